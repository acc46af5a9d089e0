"""Tiny deterministic envs for machinery tests.

They are registered nowhere: pass the class itself to ``plan_parallel.make``
(``pp.make(CounterEnv, backend=..., horizon=5)``). They live in an importable
module (``tests.envs``) so that worker processes of every start method can
unpickle them by reference.

Every env defines ``get_state()`` / ``set_state(state)`` on its class, so
plan_parallel captures it through ``UserMethodsAdapter`` (plus the env's
``np_random`` and its wrappers). Every ``step`` draws from ``self.np_random``,
so a state that forgot the RNG would replay differently.

``FaultyEnv`` misbehaves on demand (raise, exit, SIGKILL, segfault, hang,
unpicklable results) in a chosen phase, for the fault tests of the parallel
backends. Only ``fault="raise"`` (and friends that raise) is safe in-process.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "FAULTS",
    "PHASES",
    "ArrayStateEnv",
    "CounterEnv",
    "DictObsEnv",
    "FaultyEnv",
    "FlatStateEnv",
    "NumpyInfoEnv",
    "ShiftingStateEnv",
    "UnclonableEnv",
    "UnpicklableError",
]


class CounterEnv(gym.Env):
    """Counts steps; reward = action; terminates when the count reaches ``horizon``.

    Observation: ``[count, noise]`` (float32), where ``noise`` is a fresh uniform
    draw from ``np_random`` at every reset and step; with ``obs_size > 2``,
    followed by ``count + noise`` repeated (large observations, for the
    machinery that lends them to the caller).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, horizon: int = 10, obs_size: int = 2) -> None:
        self.horizon = int(horizon)
        self.obs_size = int(obs_size)
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(self.obs_size,), dtype=np.float32)
        self.count = 0
        self.total = 0
        self.noise = 0.0

    def _obs(self) -> np.ndarray:
        if self.obs_size == 2:
            return np.array([self.count, self.noise], dtype=np.float32)
        obs = np.full(self.obs_size, self.count + self.noise, dtype=np.float32)
        obs[:2] = (self.count, self.noise)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.count = 0
        self.total = 0
        self.noise = float(self.np_random.random())
        return self._obs(), {"count": 0}

    def step(self, action: Any) -> tuple:
        a = int(action)
        self.count += 1
        self.total += a
        self.noise = float(self.np_random.random())
        return self._obs(), float(a), self.count >= self.horizon, False, {"count": self.count, "total": self.total}

    def get_state(self) -> tuple:
        return (self.count, self.total, self.noise)

    def set_state(self, state: tuple) -> None:
        self.count, self.total, self.noise = state


class NumpyInfoEnv(CounterEnv):
    """:class:`CounterEnv` whose infos hold numpy scalars under keys that are not all strings."""

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, _ = super().step(action)
        info = {0: np.float64(self.noise), "count": np.int64(self.count), ("total",): np.float32(self.total)}
        return obs, reward, terminated, truncated, info


class ShiftingStateEnv(CounterEnv):
    """:class:`CounterEnv` whose ``get_state`` tuple changes form with its count: ``(count, total, noise)`` (two ints
    and a float), except at every fourth count: the total as a float, the noise as a numpy float, a bool more, or
    the total beyond 64 bits (in turn). For the lane's rows of tuples of scalars: a result or a call's states of
    another form than the first's take the pickled layout or the general path."""

    BIG = 1 << 70

    def get_state(self) -> tuple:
        c, t, n = self.count, self.total, self.noise
        form = (c // 4) % 4 if c % 4 == 3 else None
        if form == 0:
            return (c, float(t), n)
        if form == 1:
            return (c, t, np.float64(n))
        if form == 2:
            return (c, t, n, c % 8 == 3)
        if form == 3:
            return (c, t + self.BIG, n)
        return (c, t, n)

    def set_state(self, state: tuple) -> None:
        c, t, n = state[:3]
        self.count, self.noise = c, float(n)
        self.total = int(t) - (self.BIG if t >= self.BIG else 0)


class FlatStateEnv(CounterEnv):
    """:class:`CounterEnv` whose ``get_state`` value is one float64 array ``[count, total, noise]``."""

    def get_state(self) -> np.ndarray:
        return np.array([self.count, self.total, self.noise], dtype=np.float64)

    def set_state(self, state: np.ndarray) -> None:
        self.count, self.total, self.noise = int(state[0]), int(state[1]), float(state[2])


class PidEnv(CounterEnv):
    """:class:`CounterEnv` whose infos also say which process ran the step (``"pid"``): which worker ran which item."""

    def step(self, action: Any) -> tuple:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "pid": os.getpid()}


class DictObsEnv(gym.Env):
    """A point on a plane pushed by a Box(2) action, with a Dict observation.

    Observation: ``{"pos": float32 (2,), "count": Discrete(horizon + 1)}``.
    The action is applied with a small noise drawn from ``np_random``. Reward is
    ``-|pos|``; terminates when the count reaches ``horizon``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, horizon: int = 8) -> None:
        self.horizon = int(horizon)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32),
                "count": spaces.Discrete(self.horizon + 1),
            }
        )
        self.pos = np.zeros(2, dtype=np.float32)
        self.count = 0

    def _obs(self) -> dict:
        return {"pos": self.pos.copy(), "count": self.count}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1.0, 1.0, size=2).astype(np.float32)
        self.count = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        a = np.asarray(action, dtype=np.float32)
        noise = self.np_random.normal(0.0, 0.01, size=2).astype(np.float32)
        self.pos = (self.pos + 0.1 * a + noise).astype(np.float32)
        self.count += 1
        reward = -float(np.linalg.norm(self.pos))
        return self._obs(), reward, self.count >= self.horizon, False, {}

    def get_state(self) -> tuple:
        return (self.pos.copy(), self.count)

    def set_state(self, state: tuple) -> None:
        pos, count = state
        self.pos = np.array(pos, dtype=np.float32)
        self.count = int(count)


class ArrayStateEnv(gym.Env):
    """A user env whose state is an array (``get_state`` copies it out, ``set_state`` copies it in).

    A mass on a spring pushed by a Discrete(3) action (-1, 0, +1) with noise from
    ``np_random`` at every reset and step; the episode ends when the position leaves
    [-2, 2] (terminated) or after ``horizon`` steps (truncated, by the env itself).
    For the differential fuzzer's "your own env" family: a state array a caller
    could try to edit in place.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, horizon: int = 40) -> None:
        self.horizon = int(horizon)
        self.action_space = spaces.Discrete(3)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.x = np.zeros(2)  # position, velocity
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.x[0], self.x[1], float(self.t)])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-0.5, 0.5, size=2)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        force = float(int(action) - 1) + float(self.np_random.normal(0.0, 0.3))
        self.x[1] += 0.1 * (force - self.x[0])  # in place: the env's own array
        self.x[0] += 0.1 * self.x[1]
        self.t += 1
        terminated = bool(abs(self.x[0]) > 2.0)
        return self._obs(), -abs(float(self.x[0])), terminated, self.t >= self.horizon, {"t": self.t}

    def get_state(self) -> tuple:
        return (self.x.copy(), self.t)

    def set_state(self, state: tuple) -> None:
        x, t = state
        self.x = np.array(x, dtype=np.float64)
        self.t = int(t)


FAULTS = ("none", "raise", "raise_unpicklable", "exit", "sigkill", "segfault", "hang", "unpicklable")
PHASES = ("init", "reset", "step", "get_state", "set_state")


class UnpicklableError(ValueError):
    """An exception that cannot be pickled (it holds a lock)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.lock = threading.Lock()


class FaultyEnv(CounterEnv):
    """A :class:`CounterEnv` that misbehaves on demand.

    Args:
        fault: what to do when triggered:
            ``"none"`` (behave), ``"raise"`` (``ValueError``), ``"raise_unpicklable"``
            (an exception that does not pickle), ``"exit"`` (``os._exit(3)``),
            ``"sigkill"`` (SIGKILL itself), ``"segfault"`` (read address 0),
            ``"hang"`` (sleep forever), ``"unpicklable"`` (return a value holding a
            lock: in the step info for phase ``"step"``, in the state for
            ``"get_state"``; other phases raise like ``"raise"``).
        phase: when the fault triggers:
            ``"init"`` (in the constructor), ``"reset"`` (every reset, or only
            when the seed equals ``trigger_seed``), ``"step"`` (a step with
            ``action == trigger_action``), ``"get_state"`` (capturing a state
            whose last action was ``trigger_action``), ``"set_state"``
            (restoring a state whose last action was ``trigger_action``; make
            such a state with ``fault="none"``: the state kind is the same).
        trigger_action: the action that triggers the step/get_state/set_state faults.
        trigger_seed: for phase ``"reset"``: None triggers on every reset.
        once_file: when given, the fault triggers only once across all
            processes: the first trigger creates this file (atomically) and
            later triggers behave. For retry tests.
        horizon, obs_size: as :class:`CounterEnv`.
    """

    def __init__(
        self,
        fault: str = "raise",
        phase: str = "step",
        trigger_action: int = 2,
        trigger_seed: int | None = None,
        once_file: str | None = None,
        horizon: int = 10,
        obs_size: int = 2,
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        super().__init__(horizon=horizon, obs_size=obs_size)
        self.fault = fault
        self.phase = phase
        self.trigger_action = int(trigger_action)
        self.trigger_seed = trigger_seed
        self.once_file = once_file
        self.last_action = -1
        if phase == "init":
            self._fire("init")

    # ------------------------------------------------------------------ faults
    def _armed(self) -> bool:
        if self.fault == "none":
            return False
        if self.once_file is None:
            return True
        try:
            fd = os.open(self.once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def _fire(self, where: str) -> Any:
        """Misbehave (when armed); returns an unpicklable value for fault="unpicklable"."""
        if not self._armed():
            return None
        fault = self.fault
        if fault == "raise" or (fault == "unpicklable" and where not in ("step", "get_state")):
            raise ValueError(f"FaultyEnv: injected fault in {where}")
        if fault == "raise_unpicklable":
            raise UnpicklableError(f"FaultyEnv: injected unpicklable fault in {where}")
        if fault == "exit":
            os._exit(3)
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # the signal is delivered asynchronously
        if fault == "segfault":
            ctypes.string_at(0)
        if fault == "hang":
            while True:
                time.sleep(3600)
        if fault == "unpicklable":
            return threading.Lock()
        raise AssertionError(f"unhandled fault {fault!r}")

    # ------------------------------------------------------------------ env API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if self.phase == "reset" and (self.trigger_seed is None or seed == self.trigger_seed):
            self._fire("reset")
        self.last_action = -1
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple:
        bad = None
        if self.phase == "step" and int(action) == self.trigger_action:
            bad = self._fire("step")
        self.last_action = int(action)
        obs, reward, terminated, truncated, info = super().step(action)
        if bad is not None:
            info = {**info, "unpicklable": bad}
        return obs, reward, terminated, truncated, info

    def get_state(self) -> tuple:
        bad = None
        if self.phase == "get_state" and self.last_action == self.trigger_action:
            bad = self._fire("get_state")
        state = (*super().get_state(), self.last_action)
        return state if bad is None else (*state, bad)

    def set_state(self, state: tuple) -> None:
        if self.phase == "set_state" and state[3] == self.trigger_action:
            self._fire("set_state")
        super().set_state(state[:3])
        self.last_action = state[3]


class UnclonableEnv(gym.Env):
    """An env plan_parallel cannot capture: opaque state (a lock) and no get_state/set_state."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.lock = threading.Lock()
        self.x = 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.x = float(self.np_random.random())
        return np.array([self.x], dtype=np.float32), {}

    def step(self, action: Any) -> tuple:
        self.x = float(self.np_random.random())
        return np.array([self.x], dtype=np.float32), 0.0, False, False, {}


class OffDtypeEnv(gym.Env):
    """Declares ``Box(float32)`` observations and returns them in another form: ``form`` is "float64", "int64",
    "float16" (arrays), "list" (of Python floats) or "scalar" (a Python float; the box then has shape ()).

    A state of (position array, step count); noise from ``np_random``; the episode ends after 3 steps.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, form: str = "float64") -> None:
        self.form = form
        self.observation_space = spaces.Box(-10.0, 10.0, shape=() if form == "scalar" else (3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.x = np.zeros(3)
        self.t = 0

    def _obs(self) -> Any:
        if self.form == "list":
            return [float(v) for v in self.x]
        if self.form == "scalar":
            return float(self.x[0])
        return self.x.astype(self.form)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.x, self.t = self.np_random.normal(size=3) * 3, 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        self.x, self.t = self.x + (int(action) - 0.5) + self.np_random.normal(size=3) * 0.1, self.t + 1
        return self._obs(), 1.0, self.t >= 3, False, {}

    def get_state(self) -> tuple:
        return self.x.copy(), self.t

    def set_state(self, state: tuple) -> None:
        self.x, self.t = state[0].copy(), state[1]
