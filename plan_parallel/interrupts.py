"""Ctrl-C held back over the few steps that must not be cut in half (starting a worker, creating a slab)."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["ctrl_c_deferred"]


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back for the block, on the main thread; if it came, it is raised right after.

    Python runs signal handlers in the main thread only, so elsewhere nothing
    needs holding back. The handler in place before the block (Python's default
    raises ``KeyboardInterrupt``) is called once the block is done.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    old = signal.getsignal(signal.SIGINT)
    try:  # installed inside the try: a Ctrl-C landing right after the swap still restores the old handler
        signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if came and callable(old):
            old(signal.SIGINT, None)
