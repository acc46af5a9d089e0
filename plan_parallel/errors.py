"""Every exception type plan_parallel raises.

The hierarchy is flat and small: callers catch :class:`PlanParallelError` for
anything raised by the library itself, or one of its subclasses for a specific
failure. Exceptions raised by *env code* (inside a worker or inline) are not
wrapped: they re-raise with their own type, and, when they come from another
process, carry the remote traceback as ``__cause__`` (a :class:`RemoteTraceback`).

Such an exception also says which item of its batch raised it, for the library's
own use (:func:`mark_failed_item`, :func:`failed_item`): a batch's error names its
item's index the same way on every backend.
"""
from __future__ import annotations

import multiprocessing

from gymnasium.error import ClosedEnvironmentError

__all__ = [
    "ClosedError",
    "PlanParallelError",
    "RemoteError",
    "RemoteTraceback",
    "StateError",
    "WaitTimeoutError",
    "WorkerCrashedError",
    "WorkerTimeoutError",
    "failed_item",
    "mark_failed_item",
]

_ITEM = "_pp_item"  # the attribute an env error carries: which item of its batch raised it


def mark_failed_item(exc: BaseException, index: int) -> None:
    """Note on ``exc`` (raised by env code, or a check) that item ``index`` of its batch raised it."""
    setattr(exc, _ITEM, index)


def failed_item(exc: BaseException) -> int | None:
    """The item of its batch ``exc`` came from (:func:`mark_failed_item`); None when not known."""
    return getattr(exc, _ITEM, None)


class PlanParallelError(Exception):
    """Base of every error raised by plan_parallel."""


class StateError(PlanParallelError, ValueError):
    """A state cannot be captured, restored or pickled faithfully.

    Raised when no adapter can capture an env exactly, when a state is given to an
    env it does not belong to (another family, another wrapper stack, another
    shape), and when the env has no current state yet (never reset nor set).
    """


class WorkerCrashedError(PlanParallelError):
    """A worker died (signal, exit, OOM) and could not be replaced within max_restarts."""


class WorkerTimeoutError(PlanParallelError, TimeoutError):
    """A call did not finish within its deadline; the worker was killed and replaced."""


class ClosedError(PlanParallelError, ClosedEnvironmentError):
    """The env was closed; every later call raises this (also gymnasium's ``ClosedEnvironmentError``)."""


class WaitTimeoutError(PlanParallelError, TimeoutError, multiprocessing.TimeoutError):
    """A wait (``step_wait(timeout)``, ``recv(timeout=)``) ran out; the call stays pending, nothing was killed.

    Also ``multiprocessing.TimeoutError``, which code written for gymnasium's
    ``AsyncVectorEnv`` catches.
    """


class RemoteError(PlanParallelError):
    """Env code in a worker raised an exception that cannot travel back (it does not pickle).

    The message holds the original type name and text; ``__cause__`` holds the
    remote traceback.
    """


class RemoteTraceback(Exception):
    """The formatted traceback of an exception raised in another process.

    Attached as ``__cause__`` of the re-raised exception so that the usual
    traceback printout shows where, in the worker, the error came from.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return "\n\n" + self.tb
