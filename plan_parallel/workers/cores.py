"""Which core a process worker runs on: pinning workers apart, and where the calling thread runs now.

And how many CPUs this process may use (:func:`available_cpus`, the default worker count). The rest is the
execution policy's opt-in host settings (``pin_workers``, ``move_caller``): by default no worker is pinned and
the calling thread's affinity is never changed. Pinning is Linux only
(``os.sched_setaffinity``, glibc's ``sched_getcpu``); elsewhere workers run wherever the OS puts them and
the calling thread's core is unknown.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["ENV_WORKERS", "available_cpus", "check_pin_workers", "current_core", "feed_order", "move_off", "pinned_order",
           "restore_cores", "run_on", "worker_cores"]

#: The environment variable that sets the default worker count (a positive integer).
ENV_WORKERS = "PLAN_PARALLEL_WORKERS"


def available_cpus() -> int:
    """The CPUs this process may use: :data:`ENV_WORKERS` if set, else the smallest of the CPU count, this
    process's CPU affinity and its container's CPU quota (cgroup ``cpu.max`` or ``cpu.cfs_quota_us``,
    rounded up), as ``loky.cpu_count`` reads them.

    Raises:
        ValueError: :data:`ENV_WORKERS` set to other than a positive integer.
    """
    text = os.environ.get(ENV_WORKERS)
    if text is not None:
        if not text.strip().isdigit() or int(text) < 1:
            raise ValueError(f"{ENV_WORKERS} must be a positive integer, got {text!r}")
        return int(text)
    from loky import cpu_count

    return max(1, int(cpu_count(only_physical_cores=False)))


def check_pin_workers(pin: Any) -> None:
    """Refuse a ``pin_workers`` that is not True, False or None.

    Raises:
        TypeError: anything else.
    """
    if pin is not None and not isinstance(pin, bool):
        raise TypeError(f"pin_workers must be True, False or None, got {pin!r}")


def worker_cores(n: int, pin: bool) -> list[int | None]:
    """The core each of ``n`` process workers is pinned to (None: not pinned): with ``pin``, worker i runs on
    the i-th core this process may use (round robin); without it, or where the OS has no CPU affinity,
    wherever the OS puts it."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if not pin or not allowed:
        return [None] * n
    return [allowed[i % len(allowed)] for i in range(n)]


def run_on(core: int | None) -> None:
    """Keep this process on ``core`` (a worker, at its start); None, or an OS that refuses: where the OS puts it."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {core})


def _getcpu() -> Any:
    """glibc's (or musl's) ``sched_getcpu``, or None where the C library has none (macOS) or cannot be
    opened this way (Windows)."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


_GETCPU = _getcpu()


def current_core() -> int | None:
    """The core the calling thread runs on now (None: unknown here). It may move at any time: a hint."""
    if _GETCPU is None:
        return None
    core = _GETCPU()
    return core if core >= 0 else None


def feed_order(cores: Sequence[int | None], here: int | None) -> list[int]:
    """The workers (kept on ``cores``) in the order to send them a batch's chunks when this thread runs on
    core ``here``: the worker kept there last. Woken on a busy core, a worker waits for this thread to
    block (workers under ``SCHED_BATCH`` yield to the caller on wake-up), while the others start at once
    (CartPole B=512 on 2 pinned workers: ~1.03x as fast as in index order; ``docs/measurements.md``).
    """
    order = list(range(len(cores)))
    if here is None:
        return order
    return sorted(order, key=lambda i: cores[i] == here)


def pinned_order(cores: Sequence[int | None]) -> list[int]:
    """:func:`feed_order` from the core this thread runs on now, for workers kept on ``cores``; index order when
    none is kept on one (the policy's ``pin_workers`` off: no core to ask about)."""
    if all(c is None for c in cores):
        return list(range(len(cores)))
    return feed_order(cores, current_core())


def move_off(busy: set[int]) -> None:
    """Before this thread blocks for replies: move it off its core when a worker in flight is kept there
    (``busy``: the cores of the workers in flight), to a core with none if there is one, else to the others'
    (a worker done first frees its core, and this thread's work on the reply runs there). Its cores are
    given back by :func:`restore_cores`, when it wakes.

    A thread that sleeps wakes on its own core if the kernel lets it: there it took the core from the
    worker still running, with the other core idle (HalfCheetah B=64 on 2 pinned workers: 1.02-1.11x as
    fast moved; ``docs/measurements.md``, *Worker processes*).

    The cores it had are noted for this thread before they are narrowed: a Ctrl-C anywhere between the
    narrowing and the restore leaves them owed, and the next :func:`restore_cores` on this thread (the
    pool's recovery from the interruption, or the next wait that blocks) gives them back.
    """
    here = current_core()
    if here is None or here not in busy:
        return
    try:
        owed = getattr(_owed, "mask", None)
        mask = os.sched_getaffinity(0) if owed is None else owed
        target = (mask - busy) or (mask - {here})
        if not target:
            return
        _owed.mask = mask
        os.sched_setaffinity(0, target)
    except (OSError, AttributeError):  # refused (a cpuset, a container's policy), or no such call: wait where it is
        return


def restore_cores() -> None:
    """Give this thread back the cores :func:`move_off` took from it, if it owes any."""
    mask = getattr(_owed, "mask", None)
    if mask is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, mask)
        _owed.mask = None


_owed = threading.local()  # .mask: the cores this thread had before move_off narrowed them (None: none owed)
