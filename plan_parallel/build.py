"""``make``: build an env with the planning API on the chosen backend."""
from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

from plan_parallel.batch.policy import ExecutionPolicy
from plan_parallel.env.plan_env import PlanEnv
from plan_parallel.factory import EnvFactory
from plan_parallel.results import PlanningEnv
from plan_parallel.state.identity import env_creator
from plan_parallel.state.restore_probe import check_one_step
from plan_parallel.workers.cores import check_pin_workers

if TYPE_CHECKING:
    from plan_parallel.batch import BatchEnv

__all__ = ["BACKENDS", "check_env_kwargs", "make"]


#: The backends :func:`make` takes: ``"inline"`` (this process), ``"process"`` (worker processes, the default)
#: and ``"ray"`` (Ray actors, on this machine or a cluster).
BACKENDS = ("inline", "process", "ray")


@overload
def make(env: str | Callable[..., Any], *, backend: Literal["inline"], n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool | None = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., execution: ExecutionPolicy | None = ..., check: bool = ...,
         **env_kwargs: Any) -> PlanEnv: ...


@overload
def make(env: str | Callable[..., Any], *, backend: Literal["process", "ray"] = ..., n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool | None = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., execution: ExecutionPolicy | None = ..., check: bool = ...,
         **env_kwargs: Any) -> BatchEnv: ...


@overload
def make(env: str | Callable[..., Any], *, backend: str = ..., n_workers: int | None = ...,
         timeout: float | None = ..., max_restarts: int = ..., context: str | None = ..., adapter: Any = ...,
         small_batch_inline: bool | None = ..., address: str | None = ..., worker_options: dict | list[dict] | None = ...,
         pin_workers: bool | None = ..., execution: ExecutionPolicy | None = ..., check: bool = ...,
         **env_kwargs: Any) -> PlanningEnv: ...


def make(
    env: str | Callable[..., Any],
    *,
    backend: str = "process",
    n_workers: int | None = None,
    timeout: float | None = None,
    max_restarts: int = 3,
    context: str | None = None,
    adapter: Any = None,
    small_batch_inline: bool | None = None,
    address: str | None = None,
    worker_options: dict | list[dict] | None = None,
    pin_workers: bool | None = None,
    execution: ExecutionPolicy | None = None,
    check: bool = False,
    **env_kwargs: Any,
) -> PlanningEnv:
    """Build an env with the planning API: a :class:`PlanEnv` (inline) or a :class:`BatchEnv`.

    Not gymnasium's tuples: every call hands back the state first (plangym's order)::

        state, obs, info = env.reset(seed=0)                                    # not (obs, info)
        state, obs, reward, terminated, truncated, info = env.step(action)    # six values, not five
        batch = env.step_batch(actions, states=[state] * len(actions))        # a StepBatch of named fields

    Args:
        env: a gymnasium env id, or a callable returning a ``gymnasium.Env``
            (called with ``env_kwargs``).
        backend: ``"inline"`` (this process; the reference), ``"process"``
            (worker processes on this machine, the default) or ``"ray"``.
        n_workers: worker count for the parallel backends (default: the CPUs this process may use: its
            affinity, its container's CPU quota, or ``PLAN_PARALLEL_WORKERS``); ignored by ``"inline"``.
        timeout: seconds a worker call may take (None: no limit).
        max_restarts: how many times dead workers are replaced over the env's life.
        context: multiprocessing start method (``"fork"``, ``"spawn"``, ``"forkserver"``).
        adapter: an :class:`~plan_parallel.state.Adapter` class overriding the registered one.
        small_batch_inline: (process and ray backends) False: every batch on the workers (turn it
            off when env code may crash or hang the calling process); by default a batch the workers would
            save less than ~1 ms runs in this process (``execution`` says how).
        address: (ray) the cluster to join: ``"auto"``, ``"host:port"`` or
            ``"ray://host:port"``. None: the connection this process already has, or
            else a private local Ray instance started quietly (never someone else's).
        worker_options: (ray) Ray actor options for every worker, e.g.
            ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}``, or a list of one dict per
            worker, e.g. ``[{"resources": {"head": 0.01}}, {"resources": {"node2": 0.01}}]``
            to place each worker on a given node.
        pin_workers: (process) keep worker i on the i-th core this process may use (default: no).
        execution: an :class:`~plan_parallel.ExecutionPolicy`: where and how fast batches run (the
            worker count, where a batch runs, opt-in host settings such as pinning); the options
            ``n_workers``, ``small_batch_inline`` and ``pin_workers`` are its shorthands. The
            default changes nothing outside the library; ``ExecutionPolicy.tuned()`` is the tuned profile.
        check: before anything starts, build one env here and replay one step from a restored
            state against the live step (a cheap check of your own env's ``get_state``;
            :func:`plan_parallel.check_clonable` is the thorough one).
        **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

    Raises:
        ValueError: unknown backend or bad worker options.
        TypeError: pin_workers not True, False or None; an env kwarg the env does not take
            (a misspelt option of ``make``: the message names the nearest one).
        StateError: no adapter can capture the env's state exactly; with ``check``, the replayed
            step differs (the message names the env's attributes the restore left behind).
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
    if execution is not None and not isinstance(execution, ExecutionPolicy):
        raise TypeError(f"execution must be an ExecutionPolicy or None, got {type(execution).__name__}")
    factory = EnvFactory(env, env_kwargs)
    check_env_kwargs(factory)
    if check is not False:
        if check is not True:
            raise TypeError(f"check must be True or False, got {check!r}")
        check_one_step(factory, adapter)
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
        execution=execution,
    )


# What gymnasium.make takes itself, besides the env creator's arguments.
_GYM_MAKE_TAKES = frozenset({"max_episode_steps", "disable_env_checker", "render_mode"})


def _keywords(creator: Any) -> frozenset[str] | None:
    """The keyword names ``creator`` takes, or None when it takes any (``**kwargs``) or cannot be inspected."""
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def check_env_kwargs(factory: EnvFactory) -> None:
    """Refuse, here and before any worker starts, an env kwarg the env cannot take.

    An env id takes its entry point's arguments and ``gymnasium.make``'s own; a
    callable takes its parameters. A kwarg close to one of ``make``'s options is
    a misspelt option, and the message names it; one the env does take is the
    env's, however close it is.

    Raises:
        TypeError: a kwarg the env does not take.
    """
    if factory.spec is not None:
        creator = env_creator(factory.spec)
        takes = _keywords(creator)
        takes = None if takes is None else takes | _GYM_MAKE_TAKES
    else:
        creator = factory.env
        takes = _keywords(creator)
    if takes is None:
        return
    options = [name for name in inspect.signature(make).parameters if name not in ("env", "env_kwargs")]
    for key in factory.env_kwargs:
        if key in takes:
            continue
        owner = getattr(creator, "__qualname__", type(creator).__name__)
        owner = f"{factory.name} ({owner})" if factory.spec is not None else owner
        near = difflib.get_close_matches(key, options, n=1, cutoff=0.75)
        if near:
            raise TypeError(f"make() got an unexpected keyword argument {key!r}; did you mean {near[0]}=? "
                            f"(not an argument of {owner} either)")
        near = difflib.get_close_matches(key, sorted(takes), n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]}=?" if near else ""
        raise TypeError(f"{owner} got an unexpected keyword argument {key!r}{hint} "
                        f"(it takes: {', '.join(sorted(takes)) or 'nothing'})")
