"""plan_parallel: roll out many (state, action, dt) transitions of gymnasium envs, exactly and in parallel.

>>> import plan_parallel as pp
>>> env = pp.make("CartPole-v1", backend="inline")
>>> state, obs, info = env.reset(seed=0)
>>> batch = env.step_batch([0, 1], states=[state, state], dt=[1, 4])
"""
from __future__ import annotations

from typing import Any, Callable

from plan_parallel.errors import (
    ClosedError,
    PlanParallelError,
    RemoteTraceback,
    StateError,
    WorkerCrashedError,
    WorkerTimeoutError,
)
from plan_parallel.state import State, get_state, set_state
from plan_parallel.inputs import RolloutBatch, StepBatch
from plan_parallel.env import PlanEnv
from plan_parallel.factory import EnvFactory

__version__ = "0.1.0"

__all__ = [
    "make",
    "make_vec",
    "check_clonable",
    "PlanEnv",
    "EnvFactory",
    "State",
    "StepBatch",
    "RolloutBatch",
    "get_state",
    "set_state",
    "PlanParallelError",
    "StateError",
    "WorkerCrashedError",
    "WorkerTimeoutError",
    "ClosedError",
    "RemoteTraceback",
]

BACKENDS = ("inline", "process", "ray")


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
    **env_kwargs: Any,
):
    """Build an env with the planning API.

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
        **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

    Raises:
        ValueError: unknown backend or bad worker options.
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
    )


def make_vec(env: str | Callable[..., Any], num_envs: int = 1, **kwargs: Any):
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` sub-envs over the planning workers.

    See :func:`plan_parallel.vector.make_vec` for the arguments.
    """
    from plan_parallel.vector import make_vec as _make_vec

    return _make_vec(env, num_envs, **kwargs)


def check_clonable(env: str | Callable[..., Any], **kwargs: Any):
    """Prove or refute bit-identical replay from captured states; see :mod:`plan_parallel.state.check`."""
    from plan_parallel.state.check import check_clonable as _check

    return _check(env, **kwargs)
