"""Shared batches: the workers take chunks from the front, the waiting caller runs chunks from the back.

Forced with ``Tuner(w, "share", cores=w + 1)``: with w workers a batch of 2w + 1 items or more
leaves its last chunk to the calling process (the workers hold 2 queued each).
Whatever ran where, the result equals the inline backend's, errors read alike,
and a worker dying mid-batch loses nothing. (Interruptions and threads: the
tables of test_interrupts.py run shared batches too.)
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch import BatchEnv, Tuner
from plan_parallel.factory import EnvFactory
from tests.deadline import call_with_deadline
from tests.envs import CounterEnv, FaultyEnv
from tests.envs_faults import SlowEnv
from tests.helpers import assert_batches_equal, assert_fails_as_inline

pytestmark = pytest.mark.usefixtures("no_leaks_module")


def shared(env: Any, w: int, cores: int | None = None, **kwargs: Any) -> BatchEnv:
    """Every batch shared, on all ``w`` workers (as with ``w + 1`` cores) unless ``cores`` says otherwise."""
    return BatchEnv(EnvFactory(env, kwargs), n_workers=w, tuner=Tuner(w, "share", cores=cores or w + 1))


@pytest.fixture(scope="module")
def oracle() -> Any:
    with pp.make(CounterEnv, backend="inline", horizon=50) as env:
        yield env


@pytest.fixture(scope="module")
def starts(oracle: pp.PlanEnv) -> list:
    s0 = oracle.reset(seed=1)[0]
    return [s0, *oracle.step_batch(np.arange(6) % 3, states=[s0] * 6, dt=np.arange(1, 7)).states]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("w", [1, 2])
def test_shared_step_batches_equal_inline_and_the_caller_runs_a_share(w: int, oracle: pp.PlanEnv,
                                                                      starts: list) -> None:
    rng = np.random.default_rng(w)
    with shared(CounterEnv, w, horizon=50) as env:
        env.reset(seed=1)
        for n in (2 * w + 1, 9, 17):
            states = [starts[int(i)] for i in rng.integers(0, len(starts), n)]
            actions, dt = rng.integers(0, 3, n), rng.integers(1, 4, n)
            seeds = rng.integers(0, 1000, n)
            assert_batches_equal(env.step_batch(actions, states, dt), oracle.step_batch(actions, states, dt))
            assert_batches_equal(env.step_batch(actions, states, dt, seeds=seeds),
                                 oracle.step_batch(actions, states, dt, seeds=seeds))
            env.set_state(states[0])
            oracle.set_state(states[0])
            assert_batches_equal(env.step_batch(actions, None, 2), oracle.step_batch(actions, None, 2))
        assert env.stats["shared_batches"] == 9
        assert env.stats["shared_items"] >= 9, "the calling process ran the last chunk of every batch"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("return_all", [False, True])
def test_shared_rollouts_equal_inline_with_a_policy_and_seeds(return_all: bool, oracle: pp.PlanEnv,
                                                              starts: list) -> None:
    n = 11
    states = [starts[i % len(starts)] for i in range(n)]
    seeds = np.arange(n) + 100
    with shared(CounterEnv, 2, horizon=50) as env:
        env.reset(seed=1)
        got = env.rollout_batch(states, horizon=4, seeds=seeds, return_all=return_all)
        want = oracle.rollout_batch(states, horizon=4, seeds=seeds, return_all=return_all)
        np.testing.assert_array_equal(got.rewards, want.rewards)
        assert list(got.states) == list(want.states)
        np.testing.assert_array_equal(got.observations, want.observations)
        if return_all:
            assert got.all_states == want.all_states
        assert env.stats["shared_items"] > 0


@contextmanager
def raising_pair() -> Iterator[tuple[pp.PlanEnv, BatchEnv, Any]]:
    """An inline env and a shared one (one worker) whose step raises on action 2, reset alike, and their start."""
    with pp.make(FaultyEnv, backend="inline", fault="raise", trigger_action=2) as ref, \
            shared(FaultyEnv, 1, fault="raise", trigger_action=2) as env:
        s = ref.reset(seed=0)[0]
        env.reset(seed=0)
        yield ref, env, s


@pytest.mark.timeout(120)
def test_an_env_error_in_the_callers_chunk_reads_as_inline_and_the_env_goes_on(oracle: pp.PlanEnv) -> None:
    """Item 4 of 5 raises; with one worker, the calling process takes the batch from the back."""
    actions = np.array([0, 1, 0, 1, 2])
    with raising_pair() as (ref, env, s):
        with pytest.raises(ValueError) as want:
            ref.step_batch(actions, [s] * 5)
        with pytest.raises(ValueError) as got:
            env.step_batch(actions, [s] * 5)
        assert str(got.value) == str(want.value)
        assert any("calling process" in note and "item 4 of the batch" in note for note in got.value.__notes__)
        assert env.stats["shared_items"] == 0, "the failed chunk's items were not counted as results"
        assert_batches_equal(env.step_batch(actions[:4], [s] * 4), ref.step_batch(actions[:4], [s] * 4))


@pytest.mark.timeout(120)
def test_of_two_env_errors_the_earlier_items_is_raised_wherever_each_ran(oracle: pp.PlanEnv) -> None:
    """Items 1 and 8 of 9 raise. This process takes the batch from the back and meets item 8 first;
    the worker, from the front, meets item 1: item 1's error is the batch's, as inline, every time."""
    actions = np.array([0, 2, 0, 1, 0, 1, 0, 1, 2])
    with raising_pair() as (ref, env, s):
        assert_fails_as_inline(lambda: ref.step_batch(actions, [s] * 9), lambda: env.step_batch(actions, [s] * 9), 1, 5)


@pytest.mark.timeout(120)
def test_a_worker_dying_in_a_shared_batch_is_replaced_and_its_chunk_replayed(tmp_path: Path,
                                                                           oracle: pp.PlanEnv) -> None:
    """Item 0 (a worker's chunk) SIGKILLs its worker once; the batch still equals inline."""
    actions = np.array([2, 0, 1, 0, 1, 0, 1])
    kw = {"fault": "sigkill", "trigger_action": 2, "once_file": str(tmp_path / "fired")}
    with pp.make(FaultyEnv, backend="inline", fault="none") as ref, shared(FaultyEnv, 2, **kw) as env:
        s = ref.reset(seed=0)[0]
        env.reset(seed=0)
        assert_batches_equal(env.step_batch(actions, [s] * 7), ref.step_batch(actions, [s] * 7))
        assert (tmp_path / "fired").exists() and env.stats["restarts"] == 1
        assert env.stats["shared_items"] > 0


@pytest.mark.timeout(120)
def test_with_as_many_cores_as_workers_a_shared_batch_leaves_one_worker_out(oracle: pp.PlanEnv,
                                                                           starts: list) -> None:
    """2 workers on 2 cores: the caller and worker 0 run shared batches; worker 1 stays idle."""
    states = [starts[i % len(starts)] for i in range(9)]
    actions = np.arange(9) % 3
    with shared(CounterEnv, 2, cores=2, horizon=50) as env:
        env.reset(seed=1)
        for _ in range(3):
            assert_batches_equal(env.step_batch(actions, states), oracle.step_batch(actions, states))
        assert env.stats["busy_seconds"][1] == 0.0 and env.stats["busy_seconds"][0] > 0
        assert env.stats["shared_items"] > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("delay", "n"), [(0.002, 4), (0.0003, 24)], ids=["items-of-2ms", "shares-of-3.6ms"])
def test_heavy_items_or_shares_run_on_workers_that_fill_the_cores_never_here_or_shared(delay: float, n: int) -> None:
    """The tuner's own choice (mode "auto"), 2 workers on 2 cores, items of 2 ms (HEAVY_ITEM_SECONDS), or of
    0.3 ms giving each worker 3.6 ms (WORKER_SHARE_SECONDS): once the workers' step time is known from two
    batches (the figures measure each place in turns first: workers, here; the share adds no core here), each
    batch runs on the workers (the figures would go on measuring here), and equals inline."""
    with BatchEnv(EnvFactory(SlowEnv, {"delay": delay}), n_workers=2, tuner=Tuner(2, cores=2)) as env, \
            pp.make(SlowEnv, backend="inline", delay=0.0) as ref:
        s = ref.reset(seed=0)[0]
        env.reset(seed=0)
        actions = np.arange(n) % 3
        for k in range(9):
            assert_batches_equal(env.step_batch(actions, [s] * n), ref.step_batch(actions, [s] * n))
            if k == 2:
                assert env.stats["inline_batches"] == 1 and env.stats["shared_batches"] == 0
        assert env.stats["inline_batches"] == 1 and env.stats["shared_batches"] == 0
        assert all(busy > 0 for busy in env.stats["busy_seconds"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cores", [2, 3])
def test_the_tuner_shares_a_plain_batch_only_where_this_process_adds_a_core(cores: int, oracle: pp.PlanEnv,
                                                                           starts: list) -> None:
    """Mode "auto", 2 workers: with 2 cores the figures measure the workers and here, never the share (its
    caller would take a worker's core); with 3 they measure all three. Every batch equals inline."""
    states = [starts[i % len(starts)] for i in range(9)]
    actions = np.arange(9) % 3
    with BatchEnv(EnvFactory(CounterEnv, {"horizon": 50}), n_workers=2, tuner=Tuner(2, cores=cores)) as env:
        env.reset(seed=1)
        for _ in range(9):
            assert_batches_equal(env.step_batch(actions, states), oracle.step_batch(actions, states))
        assert env.stats["inline_batches"] >= 2
        assert (env.stats["shared_batches"] >= 2) == (cores == 3), env.stats


def test_a_timeout_refuses_the_share_mode() -> None:
    with pytest.raises(ValueError, match=r"a timeout cannot act on items run in this process.*'share'"):
        BatchEnv(EnvFactory(CounterEnv, {}), n_workers=1, timeout=5.0, tuner=Tuner(1, "share"))


@pytest.mark.timeout(120)
def test_async_batches_are_not_shared(starts: list) -> None:
    """A future may be awaited late, from any thread, with a timeout: the workers run all of it."""
    with shared(CounterEnv, 1, horizon=50) as env:
        env.reset(seed=1)
        env.step_batch_async(np.zeros(9, dtype=np.int64), [starts[0]] * 9).result(timeout=30)
        assert env.stats["shared_batches"] == 0 and env.stats["shared_items"] == 0


@pytest.mark.timeout(120)
def test_a_shared_batch_the_caller_runs_whole_completes(starts: list) -> None:
    """The one worker has six 0.2 s async batches queued (two sent, four waiting, all older): the
    caller runs every chunk of the shared batch itself (0.8 s), and the batch completes with no
    part on a worker to answer it."""
    with shared(SlowEnv, 1, delay=0.2) as env, pp.make(SlowEnv, backend="inline", delay=0.0) as ref:
        s = ref.reset(seed=0)[0]
        env.reset(seed=0)
        busy = [env.step_batch_async(np.zeros(1, dtype=np.int64), [s]) for _ in range(6)]
        actions = np.array([0, 1, 2, 1])
        got = call_with_deadline(lambda: env.step_batch(actions, [s] * 4), 30.0, "the shared batch")
        assert_batches_equal(got, ref.step_batch(actions, [s] * 4))
        assert env.stats["shared_items"] == 4
        assert [len(b.result(timeout=30).states) for b in busy] == [1] * 6
