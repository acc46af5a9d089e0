"""A state sent to a process worker once travels as a key after that (``plan_parallel.wire.held``).

The rows: the codec alone (what is sent as a key and when not: before the
worker answered, a field replaced, a key past the table's cap); a worker's table
(a key it does not hold, a new table, eviction); and the process backend with
real envs: the same states call after call travel as keys, results equal
inline's, and a worker that does not hold what a chunk names (a replacement)
gets the chunk again with every state, its results still inline's.
"""
from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.state import State
from plan_parallel.wire.held import HeldStates, Table, pack_held, unpack_held
from plan_parallel.wire.slabs import ArrayWriter, SlabPool, read_columns
from tests.envs import FaultyEnv
from tests.helpers import assert_batches_equal

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks_module")]


# =========================================================================== the codec and a worker's table
def _states(n: int) -> list[State]:
    return [State("classic:Toy", np.full(4, float(k)), None, {"seed": k}, (k,)) for k in range(n)]


@pytest.fixture
def slab() -> Iterator[Any]:
    pool = SlabPool()
    yield pool.acquire(1 << 16)
    pool.close()


def _send(states: list[State], table: Table, worker: HeldStates, slab: Any) -> tuple[list[State] | None, dict, list]:
    """Pack ``states`` for ``worker`` as a chunk does, and unpack them there; (its states, the remainder, keeps)."""
    w = ArrayWriter(slab)
    rest, _, keeps = pack_held(states, w, "in_", table, 32)
    rest = pickle.loads(pickle.dumps(rest))  # as it travels
    got, fresh = unpack_held(rest, read_columns(slab, w.layout), "in_", len(states), worker)
    if got is not None and rest.get("keep"):
        worker.keep(rest, [fresh[j] for j in rest["keep"]])
    return got, rest, keeps


def _held(states: list[State], table: Table, worker: HeldStates, slab: Any) -> None:
    """Send ``states`` twice (the second time they are kept) and confirm: the worker holds them."""
    _send(states, table, worker, slab)
    _, _, keeps = _send(states, table, worker, slab)
    table.confirm(keeps)


def _fields(s: State) -> tuple:
    return s.kind, s.sim.tolist(), s.extra, s.rng, s.wrappers


def test_a_state_is_kept_the_second_time_it_is_sent_and_named_by_key_once_the_worker_answered(slab: Any) -> None:
    table, worker, states = Table(), HeldStates(), _states(3)
    got, rest, keeps = _send([states[0], states[1], states[0], states[2]], table, worker, slab)
    assert "refs" not in rest and rest["index"] == [0, 1, 0, 2] and keeps == [], "sent once: each packed once, none kept"
    assert got is not None and got[0] is got[2]
    assert [_fields(s) for s in got] == [_fields(states[k]) for k in (0, 1, 0, 2)]
    _, rest, keeps = _send([states[0], states[1], states[0], states[2]], table, worker, slab)
    assert rest["refs"] == [~0, ~1, ~0, ~2] and rest["keep"] == [0, 1, 2] and [k for _, k, *_ in keeps] == [0, 1, 2]
    _, rest, _ = _send(states, table, worker, slab)
    assert rest["refs"] == [~0, ~1, ~2], "not answered yet: sent whole again"
    table.confirm(keeps)
    got2, rest, keeps2 = _send([states[2], states[0], states[2]], table, worker, slab)
    assert rest["refs"] == [2, 0, 2] and keeps2 == []
    assert got2 is not None and got2[0] is got2[2] and [_fields(s) for s in got2] == [_fields(states[k]) for k in (2, 0, 2)]


def test_a_state_given_a_new_field_or_sim_is_sent_whole_again(slab: Any) -> None:
    table, worker, states = Table(), HeldStates(), _states(4)
    _held(states, table, worker, slab)
    states[0].rng = {"seed": 0}  # equal, but another object: what the worker holds may differ from it
    states[1].wrappers = (1,)
    states[2].sim = np.zeros(4)
    got, rest, _ = _send(states, table, worker, slab)
    assert rest["refs"] == [~0, ~1, ~2, 3]
    assert got is not None and got[2].sim.tolist() == [0.0] * 4


def test_keys_past_the_tables_cap_are_not_used_and_the_worker_forgets_them(slab: Any) -> None:
    table, worker, states = Table(), HeldStates(), _states(6)
    table.cap = 4
    _held(states[:3], table, worker, slab)
    _held(states[3:], table, worker, slab)  # keys 3..5: the worker keeps 2..5
    assert sorted(worker.states) == [2, 3, 4, 5]
    _, rest, _ = _send(states, table, worker, slab)
    assert rest["refs"] == [~0, ~1, 2, 3, 4, 5]


def test_a_worker_answers_none_for_a_key_it_does_not_hold_and_a_new_table_starts_empty(slab: Any) -> None:
    table, worker, states = Table(), HeldStates(), _states(2)
    _held(states, table, worker, slab)
    replacement = HeldStates()
    got, _, _ = _send(states, table, replacement, slab)
    assert got is None, "a replacement holds nothing"
    assert worker.states, "the worker holds the two states"
    got, rest, _ = _send(states, Table(), worker, slab)
    assert rest["refs"] == [~0, ~1] and got is not None
    assert worker.states and min(worker.states) == 0 and len(worker.states) == 2, "the new table replaced the old"


# =========================================================================== the process backend
def _start(inline: Any, n: int) -> tuple[list, np.ndarray]:
    state, _, _ = inline.reset(seed=5)
    states = [state]
    rng = np.random.default_rng(0)
    for a in rng.integers(0, 2, n - 1):
        states.append(inline.step(int(a), states[-1])[0])
    return states, rng.integers(0, 2, n)


def test_states_sent_again_travel_as_keys_and_results_equal_inline(cartpole_general_pair: tuple[Any, Any]) -> None:
    inline, process = cartpole_general_pair
    states, actions = _start(inline, 40)
    by_key = process.stats["states_by_key"]
    for _ in range(4):
        got = process.step_batch(actions, states)
        assert_batches_equal(got, inline.step_batch(actions, pickle.loads(pickle.dumps(states))))
        # the next call sends back some states the workers made
        mixed = states[:20] + list(got.states[20:])
        assert_batches_equal(process.step_batch(actions, mixed), inline.step_batch(actions, pickle.loads(pickle.dumps(mixed))))
    assert process.stats["states_by_key"] > by_key + 40, "the states sent before travelled as keys"


def test_a_rollout_from_states_sent_before_equals_inline(cartpole_general_pair: tuple[Any, Any]) -> None:
    inline, process = cartpole_general_pair
    states, _ = _start(inline, 12)
    seqs = np.random.default_rng(1).integers(0, 2, (12, 5))
    for _ in range(2):  # kept the second time
        process.step_batch(np.zeros(12, dtype=np.int64), states)
    by_key = process.stats["states_by_key"]
    got = process.rollout_batch(states, seqs, dt=2)
    want = inline.rollout_batch(pickle.loads(pickle.dumps(states)), seqs, dt=2)
    assert np.array_equal(got.rewards, want.rewards) and list(got.states) == list(want.states)
    assert process.stats["states_by_key"] > by_key


def test_a_replacement_that_does_not_hold_a_chunks_states_gets_them_all_and_gives_inlines_results(tmp_path: Path) -> None:
    """Worker deaths are FaultyEnv's (SIGKILL at the action 2, once): the dead worker's chunk names states
    it held; its replacement holds none, answers so, and the chunk is sent again whole. (The general path's
    chunks: the lane sends its states whole every call.)"""
    kw: dict[str, Any] = dict(fault="sigkill", phase="step", trigger_action=2, trigger_seed=7, horizon=100,
                              once_file=str(tmp_path / "fired"))
    with pp.make(FaultyEnv, backend="inline", fault="none", horizon=100) as oracle, \
            pp.make(FaultyEnv, backend="process", max_restarts=2, **kw,
                    execution=pp.ExecutionPolicy(n_workers=2, placement="workers", lane=False)) as env:
        s0 = env.reset(seed=0)[0]
        oracle.reset(seed=0)
        s1 = oracle.step(1, state=s0)[0]
        states = [s0, s1, s0, s1, s0, s1]
        for _ in range(3):  # each worker gets the states of one chunk or the other: both hold both, after a few
            env.step_batch(np.array([0, 1, 0, 1, 0, 1]), states)
        acts = np.array([0, 1, 0, 1, 2, 1])  # item 4 kills its worker once
        got = env.step_batch(acts, states)
        assert env.stats["restarts"] == 1
        assert env.stats["resent"] >= 1, "the replayed chunk named states the replacement did not hold"
        assert_batches_equal(got, oracle.step_batch(acts, pickle.loads(pickle.dumps(states))))
