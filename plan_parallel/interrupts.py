"""Ctrl-C held back over the few steps that must not be cut in half (starting a worker, creating a slab)."""
from __future__ import annotations

import _signal
import signal
import threading
from typing import Any

__all__ = ["ctrl_c_deferred"]

_SIGINT = int(signal.SIGINT)
_NOT_HELD = object()  # the block runs off the main thread (None is a handler value: "not set from Python")


class ctrl_c_deferred:  # used as a function: ``with ctrl_c_deferred():``
    """Hold Ctrl-C (SIGINT) back for the block, on the main thread; if it came, it is raised right after.

    Python runs signal handlers in the main thread only, so elsewhere nothing
    needs holding back. The handler in place before the block (Python's default
    raises ``KeyboardInterrupt``) is called once the block is done.

    The handlers are swapped with ``_signal``, the C module under ``signal``:
    ``signal.signal`` converts every value to and from an enum, which made a
    block cost 17 us here (2.7 us this way), and blocks guard every vector step.
    """

    __slots__ = ("came", "old")

    def __init__(self) -> None:
        self.came = False
        self.old: Any = _NOT_HELD

    def _hold(self, signum: int, frame: Any) -> None:
        self.came = True

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            # One C call: once it returns, a Ctrl-C only sets self.came, so self.old is always stored.
            self.old = _signal.signal(_SIGINT, self._hold)

    def __exit__(self, *exc: object) -> None:
        old = self.old
        if old is _NOT_HELD:
            return
        # None: the handler was not set from Python (as the interpreter shuts down, or a C
        # library's): it cannot be put back, so the default action takes its place.
        _signal.signal(_SIGINT, _signal.SIG_DFL if old is None else old)
        if self.came and callable(old):
            old(_SIGINT, None)
