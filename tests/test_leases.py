"""Observations lent out of shared memory (plan_parallel.wire.leases): exact, never reused while seen.

A batch whose observations are large gets a slab of its own; workers write
their rows into it (Ray's actors send them, and they are copied into it) and
the batch's ``observations`` (and each state's ``obs``) are views of it. These
rows check that what the caller holds never changes, whatever runs next or fails,
that slabs are reused once nothing holds them, and that the results equal the
inline oracle. The interruption table runs on lent
batches too (``test_interrupts.py``, ``test_interrupt_with_lent_observations...``).
"""
from __future__ import annotations

import gc
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import plan_parallel as pp
from tests.conftest_leaks import shm_segments
from tests.envs import CounterEnv, FaultyEnv
from tests.helpers import assert_batches_equal

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")

OBS = 16384  # float32: 64 KB a row, so a batch of 3 or more is lent
ACTS = np.array([0, 1, 0, 1, 1, 0])  # no FaultyEnv trigger (action 2)


BACKENDS = ["process", pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="needs ray (the ray extra)")])]


def lent_env(backend: str = "process", **options: object) -> pp.BatchEnv:
    options.setdefault("small_batch_inline", False)
    return pp.make(CounterEnv, backend=backend, n_workers=2, horizon=1000, obs_size=OBS, **options)


@pytest.fixture(scope="module")
def oracle() -> Iterator[pp.PlanEnv]:
    with pp.make(CounterEnv, backend="inline", horizon=1000, obs_size=OBS) as env:
        yield env


@pytest.fixture(scope="module")
def starts(oracle: pp.PlanEnv) -> list:
    s0 = oracle.reset(seed=5)[0]
    return list(oracle.step_batch(np.array([0, 1, 2, 1, 2, 0]), states=[s0] * 6, dt=np.arange(1, 7)).states)


def batch_of(rng: np.random.Generator, starts: list) -> tuple[np.ndarray, list, np.ndarray]:
    n = int(rng.integers(3, 13))
    states = [starts[int(i)] for i in rng.integers(0, len(starts), size=n)]
    return rng.integers(0, 3, size=n), states, rng.integers(1, 4, size=n)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("small_batch_inline", [False, True], ids=["workers", "default"])
def test_lent_observations_equal_inline(backend: str, small_batch_inline: bool, oracle: pp.PlanEnv,
                                        starts: list) -> None:
    rng = np.random.default_rng(0)
    with lent_env(backend, small_batch_inline=small_batch_inline) as env:
        for _ in range(12):
            acts, states, dt = batch_of(rng, starts)
            got = env.step_batch(acts, states, dt)
            assert_batches_equal(got, oracle.step_batch(acts, states, dt))
            assert not got.observations.flags.writeable
            for k, s in enumerate(got.states):
                assert np.shares_memory(s.obs, got.observations[k]), "a state's obs is its batch's row"
        if not small_batch_inline:
            assert env.stats["lent_batches"] == 12, env.stats


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_lent_rows_never_change_while_held(backend: str, oracle: pp.PlanEnv, starts: list) -> None:
    """The batch's array, a row of another batch and a state kept alone stay as they were through
    later batches, while slabs nobody holds are reused (the slab count stays flat)."""
    rng = np.random.default_rng(1)
    with lent_env(backend) as env:
        acts, states, dt = batch_of(rng, starts)
        kept = env.step_batch(acts, states, dt)
        kept_copy = kept.observations.copy()
        row = env.step_batch(acts[::-1].copy(), states[::-1], dt).observations[1]
        row_copy = row.copy()
        lone = env.step_batch(acts, states, dt).states[-1]  # its batch dropped, the state kept
        lone_copy = lone.obs.copy()
        for _ in range(5):
            env.step_batch(*batch_of(rng, starts))
        gc.collect()
        segments = len(shm_segments())
        for _ in range(30):
            acts, states, dt = batch_of(rng, starts)
            assert_batches_equal(env.step_batch(acts, states, dt), oracle.step_batch(acts, states, dt))
        assert len(shm_segments()) <= segments + 1, "a slab nobody holds was not reused"
        np.testing.assert_array_equal(kept.observations, kept_copy)
        np.testing.assert_array_equal(row, row_copy)
        np.testing.assert_array_equal(lone.obs, lone_copy)
        inputs = [batch_of(rng, starts) for _ in range(6)]
        held = [env.step_batch(*x) for x in inputs]
        for i in range(6):
            for j in range(i):
                assert not np.shares_memory(held[i].observations, held[j].observations), "a held slab was reused"
        for x, got in zip(inputs, held):
            np.testing.assert_array_equal(got.observations, oracle.step_batch(*x).observations)


@pytest.mark.timeout(60)
def test_lent_rows_stay_readable_after_close(oracle: pp.PlanEnv, starts: list) -> None:
    acts, states, dt = batch_of(np.random.default_rng(2), starts)
    before = shm_segments()
    with lent_env() as env:
        got = env.step_batch(acts, states, dt)
        ours = shm_segments() - before
    assert ours and not shm_segments() & ours, "close() unlinks every slab, lent ones included"
    np.testing.assert_array_equal(got.observations, oracle.step_batch(acts, states, dt).observations)
    assert got.states[0] == oracle.step_batch(acts, states, dt).states[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", ["sigkill", "raise"])
def test_a_failing_chunk_of_a_lent_batch_leaves_later_batches_exact(fault: str, tmp_path: Path) -> None:
    """A worker killed while writing its rows (the chunk is run again), or an env error in one chunk
    while the other is still written: the next batches' observations are exactly the oracle's."""
    kw = dict(fault=fault, phase="step", trigger_action=2, horizon=1000, obs_size=OBS)
    once = {"once_file": str(tmp_path / "fired")} if fault == "sigkill" else {}
    with pp.make(FaultyEnv, backend="inline", **{**kw, "fault": "none"}) as oracle, \
            pp.make(FaultyEnv, backend="process", n_workers=2, small_batch_inline=False, **kw, **once) as env:
        s0 = env.reset(seed=0)[0]
        oracle.reset(seed=0)
        trig = np.array([0, 1, 0, 1, 0, 2, 1, 0])  # item 5: the second chunk (of 4 items, on the lane and off it)
        if fault == "sigkill":
            assert_batches_equal(env.step_batch(trig, [s0] * 8), oracle.step_batch(trig, [s0] * 8))
            assert env.stats["restarts"] == 1
        else:
            with pytest.raises(ValueError, match="injected fault"):
                env.step_batch(trig, [s0] * 8)
        states = list(oracle.step_batch(ACTS, [s0] * 6, dt=3).states)
        lent = env.stats["lent_batches"]
        for k in range(10):
            acts = np.roll(ACTS, k)
            assert_batches_equal(env.step_batch(acts, states), oracle.step_batch(acts, states))
        assert env.stats["lent_batches"] - lent == 10


def test_a_slab_returns_once_both_its_views_and_its_writers_are_gone() -> None:
    """The lease's own contract, whichever comes last; a slab a killed worker wrote is freed, not reused."""
    from plan_parallel.wire.leases import LeasePool

    pool = LeasePool()
    try:
        for views_last in (False, True):
            lease = pool.lease(1 << 17)
            rows = lease.array(np.dtype(np.float32), (2, 1 << 14))
            view = rows[1, :3]
            lease.add_writer()
            if views_last:
                lease.writer_done(killed=False)
                del rows
                assert not pool.returned, "returned while a view lives"
                del view
            else:
                del rows, view
                gc.collect()
                assert not pool.returned, "returned while a worker may write"
                lease.writer_done(killed=False)
            assert list(pool.returned) == [(lease.slab, False)]
            assert pool.lease(1 << 17).slab is lease.slab, "a returned slab is reused"
        tainted = pool.lease(1 << 17)
        rows = tainted.array(np.dtype(np.uint8), (16,))
        tainted.add_writer()
        del rows
        tainted.writer_done(killed=True)
        assert pool.lease(1 << 17).slab is not tainted.slab
        assert tainted.slab not in pool.slabs, "a slab a killed worker may have written is freed"
    finally:
        pool.close()


@pytest.mark.timeout(180)
def test_lent_ale_states_never_change_while_held_and_their_slab_returns_when_freed() -> None:
    """A lane call of 17 or more ALE states (Pong with RAM observations: only its states are large, 7.7 KB each)
    lends their columns to the result. A state kept alone, its batch dropped, keeps its bytes and steps as its
    inline twin through 30 later calls whose dropped results' slabs are reused; freed, its slab is reused too."""
    kw = {"obs_type": "ram", "frameskip": 1}
    policy = pp.ExecutionPolicy(n_workers=2, placement="workers")
    with pp.make("ALE/Pong-v5", backend="inline", **kw) as ref, pp.make("ALE/Pong-v5", execution=policy, **kw) as env:
        acts = np.arange(20) % 6
        s, r = env.reset(seed=3)[0], ref.reset(seed=3)[0]
        got, want = env.step_batch(acts, [s] * 20), ref.step_batch(acts, [r] * 20)
        assert env.stats["lent_batches"] == 1 and not got.states.columns.fields["blob"].flags.owndata
        lone, lone_want = got.states[7], want.states[7]
        del got
        env.step_batch(acts, [s] * 20)
        gc.collect()
        segments = len(shm_segments())
        for _ in range(30):
            env.step_batch(acts, [lone] * 20)
        assert len(shm_segments()) <= segments + 1, "a slab nobody holds was not reused"
        assert lone.diff(lone_want) == [] and lone.sim_blob() == lone_want.sim_blob()
        assert_batches_equal(env.step_batch(acts, [lone] * 20), ref.step_batch(acts, [lone_want] * 20))
        lent = env.stats["lent_batches"]
        del lone
        gc.collect()
        for _ in range(10):
            env.step_batch(acts, [s] * 20)
        assert len(shm_segments()) <= segments + 1, "the freed state's slab was not reused"
        assert env.stats["lent_batches"] - lent == 10


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["workers", "share"])
@pytest.mark.parametrize("return_all", [False, True], ids=["final", "return_all"])
def test_lent_rollout_observations_equal_inline(where: str, return_all: bool, oracle: pp.PlanEnv,
                                                starts: list) -> None:
    """A rollout's final observations are lent too (the worker's chunks and, shared, this process's)."""
    from plan_parallel.batch import BatchEnv, Tuner
    from plan_parallel.factory import EnvFactory

    rng = np.random.default_rng(3)
    factory = EnvFactory(CounterEnv, {"horizon": 1000, "obs_size": OBS})
    with BatchEnv(factory, n_workers=2, tuner=Tuner(2, where, cores=2)) as env:
        for _ in range(4):
            n = int(rng.integers(3, 9))
            states = [starts[int(i)] for i in rng.integers(0, len(starts), size=n)]
            seq = rng.integers(0, 3, size=(n, 4))
            got = env.rollout_batch(states, seq, dt=2, return_all=return_all)
            want = oracle.rollout_batch(states, seq, dt=2, return_all=return_all)
            np.testing.assert_array_equal(got.observations, want.observations)
            np.testing.assert_array_equal(got.rewards, want.rewards)
            assert list(got.states) == list(want.states)
            if return_all:
                np.testing.assert_array_equal(got.all_observations, want.all_observations)
                assert got.all_states == want.all_states
            assert not got.observations.flags.writeable
            for k, s in enumerate(got.states):
                assert np.shares_memory(s.obs, got.observations[k]), "a final state's obs is its batch's row"
        assert env.stats["lent_batches"] == 4


def test_a_worker_keeps_a_bounded_set_of_slabs_attached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches the caller keeps get new slabs each; a worker unmaps the least recently used past its
    count and byte bounds (a freed slab lives while a worker maps it), never the chunk it is writing."""
    from plan_parallel.wire import codec
    from plan_parallel.wire.leases import LeasePool
    from plan_parallel.wire.messages import Call, Op
    from plan_parallel.wire.slabs import SlabPool
    from plan_parallel.workers import server as server_module

    monkeypatch.setattr(server_module, "MAX_ATTACHED_BYTES", 5 * (1 << 17))
    with pp.make(CounterEnv, backend="inline", horizon=1000, obs_size=OBS) as oracle:
        server = server_module.Server(pp.make(CounterEnv, backend="inline", horizon=1000, obs_size=OBS))
        slabs, leases = SlabPool(), LeasePool()
        kept = []
        try:
            s0 = oracle.reset(seed=0)[0]
            acts = np.array([0, 1])
            want = oracle.step_batch(acts, [s0, s0]).observations
            for _ in range(12):
                job = codec.Job(2, acts, [s0, s0], 1, None)
                lease = leases.lease(2 * OBS * 4)
                rows = lease.array(np.dtype(np.float32), (2, OBS))
                req, slab, _ = codec.encode(job, 0, 2, 4096, slabs.acquire, (lease.slab, rows))
                reply = server_module.answer(server, Call(1, Op.STEP_BATCH, (req,)))
                assert reply.error is None and reply.value.obs_written
                np.testing.assert_array_equal(rows, want)
                kept.append(rows)
                slabs.release(slab)
                assert sum(s.size for s in server.slabs.values()) <= 5 * (1 << 17) + slab.size
            assert len(server.slabs) <= 6, len(server.slabs)
            for rows in kept:
                np.testing.assert_array_equal(rows, want)
        finally:
            server.close()
            slabs.close()
            leases.close()
