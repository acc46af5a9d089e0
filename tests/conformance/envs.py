"""Small deterministic envs for the conformance suite (each defines ``get_state``/``set_state``)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["CountEnv", "CustomSpace", "CustomSpaceEnv", "FinalObsEnv", "SlowStepEnv", "SpaceSampleEnv", "StringSpace",
           "TenStepEnv", "UnsetCountEnv"]


class FinalObsEnv(gym.Env):
    """Discrete(4) observations: the action (0 from action 3 on); action >= 3 terminates; infos name the action."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Discrete(4)
        self.action_space = spaces.Discrete(5)
        self.last = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.last = 0
        return 0, {"reset": True}

    def step(self, action: Any) -> tuple:
        a = int(action)
        self.last = a if a < 3 else 0
        return self.last, 0.0, a >= 3, False, {"action": a}

    def get_state(self) -> int:
        return self.last

    def set_state(self, state: int) -> None:
        self.last = state


class SpaceSampleEnv(gym.Env):
    """Observations of a given space, sampled from an RNG seeded by the env's; actions of that space too, or of
    ``action_space`` (upstream's GenericTestEnv(observation_space=...) keeps its default action space)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, space: spaces.Space, action_space: spaces.Space | None = None) -> None:
        self.observation_space = space
        self.action_space = space if action_space is None else action_space
        self.t = 0

    def _obs(self) -> Any:
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        assert action in self.action_space, action
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 5, {}

    def get_state(self) -> int:
        return self.t

    def set_state(self, state: int) -> None:
        self.t = state


class SlowStepEnv(gym.Env):
    """A Box(1) action is the number of seconds the step sleeps (as gymnasium's test ``SlowEnv``)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(0.0, 1.0, shape=(), dtype=np.float32)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple:
        import time

        time.sleep(float(action))
        self.t += 1
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def get_state(self) -> int:
        return self.t

    def set_state(self, state: int) -> None:
        self.t = state


class CustomSpace(gym.Space):
    """gymnasium's tests/vector/testing_utils.CustomSpace: ``contains`` compares with ints (its env's actions are strings)."""

    def sample(self) -> Any:
        return self.np_random.integers(0, 10, ())

    def contains(self, x: Any) -> bool:
        return bool(0 <= x <= 10)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CustomSpace)

    def __hash__(self) -> int:
        return hash(type(self))


class StringSpace(CustomSpace):
    """CustomSpace whose ``contains`` accepts the strings its env is stepped with."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StringSpace)

    def __hash__(self) -> int:
        return hash(type(self))


class CustomSpaceEnv(gym.Env):
    """gymnasium's CustomSpaceEnv: observations are strings naming the last action (its state)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, space_type: type[gym.Space] = CustomSpace) -> None:
        self.observation_space = space_type()
        self.action_space = space_type()
        self.last = "reset"

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.last = "reset"
        return self.last, {}

    def step(self, action: Any) -> tuple:
        self.last = f"step({action:s})"
        return self.last, 0.0, False, False, {}

    def get_state(self) -> str:
        return self.last

    def set_state(self, state: str) -> None:
        self.last = state


class TenStepEnv(gym.Env):
    """The env of gymnasium's test_normalize_reward.py: reward 1.0 on the 10th step, which terminates.

    Observations are zeros (upstream samples them at random): the reward wrapper does not read them.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.step_id = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.step_id = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action: Any) -> tuple:
        self.step_id += 1
        terminated = self.step_id == 10
        return np.zeros(1, dtype=np.float32), float(terminated), terminated, False, {}

    def get_state(self) -> int:
        return self.step_id

    def set_state(self, state: int) -> None:
        self.step_id = state


class CountEnv(gym.Env):
    """gymnasium's test_autoreset_mode.py env (count_reset / count_step), with ``max_count`` in its state.

    Observation: the step count (reset to the seed, 0 without one); reward: the action;
    terminated when the count reaches ``max_count``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Discrete(5)
        self.action_space = spaces.Discrete(5)
        self.count = 0
        self.max_count: int | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.count = seed if seed is not None else 0
        return self.count, {}

    def step(self, action: Any) -> tuple:
        self.count += 1
        return self.count, action, self.count == self.max_count, False, {}

    def get_state(self) -> tuple[int, int | None]:
        return self.count, self.max_count

    def set_state(self, state: tuple[int, int | None]) -> None:
        self.count, self.max_count = state


class UnsetCountEnv(CountEnv):
    """:class:`CountEnv` as gymnasium's test_autoreset_mode.py builds it: no ``max_count`` until ``set_attr`` sets
    it, and a state (the count) that leaves it out: a setting of the env, outside its state."""

    def __init__(self) -> None:
        super().__init__()
        del self.max_count

    def get_state(self) -> int:  # type: ignore[override]
        return self.count

    def set_state(self, state: int) -> None:  # type: ignore[override]
        self.count = state
