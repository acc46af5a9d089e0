"""Extra tiny test envs for the backend and fault suites (``tests/envs.py`` holds the main ones).

Like ``tests.envs``, they live in an importable module so that worker
processes of every start method can unpickle them by reference.
"""
from __future__ import annotations

import time
from typing import Any

from tests.envs import CounterEnv

__all__ = ["SlowEnv"]


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
