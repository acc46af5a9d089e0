"""The lane (plan_parallel.batch.lane): step and rollout calls through one shared segment, the states as
columns (a row layout) or pickled in the headers and replies.

Its invariants are the general path's: every result equals the inline backend's (and gymnasium's own env
where gymnasium has the call), on every worker count, with the lane on or off; a worker killed mid-call is
replaced and its rows sent again; a timeout kills and replaces; an interruption at any line of the call,
or a close from another thread, leaves the env usable and exact; a reply to another call is dropped.
Every call below that could wait has a deadline.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import threading
from collections.abc import Iterator
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch.batch_env import BatchEnv, batch_engine_of
from plan_parallel.batch.jobs import step_job
from plan_parallel.errors import ClosedError, WorkerTimeoutError
from plan_parallel.factory import EnvFactory
from plan_parallel.wire.lane import ERROR, HEADER, REPLY, TAG
from plan_parallel.workers.server import build_server
from tests.conftest_leaks import live_children
from tests.deadline import call_with_deadline
from tests.envs import ArrayStateEnv, CounterEnv, FlatStateEnv, NumpyInfoEnv
from tests.envs_faults import SlowOrRaisingEnv
from tests.helpers import assert_batches_equal
from tests.test_interrupts import Interrupt, InterruptAtLine

# Rows: classic control and MuJoCo (float64 arrays); ALE (a state's bytes, the sticky pair and its RNG as words:
# sticky actions draw), with RAM observations (small rows) and with screens (100 KB). ALE results are lent (a slab of
# their own, wire.leases) when a call's screens, or its states' 7.7 KB rows, reach 128 KB: 2 screens, 17 states.
# User envs whose steps draw from their RNG (its words in the rows): a tuple of ints and a float (one with numpy
# infos), a float64 array.
SCREEN_ENV: Any = ("ALE/Pong-v5", {"frameskip": 1})
LENT_ENVS: list[Any] = [("ALE/Pong-v5", {"obs_type": "ram"}), SCREEN_ENV]
ROW_ENVS: list[Any] = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "HalfCheetah-v5", "Hopper-v5", *LENT_ENVS,
                       CounterEnv, NumpyInfoEnv, FlatStateEnv]
# States pickled: an extra that is a float; a float32 state; a user env's tuple holding an array.
PICKLED_ENVS: list[Any] = ["Pendulum-v1", "MountainCarContinuous-v0", ArrayStateEnv]
GENERAL_ENVS: list[Any] = ["FrozenLake-v1"]  # a Discrete observation


def env_name(spec: Any) -> str:
    if isinstance(spec, tuple):
        return spec[0] + "".join(f"-{k}={v}" for k, v in spec[1].items())
    return spec if isinstance(spec, str) else spec.__name__


def make_env(spec: Any, **kw: Any) -> Any:
    env_id, options = spec if isinstance(spec, tuple) else (spec, {})
    return pp.make(env_id, **options, **kw)


def layout_pickled(env: Any) -> bool | None:
    """Whether the lane's last call sent the states pickled (None: it never ran)."""
    layout = batch_engine_of(env).placement.lane.layout
    return None if layout is None else layout.pickled


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here (a CI job may start the run with it ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def on_workers(n: int, **kw: Any) -> pp.ExecutionPolicy:
    """Every batch on the workers, one chunk a worker (so the lane takes every call it can, whatever the
    tuner measured: it would split a long one for balance, on the general path)."""
    return pp.ExecutionPolicy(n_workers=n, placement="workers", max_chunks_per_worker=1, **kw)


def actions_for(space: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.uniform(space.low, space.high, (n, *space.shape)).astype(space.dtype)


def walk(env: Any, ref: pp.PlanEnv, rng: np.random.Generator, calls: int) -> None:
    """Random calls on ``env`` and ``ref`` from the states the last calls returned: subsets as lists, or the
    whole batch back as it came; each result equal to the reference's."""
    s, r = env.reset(seed=0)[0], ref.reset(seed=0)[0]
    assert s == r
    got_states: Any = [s] * 8
    want_states: Any = [r] * 8
    for _ in range(calls):
        n = len(got_states)
        if rng.random() < 0.5:
            pick = rng.integers(0, n, int(rng.integers(1, 40)))
            got_states = [got_states[k] for k in pick]
            want_states = [want_states[k] for k in pick]
        acts = actions_for(ref.action_space, len(got_states), rng)
        dt = int(rng.integers(1, 5))
        got, want = env.step_batch(acts, got_states, dt=dt), ref.step_batch(acts, want_states, dt=dt)
        assert_batches_equal(got, want)
        for a, b in zip(got.states, want.states):
            assert a.diff(b) == [] and a.rng == b.rng and type(a.extra) is type(b.extra)
        got_states, want_states = got.states, want.states


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lane", [True, False], ids=["lane", "no-lane"])
@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("spec", ROW_ENVS + PICKLED_ENVS + GENERAL_ENVS, ids=env_name)
def test_every_call_equals_inline_with_the_lane_on_or_off(spec: Any, n_workers: int, lane: bool) -> None:
    rng = np.random.default_rng([n_workers, lane, len(env_name(spec))])
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=on_workers(n_workers, lane=lane)) as env:
        walk(env, ref, rng, 25)
        took = env.stats["lane_batches"]
        if lane and spec not in GENERAL_ENVS:
            assert took >= 20, f"the lane took {took} of {env.stats['batches']} calls"
            assert layout_pickled(env) is (spec in PICKLED_ENVS)
            # (a batch of one screen, or of 16 ALE states, is copied: a lease costs more than its copy)
            assert (env.stats["lent_batches"] >= 10) is (spec in LENT_ENVS)
        else:
            assert took == 0


def assert_rollouts_equal(got: Any, want: Any) -> None:
    assert list(got.states) == list(want.states)
    for field in ("observations", "rewards", "terminations", "truncations", "n_steps"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), field
    assert got.infos == want.infos and got.all_states is None and got.all_observations is None
    assert not got.observations.flags.writeable


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lane", [True, False], ids=["lane", "no-lane"])
@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("spec", ["CartPole-v1", "HalfCheetah-v5", "Pendulum-v1", ArrayStateEnv, CounterEnv,
                                  *LENT_ENVS], ids=env_name)
def test_every_rollout_equals_inline_with_the_lane_on_or_off(spec: Any, n_workers: int, lane: bool) -> None:
    """Rollouts of given actions (the planners' kind): from subsets of the last call's states, or from the
    whole batch as it came; a policy's rollouts and return_all take the general path, equal all the same."""
    rng = np.random.default_rng([n_workers, lane, len(env_name(spec)), 7])
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=on_workers(n_workers, lane=lane)) as env:
        got_states: Any = [env.reset(seed=0)[0]] * 8
        want_states: Any = [ref.reset(seed=0)[0]] * 8
        for k in range(16):
            if k % 2:
                pick = rng.integers(0, len(got_states), int(rng.integers(1, 30)))
                got_states, want_states = [got_states[i] for i in pick], [want_states[i] for i in pick]
            n, horizon, dt = len(got_states), int(rng.integers(1, 12)), int(rng.integers(1, 4))
            acts = np.stack([actions_for(ref.action_space, horizon, rng) for _ in range(n)])
            got, want = env.rollout_batch(got_states, acts, dt=dt), ref.rollout_batch(want_states, acts, dt=dt)
            assert_rollouts_equal(got, want)
            got_states, want_states = got.states, want.states
        full = env.rollout_batch(got_states, acts[:len(got_states)], dt=2, return_all=True)
        assert list(full.states) == list(ref.rollout_batch(want_states, acts[:len(got_states)], dt=2).states)
        took = env.stats["lane_batches"]
        assert took >= 14 if lane else took == 0, took


@pytest.mark.timeout(120)
def test_a_lane_trajectory_equals_gymnasiums_own_env() -> None:
    """CartPole stepped one item a call through the lane, from each call's state, against gymnasium's env."""
    rng = np.random.default_rng(5)
    gym_env = gym.make("CartPole-v1")
    with pp.make("CartPole-v1", execution=on_workers(2)) as env:
        state, obs, _ = env.reset(seed=11)
        gym_obs, _ = gym_env.reset(seed=11)
        np.testing.assert_array_equal(obs, gym_obs)
        for t in range(200):
            a = int(rng.integers(0, 2))
            b = env.step_batch(np.array([a]), [state])
            g_obs, g_rew, g_term, g_trunc, _ = gym_env.step(a)
            np.testing.assert_array_equal(b.observations[0], g_obs)
            assert (b.rewards[0], b.terminations[0], b.truncations[0]) == (g_rew, g_term, g_trunc), t
            if g_term or g_trunc:
                break
            state = b.states[0]
        assert env.stats["lane_batches"] >= t


def big_call(env: Any, ref: pp.PlanEnv, n: int = 2048, dt: int = 25, s: Any = None) -> tuple[Any, Any]:
    """A call long enough (~0.3-1 s on 2 workers) for a kill, a timeout or a close to land inside it (the
    lane takes it with ``max_chunks_per_worker=1``: the tuner would split it for balance otherwise)."""
    s = ref.reset(seed=2)[0] if s is None else s
    acts = np.arange(n) % 2
    return (lambda: env.step_batch(acts, [s] * n, dt=dt)), (lambda: ref.step_batch(acts, [s] * n, dt=dt))


@pytest.mark.timeout(120)
def test_a_worker_killed_during_a_lane_call_is_replaced_and_its_rows_sent_again() -> None:
    with pp.make("CartPole-v1", backend="inline") as ref, \
            pp.make("CartPole-v1", execution=on_workers(2)) as env:
        call, want = big_call(env, ref)
        call()  # the workers have measured a step; the states are theirs
        lane_before = env.stats["lane_batches"]
        victim = env.pids[0]
        killer = threading.Timer(0.05, lambda: os.kill(victim, signal.SIGKILL))
        killer.start()
        got = call_with_deadline(call, 60.0, "the call a worker died in")
        killer.join()
        assert_batches_equal(got, want())
        assert env.stats["restarts"] == 1 and env.pids[0] != victim
        assert env.stats["lane_batches"] == lane_before + 1, "the call ran in the lane"
        assert_batches_equal(call(), want())


@pytest.mark.timeout(120)
def test_a_worker_killed_after_its_last_chunk_while_another_runs_is_replaced_and_the_call_is_exact() -> None:
    """Worker 0 answers its 4 quick items and is SIGKILLed while worker 1 still sleeps through its 4 (0.4 s
    each): the call notices the death (it still polls the worker), replaces it, and returns inline's results."""
    with pp.make(SlowOrRaisingEnv, backend="inline", delay=0.4) as ref, \
            pp.make(SlowOrRaisingEnv, delay=0.4, execution=on_workers(2)) as env:
        s = ref.reset(seed=3)[0]
        acts = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        env.step_batch(np.zeros(8, dtype=np.int64), [s] * 8)  # (the states are the workers')
        lanes, victim = env.stats["lane_batches"], env.pids[0]
        killer = threading.Timer(0.5, lambda: os.kill(victim, signal.SIGKILL))
        killer.start()
        got = call_with_deadline(lambda: env.step_batch(acts, [s] * 8), 30.0, "the call a finished worker died in")
        killer.join()
        assert_batches_equal(got, ref.step_batch(acts, [s] * 8))
        assert env.stats["lane_batches"] == lanes + 1 and env.stats["restarts"] == 1 and env.pids[0] != victim
        assert_batches_equal(env.step_batch(acts[:4], [s] * 4), ref.step_batch(acts[:4], [s] * 4))


@pytest.mark.timeout(120)
def test_steps_and_rollouts_alternating_keep_a_segment_each_and_stay_exact() -> None:
    """A planner alternates step and rollout calls: each form keeps its segment (the workers map it once), up to
    MAX_SEGMENTS forms, the least recently used given back first; every call equal to inline."""
    from plan_parallel.wire.lane import MAX_SEGMENTS

    with pp.make("CartPole-v1", backend="inline") as ref, pp.make("CartPole-v1", execution=on_workers(2)) as env:
        lane = batch_engine_of(env).placement.lane
        s = ref.reset(seed=6)[0]
        states: Any = list(env.step_batch(np.zeros(8, dtype=np.int64), [s] * 8).states)
        want_states: Any = list(ref.step_batch(np.zeros(8, dtype=np.int64), [s] * 8).states)
        names: set[str] = set()
        for k in range(2 * MAX_SEGMENTS + 2):
            horizon = 3 if k < 6 else k  # two forms, then a new horizon every call
            seqs = np.arange(8 * horizon).reshape(8, horizon) % 2
            assert_rollouts_equal(env.rollout_batch(states, seqs), ref.rollout_batch(want_states, seqs))
            names |= {seg.slab.name for seg in lane.segments.values()}
            got, want = env.step_batch(seqs[:, 0], states), ref.step_batch(seqs[:, 0], want_states)
            assert_batches_equal(got, want)
            states, want_states = got.states, want.states
            if k == 5:
                assert len(lane.segments) == 2 and len(names) == 2, "each form kept its segment"
        assert len(lane.segments) == MAX_SEGMENTS
        assert env.stats["lane_batches"] == 2 * (2 * MAX_SEGMENTS + 2)


@pytest.mark.timeout(120)
def test_items_of_a_millisecond_get_a_worker_each() -> None:
    """A chunk holds at least WAKE_SECONDS of env time, up to 4 items: 4 items of 10 ms on 4 workers run one a
    worker once a step's time is known; 8 CartPole items (~20-40 us each) run 4 a worker."""
    with pp.make(SlowOrRaisingEnv, backend="inline", delay=0.01) as ref, \
            pp.make(SlowOrRaisingEnv, delay=0.01, execution=on_workers(4)) as env:
        s = ref.reset(seed=1)[0]
        acts = np.ones(4, dtype=np.int64)
        env.step_batch(acts, [s] * 4)  # (the states are the workers', a step's time is known)
        chunks = env.stats["lane_chunks"]
        assert_batches_equal(env.step_batch(acts, [s] * 4), ref.step_batch(acts, [s] * 4))
        assert env.stats["lane_chunks"] - chunks == 4
    with pp.make("CartPole-v1", execution=on_workers(4)) as env:
        s = env.reset(seed=1)[0]
        for _ in range(3):  # (the tuner learns a step's time: ~20-40 us here)
            env.step_batch(np.ones(512, dtype=np.int64), [s] * 512)
        chunks = env.stats["lane_chunks"]
        env.step_batch(np.ones(8, dtype=np.int64), [s] * 8)
        assert env.stats["lane_chunks"] - chunks == 2, "8 CartPole items on 4 workers: 4 a chunk"


@pytest.mark.timeout(120)
def test_a_batch_the_tuner_splits_for_balance_runs_in_the_lane_in_more_chunks_than_workers() -> None:
    """~0.5 s of CartPole steps: the tuner splits it in up to 3 chunks a worker, which the lane hands out as
    workers finish (a worker slowed by its neighbours takes fewer). Same results as inline."""
    policy = pp.ExecutionPolicy(n_workers=2, placement="workers")  # max_chunks_per_worker=3, the default
    with pp.make("CartPole-v1", backend="inline") as ref, pp.make("CartPole-v1", execution=policy) as env:
        call, want = big_call(env, ref)
        assert_batches_equal(call(), want())  # (the workers measure a step; the states are theirs)
        lanes, chunks = env.stats["lane_batches"], env.stats["lane_chunks"]
        assert_batches_equal(call(), want())
        assert env.stats["lane_batches"] == lanes + 1
        assert 2 < env.stats["lane_chunks"] - chunks <= 6


@pytest.mark.timeout(120)
def test_a_lane_call_past_its_timeout_raises_and_the_env_stays_exact() -> None:
    with pp.make("CartPole-v1", backend="inline") as ref, \
            pp.make("CartPole-v1", execution=on_workers(2), timeout=0.05) as env:
        s = ref.reset(seed=2)[0]
        small = np.array([0, 1, 1])
        for _ in range(2):  # the states are the workers' from the first: the second takes the lane
            assert_batches_equal(env.step_batch(small, [s] * 3), ref.step_batch(small, [s] * 3))
        assert env.stats["lane_batches"] == 1
        call, want = big_call(env, ref, n=4096, dt=40, s=s)
        with pytest.raises(WorkerTimeoutError, match=r"did not finish step_batch \(2048 items\)"):  # the lane's
            call_with_deadline(call, 60.0, "a call past its timeout")
        assert env.stats["timeouts"] == 1
        for _ in range(2):  # the first replaces the workers the interrupted call left
            assert_batches_equal(env.step_batch(small, [s] * 3), ref.step_batch(small, [s] * 3))
        assert env.stats["lane_batches"] >= 2


@pytest.mark.timeout(600)
@pytest.mark.parametrize("spec,chunked,sizes", [("CartPole-v1", False, (4, 12)), (ArrayStateEnv, False, (4, 12)),
                                               ("CartPole-v1", True, (64, 65)), (SCREEN_ENV, False, (18, 24)),
                                               (CounterEnv, False, (4, 12))],
                         ids=["rows", "pickled", "chunks-handed-out", "ale-rows-lent", "user-tuple-rows"])
def test_an_interrupt_at_every_line_of_a_lane_call_leaves_the_env_exact(spec: Any, chunked: bool,
                                                                         sizes: tuple[int, int]) -> None:
    """KeyboardInterrupt at the first event of every line of plan_parallel a lane call reaches (where SIGINT is
    not held back), each in its own call; then two calls equal the oracle's. States as rows, or pickled; and
    calls long enough that the tuner splits them in more chunks than workers (handed out as workers finish); ALE
    states as rows, their screens and state columns lent to the result (calls of ``sizes`` items)."""
    rng = np.random.default_rng(3)
    policy = pp.ExecutionPolicy(n_workers=2, placement="workers") if chunked else on_workers(2, lane=True)
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=policy, max_restarts=1000) as env:
        s = ref.reset(seed=4)[0]
        starts = list(ref.step_batch(np.array([0, 1, 0, 1]), [s] * 4, dt=3).states) + [s]

        def case() -> tuple[Any, Any, Any]:
            """A call, the oracle's, and how to compare their results (a step's or a rollout's)."""
            n = int(rng.integers(*sizes))
            states = [starts[int(k)] for k in rng.integers(0, len(starts), n)]
            dt = int(rng.integers(150, 200)) if chunked else int(rng.integers(1, 4))
            if rng.random() < 0.5:
                seqs = rng.integers(0, 2, (len(states), 3))
                return (lambda: env.rollout_batch(states, seqs, dt=dt)), \
                    (lambda: ref.rollout_batch(states, seqs, dt=dt)), assert_rollouts_equal
            acts = rng.integers(0, 2, len(states))
            return (lambda: env.step_batch(acts, states, dt=dt)), (lambda: ref.step_batch(acts, states, dt=dt)), \
                assert_batches_equal

        env.step_batch(np.zeros(len(starts), dtype=np.int64), starts)  # the workers checked them: the lane takes them
        counter = Interrupt()
        chunks = env.stats["lane_chunks"]
        counter.run(case()[0])
        counter.run(case()[0])  # (two calls: a step's and a rollout's lines, most often)
        assert env.stats["lane_chunks"] - chunks >= (5 if chunked else 2), "chunks handed out as workers finish"
        lines = sorted(counter.open_lines)
        assert any(f.endswith(os.path.join("batch", "lane.py")) for f, _ in lines)
        seen = []
        for line in lines:
            call, want, same = case()
            lanes = env.stats["lane_batches"]
            interrupted, got = InterruptAtLine(line).run(call)
            if not interrupted:
                same(got, want())
            for _ in range(2):
                call, want, same = case()
                same(call_with_deadline(call, 40.0, f"a call after an interrupt at {line}"), want())
            if interrupted:
                seen.append(line)
            assert env.stats["lane_batches"] > lanes, "the calls took the lane"
        in_lane = [n for f, n in seen if f.endswith((os.path.join("batch", "lane.py"), os.path.join("batch", "lane_call.py")))]
        assert len(in_lane) >= 30, f"{len(in_lane)} lines of the lane's call interrupted it"
        assert env.stats["restarts"] == 0, "interrupts are not deaths"
        if spec is SCREEN_ENV:  # (its results' state columns are rows of the slab lent to them, not copies)
            assert not case()[0]().states.columns.fields["blob"].flags.owndata


@pytest.mark.timeout(120)
def test_close_from_another_thread_during_a_lane_call_raises_closed_error() -> None:
    with pp.make("CartPole-v1", backend="inline") as ref:
        env = pp.make("CartPole-v1", execution=on_workers(2))
        call, _ = big_call(env, ref, n=4096, dt=40)
        call()
        pids = set(env.pids)
        closer = threading.Timer(0.05, env.close)
        closer.start()
        with pytest.raises(ClosedError):
            call_with_deadline(call, 30.0, "a call its env was closed under")
        closer.join()
        assert not pids & {pid for pid, _ in live_children()}


@pytest.mark.timeout(120)
def test_a_reply_to_another_call_is_dropped_and_counted() -> None:
    with pp.make("CartPole-v1", backend="inline") as ref, pp.make("CartPole-v1", execution=on_workers(1)) as env:
        s = ref.reset(seed=1)[0]
        acts = np.array([1, 0, 1, 1])
        env.step_batch(acts, [s] * 4)  # the segment exists, the states are trusted
        engine = batch_engine_of(env)
        lane, worker = engine.placement.lane, engine.pool.slots[0].worker
        # (a call no one waits for)
        worker.send(HEADER.pack(TAG, 10**12, 0, 2, 1, 0, len(lane.key), 0, 0, -1, -1, 0, 0, 0, -1, 0) + lane.key)
        replied = select.poll()
        replied.register(worker.handles()[0], select.POLLIN)
        assert replied.poll(10_000), "the worker answered the header"
        assert_batches_equal(env.step_batch(acts, [s] * 4), ref.step_batch(acts, [s] * 4))
        assert env.stats["stray_replies"] == 1


def test_an_env_error_in_a_lane_serve_travels_with_its_item() -> None:
    """The worker's side alone, in this process: an action CartPole's step rejects, written past the caller's
    checks into the lane's rows, comes back as the env's AssertionError naming item 1."""
    server, _ = build_server(cloudpickle.dumps((EnvFactory("CartPole-v1", {}), None)))
    with BatchEnv(EnvFactory("CartPole-v1", {}), n_workers=1, execution=on_workers(1)) as env:
        s = env.reset(seed=0)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s, s])
        lane = batch_engine_of(env).placement.lane
        job = step_job(env.action_space, env.kind, env.reseedable, lambda: s, np.array([0, 1]), [s, s], 1, None)
        lane._write_inputs(job)
        lane.cols["actions"][1] = 5
        reply = server.lane.serve(HEADER.pack(TAG, 3, 0, 2, 1, 0, len(lane.key), 0, 0, -1, -1, 0, 0, 0, -1, 0) + lane.key)
        _, call_id, status, _ = REPLY.unpack_from(reply)
        exc, _, item = pickle.loads(reply[REPLY.size:])
        assert (call_id, status, type(exc), item) == (3, ERROR, AssertionError, 1)
    server.close()


@pytest.mark.parametrize("env_id,row,rng", [("CartPole-v1", "count", False), ("Acrobot-v1", "none", False),
                                            ("MountainCar-v0", "none", False), ("HalfCheetah-v5", "none", False),
                                            ("Pendulum-v1", None, False), ("MountainCarContinuous-v0", "none", False),
                                            ("ALE/Pong-v5", "sticky", True), ("FrozenLake-v1", None, False),
                                            (CounterEnv, "none", True)], ids=str)
def test_which_families_declare_a_fixed_row(env_id: Any, row: str | None, rng: bool) -> None:
    """Adapter.row_extra, the family's opt-in: CartPole's extra is a count; Pendulum's (last_u, a float) is not
    a row; ALE's is the sticky pair; toy text is not; a user env's ``get_state`` value is a row when it is a
    float64 array or a tuple of scalars (else pickled, call by call). ALE's and a user env's rows hold the RNG too
    (Adapter.row_rng: their steps may draw). MountainCarContinuous declares one, but its float32 state does not fit
    the float64 column, so its states travel pickled (see the exactness table)."""
    from plan_parallel.env.plan_env import engine_of

    with pp.make(env_id, backend="inline") as env:
        assert engine_of(env).adapter.row_extra() == row
        assert engine_of(env).adapter.row_rng() is rng


@pytest.mark.timeout(120)
@pytest.mark.parametrize("spec", ["CartPole-v1", CounterEnv], ids=env_name)
def test_the_state_a_reset_returns_takes_the_lane_and_equals_inline(spec: Any) -> None:
    """A worker's env made it (``BatchEnv.reset``): the first call from it takes the lane, as a result's states do."""
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=on_workers(2)) as env:
        s, r = env.reset(seed=5)[0], ref.reset(seed=5)[0]
        acts = np.array([0, 1, 2, 1, 0, 1, 0, 1]) % ref.action_space.n
        got, want = env.step_batch(acts, [s] * 8, dt=2), ref.step_batch(acts, [r] * 8, dt=2)
        assert_batches_equal(got, want)
        assert env.stats["lane_batches"] == 1 == env.stats["batches"]


@pytest.mark.timeout(120)
def test_a_lane_batch_of_states_given_to_an_env_of_another_kind_fails_as_inline() -> None:
    """A StateBatch read as columns is checked for its kind as a list is: the same StateError as inline."""
    with pp.make("CartPole-v1", execution=on_workers(2)) as env, pp.make("Acrobot-v1", execution=on_workers(2)) as other, \
            pp.make("Acrobot-v1", backend="inline") as other_inline:
        s = env.reset(seed=0)[0]
        batch = env.step_batch(np.array([0, 1]), [s, s])
        batch = env.step_batch(np.array([0, 1]), batch.states)
        assert batch.states.columns is not None
        with pytest.raises(pp.StateError) as inline_error:
            other_inline.step_batch(np.array([0, 1]), batch.states)
        with pytest.raises(pp.StateError) as lane_error:
            other.step_batch(np.array([0, 1]), batch.states)
        assert str(lane_error.value) == str(inline_error.value)


@pytest.mark.timeout(120)
def test_a_vector_envs_validated_states_take_the_lane_and_the_workers_check_them() -> None:
    """A vector env's states were validated by its own env in this process: the lane takes them (a step after a
    SAME_STEP reset), and the workers check the ones they did not make, as a chunk's: another env's state fails
    with step_batch's StateError, naming its item."""
    with pp.make("CartPole-v1", execution=on_workers(2)) as env, pp.make("Pendulum-v1", backend="inline") as other, \
            pp.make("CartPole-v1", backend="inline") as ref:
        good, bad = ref.reset(seed=0)[0], other.reset(seed=0)[0]
        engine = batch_engine_of(env)
        got = engine.step_batch_checked(np.array([0, 1, 1, 0]), [good] * 4, 1, validated=True)
        assert_batches_equal(got, ref.step_batch(np.array([0, 1, 1, 0]), [good] * 4))
        assert env.stats["lane_batches"] == 1
        chunks = env.stats["lane_chunks"]
        with pytest.raises(pp.StateError, match=r"states\[1\]"):
            engine.step_batch_checked(np.array([0, 1]), [good, bad], 1, validated=True)
        assert env.stats["lane_chunks"] > chunks, "the lane sent it (the workers refused it)"
