"""One behavioural suite over every backend; the inline backend is the oracle.

Every test runs the same calls on the backend under test and on an inline
oracle env, and requires the same outcome: bit-identical results (states equal
with ``==``, observations / rewards / flags / infos equal bit for bit,
``n_steps`` included), or the same exception type and message.

Process envs are shared per module (``shared_envs``) so worker processes start
a few times only; they run with ``small_batch_inline=False`` so every batch
really goes through the workers (one setup keeps the default, to cover the
small-batch shortcut too).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import plan_parallel as pp
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.state import State
from tests.deadline import call_with_deadline
from tests.envs import CounterEnv, DictObsEnv, FaultyEnv
from tests.envs_faults import SlowEnv
from tests.helpers import assert_batches_equal, assert_tree_equal, sample_actions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")

try:
    import ray  # noqa: F401 - the ray extra: its backend runs the same suite

    BACKENDS = ["inline", "process", "ray"]
except ImportError:
    BACKENDS = ["inline", "process"]
PARALLEL = [b for b in BACKENDS if b != "inline"]

# key -> (env id or class, env kwargs)
ENVS: dict[str, tuple[Any, dict]] = {
    "counter": (CounterEnv, {"horizon": 30}),
    "CartPole-v1": ("CartPole-v1", {}),
    "ALE/Pong-v5": ("ALE/Pong-v5", {"repeat_action_probability": 0.25}),  # sticky actions on
    "Hopper-v5": ("Hopper-v5", {}),
    "FrozenLake-v1": ("FrozenLake-v1", {"is_slippery": True}),
    "dict-obs": (DictObsEnv, {}),
}
REAL_ENVS = ["CartPole-v1", "ALE/Pong-v5", "Hopper-v5", "FrozenLake-v1", "dict-obs"]
BATCH_SIZE = {"ALE/Pong-v5": 4}  # ALE is slow: small batches
DEFAULT_BATCH = 12

Make = Callable[..., Any]


# =========================================================================== fixtures and helpers
@pytest.fixture(scope="module")
def shared_envs(keep_processes: Callable) -> Iterator[Make]:
    """``get(key, backend, n_workers=2, small_batch_inline=False)``: one env per setup for the module.

    ``backend="oracle"`` is a separate inline env: the reference.
    """
    made: dict[tuple, Any] = {}

    def get(key: str, backend: str, n_workers: int = 2, small_batch_inline: bool = False) -> Any:
        env, kwargs = ENVS[key]
        if backend in ("inline", "oracle"):
            setup: tuple = (key, backend)
        else:
            setup = (key, backend, n_workers, small_batch_inline)
        if setup not in made:
            if backend in ("inline", "oracle"):
                made[setup] = pp.make(env, backend="inline", **kwargs)
            else:
                made[setup] = pp.make(
                    env, backend=backend, n_workers=n_workers, small_batch_inline=small_batch_inline, **kwargs
                )
                keep_processes(made[setup].pids)
        return made[setup]

    yield get
    for e in made.values():
        e.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pair(shared_envs: Make, backend: str) -> tuple[Any, Any]:
    """(env under test, inline oracle) on CounterEnv(horizon=30), both reset with seed 0."""
    env, oracle = shared_envs("counter", backend), shared_envs("counter", "oracle")
    s, _, _ = env.reset(seed=0)
    r, _, _ = oracle.reset(seed=0)
    assert s == r
    return env, oracle


def make_fresh(key: str, backend: str, **kw: Any) -> Any:
    env, kwargs = ENVS[key]
    if backend == "inline":
        return pp.make(env, backend="inline", **kwargs)
    return pp.make(env, backend=backend, n_workers=kw.pop("n_workers", 2), small_batch_inline=False, **kwargs, **kw)


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", value) or ("raised", exception)."""
    try:
        return "ok", fn()
    except Exception as e:
        return "raised", e


def assert_same_outcome(got: tuple[str, Any], ref: tuple[str, Any]) -> Any:
    """Same value (bit for bit) or same exception type and message; returns the value."""
    if ref[0] == "raised":
        assert got[0] == "raised", f"the oracle raised {ref[1]!r}, the backend returned"
        assert type(got[1]) is type(ref[1]) and str(got[1]) == str(ref[1]), f"{got[1]!r} vs oracle {ref[1]!r}"
        return None
    assert got[0] == "ok", f"the backend raised {got[1]!r}, the oracle returned"
    assert_batches_equal(got[1], ref[1])
    return got[1]


def as_arrays(x: Any) -> Any:
    """Observations as arrays (dicts key by key): ``step`` returns one observation, raw or batched-row."""
    if isinstance(x, dict):
        return {k: as_arrays(v) for k, v in x.items()}
    return np.asarray(x)


def assert_step_equal(got: tuple, ref: tuple) -> None:
    assert len(got) == len(ref) == 6
    s, obs, reward, term, trunc, info = got
    assert s == ref[0], f"state differs in {s.diff(ref[0])}"
    assert_tree_equal(as_arrays(obs), as_arrays(ref[1]))
    assert type(reward) is float and reward.hex() == ref[2].hex(), f"reward {reward!r} vs {ref[2]!r}"
    assert term is ref[3] and trunc is ref[4]
    assert_tree_equal(info, ref[5], "info")


def random_pool(oracle: Any, seed: int, n: int, rng: np.random.Generator) -> list[State]:
    """States by random play on the oracle from reset(seed); non-terminal states only."""
    s, _, _ = oracle.reset(seed=seed)
    pool = [s]
    for _ in range(n):
        a = sample_actions(oracle.action_space, 1, rng)
        b = oracle.step_batch(a, states=[pool[-1]], dt=int(rng.integers(1, 4)))
        if b.terminations[0] or b.truncations[0]:
            break
        pool.append(b.states[0])
    oracle.set_state(s)
    return pool


# =========================================================================== semantics, on CounterEnv
def test_n_workers_and_backend(shared_envs: Make, backend: str) -> None:
    env = shared_envs("counter", backend)
    assert env.n_workers == (1 if backend == "inline" else 2)
    assert env.backend == backend
    assert env.kind == shared_envs("counter", "oracle").kind


def test_reset_returns_state_obs_info(pair: tuple) -> None:
    env, oracle = pair
    for seed in (3, 4):
        got, ref = env.reset(seed=seed), oracle.reset(seed=seed)
        assert isinstance(got, tuple) and len(got) == 3
        assert got[0] == ref[0]
        assert_tree_equal(got[1], ref[1])
        assert_tree_equal(got[2], ref[2], "info")
        assert env.get_state() == got[0]


def test_step_advances_the_current_state(pair: tuple) -> None:
    env, oracle = pair
    for a, dt in [(1, 1), (2, 3), (0, 1), (2, 6)]:
        got, ref = env.step(a, dt=dt), oracle.step(a, dt=dt)
        assert_step_equal(got, ref)
        assert env.get_state() == got[0] == oracle.get_state()
    assert got[5]["n_steps"] == 6


def test_step_from_a_given_state_makes_the_result_current(pair: tuple) -> None:
    env, oracle = pair
    s0 = oracle.get_state()
    s1 = oracle.step(2, dt=2)[0]
    env.step(1)
    oracle.step(1)
    got, ref = env.step(0, state=s1, dt=3), oracle.step(0, state=s1, dt=3)
    assert_step_equal(got, ref)
    assert env.get_state() == got[0] != s0


def test_step_stops_early_at_termination(pair: tuple) -> None:
    env, oracle = pair
    near_end = oracle.step(1, dt=28)[0]
    got, ref = env.step(2, state=near_end, dt=5), oracle.step(2, state=near_end, dt=5)
    assert_step_equal(got, ref)
    assert got[3] is True and got[5]["n_steps"] == 2


def test_step_batch_never_changes_the_current_state(pair: tuple) -> None:
    env, oracle = pair
    cur = env.step(1)[0]
    oracle.step(1)
    other = oracle.step(2, state=cur, dt=4)[0]
    oracle.set_state(cur)
    acts = np.array([0, 1, 2, 1, 0])
    for states in ([other] * 5, None):
        assert_batches_equal(env.step_batch(acts, states=states, dt=2), oracle.step_batch(acts, states=states, dt=2))
        assert env.get_state() == cur == oracle.get_state()
    # ... so a later step starts from ``cur``, not from what a batch item reached.
    assert_step_equal(env.step(2), oracle.step(2))


def test_states_none_means_the_current_state(pair: tuple) -> None:
    env, oracle = pair
    cur = env.step(2, dt=3)[0]
    oracle.step(2, dt=3)
    acts = np.array([2, 1, 0, 2, 1, 1, 0])
    dt = np.array([1, 2, 3, 4, 5, 6, 1])
    implicit = env.step_batch(acts, dt=dt)
    assert_batches_equal(implicit, env.step_batch(acts, states=[cur] * 7, dt=dt))
    assert_batches_equal(implicit, oracle.step_batch(acts, dt=dt))


def test_set_state_then_batches_from_it(pair: tuple) -> None:
    env, oracle = pair
    target = oracle.step(2, dt=5)[0]
    oracle.reset(seed=0)
    for s in (target, env.get_state(), target):  # back and forth: workers must not keep a stale state
        env.set_state(s)
        oracle.set_state(s)
        assert env.get_state() == s
        acts = np.array([1, 2, 0, 1])
        assert_batches_equal(env.step_batch(acts, dt=[1, 2, 3, 4]), oracle.step_batch(acts, dt=[1, 2, 3, 4]))
        assert_step_equal(env.step(1), oracle.step(1))



def test_sync_states(pair: tuple, request: pytest.FixtureRequest) -> None:
    env, oracle = pair
    target = oracle.step(1, dt=7)[0]
    call_with_deadline(lambda: env.sync_states(target), 3.0, "sync_states")
    oracle.sync_states(target)
    assert env.get_state() == target
    acts = np.array([0, 1, 2, 0, 1, 2])
    assert_batches_equal(env.step_batch(acts, dt=3), oracle.step_batch(acts, dt=3))
    env.set_state(oracle.reset(seed=9)[0])  # a set_state after a sync wins
    assert_batches_equal(env.step_batch(acts), oracle.step_batch(acts))


@pytest.mark.parametrize("states_none", [False, True], ids=["states=[]", "states=None"])
def test_empty_batch(pair: tuple, states_none: bool) -> None:
    env, oracle = pair
    cur = env.get_state()
    acts = np.empty(0, dtype=np.int64)
    states = None if states_none else []
    got = env.step_batch(acts, states=states, dt=np.empty(0, dtype=np.int64))
    ref = oracle.step_batch(acts, states=states, dt=np.empty(0, dtype=np.int64))
    assert_batches_equal(got, ref)
    assert got.observations.shape == (0, 2) and got.observations.dtype == np.float32
    assert got.rewards.dtype == np.float64 and got.terminations.dtype == got.truncations.dtype == np.bool_
    assert list(got.states) == [] and got.infos == []
    assert env.get_state() == cur


def test_no_current_state_before_reset(backend: str) -> None:
    with make_fresh("counter", backend) as env, pp.make(CounterEnv, backend="inline", horizon=30) as oracle:
        for call in (
            lambda e: e.get_state(),
            lambda e: e.step(1),
            lambda e: e.step_batch(np.array([0, 1])),
        ):
            got, ref = outcome(lambda: call(env)), outcome(lambda: call(oracle))
            assert ref[0] == "raised" and isinstance(ref[1], StateError)
            assert_same_outcome(got, ref)
        # Explicit states need no current state.
        s = oracle.reset(seed=0)[0]
        got = env.step_batch(np.array([0, 1]), states=[s, s])
        assert_batches_equal(got, oracle.step_batch(np.array([0, 1]), states=[s, s]))


def test_stats_count_items_and_batches(pair: tuple) -> None:
    env, _ = pair
    s = env.get_state()
    before = dict(env.stats)
    env.step_batch(np.array([0, 1, 2, 0, 1]))
    env.step_batch(np.array([2, 2, 1]), states=[s] * 3, dt=4)
    env.step(1)
    assert env.stats["items"] - before["items"] == 5 + 3 + 1
    assert env.stats["batches"] - before["batches"] == 3
    if env.backend == "process":
        assert env.stats["restarts"] == before["restarts"] == 0
        assert env.stats["timeouts"] == 0
        assert len(env.stats["busy_seconds"]) == env.n_workers



def test_stats_count_an_empty_batch_alike(shared_envs: Make) -> None:
    deltas = []
    for backend in BACKENDS:
        env = shared_envs("counter", backend)
        s = env.reset(seed=0)[0]
        before = (env.stats["items"], env.stats["batches"])
        env.step_batch(np.empty(0, dtype=np.int64), states=[])
        deltas.append((env.stats["items"] - before[0], env.stats["batches"] - before[1]))
        assert env.get_state() == s
    assert deltas[0] == deltas[1], f"inline counted {deltas[0]}, process {deltas[1]} (items, batches)"


# =========================================================================== real envs, bit for bit
@pytest.mark.parametrize("key", REAL_ENVS)
def test_real_env_batches_identical_to_inline(shared_envs: Make, key: str, backend: str) -> None:
    env, oracle = shared_envs(key, backend), shared_envs(key, "oracle")
    rng = np.random.default_rng(7)
    got, ref = env.reset(seed=5), oracle.reset(seed=5)
    assert got[0] == ref[0]
    assert_tree_equal(got[1], ref[1])
    assert_tree_equal(got[2], ref[2], "info")
    pool = random_pool(oracle, 5, 6, rng) + random_pool(oracle, 6, 6, rng)
    oracle.set_state(ref[0])
    n = BATCH_SIZE.get(key, DEFAULT_BATCH)
    states = [pool[i] for i in rng.integers(0, len(pool), n)]
    actions = sample_actions(env.action_space, n, rng)
    dt = rng.integers(1, 7, n)
    # Explicit states, mixed dt.
    assert_batches_equal(env.step_batch(actions, states=states, dt=dt), oracle.step_batch(actions, states=states, dt=dt))
    # From the current state; the current state does not move.
    assert_batches_equal(env.step_batch(actions, dt=3), oracle.step_batch(actions, dt=3))
    assert env.get_state() == ref[0]
    # After set_state (sync_states: see test_sync_states).
    env.set_state(pool[-1])
    oracle.set_state(pool[-1])
    assert_batches_equal(env.step_batch(actions, dt=dt), oracle.step_batch(actions, dt=dt))
    env.set_state(pool[1])
    oracle.set_state(pool[1])
    assert_batches_equal(env.step_batch(actions[:2], dt=2), oracle.step_batch(actions[:2], dt=2))
    assert env.get_state() == pool[1]



@pytest.mark.parametrize(
    "key,backend",
    [
        pytest.param(k, b)
        if (k, b) == ("dict-obs", "process")
        else (k, b)
        for k in REAL_ENVS
        for b in BACKENDS
    ],
)
def test_real_env_steps_identical_to_inline(shared_envs: Make, key: str, backend: str) -> None:
    env, oracle = shared_envs(key, backend), shared_envs(key, "oracle")
    rng = np.random.default_rng(11)
    env.reset(seed=11)
    s0 = oracle.reset(seed=11)[0]
    for i in range(6):
        a = sample_actions(env.action_space, 1, rng)[0]
        dt = int(rng.integers(1, 4))
        got, ref = env.step(a, dt=dt), oracle.step(a, dt=dt)
        assert_step_equal(got, ref)
        assert env.get_state() == oracle.get_state()
        if got[3] or got[4]:
            env.reset(seed=12 + i)
            oracle.reset(seed=12 + i)
    assert_step_equal(env.step(a, state=s0, dt=2), oracle.step(a, state=s0, dt=2))


# =========================================================================== the invariant, as a property
class Pools(dict):
    """{env key: states}; a short repr for hypothesis's falsifying examples."""

    def __repr__(self) -> str:
        return f"Pools({ {k: len(v) for k, v in self.items()} })"


@pytest.fixture(scope="module")
def pools() -> Pools:
    """States collected by random play (non-terminal), per env key."""
    out = Pools()
    for key in ("counter", "CartPole-v1"):
        env_, kwargs = ENVS[key]
        with pp.make(env_, backend="inline", **kwargs) as env:
            rng = np.random.default_rng(3)
            pool: list[State] = []
            for seed in range(3):
                s, _, _ = env.reset(seed=seed)
                pool.append(s)
                for _ in range(40):
                    s, _, _, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
                    if term or trunc:
                        break
                    pool.append(s)
            out[key] = pool
    return out


# (n_workers, small_batch_inline)
WORKER_SETUPS = [(1, False), (2, False), (3, False), (2, True)]


@pytest.mark.parametrize("n_workers,small_inline", WORKER_SETUPS, ids=["w1", "w2", "w3", "w2-small-inline"])
@pytest.mark.parametrize("key", ["counter", "CartPole-v1"])
@given(data=st.data())
def test_invariant_random_batches(
    shared_envs: Make, pools: dict, key: str, n_workers: int, small_inline: bool, data: st.DataObject
) -> None:
    env = shared_envs(key, "process", n_workers, small_inline)
    oracle = shared_envs(key, "oracle")
    pool = pools[key]
    n = data.draw(st.integers(0, 20), label="n")
    actions = np.array(
        data.draw(st.lists(st.integers(0, env.action_space.n - 1), min_size=n, max_size=n), label="actions"),
        dtype=np.int64,
    )
    per_item = st.lists(st.integers(1, 6), min_size=n, max_size=n)
    dt_choices = [st.integers(1, 6), per_item.map(lambda d: np.array(d, dtype=np.int64))]
    if n:
        dt_choices.append(per_item)  # a plain list (for n == 0 a known inputs bug, see test_inline)
    dt = data.draw(st.one_of(*dt_choices), label="dt")
    if data.draw(st.booleans(), label="from the current state"):
        cur = pool[data.draw(st.integers(0, len(pool) - 1), label="current")]
        env.set_state(cur)
        oracle.set_state(cur)
        states = None
    else:
        idx = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n), label="states")
        states = [pool[i] for i in idx]
    before = outcome(env.get_state)
    got = outcome(lambda: env.step_batch(actions, states=states, dt=dt))
    ref = outcome(lambda: oracle.step_batch(actions, states=states, dt=dt))
    assert_same_outcome(got, ref)
    if before[0] == "ok":
        assert env.get_state() == before[1]  # step_batch never moves the current state


# =========================================================================== async (process backend)
def test_async_several_in_flight_never_mixed_up(shared_envs: Make) -> None:
    env, oracle = shared_envs("counter", "process"), shared_envs("counter", "oracle")
    rng = np.random.default_rng(5)
    env.reset(seed=2)
    pool = random_pool(oracle, 2, 20, rng)
    jobs = []
    for k, n in enumerate([7, 0, 1, 12, 3, 25, 2]):
        acts = rng.integers(0, 3, n)
        dt = rng.integers(1, 7, n) if k % 2 else int(rng.integers(1, 7))
        if k % 3 == 0:  # from the current state at submit time
            cur = pool[k % len(pool)]
            env.set_state(cur)
            oracle.set_state(cur)
            states = None
        else:
            states = [pool[i] for i in rng.integers(0, len(pool), n)]
        ref = oracle.step_batch(acts, states=states, dt=dt)
        jobs.append((env.step_batch_async(acts, states=states, dt=dt), ref))
    for fut, ref in reversed(jobs):  # gathered in another order than sent
        assert_batches_equal(fut.result(timeout=60), ref)
    for fut, ref in jobs:
        assert fut.done()
        assert_batches_equal(fut.result(), ref)  # result() again: the same value
    # ... and the synchronous call agrees with the asynchronous one.
    acts = rng.integers(0, 3, 9)
    states = [pool[i] for i in rng.integers(0, len(pool), 9)]
    assert_batches_equal(env.step_batch_async(acts, states).result(timeout=60), env.step_batch(acts, states))


@pytest.mark.timeout(60)
def test_result_timeout_then_result() -> None:
    with pp.make(SlowEnv, n_workers=2, small_batch_inline=False, delay=0.02) as env, pp.make(
        SlowEnv, backend="inline", delay=0.0
    ) as oracle:
        s, _, _ = env.reset(seed=1)
        oracle.reset(seed=1)
        acts = np.array([0, 1, 2, 1, 0, 2])
        ref = oracle.step_batch(acts, dt=5)  # 3 items x 5 steps x 20 ms per worker
        fut = env.step_batch_async(acts, dt=5)
        with pytest.raises(TimeoutError, match=r"not done after") as info:
            fut.result(timeout=0.01)
        assert not isinstance(info.value, pp.WorkerTimeoutError)  # the batch was not given up
        acts2 = np.array([2, 2, 1])
        ref2 = oracle.step_batch(acts2, states=[s, ref.states[0], s], dt=[1, 2, 3])
        fut2 = env.step_batch_async(acts2, states=[s, ref.states[0], s], dt=[1, 2, 3])
        assert_batches_equal(fut2.result(timeout=30), ref2)
        assert_batches_equal(fut.result(), ref)  # still in flight after the TimeoutError, then done
        assert fut.done() and fut2.done()
        assert env.stats["timeouts"] == 0 and env.stats["restarts"] == 0



@pytest.mark.timeout(60)
def test_async_inputs_are_taken_at_submit_time() -> None:
    """A planner reuses its buffers: what it passed to step_batch_async is what runs."""
    with pp.make(SlowEnv, n_workers=2, small_batch_inline=False, delay=0.005) as env, pp.make(
        SlowEnv, backend="inline", delay=0.0
    ) as oracle:
        s, _, _ = env.reset(seed=0)
        oracle.reset(seed=0)
        other = oracle.step(2, dt=3)[0]
        acts = np.array([0, 1, 2, 1, 0, 2, 1, 1], dtype=np.int64)
        dt = np.array([1, 2, 3, 1, 2, 3, 1, 2], dtype=np.int64)
        states = [s] * 8
        env.step_batch(acts, states=states, dt=dt)  # warm up: the env learns its step time (more chunks)
        ref = oracle.step_batch(acts.copy(), states=list(states), dt=dt.copy())
        fut = env.step_batch_async(acts, states=states, dt=dt)
        acts[:] = 2 - acts  # the caller reuses its buffers for the next batch
        dt[:] = 1
        states[:] = [other] * 8
        assert_batches_equal(fut.result(timeout=30), ref)


# =========================================================================== inputs

def test_returned_observations_are_read_only_rows_of_the_states(pair: tuple, request: pytest.FixtureRequest) -> None:
    """One copy for the batch and its states: changing it in place is refused on every backend; a copy can change."""
    env, oracle = pair
    acts = np.array([0, 1, 2, 1])
    got, ref = env.step_batch(acts, dt=2), oracle.step_batch(acts, dt=2)
    for b in (got, ref):
        with pytest.raises(ValueError, match="read-only"):
            b.observations[:] = -1.0  # e.g. normalising in place
        for i, s in enumerate(b.states):
            np.testing.assert_array_equal(s.obs, b.observations[i])
        mine = b.observations.copy()
        mine[:] = -1.0
        assert not np.any(b.observations == -1.0)
    for a, b in zip(got.states, ref.states):
        assert a == b



def test_states_as_any_sequence(backend: str, request: pytest.FixtureRequest) -> None:
    # A fresh env: the bug leaves the env unusable for the next batch.
    with make_fresh("counter", backend) as env, pp.make(CounterEnv, backend="inline", horizon=30) as oracle:
        s = env.reset(seed=0)[0]
        oracle.reset(seed=0)
        s1 = oracle.step(1, dt=2)[0]
        acts = np.array([0, 1, 2, 1])
        ref = oracle.step_batch(acts, states=[s, s1, s, s1])
        for states in ((s, s1, s, s1), deque([s, s1, s, s1])):
            got = outcome(lambda: env.step_batch(acts, states=states))
            assert_same_outcome(got, ("ok", ref))
        assert_batches_equal(env.step_batch(acts, states=[s, s1, s, s1]), ref)


def _bad_inputs(s: State, alien: State) -> list[tuple[str, Callable[[Any], Any], type, str]]:
    """(id, call, exception type, message regex naming expected vs given)."""
    a3 = np.array([0, 1, 2])
    return [
        ("lengths", lambda e: e.step_batch(np.array([0, 1]), states=[s] * 3), ValueError, r"shape \(3,\), got shape \(2,\)"),
        ("dt=0", lambda e: e.step_batch(a3, dt=0), ValueError, r"dt must be .*>= 1.*got 0"),
        ("dt-shape", lambda e: e.step_batch(a3, dt=[1, 2]), ValueError, r"shape \(3,\), got shape \(2,\)"),
        ("dt-float", lambda e: e.step_batch(a3, dt=1.5), TypeError, r"dt must be .*got float"),
        ("dt-floats", lambda e: e.step_batch(a3, dt=[1, 2.0, 3]), TypeError, r"dt must be integers.*got dtype float"),
        ("dt-negative", lambda e: e.step_batch(a3, dt=[1, -2, 3]), ValueError, r"dt must be integers >= 1"),
        ("action-range", lambda e: e.step_batch(np.array([0, 3, 1])), ValueError, r"actions\[1\] = 3 is outside Discrete\(3\)"),
        ("action-float", lambda e: e.step_batch([0.5, 1.0]), TypeError, r"must be integers, got dtype float64"),
        ("action-shape", lambda e: e.step_batch(np.zeros((2, 2), dtype=int)), ValueError, r"shape \(N,\), got shape"),
        ("states-not-seq", lambda e: e.step_batch(np.array([0]), states=s), TypeError, r"sequence of 1 State"),
        ("states-alien", lambda e: e.step_batch(np.array([0]), states=[alien]), StateError, r"states\[0\]:.*kind"),
        ("states-junk", lambda e: e.step_batch(np.array([0]), states=["x"]), StateError,
         r"expected a plan_parallel State, got str"),
        ("step-action", lambda e: e.step(5), ValueError, r"outside Discrete\(3\)"),
        ("step-dt", lambda e: e.step(0, dt=0), ValueError, r"dt must be"),
        ("step-dt-array", lambda e: e.step(0, dt=[1, 2]), ValueError, r"dt must be integers >= 1 with shape \(1,\)"),
        ("step-alien", lambda e: e.step(0, state=alien), StateError, r"kind .*cannot restore"),
        ("set-alien", lambda e: e.set_state(alien), StateError, r"kind .*cannot restore"),
        ("set-junk", lambda e: e.set_state("nope"), StateError, r"expected a plan_parallel State, got str"),
        ("sync-alien", lambda e: e.sync_states(alien), StateError, r"kind .*cannot restore"),
        ("seed", lambda e: e.reset(seed=-1), TypeError, r"seed must be None or an integer >= 0, got int: -1"),
        ("options", lambda e: e.reset(seed=0, options=[1]), TypeError, r"options must be a dict or None, got list"),
    ]


BAD_IDS = [row[0] for row in _bad_inputs(None, None)]  # type: ignore[arg-type]


@pytest.mark.parametrize("which", BAD_IDS)
def test_bad_input_fails_before_anything_is_sent(shared_envs: Make, pair: tuple, which: str) -> None:
    env, oracle = pair
    alien = shared_envs("CartPole-v1", "oracle").reset(seed=0)[0]
    s = env.get_state()
    _, call, exc, pattern = {row[0]: row for row in _bad_inputs(s, alien)}[which]
    before = pickle.dumps({k: env.stats[k] for k in env.stats if k != "env_seconds"})
    pids = getattr(env, "pids", None)
    with pytest.raises(exc, match=pattern) as got:
        call(env)
    with pytest.raises(exc, match=pattern) as ref:
        call(oracle)
    assert type(got.value) is type(ref.value)
    # Nothing was sent: no batch counted, no worker time, no restart; the workers are the same.
    assert pickle.dumps({k: env.stats[k] for k in env.stats if k != "env_seconds"}) == before
    assert getattr(env, "pids", None) == pids
    assert env.get_state() == s
    acts = np.array([2, 0, 1])
    assert_batches_equal(env.step_batch(acts, dt=2), oracle.step_batch(acts, dt=2))



@pytest.mark.parametrize("which", ["step-alien", "set-alien", "set-junk", "sync-alien"])
def test_single_state_errors_read_like_inline(shared_envs: Make, which: str) -> None:
    env, oracle = shared_envs("counter", "process"), shared_envs("counter", "oracle")
    s = env.reset(seed=0)[0]
    oracle.reset(seed=0)
    alien = shared_envs("CartPole-v1", "oracle").reset(seed=0)[0]
    _, call, exc, _ = {row[0]: row for row in _bad_inputs(s, alien)}[which]
    got, ref = outcome(lambda: call(env)), outcome(lambda: call(oracle))
    assert isinstance(ref[1], exc)
    assert_same_outcome(got, ref)



def test_unpicklable_state_is_rejected_before_sending() -> None:
    kw = dict(fault="unpicklable", phase="get_state", trigger_action=2, horizon=100)
    with pp.make(FaultyEnv, n_workers=2, small_batch_inline=False, **kw) as env, pp.make(
        FaultyEnv, backend="inline", **kw
    ) as oracle:
        s = env.reset(seed=0)[0]
        oracle.reset(seed=0)
        bad = oracle.step(2)[0]  # holds a lock: inline can use it, it cannot travel to a worker
        acts = np.array([0, 1, 0, 1])
        with pytest.raises(StateError, match=r"pickl"):
            env.step_batch(acts, states=[s, bad, s, s])
        assert_batches_equal(env.step_batch(acts, states=[s] * 4), oracle.step_batch(acts, states=[s] * 4))
        assert_batches_equal(env.step_batch(acts, states=[s] * 4), oracle.step_batch(acts, states=[s] * 4))


# =========================================================================== start methods
@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_other_start_methods(context: str) -> None:
    with pp.make(CounterEnv, n_workers=2, small_batch_inline=False, context=context, horizon=30) as env, pp.make(
        CounterEnv, backend="inline", horizon=30
    ) as oracle:
        assert env.context == context
        got, ref = env.reset(seed=4), oracle.reset(seed=4)
        assert got[0] == ref[0]
        rng = np.random.default_rng(0)
        pool = random_pool(oracle, 4, 10, rng)
        acts = rng.integers(0, 3, 11)
        states = [pool[i] for i in rng.integers(0, len(pool), 11)]
        dt = rng.integers(1, 7, 11)
        assert_batches_equal(env.step_batch(acts, states=states, dt=dt), oracle.step_batch(acts, states=states, dt=dt))
        env.set_state(pool[3])
        oracle.set_state(pool[3])
        assert_batches_equal(env.step_batch(acts, dt=dt), oracle.step_batch(acts, dt=dt))
        assert_step_equal(env.step(2, dt=2), oracle.step(2, dt=2))


@pytest.mark.timeout(90)
@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="scheduling policies are Linux's")
@pytest.mark.parametrize("context", ["forkserver", "fork", "spawn"])
def test_workers_run_as_batch_processes_when_asked_and_the_caller_keeps_its_policy(context: str) -> None:
    """The execution policy's opt-in ``batch_scheduling``: a worker woken by a call does not preempt the
    process that sent it (docs/measurements.md, *Worker processes*); by default see test_host_settings."""
    mine = os.sched_getscheduler(0)
    policy = pp.ExecutionPolicy(placement="workers", batch_scheduling=True)
    with pp.make(CounterEnv, n_workers=2, execution=policy, context=context) as env:
        env.reset(seed=0)
        for pid in env.pids:
            assert pid is not None and os.sched_getscheduler(pid) == os.SCHED_BATCH, (pid, context)
    assert os.sched_getscheduler(0) == mine


@pytest.mark.timeout(120)
def test_forkserver_preloads_the_worker_and_keeps_the_users_preloads() -> None:
    """Workers fork from a forkserver that imported plan_parallel's worker module once (a replaced worker
    starts in tens of ms, not the ~0.4 s of importing numpy and gymnasium again); a module the user asked
    the forkserver to preload is still preloaded."""
    code = textwrap.dedent("""
        import multiprocessing as mp, sys
        import numpy as np, psutil
        mp.set_forkserver_preload(["colorsys"])
        import plan_parallel as pp
        from tests.envs import CounterEnv

        def factory():
            assert "colorsys" in sys.modules, "the user's forkserver preload was dropped"
            assert "plan_parallel.workers.server" in sys.modules
            return CounterEnv(horizon=30)

        with pp.make(factory, n_workers=1, small_batch_inline=False, max_restarts=5) as env:
            s = env.reset(seed=0)[0]
            import multiprocessing.forkserver as fs
            print(fs._forkserver._preload_modules)  # a CPython detail: what the forkserver imported
            p = psutil.Process(env.pids[0]); p.kill(); p.wait(5)
            env.step_batch(np.array([0, 1]), [s, s])  # a replacement, forked from the same forkserver
            print("replaced")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["['colorsys', 'plan_parallel.workers.process']", "replaced"]


# =========================================================================== closing
def test_close_is_idempotent_and_every_call_raises_after(backend: str) -> None:
    env = make_fresh("counter", backend)
    s = env.reset(seed=0)[0]
    env.close()
    env.close()
    calls = [
        lambda: env.reset(seed=0),
        lambda: env.step(0),
        lambda: env.step_batch(np.array([0])),
        lambda: env.step_batch(np.array([0]), states=[s]),
        lambda: env.get_state(),
        lambda: env.set_state(s),
        lambda: env.sync_states(s),
    ]
    if backend == "process":
        calls.append(lambda: env.step_batch_async(np.array([0]), states=[s]))
    for call in calls:
        with pytest.raises(ClosedError, match="closed"):
            call()
    with env:  # a context manager on a closed env is fine, and closes nothing more
        pass


# =========================================================================== small batches in this process
@pytest.mark.parametrize("backend", ["inline", *PARALLEL])
def test_empty_batch_with_dict_observations(shared_envs: Make, backend: str) -> None:
    env = shared_envs("dict-obs", backend)
    env.reset(seed=0)
    b = env.step_batch(np.empty((0,) + env.action_space.shape, dtype=env.action_space.dtype), states=[])
    assert set(b.observations) == set(env.observation_space.spaces)
    assert all(len(v) == 0 for v in b.observations.values())
