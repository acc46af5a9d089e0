"""The lane's pickled states: their arrays and blobs in the segment's state regions, not the pipe.

ALE states (7.7 KB blobs) of an adapter that declares no row layout (a subclass of ALE's) travel as a chunk's
rows of ``in_states`` and ``out_states``; what does not fit a region travels in the message, with the same
result. The tables of ``tests/test_lane.py`` hold every call
equal to inline; these rows hold where the bytes go.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch.batch_env import batch_engine_of
from plan_parallel.state import AleAdapter
from plan_parallel.wire.columns import unpack_states
from plan_parallel.wire.lane import MAX_STATE_BYTES, pack_states_tail, state_bytes_for, unpack_states_tail
from plan_parallel.wire.slabs import Slab
from tests.helpers import assert_batches_equal
from tests.test_lane import on_workers


def pong_states(n: int) -> tuple[Any, list]:
    """An inline Pong RAM env and ``n`` distinct states of one episode it played (sticky actions: each state
    its own RNG)."""
    env = pp.make("ALE/Pong-v5", obs_type="ram", backend="inline")
    env.reset(seed=0)
    return env, [env.step(k % 6)[0] for k in range(n)]


class PickledAle(AleAdapter):
    """ALE's adapter as a user's subclass: its states take the pickled layout (a row layout is the family's own)."""


@pytest.mark.timeout(120)
def test_a_tail_carries_blobs_that_fit_the_region_in_the_slab_and_the_rest_in_the_pickle() -> None:
    env, states = pong_states(4)
    blob = len(states[0].sim_blob())
    slab = Slab.create(1 << 16)
    try:
        with env:
            fitting, needed = pack_states_tail(states, None, slab, (64, 64 + 4 * state_bytes_for(4 * blob, 4)))
            too_small, needed_again = pack_states_tail(states, None, slab, (64, 64 + blob))
            for tail in (fitting, too_small):
                packed, infos, cols = unpack_states_tail(tail, slab)
                got = unpack_states(packed, cols, "", 4)
                assert infos is None
                assert [s.sim_blob() for s in got] == [s.sim_blob() for s in states]
                assert [(s.kind, s.extra, s.rng, s.wrappers) for s in got] == [
                    (s.kind, s.extra, s.rng, s.wrappers) for s in states]
            assert len(fitting) < blob, "the blobs went to the slab"
            assert len(too_small) > 4 * blob, "the blobs that do not fit travel in the message"
            assert needed == needed_again >= 4 * blob
    finally:
        slab.close()


def test_a_region_holds_rows_up_to_its_limit_only() -> None:
    assert state_bytes_for(4 * 7717, 4) % 64 == 0 and state_bytes_for(4 * 7717, 4) >= 7717 * 5 // 4
    assert state_bytes_for(MAX_STATE_BYTES, 1) == 0, "larger states travel in the messages"
    assert state_bytes_for(0, 32) == 0, "states without arrays or blobs need no region"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n_workers", [1, 2])
def test_the_regions_grow_when_a_call_brings_larger_states_and_every_call_equals_inline(n_workers: int) -> None:
    """A first call of 8 items from one state (packed once) sizes the regions small; a call of 8 distinct
    states then does not fit them (its blobs travel in the messages) and the next call's segment is larger.
    Every call equals inline, step and rollout calls alike."""
    with pp.make("ALE/Pong-v5", obs_type="ram", adapter=PickledAle, backend="inline") as ref, \
            pp.make("ALE/Pong-v5", obs_type="ram", adapter=PickledAle, execution=on_workers(n_workers)) as env:
        lane = batch_engine_of(env).placement.lane
        acts = np.arange(8) % 6
        start, start_ref = env.reset(seed=0)[0], ref.reset(seed=0)[0]
        for _ in range(2):  # (two calls of one state, packed once a chunk)
            first, want = env.step_batch(acts, [start] * 8), ref.step_batch(acts, [start_ref] * 8)
            assert_batches_equal(first, want)
        blob = len(start.sim_blob())
        assert 0 < lane.state_bytes < blob, "sized for one state a chunk"
        states, want_states = list(first.states), list(want.states)
        for _ in range(2):
            assert_batches_equal(env.step_batch(acts, states), ref.step_batch(acts, want_states))
        assert lane.layout is not None and lane.layout.state_bytes == lane.state_bytes > blob
        got = env.rollout_batch(states, np.tile(acts[:, None], 3))
        want_rollout = ref.rollout_batch(want_states, np.tile(acts[:, None], 3))
        assert list(got.states) == list(want_rollout.states) and np.array_equal(got.rewards, want_rollout.rewards)
        assert np.array_equal(got.observations, want_rollout.observations)
        assert env.stats["lane_batches"] == 5 and env.stats["batches"] == 5
