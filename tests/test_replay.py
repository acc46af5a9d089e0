"""Action-replay families (Box2D): a state restores to the same trajectory on any env, in linear time on workers."""
from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.errors import StateError
from plan_parallel.state.families.replay import ActionLog, ActionReplayAdapter

pytestmark = pytest.mark.usefixtures("no_leaks")


def gymnasium_episode(env_id: str, seed: int, actions: list) -> list[np.ndarray]:
    """Observations of a new gymnasium env: reset(seed), then ``actions`` until the episode ends."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, _, term, trunc, _ = env.step(a)
        out.append(obs)
        if term or trunc:
            break
    env.close()
    return out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("setup", ["inline", "process-workers"])
def test_a_chain_of_steps_equals_gymnasium(setup: str) -> None:
    """BipedalWalker keeps its Box2D world across resets; a replay on a used env diverged at step 3."""
    space = gym.make("BipedalWalker-v3").action_space
    space.seed(0)
    actions = [space.sample() for _ in range(40)]
    truth = gymnasium_episode("BipedalWalker-v3", 3, actions)
    kw = {} if setup == "inline" else {"n_workers": 2, "small_batch_inline": False}
    with pp.make("BipedalWalker-v3", backend=setup.split("-")[0], **kw) as env:
        state, obs, _ = env.reset(seed=3)
        got = [obs]
        for a in actions[: len(truth) - 1]:
            state, obs, *_ = env.step(a)
            got.append(obs)
        differ = [t for t, (x, y) in enumerate(zip(truth, got)) if not np.array_equal(x, y)]
        assert not differ, f"observations differ from gymnasium's at steps {differ}"


@pytest.mark.timeout(180)
def test_a_used_env_resets_as_a_new_one() -> None:
    """Episodes after the first equal a new gymnasium env's (the Box2D world is replaced on reset)."""
    space = gym.make("BipedalWalker-v3").action_space
    space.seed(1)
    actions = [space.sample() for _ in range(12)]
    with pp.make("BipedalWalker-v3", backend="inline") as env:
        for seed in (3, 3, 3, 4):
            _, obs, _ = env.reset(seed=seed)
            got = [obs] + [env.step(a)[1] for a in actions]
            truth = gymnasium_episode("BipedalWalker-v3", seed, actions)
            assert all(np.array_equal(x, y) for x, y in zip(truth, got)), f"episode with seed {seed} differs"


def test_action_logs_compare_by_their_whole_history() -> None:
    a = ActionLog.from_list([np.float32([0.5, 1.0]), np.float32([0.0, 1.0])])
    b = ActionLog.from_list([np.float32([0.5, 1.0]), np.float32([0.0, 1.0])])
    c = ActionLog.from_list([np.float32([0.5, 1.0]), np.float32([0.0, 2.0])])
    d = ActionLog.from_list([np.float64([0.5, 1.0]), np.float64([0.0, 1.0])])  # other bytes: another history
    assert a is not b and a == b and a.key == b.key
    assert a != c and a != d
    assert a.ancestor(1) == b.ancestor(1) == c.ancestor(1)
    assert a.ancestor(0) is None


class CountingEnv(gym.Env):
    """Deterministic; its info says how many steps this env object has run in all (replays included)."""

    observation_space = gym.spaces.Box(-1e6, 1e6, (1,))
    action_space = gym.spaces.Discrete(3)
    steps_in_this_process = 0  # by every CountingEnv here

    def __init__(self) -> None:
        self.x = 0.0
        self.total_steps = 0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.x = float(self.np_random.integers(10))
        return np.array([self.x], dtype=np.float32), {}

    def step(self, action: int) -> tuple:
        self.total_steps += 1
        CountingEnv.steps_in_this_process += 1
        self.x = self.x * 0.5 + int(action)
        return np.array([self.x], dtype=np.float32), self.x, False, False, {"total_steps": self.total_steps}


@pytest.mark.timeout(120)
def test_a_worker_extends_the_history_it_holds() -> None:
    """A 60-step chain on one worker: each restore of a copy replays the one new step, not the whole history."""
    with pp.make(CountingEnv, n_workers=1, small_batch_inline=False, adapter=ActionReplayAdapter) as env:
        env.reset(seed=0)
        for t in range(60):
            *_, info = env.step(t % 3)
        assert info["total_steps"] == 60, f"the worker's env ran {info['total_steps']} steps for a 60-step chain"


@pytest.mark.timeout(120)
def test_interleaved_histories_are_each_extended() -> None:
    """Four chains stepped in turn (a vector env's sub-envs): each held by its own env, so 4 x 30 steps cost 120."""
    with pp.make(CountingEnv, backend="inline", adapter=ActionReplayAdapter) as env:
        starts = [env.reset(seed=k)[0] for k in range(4)]
        before = CountingEnv.steps_in_this_process
        states = starts
        for t in range(30):
            states = list(env.step_batch(np.full(4, t % 3), states).states)
        assert CountingEnv.steps_in_this_process - before == 120
        with pp.make(CountingEnv, backend="inline", adapter=ActionReplayAdapter) as ref:  # and exact
            for k in range(4):
                s = ref.reset(seed=k)[0]
                for t in range(30):
                    s = ref.step(t % 3)[0]
                assert s == states[k]


@pytest.mark.parametrize("actions", [
    [np.array([0.5, -1.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)] * 3,  # stacked
    [0, 3, 1, 2],  # Discrete: plain values
    [np.array(0.5), np.array(1.5)],  # 0-d arrays stay 0-d arrays
    [np.zeros(2), np.zeros(3)],  # shapes differ: listed
], ids=["box", "discrete", "0-d", "ragged"])
def test_a_pickled_action_log_is_the_same_history(actions: list) -> None:
    """A log that travelled has the same actions (types, dtypes, shapes), the same key at every
    length, and extends as the original does."""
    log = ActionLog.from_list(actions)
    back = pickle.loads(pickle.dumps(log))
    assert back == log and len(back) == len(log)
    for k in range(1, len(actions) + 1):
        assert back.ancestor(k).key == log.ancestor(k).key
    for a, b in zip(back.to_list(), actions):
        assert type(a) is type(b) and np.array_equal(a, b)
        if isinstance(b, np.ndarray):
            assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert ActionLog(back, actions[0]) == ActionLog(log, actions[0])


def test_a_pickled_action_log_with_damaged_keys_is_refused() -> None:
    with pytest.raises(StateError, match="key bytes"):
        ActionLog.rebuild([0, 1], b"\0" * 16)
