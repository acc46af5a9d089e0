"""``make``: build an env with the planning API on the chosen backend."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

from plan_parallel.env.plan_env import PlanEnv
from plan_parallel.factory import EnvFactory
from plan_parallel.workers.cores import check_pin_workers

if TYPE_CHECKING:
    from plan_parallel.batch import BatchEnv

__all__ = ["BACKENDS", "make"]


BACKENDS = ("inline", "process", "ray")


@overload
def make(env: str | Callable[..., Any], *, backend: Literal["inline"], n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., **env_kwargs: Any) -> PlanEnv: ...


@overload
def make(env: str | Callable[..., Any], *, backend: Literal["process", "ray"] = ..., n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., **env_kwargs: Any) -> BatchEnv: ...


@overload
def make(env: str | Callable[..., Any], *, backend: str = ..., n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., **env_kwargs: Any) -> PlanEnv | BatchEnv: ...


def make(
    env: str | Callable[..., Any],
    *,
    backend: str = "process",
    n_workers: int | None = None,
    timeout: float | None = None,
    max_restarts: int = 3,
    context: str | None = None,
    adapter: Any = None,
    small_batch_inline: bool = True,
    address: str | None = None,
    worker_options: dict | list[dict] | None = None,
    pin_workers: bool | None = None,
    **env_kwargs: Any,
) -> PlanEnv | BatchEnv:
    """Build an env with the planning API: a :class:`PlanEnv` (inline) or a :class:`BatchEnv`.

    Args:
        env: a gymnasium env id, or a callable returning a ``gymnasium.Env``
            (called with ``env_kwargs``).
        backend: ``"inline"`` (this process; the reference), ``"process"``
            (worker processes on this machine, the default) or ``"ray"``.
        n_workers: worker count for the parallel backends (default: CPU count);
            ignored by ``"inline"``.
        timeout: seconds a worker call may take (None: no limit).
        max_restarts: how many times dead workers are replaced over the env's life.
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``).
        adapter: an :class:`~plan_parallel.state.Adapter` class overriding the registered one.
        small_batch_inline: (process and ray backends) run batches too small to gain
            from workers in this process; turn off when env code may crash or hang it.
        address: (ray) the cluster to join: ``"auto"``, ``"host:port"`` or
            ``"ray://host:port"``. None: the connection this process already has, or
            else a private local Ray instance started quietly (never someone else's).
        worker_options: (ray) Ray actor options for every worker, e.g.
            ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}``, or a list of one dict per
            worker, e.g. ``[{"resources": {"head": 0.01}}, {"resources": {"node2": 0.01}}]``
            to place each worker on a given node.
        pin_workers: (process) keep worker i on the i-th core this process may use. None
            (default): pinned when the workers are as many as those cores (Linux).
        **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

    Raises:
        ValueError: unknown backend or bad worker options.
        TypeError: pin_workers not True, False or None.
        StateError: no adapter can capture the env's state exactly.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if n_workers is not None and (not isinstance(n_workers, int) or isinstance(n_workers, bool) or n_workers < 1):
        raise ValueError(f"n_workers must be an integer >= 1 or None, got {n_workers!r}")
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
    check_pin_workers(pin_workers)  # on every backend, as the options above
    factory = EnvFactory(env, env_kwargs)
    if backend == "inline":
        return PlanEnv(factory, adapter=adapter)
    from plan_parallel.batch import BatchEnv

    return BatchEnv(
        factory,
        backend=backend,
        n_workers=n_workers,
        timeout=timeout,
        max_restarts=max_restarts,
        context=context,
        adapter=adapter,
        small_batch_inline=small_batch_inline,
        address=address,
        worker_options=worker_options,
        pin_workers=pin_workers,
    )
