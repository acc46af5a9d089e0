"""A backend name made concrete: the worker class, and how to start worker ``i`` of it.

The only place that tells ``"process"`` from ``"ray"``: above this module the
pool and :class:`~plan_parallel.batch.batch_env.BatchEnv` see workers through
the Worker Protocol alone.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from plan_parallel.workers.base import Worker
from plan_parallel.workers.cores import worker_cores

__all__ = ["Backend", "HostSettings", "per_worker_options", "select_backend"]


@dataclass(frozen=True)
class HostSettings:
    """What process workers change on the host (the execution policy's opt-in settings; none by default)."""

    pin_workers: bool = False  #: worker i on the i-th core this process may use
    batch_scheduling: bool = False  #: workers under ``SCHED_BATCH``
    move_caller: bool = False  #: the calling thread waits off the cores of pinned workers in flight


@dataclass(frozen=True)
class Backend:
    """What a pool needs from its backend."""

    #: The worker class (its ``wait_any`` and ``broadcast_args`` are used as class methods).
    worker_type: type[Worker]
    #: Starts worker ``index`` without waiting for its env.
    new_worker: Callable[[int], Worker]
    #: How the backend shows in a repr: ``"context='forkserver'"``, ``"backend='ray'"``.
    where: str
    #: The workers run on this machine's cores (process workers; the actors of a private local Ray
    #: instance), which the calling process shares with them; False: they may run elsewhere (a cluster).
    workers_here: bool = True


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


def select_backend(name: str, blob: bytes, n: int, context: str, address: str | None,
                   worker_options: dict | Sequence[dict] | None, host: HostSettings | None = None) -> Backend:
    """The backend ``name`` for ``n`` workers hosting the env of ``blob`` (cloudpickled factory and adapter).

    For ``"ray"`` this connects to (or starts) Ray first. ``host``: the execution policy's host settings
    (process workers only; none by default).

    Raises:
        ValueError: an unknown backend, or Ray's options given to another backend, or host settings
            given to Ray.
    """
    if name not in ("process", "ray"):
        raise ValueError(f"BatchEnv runs the 'process' or 'ray' backend, got {name!r}")
    host = host or HostSettings()
    if name != "ray" and (address is not None or worker_options):
        raise ValueError("address and worker_options are options of backend='ray'")
    if name == "ray" and host != HostSettings():
        raise ValueError("pin_workers, batch_scheduling and move_caller are settings of backend='process' "
                         f"(Ray places and schedules its actors), got {host}")
    if name == "ray":
        from plan_parallel.workers.ray_actor import RayWorker
        from plan_parallel.workers.ray_connect import connect, is_private

        connect(address)
        options = per_worker_options(worker_options, n)
        return Backend(RayWorker, lambda i: RayWorker(i, blob, options[i]), "backend='ray'", is_private())
    from plan_parallel.workers.process import ExternalProcess

    cores = worker_cores(n, host.pin_workers)
    return Backend(ExternalProcess, lambda i: ExternalProcess(i, blob, context, cores[i], host.batch_scheduling,
                                                               host.move_caller), f"context={context!r}")
