"""Input states read where a former lane result's lie: its state columns in the slab lent to it.

A lane call whose states are rows of one result's state columns lent by the same workers (an ALE result of 17
states or more: 7.7 KB a state) does not copy them into its segment: its header names that slab and ``in_source``
the rows, and each worker reads its chunk's states there (``env.stats["lane_sourced"]``). These rows hold such
calls exact against the inline backend — a result given back whole, a subset of its rows in any order and with
repeats, a rollout — and show which calls copy instead (states of two results, or of another env's workers); a
worker killed in such a call is replaced and its chunk read again from the same slab; a source let go after its
call is reused for later results, which stay exact.
"""
from __future__ import annotations

import gc
import os
import signal
import threading
from typing import Any

import numpy as np
import pytest

from tests.conftest_leaks import shm_segments
from tests.deadline import call_with_deadline
from tests.helpers import assert_batches_equal
from tests.test_lane import assert_rollouts_equal, on_workers
from tests.test_lane_ale import assert_states_equal, pong

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")  # (no worker, segment or lent slab left behind)

B = 24  # (24 Pong states are 185 KB: their columns are lent, LEND_MIN_BYTES)


def first_results(env: Any, ref: Any, seed: int = 0) -> tuple[Any, Any]:
    """Two calls from a reset on each side: the second's result is a lane result with its state columns lent."""
    acts = np.arange(B) % 6
    got, want = [env.reset(seed=seed)[0]] * B, [ref.reset(seed=seed)[0]] * B
    for _ in range(2):
        got, want = env.step_batch(acts, got).states, ref.step_batch(acts, want).states
    assert got.columns is not None and got.columns.place is not None, "the result's state columns were lent"
    return got, want


PICKS: dict[str, Any] = {
    "whole": None,  # the StateBatch itself
    "all rows": lambda rng: np.arange(B),  # a list of its states in order
    "reversed": lambda rng: np.arange(B)[::-1],
    "repeats": lambda rng: rng.integers(0, B, B + 7),
    "one state": lambda rng: np.zeros(B, np.intp),  # a shooting planner's root, repeated
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rollout", [False, True], ids=["step", "rollout"])
@pytest.mark.parametrize("pick", list(PICKS))
def test_rows_of_one_lent_result_are_read_where_they_lie_and_step_as_inline(pick: str, rollout: bool) -> None:
    rng = np.random.default_rng(len(pick))
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env:
        got, want = first_results(env, ref)
        sourced = env.stats["lane_sourced"]
        for _ in range(3):
            choose = PICKS[pick]
            if choose is not None:
                rows = choose(rng)
                got, want = [got[k] for k in rows], [want[k] for k in rows]
            n = len(got)
            if rollout:
                acts = rng.integers(0, 6, (n, 4))
                a, b = env.rollout_batch(got, acts, 2), ref.rollout_batch(want, acts, 2)
                assert_rollouts_equal(a, b)
            else:
                acts = rng.integers(0, 6, n)
                a, b = env.step_batch(acts, got, 3), ref.step_batch(acts, want, 3)
                assert_batches_equal(a, b)
            assert_states_equal(a.states, b.states)
            got, want = a.states, b.states
        assert env.stats["lane_sourced"] == sourced + 3, "each call read its states where the last result's lie"


@pytest.mark.timeout(300)
def test_states_of_two_results_or_of_another_envs_workers_are_copied_and_step_as_inline() -> None:
    """Only rows of one result of the same workers are read where they lie; any other list is copied into the
    segment (or, not made by these workers, checked on the general path) and steps as inline all the same."""
    rng = np.random.default_rng(7)
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env, \
            pong("rgb", execution=on_workers(2)) as other:
        got1, want1 = first_results(env, ref)
        got2, want2 = first_results(env, ref, seed=1)
        theirs, _ = first_results(other, ref)
        sourced, lanes = env.stats["lane_sourced"], env.stats["lane_batches"]
        acts = rng.integers(0, 6, B)
        mixed = [got1[k] if k % 2 else got2[k] for k in range(B)]
        mixed_ref = [want1[k] if k % 2 else want2[k] for k in range(B)]
        a, b = env.step_batch(acts, mixed), ref.step_batch(acts, mixed_ref)
        assert_batches_equal(a, b)
        assert_states_equal(a.states, b.states)
        assert env.stats["lane_batches"] == lanes + 1 and env.stats["lane_sourced"] == sourced
        a, b = env.step_batch(acts, theirs), ref.step_batch(acts, want1)
        assert_batches_equal(a, b)
        assert env.stats["lane_sourced"] == sourced, "another env's slab was named to these workers"


@pytest.mark.timeout(120)
def test_a_worker_killed_during_a_sourced_call_is_replaced_and_the_call_is_exact() -> None:
    """The replacement reads the dead worker's rows from the same slab, held by the call's states."""
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env:
        n = 192
        acts = np.arange(n) % 6
        s, s_ref = env.reset(seed=1)[0], ref.reset(seed=1)[0]
        got, want = env.step_batch(acts, [s] * n), ref.step_batch(acts, [s_ref] * n)
        got, want = env.step_batch(acts, got.states), ref.step_batch(acts, want.states)
        sourced, victim = env.stats["lane_sourced"], env.pids[0]
        killer = threading.Timer(0.05, lambda: os.kill(victim, signal.SIGKILL))
        killer.start()
        # (a call of ~200 ms, so the kill at 50 ms falls inside it: see test_lane_ale's killed-worker row)
        a = call_with_deadline(lambda: env.step_batch(acts, got.states, dt=32), 60.0, "the call a worker died in")
        killer.join()
        b = ref.step_batch(acts, want.states, dt=32)
        assert_batches_equal(a, b)
        assert_states_equal(a.states, b.states)
        assert env.stats["restarts"] == 1 and env.stats["lane_sourced"] == sourced + 1


@pytest.mark.timeout(300)
def test_sources_let_go_are_reused_for_later_results_which_stay_exact() -> None:
    """Each call reads the last result's states and lets the one before go: its slab comes back for a later call's
    results while that call's workers read another; a result kept meanwhile never changes."""
    rng = np.random.default_rng(3)
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env:
        got, want = first_results(env, ref)
        kept, kept_want = got, want
        kept_blobs = [s.sim_blob() for s in kept]
        sourced = env.stats["lane_sourced"]
        segments = None
        for k in range(16):
            acts = rng.integers(0, 6, B)
            a, b = env.step_batch(acts, got), ref.step_batch(acts, want)
            assert_batches_equal(a, b)
            got, want = a.states, b.states
            if k == 4:
                gc.collect()
                segments = len(shm_segments())
        assert segments is not None and len(shm_segments()) <= segments + 1, "a slab nobody holds was not reused"
        assert env.stats["lane_sourced"] == sourced + 16
        assert [s.sim_blob() for s in kept] == kept_blobs
        acts = rng.integers(0, 6, B)
        assert_batches_equal(env.step_batch(acts, kept), ref.step_batch(acts, kept_want))
