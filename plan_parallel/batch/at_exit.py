"""Worker pools still open when the interpreter exits are closed then, by an ``atexit`` hook.

A pool is also closed when its env is garbage-collected (``BatchEnv.__del__``),
but an env may outlive every collection: one a daemon thread still refers to, or
an exception kept in ``sys.last_exc``, is never freed before the interpreter is
torn down. Its workers would then die only with this process (their
parent-death signal) and its shared-memory slabs be left to multiprocessing's
resource tracker, which unlinks them with a "leaked shared_memory objects"
warning. The hook runs before multiprocessing's own exit handler (it was
registered later), and closes each pool as ``close()`` does, briefly.
"""
from __future__ import annotations

import atexit
import logging
import multiprocessing.util  # noqa: F401 - its exit handler is registered first, so this one runs before it
import weakref
from typing import Any

__all__ = ["close_at_exit"]

log = logging.getLogger("plan_parallel")
EXIT_CLOSE_SECONDS = 0.5  # each pool's workers get this long to stop before they are killed
_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()


def close_at_exit(pool: Any) -> None:
    """Close ``pool`` when the interpreter exits, unless it was closed (or freed) before."""
    _OPEN.add(pool)


def _close_open_pools() -> None:
    for pool in list(_OPEN):
        try:
            pool.close(EXIT_CLOSE_SECONDS)
        except Exception:  # exiting: nothing left to tell it to
            log.debug("plan_parallel: closing a pool at exit failed", exc_info=True)


atexit.register(_close_open_pools)
