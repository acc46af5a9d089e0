"""Extra tiny test envs for the backend and fault suites (``tests/envs.py`` holds the main ones).

Like ``tests.envs``, they live in an importable module so that worker
processes of every start method can unpickle them by reference.
"""
from __future__ import annotations

import os
import time
from typing import Any

from tests.envs import CounterEnv

__all__ = ["SlowBuildEnv", "SlowEnv", "SlowOrRaisingEnv"]


class SlowEnv(CounterEnv):
    """A :class:`CounterEnv` whose every step sleeps ``delay`` seconds.

    Used to keep a batch in flight long enough to observe it (``result(timeout)``,
    futures queued behind it), never for speed assertions.
    """

    def __init__(self, delay: float = 0.02, horizon: int = 1000) -> None:
        super().__init__(horizon=horizon)
        self.delay = float(delay)

    def step(self, action: Any) -> tuple:
        time.sleep(self.delay)
        return super().step(action)


class SlowBuildEnv(CounterEnv):
    """A :class:`CounterEnv` that takes ``build_delay`` seconds to build and ``first_step_delay`` more
    on its first step (a heavy simulator warming up, a loaded machine)."""

    def __init__(self, build_delay: float = 0.0, first_step_delay: float = 0.0, horizon: int = 1000) -> None:
        time.sleep(float(build_delay))
        super().__init__(horizon=horizon)
        self.first_step_delay = float(first_step_delay)

    def step(self, action: Any) -> tuple:
        time.sleep(self.first_step_delay)
        self.first_step_delay = 0.0
        return super().step(action)


class HangsOnceMarkedEnv(CounterEnv):
    """A :class:`CounterEnv` whose build hangs (sleeps an hour) while the file ``marker`` exists: a replacement
    worker that cannot start."""

    def __init__(self, marker: str, horizon: int = 1000) -> None:
        if os.path.exists(marker):
            time.sleep(3600)
        super().__init__(horizon=horizon)


class SlowOrRaisingEnv(CounterEnv):
    """A :class:`CounterEnv` whose step sleeps ``delay`` seconds on action 1 and raises ValueError on action 2:
    a batch whose earlier failing item is answered after a later one."""

    def __init__(self, delay: float = 0.3) -> None:
        super().__init__(horizon=1000)
        self.delay = float(delay)

    def step(self, action: Any) -> tuple:
        if int(action) == 1:
            time.sleep(self.delay)
        elif int(action) == 2:
            raise ValueError("action 2 is not allowed here")
        return super().step(action)
