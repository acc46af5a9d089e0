"""The worker interface and the typed messages every backend speaks.

A worker hosts one :class:`~plan_parallel.env.PlanEnv` built from a factory and
answers :class:`Call` messages, in order, with :class:`Reply` messages. The ops
a worker accepts are an allow-list (:data:`OPS`); anything else is a bug of
this package and is reported as such.
"""
from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from plan_parallel.errors import RemoteError, RemoteTraceback

__all__ = ["OPS", "Call", "Reply", "Worker", "remote_error", "reraise"]

OPS = frozenset({"reset", "step_batch", "rollout_batch", "set_state", "ping", "close"})


@dataclass
class Call:
    """One request to a worker."""

    id: int
    op: str
    args: tuple = ()


@dataclass
class Reply:
    """The answer to :class:`Call` ``id``: a value, or an error raised by env code."""

    id: int
    value: Any = None
    error: bytes | None = None  # a pickled (exception, remote traceback text, item index)
    env_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def remote_error(exc: BaseException, item: int | None = None) -> bytes:
    """Pickle ``exc`` with its traceback text for the parent; unpicklable ones become RemoteError."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
        payload: Any = exc
    except Exception:  # noqa: BLE001 - any failure to round-trip means "send a stand-in"
        payload = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return pickle.dumps((payload, tb, item))


def reraise(blob: bytes, where: str, first_item: int = 0) -> BaseException:
    """The exception from :func:`remote_error`, with its traceback as ``__cause__`` and a note.

    ``first_item`` is the batch index of the chunk's first item, so the note
    names the item's index in the caller's batch.
    """
    exc, tb, item = pickle.loads(blob)
    note = where + (f", at item {first_item + item} of the batch" if item is not None else "")
    exc.__cause__ = RemoteTraceback(tb)
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    return exc


class Worker(Protocol):
    """What :class:`~plan_parallel.batch.BatchEnv` needs from a worker, whatever the backend."""

    index: int

    @property
    def pid(self) -> int | None: ...

    def send(self, call: Call) -> None:
        """Queue ``call`` (never blocks for long); replies come back in order."""

    def handles(self) -> list[Any]:
        """Objects for ``multiprocessing.connection.wait``: readable when a reply or a death is due."""

    def poll(self) -> Reply | None:
        """A reply if one is ready, else None. Raises EOFError/OSError when the worker is gone."""

    def dead(self) -> str | None:
        """None while alive; else how it died (``"signal SIGKILL"``, ``"exit code 3"``)."""

    def kill(self) -> None:
        """Stop the worker at once (SIGKILL or equivalent)."""

    def close(self, timeout: float) -> None:
        """Ask the worker to exit; kill it if it has not within ``timeout``."""
