"""The codec without processes: chunks encoded as the pool does, run by a worker's Server here, gathered back.

Every test compares with the inline backend, which runs the same kernel; the
slab and no-slab paths (process and Ray workers) are both covered.
"""
from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.wire.codec import Job, encode, out_bytes_guess
from plan_parallel.wire.columns import listed_rows, pack_states, stack_rows, unpack_states
from plan_parallel.wire.messages import (
    Call,
    ChunkRequest,
    Op,
    Reply,
    RolloutSpec,
    call_from_wire,
    call_wire,
    reply_from_wire,
    reply_wire,
)
from plan_parallel.wire.slabs import ArrayWriter, Slab, SlabPool, read_columns, rows_fit
from plan_parallel.workers.server import Server, answer
from tests.envs import NumpyInfoEnv
from tests.helpers import assert_tree_equal
from tests.test_rollout import assert_rollouts_equal, noisy_balance_policy, start_states

CHUNKS = [(0, 2), (2, 3), (3, 6)]


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(pp.make("CartPole-v1", backend="inline"))
    yield s
    s.close()


def run_job(server: Server, job: Job, space: Any, with_slab: bool, chunks: list[tuple[int, int]] = CHUNKS,
            replay: tuple[int, int] | None = None) -> Any:
    """Encode each chunk, answer it with ``server`` (as a worker would), absorb it; ``replay`` one chunk twice."""
    pool = SlabPool()
    gather = job.gatherer(space)
    per_out = out_bytes_guess(space, job.states[0] if job.states else job.start, job)
    try:
        order = list(chunks) + ([replay] if replay else [])
        for lo, hi in reversed(order):  # any arrival order
            req, slab, _ = encode(job, lo, hi, per_out, pool.acquire if with_slab else None)
            reply = through_the_wire(server, Call(7, job.op, (req,)))
            assert reply.id == 7 and reply.error is None, reply.error and pickle.loads(reply.error)[1]
            cols = read_columns(slab, reply.value.layout, views=gather.views)
            gather.absorb(lo, hi, reply.value, cols)
            if slab is not None:
                pool.release(slab)
        return gather.result()
    finally:
        pool.close()


def through_the_wire(server: Server, call: Call) -> Reply:
    """``call`` pickled as a worker receives it, answered, and the reply pickled as the parent receives it."""
    sent = call_from_wire(pickle.loads(pickle.dumps(call_wire(call))))
    assert_same_message(sent, call)
    reply = answer(server, sent)
    got = reply_from_wire(pickle.loads(pickle.dumps(reply_wire(reply))))
    assert_same_message(got, reply)
    return got


def assert_same_message(got: Any, sent: Any) -> None:
    """The same dataclass, field by field (arrays by dtype, shape and bytes), nested messages included."""
    assert type(got) is type(sent)
    assert_tree_equal(dataclasses.asdict(got), dataclasses.asdict(sent), type(sent).__name__)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("with_slab", [True, False], ids=["slab", "no-slab"])
def test_step_chunks_rebuild_the_inline_batch(make_inline, server, with_slab) -> None:
    env = make_inline("CartPole-v1")
    states = start_states(env, 6)[:6]
    actions = np.array([0, 1, 1, 0, 1, 0])
    dt = np.array([1, 3, 2, 1, 4, 2])
    oracle = env.step_batch(actions, states, dt)
    got = run_job(server, Job(6, actions, states, dt, None), env.observation_space, with_slab, replay=(2, 3))
    assert np.array_equal(got.observations, oracle.observations)
    assert np.array_equal(got.rewards, oracle.rewards)
    assert got.infos == oracle.infos
    assert [s == o for s, o in zip(got.states, oracle.states)] == [True] * 6


@pytest.mark.timeout(60)
@pytest.mark.parametrize("with_slab", [True, False], ids=["slab", "no-slab"])
def test_rollout_chunks_rebuild_the_inline_batch(make_inline, server, with_slab) -> None:
    """A policy rollout chunk by chunk (each chunk's first_index picks its items' RNGs) equals inline."""
    env = make_inline("CartPole-v1")
    s0, _, _ = env.reset(seed=0)
    states = start_states(env, 6)[:6:2] + [s0, s0, s0]  # copies of one state: their policy RNG differs by index
    oracle = env.rollout_batch(states, horizon=6, policy=noisy_balance_policy, return_all=True, dt=2)
    spec = RolloutSpec(6, cloudpickle.dumps(noisy_balance_policy), True)
    job = Job(6, None, states, 2, None, rollout=spec, policy=noisy_balance_policy)
    assert_rollouts_equal(run_job(server, job, env.observation_space, with_slab, replay=(0, 2)), oracle)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("with_slab", [True, False], ids=["slab", "no-slab"])
def test_numpy_scalar_infos_travel_as_columns_and_come_back_equal_in_value_and_type(make_inline, with_slab) -> None:
    """MuJoCo's infos (numpy scalars) travel as one column per key: in the slab when it has room (the reply
    carries no array to unpickle), else in the message; rebuilt, each dict equals inline's, value and type."""
    env = make_inline("HalfCheetah-v5")
    states = start_states(env, 4)[:4]
    actions = np.zeros((4, 6), dtype=np.float32)
    oracle = env.step_batch(actions, states)
    server = Server(pp.make("HalfCheetah-v5", backend="inline"))
    pool = SlabPool()
    try:
        req, slab, _ = encode(Job(4, actions, states, 1, None), 0, 4, 4096, pool.acquire if with_slab else None)
        reply = through_the_wire(server, Call(3, Op.STEP_BATCH, (req,))).value
        tag, keys, columns = reply.infos
        assert tag == "cols" and keys == [k for k in oracle.infos[0] if k != "n_steps"]
        assert all((columns[k] is None) == with_slab for k in keys), columns
        gather = Job(4, actions, states, 1, None).gatherer(env.observation_space)
        gather.absorb(0, 4, reply, read_columns(slab, reply.layout, views=gather.views))
        got = gather.result().infos
        assert got == oracle.infos
        assert [[type(v) for v in i.values()] for i in got] == [[type(v) for v in i.values()] for i in oracle.infos]
    finally:
        pool.close()
        server.close()


@pytest.mark.timeout(60)
def test_numpy_scalar_infos_under_keys_of_any_type_come_back_through_the_slab(make_inline) -> None:
    """Info keys need not be strings: a column in the slab is named by the key's position."""
    env = make_inline(NumpyInfoEnv)
    s0, _, _ = env.reset(seed=1)
    states, actions = [s0] * 3, np.array([0, 1, 2])
    oracle = env.step_batch(actions, states)
    server = Server(pp.make(NumpyInfoEnv, backend="inline"))
    try:
        got = run_job(server, Job(3, actions, states, 1, None), env.observation_space, True, chunks=[(0, 2), (2, 3)])
    finally:
        server.close()
    assert got.infos == oracle.infos and list(got.infos[0]) == [0, "count", ("total",), "n_steps"]
    assert [[type(v) for v in i.values()] for i in got.infos] == [[type(v) for v in i.values()] for i in oracle.infos]


@pytest.mark.timeout(60)
def test_observations_in_the_message_travel_as_one_array(make_inline, server) -> None:
    """Without slab room (Ray workers; rows larger than the slab) a chunk's observations are one array in
    its reply: one buffer to pickle and to read back, not one per row. Rows that do not stack stay a list,
    and the rows read back are read-only, as the slab's are."""
    env = make_inline("CartPole-v1")
    states = start_states(env, 6)[:6]
    req, _, _ = encode(Job(6, np.array([0, 1, 1, 0, 1, 0]), states, 1, None), 0, 6, 0, None)
    reply = through_the_wire(server, Call(1, Op.STEP_BATCH, (req,))).value
    assert isinstance(reply.obs, np.ndarray) and reply.obs.shape == (6, 4) and reply.obs.dtype == np.float32
    for ragged in ([np.zeros(2), np.zeros(3)], [np.zeros(2), np.zeros(2, np.float32)], [np.zeros(())] * 2,
                   [{"a": np.zeros(2)}] * 2, [np.array([None, 1])] * 2):
        assert stack_rows(ragged) is ragged
    rows = listed_rows(stack_rows([np.arange(3.0), np.arange(3.0) + 1]))
    assert [r.tolist() for r in rows] == [[0, 1, 2], [1, 2, 3]] and not rows[0].flags.writeable
    assert isinstance(req.states["sim"], np.ndarray) and req.states["sim"].shape == (6, 4), "array states alike"


@pytest.mark.timeout(60)
def test_ale_states_in_the_message_travel_as_their_bytes(make_inline) -> None:
    """Without slab room an ALE state travels as its bytes form, as through a slab: the sender does not decode
    a state it got as bytes to serialize it again, and the receiver decodes it only when it is used."""
    env = make_inline("ALE/Pong-v5")
    states = list(env.step_batch(np.array([0, 1, 2]), start_states(env, 3)[:3]).states)
    rest = pack_states(states, ArrayWriter(None), "", with_obs=False)
    assert "sim" not in rest and [type(b) for b in rest["sim_blobs"]] == [bytes] * 3
    back = unpack_states(pickle.loads(pickle.dumps(rest)), {}, "", 3)
    assert [type(s.wire_sim) for s in back] == [bytes] * 3, "not decoded on arrival"
    again = pack_states(back, ArrayWriter(None), "", with_obs=False)
    assert [type(s.wire_sim) for s in back] == [bytes] * 3, "not decoded to be sent again"
    assert again["sim_blobs"] == rest["sim_blobs"]
    for s, o in zip(back, states):
        s.obs = o.obs  # observations travel apart from the states
    assert back == states


@pytest.mark.timeout(60)
def test_step_chunks_from_the_held_state_with_seeds(make_inline) -> None:
    """states=None: every item starts from the state the worker holds; seeds reseed each item."""
    env = make_inline("FrozenLake-v1", is_slippery=True)
    s0, _, _ = env.reset(seed=0)
    seeds = np.arange(6, dtype=np.uint64)
    oracle = env.step_batch(np.full(6, 1), seeds=seeds)
    server = Server(pp.make("FrozenLake-v1", backend="inline", is_slippery=True))
    try:
        server.set_state(pickle.dumps(s0))
        got = run_job(server, Job(6, np.full(6, 1), None, 1, seeds, start=s0), env.observation_space, True)
    finally:
        server.close()
    assert got.observations.tolist() == oracle.observations.tolist()
    assert [s.sim for s in got.states] == [s.sim for s in oracle.states]


@pytest.mark.timeout(60)
def test_a_malformed_state_fails_in_the_server_as_inline_with_its_item(make_inline, server) -> None:
    """The server validates every state before restoring it: the inline error type and message, and the item."""
    env = make_inline("CartPole-v1")
    states = start_states(env, 3)[:3]
    states[1] = pickle.loads(pickle.dumps(states[1]))
    states[1].sim = np.zeros(3)
    with pytest.raises(pp.StateError) as inline_err:
        env.step_batch([0, 0, 0], states)
    req, _, _ = encode(Job(3, np.zeros(3, dtype=np.int64), states, 1, None), 0, 3, 1024, None)
    reply = answer(server, Call(3, Op.STEP_BATCH, (req,)))
    exc, _, item = pickle.loads(reply.error)
    assert type(exc) is pp.StateError and str(exc) == str(inline_err.value) and item == 1


@pytest.mark.timeout(60)
def test_equal_rng_values_of_a_chunk_travel_as_one_object(make_inline) -> None:
    """States whose RNG values are equal but distinct objects (each unpickled on its own; CartPole's step
    never draws) carry one RNG dict in the chunk and arrive sharing it; unequal ones (Pong's sticky
    draws) stay apart; every state comes back equal."""
    cart = make_inline("CartPole-v1")
    states = [pickle.loads(pickle.dumps(s)) for s in start_states(cart, 4)[:4]]
    assert len({id(s.rng) for s in states}) == 4 and all(s.rng == states[0].rng for s in states)
    rest = pack_states(states, ArrayWriter(None), "", with_obs=False)
    wire = pickle.dumps(rest)
    assert len({id(r) for r in pickle.loads(wire)["rng"]}) == 1
    back = unpack_states(pickle.loads(wire), {}, "", 4)
    assert len({id(s.rng) for s in back}) == 1
    for s, o in zip(back, states):
        s.obs = o.obs  # observations travel apart from the states
    assert back == states
    pong = make_inline("ALE/Pong-v5")
    drawn = list(pong.step_batch(np.array([0, 1, 2]), start_states(pong, 3)[:3]).states)
    rest = pack_states(drawn, ArrayWriter(None), "", with_obs=False)
    sent = pickle.loads(pickle.dumps(rest))["rng"]
    assert len({id(r) for r in sent}) == len({str(s.rng) for s in drawn}) > 1
    assert sent == [s.rng for s in drawn]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
def test_items_from_one_state_object_carry_it_once(make_inline, env_id) -> None:
    """N items from one state object pack that state once (an index maps the items to it), in the slab and
    in the message alike, and the chunks equal inline; a malformed state listed twice is named at its
    first item, as inline names it."""
    if env_id.startswith("ALE"):
        pytest.importorskip("ale_py")
    env = make_inline(env_id)
    a, b = start_states(env, 3)[1:3]
    states = [a, b, a, a, b, a]
    actions = np.array([0, 1, 1, 0, 1, 0])
    job = Job(6, actions, states, 1, None)
    req, _, _ = encode(job, 0, 6, 1 << 16, None)
    assert req.states["index"] == [0, 1, 0, 0, 1, 0] and len(req.states["extra"]) == 2
    oracle = env.step_batch(actions, states)
    server = Server(pp.make(env_id, backend="inline"))
    try:
        for with_slab in (True, False):
            got = run_job(server, job, env.observation_space, with_slab, chunks=[(0, 4), (4, 6)])
            assert [g == o for g, o in zip(got.states, oracle.states)] == [True] * 6
            assert np.array_equal(got.rewards, oracle.rewards)
            assert np.array_equal(got.observations, oracle.observations)
        bad = pickle.loads(pickle.dumps(b))
        bad.rng = {"bit_generator": "nothing"}
        with pytest.raises(pp.StateError) as inline_err:
            env.step_batch(actions, [a, bad, a, bad, a, a])
        req, _, _ = encode(Job(6, actions, [a, bad, a, bad, a, a], 1, None), 0, 6, 1024, None)
        exc, _, item = pickle.loads(answer(server, Call(5, Op.STEP_BATCH, (req,))).error)
    finally:
        server.close()
    assert type(exc) is pp.StateError and str(exc) == str(inline_err.value) and item == 1


@pytest.mark.timeout(30)
def test_an_unknown_op_is_reported_as_a_bug(server) -> None:
    reply = answer(server, Call(5, Op.CLOSE, ()))
    exc, _, _ = pickle.loads(reply.error)
    assert reply.id == 5 and "plan_parallel bug" in str(exc)


def test_messages_are_frozen_and_carry_their_call_id() -> None:
    call = Call(9, Op.RESET, (0, None))
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.id = 10  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(Reply(9, 1))).id == 9
    assert {f.name for f in dataclasses.fields(ChunkRequest)} >= {"n", "first_index", "slab", "layout"}


def test_chunk_calls_and_replies_cross_the_pipe_as_builtins(server: Server) -> None:
    """A chunk's call and reply pickle without naming a class of plan_parallel (unpickling a class looks it up
    by module and name each time) and come back equal, a rollout's spec included."""
    env = pp.make("CartPole-v1", backend="inline")
    states = start_states(env, 3)[:3]
    for job in (Job(3, np.array([0, 1, 1]), states, 2, None),
                Job(3, np.array([[0, 1], [1, 1], [1, 0]]), states, 1, None, rollout=RolloutSpec(2, None, True))):
        req, _, _ = encode(job, 0, 3, 1 << 12, None)
        call = Call(5, job.op, (req,))
        assert b"plan_parallel" not in pickle.dumps(call_wire(call))
        assert_same_message(call_from_wire(pickle.loads(pickle.dumps(call_wire(call)))), call)
        reply = answer(server, call)
        assert reply.error is None
        wire = pickle.dumps(reply_wire(reply))
        assert b"plan_parallel" not in wire
        assert_same_message(reply_from_wire(pickle.loads(wire)), reply)


@pytest.mark.timeout(30)
def test_slabs_are_private_to_the_user() -> None:
    import os
    import stat

    slab = Slab.create(4096)
    try:
        mode = os.stat(f"/dev/shm/{slab.name}").st_mode
        assert stat.S_IMODE(mode) == 0o600
    finally:
        slab.close()
    assert not os.path.exists(f"/dev/shm/{slab.name}")


def test_a_writer_counts_every_column_that_did_not_fit_in_what_it_needs() -> None:
    """``needed`` is where the columns would end had each fitted: the next chunk's slab is sized from it.

    It was the end of the last column tried, so a large column that did not fit
    (a rollout's every observation) was forgotten when a smaller one came after,
    and every later chunk sent it pickled again.
    """
    from plan_parallel.wire.slabs import ALIGN, ArrayWriter

    slab = Slab.create(1 << 16)
    try:
        w = ArrayWriter(slab)
        assert w.put_array("small", np.zeros(100, dtype=np.uint8))
        assert not w.put_array("large", np.zeros(1 << 17, dtype=np.uint8))
        assert not w.put_blobs("blobs", [b"x" * (1 << 16)])
        assert w.put_array("after", np.zeros(100, dtype=np.uint8))
        assert w.needed >= 100 + (1 << 17) + 8 + (1 << 16) + 100, w.needed
        assert w.needed <= 100 + (1 << 17) + 8 + (1 << 16) + 100 + 5 * ALIGN
    finally:
        slab.close()


def test_rollout_chunks_with_every_step_travel_in_shared_memory_after_the_first() -> None:
    """Pong rollouts with ``return_all``: once the first chunks told their size, no later reply pickles a state
    or an observation (they were 6.9 MB each, in the pipe)."""
    import plan_parallel.batch.feeder as feeder_module

    sizes: list[tuple[Any, Any]] = []
    absorb = feeder_module.Feeder.absorb

    def spy(self: Any, part: Any, reply: Any) -> None:
        sizes.append((reply.all_obs, reply.all_states))
        absorb(self, part, reply)

    with pp.make("ALE/Pong-v5", backend="inline") as inline, \
            pp.make("ALE/Pong-v5", backend="process", n_workers=2, small_batch_inline=False) as proc:
        start = inline.reset(seed=0)[0]
        proc.rollout_batch([start] * 6, horizon=3)  # sizes learned for rollouts without every step first
        feeder_module.Feeder.absorb = spy  # type: ignore[method-assign]
        try:
            for _ in range(3):
                got = proc.rollout_batch([start] * 6, np.ones((6, 3), dtype=np.int64), return_all=True)
        finally:
            feeder_module.Feeder.absorb = absorb  # type: ignore[method-assign]
        want = inline.rollout_batch([start] * 6, np.ones((6, 3), dtype=np.int64), return_all=True)
    assert [s.key() for row in got.all_states for s in row] == [s.key() for row in want.all_states for s in row]
    later = sizes[len(sizes) // 3:]  # after the first call's chunks
    assert later and all(obs is None and "sim" not in states for obs, states in later), later[:1]


def test_a_policy_rollout_chunk_has_room_for_its_start_observations() -> None:
    """A policy reads each item's start observation, which travels with its state: the chunk's slab has room for
    both (Pong rollout requests pickled 3 observations, 303 KB, into the pipe). Uniform random actions (no
    actions, no policy) read none: the observations stay here."""
    with pp.make("ALE/Pong-v5", backend="inline") as inline:
        start = inline.reset(seed=0)[0]
        policy = inline.uniform_policy()
        asked: list[int] = []

        def acquire(size: int) -> Slab:
            asked.append(size)
            return Slab.create(size)

        for given in (policy, None):
            spec = RolloutSpec(3, None if given is None else cloudpickle.dumps(given), False)
            req, slab, _ = encode(Job(3, None, [start] * 3, 1, None, rollout=spec, policy=given), 0, 3, 0, acquire)
            assert slab is not None
            try:
                assert req.states is not None and "obs" not in req.states and "sim" not in req.states
                if given is not None:
                    assert asked[-1] >= 3 * (len(start.sim_blob()) + start.obs.nbytes)
                    assert "in_obs" in req.layout
                else:
                    assert "in_obs" not in req.layout, "uniform random actions read no observation"
            finally:
                slab.close()


class _Row(np.ndarray):
    """An ndarray subclass: its rows fit as plain arrays do."""


@pytest.mark.parametrize("rows, fit", [
    ([], True),
    ([np.zeros(3), np.ones(3)], True),
    ([np.zeros(3), np.zeros(3).view(_Row)], True),
    ([np.zeros(3), np.zeros(3, dtype=np.float32)], False),
    ([np.zeros(3), np.zeros(4)], False),
    ([np.zeros(3), np.zeros((1, 3))], False),
    ([np.zeros(3), [0.0, 0.0, 0.0]], False),
], ids=["none", "alike", "subclass", "another dtype", "another length", "another shape", "a list"])
def test_rows_fit_only_arrays_of_one_dtype_and_shape(rows: list, fit: bool) -> None:
    assert rows_fit(rows, np.dtype(np.float64), (3,)) is fit
