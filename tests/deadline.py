"""A deadline for one call in the main thread, for calls that may never return because of a bug.

pytest-timeout would fail the whole test (and, with a known bug, leave a
strict-xfail test waiting for the global timeout). ``call_with_deadline`` raises
:class:`Hang` after ``seconds`` instead, from a SIGALRM handler, and then
restores pytest-timeout's own alarm (which also uses SIGALRM).
"""
from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Hang", "call_with_deadline"]


class Hang(AssertionError):
    """The call did not return within its deadline."""


def call_with_deadline(fn: Callable[[], Any], seconds: float, what: str = "the call") -> Any:
    """``fn()``, or :class:`Hang` if it has not returned after ``seconds`` (main thread only)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"{what} did not return within {seconds} s")

    t0 = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # pytest-timeout's alarm, minus the time spent here
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - t0), 0.001))
