"""Small deterministic envs for the conformance suite (each defines ``get_state``/``set_state``)."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["FinalObsEnv", "SlowStepEnv", "SpaceSampleEnv"]


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
    """Observations and actions of a given space; each observation is sampled from an RNG seeded by the env's."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, space: spaces.Space) -> None:
        self.observation_space = space
        self.action_space = space
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
