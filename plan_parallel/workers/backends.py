"""A backend name made concrete: the worker class, and how to start worker ``i`` of it.

The only place that tells ``"process"`` from ``"ray"``: above this module the
pool and :class:`~plan_parallel.batch.batch_env.BatchEnv` see workers through
the Worker Protocol alone.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from plan_parallel.workers.base import Worker

__all__ = ["Backend", "per_worker_options", "select_backend", "worker_cores"]


@dataclass(frozen=True)
class Backend:
    """What a pool needs from its backend."""

    #: The worker class (its ``wait_any`` and ``broadcast_args`` are used as class methods).
    worker_type: Any
    #: Starts worker ``index`` without waiting for its env.
    new_worker: Callable[[int], Worker]
    #: How the backend shows in a repr: ``"context='forkserver'"``, ``"backend='ray'"``.
    where: str


def per_worker_options(options: Any, n: int) -> list[dict]:
    """Ray actor options per worker: one dict for all, or a sequence of one dict per worker.

    Raises:
        ValueError: a sequence with other than ``n`` dicts.
        TypeError: neither a dict nor a sequence of dicts.
    """
    if options is None or isinstance(options, dict):
        return [dict(options or {}) for _ in range(n)]
    if isinstance(options, (list, tuple)) and all(isinstance(o, dict) for o in options):
        if len(options) != n:
            raise ValueError(f"worker_options has {len(options)} dicts for {n} workers: give one per worker")
        return [dict(o) for o in options]
    raise TypeError("worker_options must be a dict of Ray actor options or a list of one dict per worker, "
                    f"got {type(options).__name__}")


def worker_cores(n: int, pin: bool | None) -> list[int | None]:
    """The core each of ``n`` process workers is pinned to (None: not pinned), from ``pin_workers``.

    Pinned, worker i runs on the i-th core this process may use (round robin). ``pin=None`` pins when
    the OS can and the workers are no more than those cores: each then has a core of its own. A pipe
    write wakes its reader on the writer's core, so a batch's chunks, sent one after the other, could
    wake both workers on the caller's core, one waiting until the kernel moved it. 2-core VM, W=2,
    every batch on the workers, the workers' affinity toggled between alternating samples (x inline,
    free -> pinned; rounds of 2-3 runs): CartPole B=512 1.03 -> 1.10, 1.06 -> 1.11, 0.98 -> 1.04 (and
    once 0.95 -> 0.89); HalfCheetah B=64 1.20 -> 1.26, 1.17 -> 1.25, 1.06 -> 1.11, 1.05 -> 1.25; Pong
    B=64 1.40 -> 1.47, 1.43 -> 1.53, 1.27 -> 1.41; HalfCheetah B=512 1.41 -> 1.49; CartPole B=8 (a
    round trip: no core to gain) 0.25 -> 0.24, 0.26 -> 0.26.
    """
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if pin is None:
        pin = 0 < n <= len(allowed)
    if not pin or not allowed:
        return [None] * n
    return [allowed[i % len(allowed)] for i in range(n)]


def select_backend(name: str, blob: bytes, n: int, context: str, address: str | None,
                   worker_options: dict | Sequence[dict] | None, pin_workers: bool | None = None) -> Backend:
    """The backend ``name`` for ``n`` workers hosting the env of ``blob`` (cloudpickled factory and adapter).

    For ``"ray"`` this connects to (or starts) Ray first. ``pin_workers``: see :func:`worker_cores`.

    Raises:
        ValueError: an unknown backend, or Ray's options given to another backend, or ``pin_workers``
            given to Ray.
        TypeError: ``pin_workers`` not a bool or None.
    """
    if name not in ("process", "ray"):
        raise ValueError(f"BatchEnv runs the 'process' or 'ray' backend, got {name!r}")
    if pin_workers is not None and not isinstance(pin_workers, bool):
        raise TypeError(f"pin_workers must be True, False or None, got {pin_workers!r}")
    if name != "ray" and (address is not None or worker_options):
        raise ValueError("address and worker_options are options of backend='ray'")
    if name == "ray" and pin_workers is not None:
        raise ValueError("pin_workers is an option of backend='process' (Ray places its actors)")
    if name == "ray":
        from plan_parallel.workers.ray_actor import RayWorker
        from plan_parallel.workers.ray_connect import connect

        connect(address)
        options = per_worker_options(worker_options, n)
        return Backend(RayWorker, lambda i: RayWorker(i, blob, options[i]), "backend='ray'")
    from plan_parallel.workers.process import ExternalProcess

    cores = worker_cores(n, pin_workers)
    return Backend(ExternalProcess, lambda i: ExternalProcess(i, blob, context, cores[i % n]), f"context={context!r}")
