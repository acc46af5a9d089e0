"""rollout_batch and per-item seeds: rollouts equal chained step_batch calls, policies, sampling.

The backend-agnostic tests run on the ``backend`` fixture (inline, process, and
ray when it is installed) and compare against the inline backend.
"""
from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import plan_parallel as pp
from plan_parallel.env.loops import UniformPolicy
from plan_parallel.errors import StateError
from plan_parallel.state import State
from tests.envs import CounterEnv, DictObsEnv
from tests.helpers import assert_tree_equal, sample_actions

try:
    import ray  # noqa: F401 - the ray extra: its backend runs the same tests

    ROLLOUT_BACKENDS = ["inline", "process", "ray"]
except ImportError:
    ROLLOUT_BACKENDS = ["inline", "process"]
SEEDS_BACKENDS = ROLLOUT_BACKENDS

# key -> (env id or class, env kwargs)
ENVS: dict[str, tuple[Any, dict]] = {
    "CartPole": ("CartPole-v1", {}),
    "Pong-ram": ("ALE/Pong-v5", {"obs_type": "ram", "repeat_action_probability": 0.25}),
    "Pong-rgb": ("ALE/Pong-v5", {"repeat_action_probability": 0.25}),
    "FrozenLake-slippery": ("FrozenLake-v1", {"is_slippery": True}),
}

Make = Callable[..., Any]


@pytest.fixture(params=ROLLOUT_BACKENDS)
def backend(request: Any) -> str:
    """The backend under test for rollout_batch."""
    return request.param


@pytest.fixture(params=SEEDS_BACKENDS)
def seeds_backend(request: Any) -> str:
    """The backend under test for step_batch(seeds=)."""
    return request.param


def _maker(backend: str) -> Iterator[Make]:
    made: list[Any] = []

    def make(env: Any, **kwargs: Any) -> Any:
        if backend != "inline":
            kwargs.setdefault("small_batch_inline", False)  # every batch through the workers
        e = pp.make(env, backend=backend, n_workers=2, **kwargs)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture
def make_env(backend: str) -> Iterator[Make]:
    """``make_env(env, **kwargs)`` on the backend under test; closed at teardown."""
    yield from _maker(backend)


@pytest.fixture
def make_seeded_env(seeds_backend: str) -> Iterator[Make]:
    """``make_seeded_env(env, **kwargs)`` on the step_batch(seeds=) backend under test."""
    yield from _maker(seeds_backend)


# =========================================================================== helpers
def start_states(env: Any, n_steps: int, seed: int = 0) -> list[State]:
    """States along one random walk from ``reset(seed)`` (a new episode after each end)."""
    rng = np.random.default_rng(seed)
    state, _, _ = env.reset(seed=seed)
    out = [state]
    for k in range(n_steps):
        state, _, _, term, trunc, _ = env.step(sample_actions(env.action_space, 1, rng)[0])
        if term or trunc:
            state, _, _ = env.reset(seed=seed + k + 1)
        out.append(state)
    return out


def chain(env: Any, states: list[State], actions: np.ndarray, dt: Any, seeds: Any = None) -> dict:
    """The rollout done with T ``step_batch`` calls (seeds, if any, on the first call only)."""
    n, horizon = actions.shape[:2]
    dt = np.broadcast_to(np.asarray(dt, dtype=np.int64), (n,)).copy()
    cur, obs = list(states), [s.obs for s in states]
    alive = np.ones(n, dtype=bool)
    out: dict[str, Any] = {
        "rewards": np.zeros((n, horizon)),
        "terminations": np.zeros(n, dtype=bool),
        "truncations": np.zeros(n, dtype=bool),
        "n_steps": np.zeros(n, dtype=np.int64),
        "infos": [None] * n,
        "all_states": [[None] * horizon for _ in range(n)],
        "all_obs": [[None] * horizon for _ in range(n)],
    }
    for t in range(horizon):
        idx = np.flatnonzero(alive)
        if len(idx):
            kw = {"seeds": np.asarray(seeds)[idx]} if seeds is not None and t == 0 else {}
            b = env.step_batch(actions[idx, t], states=[cur[i] for i in idx], dt=dt[idx], **kw)
            for j, i in enumerate(idx):
                cur[i], obs[i] = b.states[j], b.observations[j]
                out["rewards"][i, t] = b.rewards[j]
                out["terminations"][i], out["truncations"][i] = b.terminations[j], b.truncations[j]
                out["n_steps"][i] += b.infos[j]["n_steps"]
                out["infos"][i] = {k: v for k, v in b.infos[j].items() if k != "n_steps"}
                alive[i] = not (b.terminations[j] or b.truncations[j])
        for i in range(n):
            out["all_states"][i][t], out["all_obs"][i][t] = cur[i], obs[i]
    out["states"], out["observations"] = cur, np.stack(obs)
    return out


def assert_rollout_matches(r: pp.RolloutBatch, ref: dict) -> None:
    """A RolloutBatch equals a :func:`chain` result bit for bit."""
    assert r.rewards.dtype == np.float64 and r.rewards.tobytes() == ref["rewards"].tobytes(), (
        f"rewards differ:\n{r.rewards}\nvs\n{ref['rewards']}"
    )
    assert r.terminations.tolist() == ref["terminations"].tolist()
    assert r.truncations.tolist() == ref["truncations"].tolist()
    assert r.n_steps.dtype == np.int64 and r.n_steps.tolist() == ref["n_steps"].tolist()
    assert_tree_equal(r.observations, ref["observations"])
    assert_tree_equal(r.infos, ref["infos"], "infos")
    assert len(r.states) == len(ref["states"])
    for i, (a, b) in enumerate(zip(r.states, ref["states"])):
        assert a == b, f"state {i} differs in {a.diff(b)}"
    if r.all_states is not None:
        for i, (row, ref_row) in enumerate(zip(r.all_states, ref["all_states"])):
            assert len(row) == len(ref_row)
            for t, (a, b) in enumerate(zip(row, ref_row)):
                assert a == b, f"all_states[{i}][{t}] differs in {a.diff(b)}"
        assert_tree_equal(r.all_observations, np.array(ref["all_obs"]), "all_observations")


def assert_rollouts_equal(a: pp.RolloutBatch, b: pp.RolloutBatch) -> None:
    """Two RolloutBatch results are bitwise equal, states included."""
    for name in ("rewards", "terminations", "truncations", "n_steps"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f"{name}: {x} vs {y}"
    assert_tree_equal(a.observations, b.observations)
    assert_tree_equal(a.infos, b.infos, "infos")
    assert all(x == y for x, y in zip(a.states, b.states)) and len(a.states) == len(b.states)
    assert (a.all_states is None) == (b.all_states is None)
    if a.all_states is not None:
        assert all(x == y for r1, r2 in zip(a.all_states, b.all_states) for x, y in zip(r1, r2))
        assert_tree_equal(a.all_observations, b.all_observations, "all_observations")


# module-level policies: picklable by reference in every worker
def balance_policy(obs: Any, rng: np.random.Generator) -> int:
    """CartPole: push toward the pole's lean (deterministic; ignores ``rng``)."""
    return int(obs[2] > 0)


def noisy_balance_policy(obs: Any, rng: np.random.Generator) -> int:
    """CartPole: ``balance_policy`` with probability 0.7, else a random push drawn from ``rng``."""
    return int(obs[2] > 0) if rng.random() < 0.7 else int(rng.integers(2))


class LockedPolicy:
    """A callable that cannot be pickled (it holds a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, obs: Any, rng: np.random.Generator) -> int:
        return 0


# =========================================================================== equivalence to step_batch
@pytest.mark.timeout(180)
@pytest.mark.parametrize("key", list(ENVS))
def test_rollout_equals_chained_step_batch(make_env, make_inline, key):
    env_id, kwargs = ENVS[key]
    env = make_env(env_id, **kwargs)
    oracle = make_inline(env_id, **kwargs)
    n, horizon = (3, 4) if key == "Pong-rgb" else (6, 8)
    states = start_states(oracle, 2 * n)[::2][:n]
    rng = np.random.default_rng(1)
    actions = sample_actions(env.action_space, n * horizon, rng).reshape(n, horizon)
    dt = rng.integers(1, 4, size=n)
    r = env.rollout_batch(states, actions, dt, return_all=True)
    assert isinstance(r, pp.RolloutBatch)
    assert r.rewards.shape == (n, horizon) and r.terminations.shape == (n,) and r.n_steps.shape == (n,)
    assert_rollout_matches(r, chain(oracle, states, actions, dt))
    assert_rollouts_equal(r, oracle.rollout_batch(states, actions, dt, return_all=True))  # the invariant


@pytest.mark.timeout(120)
def test_rollout_from_the_current_state(make_env):
    env = make_env("CartPole-v1")
    env.reset(seed=3)
    current = env.step(1)[0]
    actions = np.array([[0, 1, 0], [1, 1, 1]])
    r = env.rollout_batch(None, actions, dt=2)
    assert env.get_state() == current  # unchanged
    assert_rollouts_equal(r, env.rollout_batch([current, current], actions, dt=2))
    assert_rollout_matches(r, chain(env, [current, current], actions, 2))


# =========================================================================== early stop, return_all
@pytest.mark.timeout(120)
def test_early_stop_at_termination(make_env):
    env = make_env(CounterEnv, horizon=5)
    s0, _, _ = env.reset(seed=0)
    s3 = env.step(1, dt=3)[0]
    actions = np.array([[1, 2, 1, 2], [2, 2, 2, 2], [1, 1, 1, 1]])
    r = env.rollout_batch([s0, s3, s3], actions, dt=[1, 2, 1], return_all=True)
    # reward = action (summed over dt); CounterEnv terminates when its count reaches 5.
    assert r.rewards.tolist() == [[1, 2, 1, 2], [4, 0, 0, 0], [1, 1, 0, 0]]
    assert r.n_steps.tolist() == [4, 2, 2]
    assert r.terminations.tolist() == [False, True, True] and not r.truncations.any()
    assert r.observations[:, 0].tolist() == [4.0, 5.0, 5.0]
    assert [i["count"] for i in r.infos] == [4, 5, 5] and all("n_steps" not in i for i in r.infos)
    # After an item stopped, return_all repeats its final state and observation.
    assert r.all_observations.shape == (3, 4, 2)
    assert r.all_observations[:, :, 0].tolist() == [[1, 2, 3, 4], [5, 5, 5, 5], [4, 5, 5, 5]]
    for i in range(3):
        assert len(r.all_states[i]) == 4
        assert r.all_states[i][-1] == r.states[i]
    assert r.all_states[1][0] == r.all_states[1][3]
    assert_rollout_matches(r, chain(env, [s0, s3, s3], actions, [1, 2, 1]))


@pytest.mark.timeout(120)
def test_early_stop_at_truncation(make_env):
    env = make_env("CartPole-v1", max_episode_steps=5)
    s0, _, _ = env.reset(seed=0)
    actions = np.tile([0, 1], (2, 4))  # wiggle: the pole stays up, TimeLimit truncates
    r = env.rollout_batch([s0, s0], actions, dt=[1, 2])
    assert r.n_steps.tolist() == [5, 5]
    assert r.truncations.tolist() == [True, True] and not r.terminations.any()
    assert np.count_nonzero(r.rewards[0]) == 5 and np.count_nonzero(r.rewards[1]) == 3
    assert r.all_states is None and r.all_observations is None
    assert_rollout_matches(r, chain(env, [s0, s0], actions, [1, 2]))


@pytest.mark.timeout(120)
def test_return_all_dict_observations(make_env, make_inline):
    env = make_env(DictObsEnv, horizon=5)
    oracle = make_inline(DictObsEnv, horizon=5)
    s0, _, _ = oracle.reset(seed=0)
    r = env.rollout_batch([s0, s0], horizon=7, seeds=[1, 2], return_all=True)
    assert set(r.all_observations) == {"pos", "count"}
    assert r.all_observations["pos"].shape == (2, 7, 2) and r.all_observations["count"].shape == (2, 7)
    assert r.all_observations["count"].tolist() == [[1, 2, 3, 4, 5, 5, 5]] * 2  # repeated after the stop
    assert_tree_equal(r.observations, {k: v[:, -1] for k, v in r.all_observations.items()})
    assert_rollouts_equal(r, oracle.rollout_batch([s0, s0], horizon=7, seeds=[1, 2], return_all=True))


@pytest.mark.timeout(120)
def test_empty_rollout(make_env):
    env = make_env("CartPole-v1")
    env.reset(seed=0)
    r = env.rollout_batch([], np.empty((0, 3), dtype=np.int64), return_all=True)
    assert r.rewards.shape == (0, 3) and r.n_steps.shape == (0,) and r.observations.shape == (0, 4)
    assert r.states == [] and r.infos == [] and r.all_observations.shape == (0, 3, 4)


# =========================================================================== policies
@pytest.mark.timeout(120)
def test_deterministic_policy_equals_its_actions(make_env, make_inline):
    env = make_env("CartPole-v1")
    oracle = make_inline("CartPole-v1")
    states = start_states(oracle, 6)[::3]
    r = env.rollout_batch(states, horizon=12, policy=balance_policy, dt=2, return_all=True)
    # The same rollout, with the policy applied by hand.
    actions = np.zeros((len(states), 12), dtype=np.int64)
    for i, state in enumerate(states):
        obs = state.obs
        for t in range(12):
            actions[i, t] = balance_policy(obs, None)
            state, obs, _, term, trunc, _ = oracle.step(actions[i, t], state=state, dt=2)
            if term or trunc:
                break
    assert_rollouts_equal(r, oracle.rollout_batch(states, actions, dt=2, return_all=True))


@pytest.mark.timeout(120)
def test_policy_rollouts_are_reproducible(make_env, make_inline):
    env = make_env("CartPole-v1")
    oracle = make_inline("CartPole-v1")
    s0, _, _ = oracle.reset(seed=0)
    states = [s0] * 6
    a = env.rollout_batch(states, horizon=15, policy=noisy_balance_policy)
    assert_rollouts_equal(a, env.rollout_batch(states, horizon=15, policy=noisy_balance_policy))
    assert_rollouts_equal(a, oracle.rollout_batch(states, horizon=15, policy=noisy_balance_policy))
    # Without seeds, copies of one state at different indices draw different streams.
    assert len({s.sim.tobytes() for s in a.states}) > 1
    # With seeds, an item depends on its (state, seed) only, not on its place in the batch.
    seeded = env.rollout_batch(states, horizon=15, policy=noisy_balance_policy, seeds=[5, 6, 7, 5, 6, 7])
    alone = env.rollout_batch([s0], horizon=15, policy=noisy_balance_policy, seeds=[6])
    assert seeded.states[1] == seeded.states[4] == alone.states[0]
    assert seeded.rewards[1].tobytes() == alone.rewards[0].tobytes()


@pytest.mark.timeout(120)
def test_policy_rng_survives_pickled_states(make_inline):
    """The policy RNG without seeds depends on the state's value, not on object identity (workers get copies)."""
    for env_id, kwargs in [("CartPole-v1", {}), ("ALE/Pong-v5", {"obs_type": "ram"})]:
        env = make_inline(env_id, **kwargs)
        states = start_states(env, 4)[1:4]
        copies = pickle.loads(pickle.dumps(states))
        a = env.rollout_batch(states, horizon=5, return_all=True)
        assert_rollouts_equal(a, env.rollout_batch(copies, horizon=5, return_all=True))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_uniform_random_actions(make_env, make_inline, env_id):
    env = make_env(env_id)
    oracle = make_inline(env_id)
    s0, _, _ = oracle.reset(seed=0)
    a = env.rollout_batch([s0] * 4, horizon=10, seeds=[1, 2, 1, 3], return_all=True)
    assert_rollouts_equal(a, oracle.rollout_batch([s0] * 4, horizon=10, seeds=[1, 2, 1, 3], return_all=True))
    assert a.states[0] == a.states[2]  # equal (state, seed)
    assert a.states[0].sim.tobytes() != a.states[1].sim.tobytes()  # different seeds, different actions
    unseeded = env.rollout_batch([s0] * 4, horizon=10)
    assert_rollouts_equal(unseeded, oracle.rollout_batch([s0] * 4, horizon=10))
    assert len({s.sim.tobytes() for s in unseeded.states}) > 1  # copies at different indices differ
    # N from seeds when states is None.
    oracle.set_state(s0)
    env.set_state(s0)
    from_current = env.rollout_batch(None, horizon=10, seeds=[1, 2])
    assert_rollouts_equal(from_current, oracle.rollout_batch(None, horizon=10, seeds=[1, 2]))


@pytest.mark.timeout(30)
def test_uniform_policy_spaces():
    rng = np.random.default_rng(0)
    cases = [
        spaces.Discrete(3, start=-1),
        spaces.MultiDiscrete([2, 5], start=[1, -2]),
        spaces.MultiBinary(4),
        spaces.Box(-1.0, 2.0, shape=(2, 3), dtype=np.float32),
        spaces.Box(0, 9, shape=(3,), dtype=np.int64),
    ]
    for space in cases:
        draw = UniformPolicy(space)
        samples = [draw(None, rng) for _ in range(200)]
        assert all(space.contains(x) for x in samples), space
        assert len({np.asarray(x).tobytes() for x in samples}) > 1, space
        again = np.random.default_rng(7)
        first = [np.asarray(draw(None, again)).tobytes() for _ in range(5)]
        again = np.random.default_rng(7)
        assert first == [np.asarray(draw(None, again)).tobytes() for _ in range(5)]  # only the rng draws
    with pytest.raises(ValueError, match=r"uniform random actions need a bounded action space"):
        UniformPolicy(spaces.Box(-np.inf, 1.0, shape=(2,)))
    with pytest.raises(TypeError, match=r"only for Discrete, Box \(bounded\), MultiDiscrete and MultiBinary.*Dict"):
        UniformPolicy(spaces.Dict({"a": spaces.Discrete(2)}))


# =========================================================================== per-item seeds
@pytest.mark.timeout(120)
def test_step_batch_seeds_frozen_lake(make_seeded_env, make_inline):
    env = make_seeded_env("FrozenLake-v1", is_slippery=True)
    oracle = make_inline("FrozenLake-v1", is_slippery=True)
    s0, _, _ = oracle.reset(seed=0)
    n = 24
    seeds = np.arange(n) % 12  # each seed twice
    b = env.step_batch(np.full(n, 2), states=[s0] * n, seeds=seeds)
    ref = oracle.step_batch(np.full(n, 2), states=[s0] * n, seeds=seeds)
    for i in range(n):
        assert b.states[i] == ref.states[i]
        assert b.states[i] == b.states[(i + 12) % n]  # equal (state, action, seed)
    assert len(set(b.observations.tolist())) > 1  # slippery: different seeds, different outcomes
    # Without seeds, the state's own RNG: every copy has the same outcome.
    plain = env.step_batch(np.full(n, 2), states=[s0] * n)
    assert len(set(plain.observations.tolist())) == 1
    assert plain.states[0] == oracle.step(2, state=s0)[0]


def sticky_pong(make: Make, make_inline: Make) -> tuple[Any, pp.PlanEnv, State]:
    """Pong (RAM obs, sticky actions) on the backend under test, its inline oracle, and a mid-game state."""
    kwargs = {"obs_type": "ram", "repeat_action_probability": 0.25}
    oracle = make_inline("ALE/Pong-v5", **kwargs)
    return make("ALE/Pong-v5", **kwargs), oracle, start_states(oracle, 40)[-1]


@pytest.mark.timeout(120)
def test_step_batch_seeds_ale_sticky(make_seeded_env, make_inline):
    env, oracle, start = sticky_pong(make_seeded_env, make_inline)
    prev = oracle.step(3, state=start, dt=2)[0]  # last effective action DOWN: sticky frames repeat it
    seeds = np.array([0, 1, 2, 3, 4, 5, 0, 1])
    b = env.step_batch(np.full(8, 2), states=[prev] * 8, dt=4, seeds=seeds)
    ref = oracle.step_batch(np.full(8, 2), states=[prev] * 8, dt=4, seeds=seeds)
    for i in range(8):
        assert b.states[i] == ref.states[i]
    assert b.states[0] == b.states[6] and b.states[1] == b.states[7]
    assert len({o.tobytes() for o in b.observations}) > 1  # sticky draws differ across seeds


@pytest.mark.timeout(120)
def test_seeded_rollouts_ale_sticky(make_env, make_inline):
    env, oracle, start = sticky_pong(make_env, make_inline)
    actions = np.tile([2, 3], (6, 5))  # UP, DOWN, ...: every step changes the effective action
    seeds = [10, 11, 12, 13, 10, 11]
    r = env.rollout_batch([start] * 6, actions, seeds=seeds, return_all=True)
    assert_rollouts_equal(r, env.rollout_batch([start] * 6, actions, seeds=seeds, return_all=True))
    # A seeded rollout reseeds once, before its first step: chained step_batch seeds only the first call.
    assert_rollout_matches(r, chain(oracle, [start] * 6, actions, 1, seeds=seeds))
    assert r.states[0] == r.states[4] and r.states[1] == r.states[5]
    ram = {r.all_observations[i].tobytes() for i in range(4)}
    assert len(ram) > 1  # different seeds sample different sticky frames
    unseeded = env.rollout_batch([start] * 3, actions[:3])
    assert unseeded.states[0] == unseeded.states[1] == unseeded.states[2]  # the state's own RNG


@pytest.mark.timeout(120)
def test_seeded_rollouts_frozen_lake(make_env, make_inline):
    env = make_env("FrozenLake-v1", is_slippery=True)
    oracle = make_inline("FrozenLake-v1", is_slippery=True)
    s0, _, _ = oracle.reset(seed=0)
    actions = np.tile([1, 2, 1, 2, 1, 2], (16, 1))
    seeds = np.arange(16) % 8
    r = env.rollout_batch([s0] * 16, actions, seeds=seeds)
    assert_rollout_matches(r, chain(oracle, [s0] * 16, actions, 1, seeds=seeds))
    for i in range(8):
        assert r.states[i] == r.states[i + 8]
    assert len({(o, k) for o, k in zip(r.observations.tolist(), r.n_steps.tolist())}) > 1


# =========================================================================== bad input
def _no_obs(s0: State) -> State:
    return State(s0.kind, s0.sim, s0.extra, s0.rng, s0.wrappers)  # obs=None


# (case, the rollout_batch arguments given the start state s0, the exception, its message)
BAD_INPUTS: list[tuple[str, Callable[[State], dict], type, str]] = [
    ("actions-wrong-n", lambda s0: dict(states=[s0, s0], actions=np.zeros((3, 4), dtype=int)),
     ValueError, r"actions for Discrete\(2\) must have shape \(2, T\), got shape \(3, 4\)"),
    ("actions-no-T", lambda s0: dict(states=[s0, s0], actions=np.zeros(2, dtype=int)),
     ValueError, r"must have shape \(2, T\), got shape \(2,\)"),
    ("actions-T-zero", lambda s0: dict(states=[s0], actions=np.zeros((1, 0), dtype=int)),
     ValueError, r"T >= 1\), got T=0"),
    ("actions-outside", lambda s0: dict(states=[s0, s0], actions=[[0, 1], [1, 2]]),
     ValueError, r"actions\[1, 1\] = 2 is outside Discrete\(2\)"),
    ("actions-floats", lambda s0: dict(states=[s0], actions=[[0.5]]),
     TypeError, r"must be integers, got dtype float64"),
    ("horizon-mismatch", lambda s0: dict(states=[s0], actions=np.zeros((1, 3), dtype=int), horizon=4),
     ValueError, r"horizon=4 does not match the actions.*T=3"),
    ("horizon-missing", lambda s0: dict(states=[s0]),
     ValueError, r"horizon is required when actions is None"),
    ("horizon-zero", lambda s0: dict(states=[s0], horizon=0),
     ValueError, r"horizon must be None or an integer >= 1, got int: 0"),
    ("horizon-float", lambda s0: dict(states=[s0], horizon=2.0),
     ValueError, r"got float: 2\.0"),
    ("actions-and-policy", lambda s0: dict(states=[s0], actions=[[0]], policy=balance_policy),
     ValueError, r"pass actions or policy, not both"),
    ("seeds-short", lambda s0: dict(states=[s0, s0], horizon=2, seeds=[1]),
     ValueError, r"seeds must be None or integers >= 0 with shape \(2,\), got shape \(1,\)"),
    ("seeds-floats", lambda s0: dict(states=[s0], horizon=2, seeds=[1.5]),
     TypeError, r"got dtype float64"),
    ("seeds-negative", lambda s0: dict(states=[s0], horizon=2, seeds=[-1]),
     ValueError, r"with shape \(1,\), got \[-1\]"),
    ("seeds-scalar", lambda s0: dict(states=[s0], horizon=2, seeds=3),
     TypeError, r"got int: 3"),
    ("seeds-bools", lambda s0: dict(states=[s0], horizon=2, seeds=[True]),
     TypeError, r"got dtype bool"),
    ("policy-not-callable", lambda s0: dict(states=[s0], horizon=2, policy=3),
     TypeError, r"policy must be a callable \(obs, rng\) -> action, got int"),
    ("policy-unpicklable", lambda s0: dict(states=[s0], horizon=2, policy=LockedPolicy()),
     TypeError, r"policy must be picklable with cloudpickle.*failed: TypeError"),
    ("policy-no-obs", lambda s0: dict(states=[_no_obs(s0)], horizon=2, policy=balance_policy),
     StateError, r"states\[0\] carries no observation"),
    ("no-n", lambda s0: dict(states=None, horizon=2),
     ValueError, r"with states=None, pass actions or seeds"),
    ("dt-zero", lambda s0: dict(states=[s0], actions=[[0]], dt=0),
     ValueError, r"dt must be an integer >= 1"),
    ("dt-short", lambda s0: dict(states=[s0, s0], actions=[[0], [1]], dt=[1]),
     ValueError, r"with shape \(2,\), got shape \(1,\)"),
    ("return-all", lambda s0: dict(states=[s0], actions=[[0]], return_all="yes"),
     TypeError, r"return_all must be a bool, got str"),
    ("states-str", lambda s0: dict(states="ab", actions=[[0], [1]]),
     TypeError, r"states must be a sequence of N State"),
    ("states-foreign", lambda s0: dict(states=[s0, 3], actions=[[0], [1]]),
     StateError, r"states\[1\]: expected a plan_parallel State"),
]


@pytest.mark.timeout(120)
def test_bad_rollout_input(make_env):
    env = make_env("CartPole-v1")
    s0, _, _ = env.reset(seed=0)
    items = env.stats["items"]
    for case, build, exc, pattern in BAD_INPUTS:
        kwargs = build(s0)
        try:
            with pytest.raises(exc, match=pattern):
                env.rollout_batch(kwargs.pop("states"), **kwargs)
        except (AssertionError, pytest.fail.Exception) as failure:
            failure.add_note(f"bad-input case {case!r}")
            raise
    assert env.stats["items"] == items  # nothing ran
    assert env.get_state() == s0


@pytest.mark.timeout(120)
def test_bad_seeds_on_step_batch(make_seeded_env):
    env = make_seeded_env("CartPole-v1")
    s0, _, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match=r"seeds must be None or integers >= 0 with shape \(2,\), got shape \(3,\)"):
        env.step_batch([0, 1], states=[s0, s0], seeds=[1, 2, 3])
    with pytest.raises(TypeError, match=r"got dtype float64"):
        env.step_batch([0, 1], seeds=[1.0, 2.0])


@pytest.mark.timeout(120)
def test_seeds_refused_for_action_replay_envs(make_inline):
    env = make_inline("LunarLander-v3")
    s0, _, _ = env.reset(seed=0)
    assert not env.reseedable
    with pytest.raises(StateError, match=r"per-item seeds cannot act on this env \(env.reseedable is False\)"):
        env.step_batch([0], states=[s0], seeds=[1])
    with pytest.raises(StateError, match="action-replay history"):
        env.rollout_batch([s0], horizon=2, seeds=[1])
    env.rollout_batch([s0], horizon=2)  # without seeds it works


class DictActionCounter(CounterEnv):
    """CounterEnv with a Dict action space (no uniform sampler)."""

    def __init__(self) -> None:
        super().__init__(horizon=10)
        self.action_space = spaces.Dict({"a": spaces.Discrete(3)})

    def step(self, action: Any) -> tuple:
        return super().step(action["a"])


@pytest.mark.timeout(60)
def test_uniform_actions_refused_before_running(make_inline):
    env = make_inline(DictActionCounter)
    s0, _, _ = env.reset(seed=0)
    with pytest.raises(TypeError, match="uniform random actions are drawn only for"):
        env.rollout_batch([s0], horizon=3)
    assert env.stats["items"] == 0
    r = env.rollout_batch([s0], horizon=3, policy=dict_policy)  # a policy of its own works
    assert r.n_steps.tolist() == [3] and r.rewards.tolist() == [[1.0, 1.0, 1.0]]


def dict_policy(obs: Any, rng: np.random.Generator) -> dict:
    """DictActionCounter: always {"a": 1}."""
    return {"a": 1}
