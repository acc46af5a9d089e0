"""ALE states that travel as bytes (State.from_blob): undecoded until read, and alike in every other way.

A state that comes back from a worker keeps its ALEState serialized; it must
equal, hash, pickle, restore and travel back to a worker exactly as the
decoded state the inline backend made.
"""
from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.state import State
from tests.helpers import assert_batches_equal

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")

ACTS = np.array([1, 2, 3, 0, 4, 5])


@pytest.fixture(scope="module")
def shared_pong() -> Iterator[tuple[pp.PlanEnv, pp.BatchEnv]]:
    with pp.make("ALE/Pong-v5", backend="inline") as inline, \
            pp.make("ALE/Pong-v5", backend="process", n_workers=2, small_batch_inline=False) as proc:
        yield inline, proc


@pytest.mark.timeout(120)
def test_a_state_from_a_worker_is_decoded_only_when_read(shared_pong: tuple[pp.PlanEnv, pp.BatchEnv]) -> None:
    inline, proc = shared_pong
    s0 = inline.reset(seed=0)[0]
    got = proc.step_batch(ACTS, [s0] * 6, dt=3)
    want = inline.step_batch(ACTS, [s0] * 6, dt=3)
    assert all(type(s.wire_sim) is bytes for s in got.states), "decoded on arrival"
    assert [s.key() for s in got.states] == [s.key() for s in want.states]
    assert list(got.states) == list(want.states)  # reads (decodes) them
    assert all(type(s.wire_sim).__name__ == "ALEState" for s in got.states)

    fresh = proc.step_batch(ACTS, [s0] * 6, dt=3).states
    travelled = pickle.loads(pickle.dumps(fresh))
    assert all(type(s.wire_sim) is bytes for s in travelled), "pickling an undecoded state decodes it"
    assert travelled == list(want.states)
    assert pickle.loads(pickle.dumps(want.states[2])) == fresh[2], "a decoded state pickles as before"

    # Undecoded states go back to the workers as they are, and restore here too.
    again = proc.step_batch(ACTS[::-1].copy(), proc.step_batch(ACTS, [s0] * 6, dt=3).states)
    assert_batches_equal(again, inline.step_batch(ACTS[::-1].copy(), list(want.states)))
    undecoded = proc.step_batch(ACTS, [s0] * 6, dt=3).states
    assert_batches_equal(inline.step_batch(ACTS, list(undecoded)), inline.step_batch(ACTS, list(want.states)))


def test_a_state_serialized_once_is_not_serialized_again() -> None:
    with pp.make("ALE/Pong-v5", backend="inline") as env:
        s = env.reset(seed=1)[0]
        blob = s.sim_blob()
        assert isinstance(blob, bytes) and s.sim_blob() is blob
        copy = State.from_blob(s.kind, blob, s.extra, s.rng, s.wrappers, s.obs)
        assert copy == s and copy.key() == s.key()
        copy.sim = s.sim  # setting the simulator value drops the bytes made from the old one
        assert copy.sim_blob() is not blob and copy.sim_blob() == blob


def test_a_decoded_state_reserves_room_for_its_bytes_in_the_chunk_slab(
        shared_pong: tuple[pp.PlanEnv, pp.BatchEnv]) -> None:
    """A state made in this process (decoded) travels as its bytes form: the chunk's slab has room for them.

    Sized without them, the input blobs took the results' room, and every other
    Pong chunk sent its 16 result states (~230 KB) pickled through the pipe.
    """
    from plan_parallel.wire.codec import Job, encode
    from plan_parallel.wire.slabs import Slab

    inline, _ = shared_pong
    s0 = inline.reset(seed=0)[0]
    assert type(s0.wire_sim).__name__ == "ALEState"
    asked: list[int] = []

    def acquire(size: int) -> Slab:
        asked.append(size)
        return Slab.create(size)

    req, slab, _ = encode(Job(4, np.zeros(4, dtype=np.int64), [s0] * 4, 1, None), 0, 4, 0, acquire)
    assert slab is not None
    try:
        assert asked[0] >= 4 * len(s0.sim_blob()), "no room was reserved for the input states' bytes"
        assert req.states is not None and "sim" not in req.states, "the states' bytes went into the message"
    finally:
        slab.close()


def test_an_ale_states_sticky_action_is_an_int_and_an_enum_one_restores_alike(
        shared_pong: tuple[pp.PlanEnv, pp.BatchEnv]) -> None:
    """The previous action sticky frames repeat is kept as an int (it pickles in a byte; an ale_py.Action
    unpickles through an enum call); a state saved with the enum (earlier versions) steps identically."""
    import ale_py

    inline, proc = shared_pong
    s0 = inline.reset(seed=0)[0]
    state = inline.step_batch(np.array([3]), [s0]).states[0]
    assert type(state.extra[0]) is int
    with_enum = State(state.kind, state.sim, (ale_py.Action(state.extra[0]), state.extra[1]), state.rng,
                      state.wrappers, state.obs)
    for env in (inline, proc):
        got = env.step_batch(ACTS, [with_enum] * 6, dt=5)
        want = inline.step_batch(ACTS, [state] * 6, dt=5)
        assert [s.sim_blob() for s in got.states] == [s.sim_blob() for s in want.states]
        assert np.array_equal(got.observations, want.observations) and np.array_equal(got.rewards, want.rewards)
