"""Which core a process worker runs on: pinning workers apart, and where the calling thread runs now.

Linux only (``os.sched_setaffinity``, glibc's ``sched_getcpu``); elsewhere workers run wherever the OS
puts them and the calling thread's core is unknown.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["check_pin_workers", "current_core", "feed_order", "move_off", "restore_cores", "run_on", "worker_cores"]


def check_pin_workers(pin: Any) -> None:
    """Refuse a ``pin_workers`` that is not True, False or None.

    Raises:
        TypeError: anything else.
    """
    if pin is not None and not isinstance(pin, bool):
        raise TypeError(f"pin_workers must be True, False or None, got {pin!r}")


def worker_cores(n: int, pin: bool | None) -> list[int | None]:
    """The core each of ``n`` process workers is pinned to (None: not pinned), from ``pin_workers``.

    Pinned, worker i runs on the i-th core this process may use (round robin). ``pin=None`` pins when
    the OS can and the workers are as many as those cores: each then has a core of its own, and no idle
    core is kept from them (fewer workers on a machine shared with other work could be held on busy
    cores while others idle). A pipe write wakes its reader on the writer's core, so a batch's chunks,
    sent one after the other, could wake both workers on the caller's core, one waiting there until the
    kernel moved it. 2-core VM, W=2, every batch on the workers, the workers' affinity toggled between
    alternating samples (x inline, free -> pinned): CartPole B=512 1.03 -> 1.10, 1.06 -> 1.11, 0.98 ->
    1.04 (once 0.95 -> 0.89); HalfCheetah B=64 1.20 -> 1.26, 1.17 -> 1.25, 1.06 -> 1.11, 1.05 -> 1.25;
    Pong B=64 1.40 -> 1.47, 1.43 -> 1.53, 1.27 -> 1.41; HalfCheetah B=512 1.41 -> 1.49; CartPole B=8
    (a round trip: no core to gain) 0.25 -> 0.24, 0.26 -> 0.26.
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if pin is None:
        pin = n == len(allowed)
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
    block (workers yield to the caller on wake-up), while the others start at once.

    CartPole B=512 and HalfCheetah B=512 on 2 pinned workers, alternating samples: 1.028-1.031x and
    1.037x as fast as in index order; HalfCheetah and Pong B=64, whose chunks take less to encode
    than to run, 0.996-1.006x.
    """
    order = list(range(len(cores)))
    if here is None:
        return order
    return sorted(order, key=lambda i: cores[i] == here)


def move_off(busy: set[int]) -> None:
    """Before this thread blocks for replies: move it off its core when a worker in flight is kept there
    (``busy``: the cores of the workers in flight), to a core with none if there is one, else to the others'
    (a worker done first frees its core, and this thread's work on the reply runs there). Its cores are
    given back by :func:`restore_cores`, when it wakes.

    A thread that sleeps wakes on its own core if the kernel lets it: there it took the core from the
    worker still running (workers yield to the caller), with the other core idle: that worker's env time
    was 1,770 us against 1,516 for the same chunk (HalfCheetah B=64). 2-core VM, W=2, every batch on the
    workers, moved / not in alternating samples in one process, two runs: HalfCheetah B=64 1.111, 1.024x;
    Pong B=64 1.010, 1.010x; CartPole B=512 1.046, 1.030x; HalfCheetah B=512 1.017, 1.019x.

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
