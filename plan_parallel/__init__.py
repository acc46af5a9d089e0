"""plan_parallel: roll out many (state, action, dt) transitions of gymnasium envs, exactly and in parallel.

>>> import plan_parallel as pp
>>> env = pp.make("CartPole-v1", backend="inline")
>>> state, obs, info = env.reset(seed=0)
>>> batch = env.step_batch([0, 1], states=[state, state], dt=[1, 4])

Where to start: the functions documented below, and the classes named here, each with its own
``help()`` (e.g. ``help(pp.PlanEnv)``).

- :func:`make`: an env with the planning API (``reset`` returns ``(state, obs, info)``, ``step`` six
  values, ``step_batch`` / ``rollout_batch`` many items): a :class:`PlanEnv` (``backend="inline"``) or a
  :class:`BatchEnv` (``"process"``, ``"ray"``; ``BACKENDS`` lists them), built from an env id or an
  :class:`EnvFactory`. Both provide :class:`PlanningEnv`, the Protocol to type code that runs on any backend.
- :func:`make_vec`: a ``gymnasium.vector.VectorEnv`` over the same workers (``PlanVectorEnv``).
- :class:`ExecutionPolicy`: where and how fast batches run (worker count, placement, opt-in host settings).
- :func:`check_clonable`: prove or refute that an env's states replay bit-identically (run it on your own env).
- :func:`get_state` / :func:`set_state`: the complete state of any gymnasium env, without ``make``.
- What the calls return: :class:`State` (one saved state, a value), :class:`StateBatch` (many, as columns),
  :class:`StepBatch` and :class:`RolloutBatch`.
- Planners: ``plan_parallel.planners`` (``MCTS``, ``BeamSearch``, ``RandomShooting``, ``run_episode``), on
  the public API only.
- Errors: :class:`PlanParallelError`, the base of :class:`StateError` (a state that cannot be captured or
  restored), :class:`ClosedError`, :class:`WorkerCrashedError`, :class:`WorkerTimeoutError` and
  :class:`WaitTimeoutError`; an env's own error from a worker has a :class:`RemoteTraceback` as its
  ``__cause__``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gymnasium.vector import AutoresetMode

# The classes are re-exported explicitly ("X as X"): names of the package, not listed in __all__, so that
# help(plan_parallel) stays the map above and the functions; each class has its own help().
from plan_parallel.batch import BatchEnv as BatchEnv
from plan_parallel.batch.policy import ExecutionPolicy as ExecutionPolicy
from plan_parallel.build import BACKENDS, make
from plan_parallel.env.plan_env import PlanEnv as PlanEnv
from plan_parallel.errors import ClosedError as ClosedError
from plan_parallel.errors import PlanParallelError as PlanParallelError
from plan_parallel.errors import RemoteTraceback as RemoteTraceback
from plan_parallel.errors import StateError as StateError
from plan_parallel.errors import WaitTimeoutError as WaitTimeoutError
from plan_parallel.errors import WorkerCrashedError as WorkerCrashedError
from plan_parallel.errors import WorkerTimeoutError as WorkerTimeoutError
from plan_parallel.factory import EnvFactory as EnvFactory
from plan_parallel.results import PlanningEnv as PlanningEnv
from plan_parallel.results import RolloutBatch as RolloutBatch
from plan_parallel.results import StepBatch as StepBatch
from plan_parallel.state import State as State
from plan_parallel.state import StateBatch as StateBatch
from plan_parallel.state import get_state, set_state
from plan_parallel.state.check import check_clonable

if TYPE_CHECKING:
    from plan_parallel.vector import PlanVectorEnv

__version__ = "0.1.0"  # the one place the version is written: setup.cfg reads it (attr:); CHANGELOG.md

__all__ = ["BACKENDS", "check_clonable", "get_state", "make", "make_vec", "set_state"]

def make_vec(
    env: str | Callable[..., Any] | Sequence[Callable[[], Any]] | None = None,
    num_envs: int | None = None,
    n_workers: int | None = None,
    backend: str = "process",
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    *,
    env_fns: Sequence[Callable[[], Any]] | None = None,
    observation_mode: str = "same",
    recover: bool = True,
    copy: bool = True,
    timeout: float | None = None,
    max_restarts: int | None = None,
    context: str | None = None,
    adapter: Any = None,
    small_batch_inline: bool | None = None,
    address: str | None = None,
    worker_options: dict | None = None,
    pin_workers: bool | None = None,
    execution: ExecutionPolicy | None = None,
    **env_kwargs: Any,
) -> PlanVectorEnv:
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` sub-envs stepped by planning workers, with
    ``get_states`` / ``set_states``.

    Args:
        env: a gymnasium env id, a callable returning a ``gymnasium.Env``, or a list of such callables,
            one per sub-env (as ``env_fns``).
        num_envs: the number of sub-envs (any N >= 1, independent of ``n_workers``; default 1, or
            ``len(env_fns)``).
        n_workers: as :func:`make`.
        backend: as :func:`make`.
        autoreset_mode: gymnasium's ``AutoresetMode`` (``NEXT_STEP``, the default, ``SAME_STEP`` or
            ``DISABLED``) or its string value.
        env_fns: gymnasium's list of sub-env constructors (instead of ``env``).
        observation_mode: ``"same"`` (every sub-env's observation space equal) or ``"different"``
            (equal shape and dtype), as ``SyncVectorEnv``'s.
        recover: replace a worker that dies and replay its items; False: a death raises
            :class:`WorkerCrashedError`.
        copy: return a fresh observation array every call (as ``SyncVectorEnv``'s ``copy``).
        timeout: as :func:`make`.
        max_restarts: dead workers replaced over the env's life (default 3 with ``recover``).
        context: as :func:`make`.
        adapter: as :func:`make`.
        small_batch_inline: as :func:`make`.
        address: as :func:`make`.
        worker_options: as :func:`make`.
        pin_workers: as :func:`make` (the same default).
        execution: as :func:`make` (the same default).
        **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

    The full description is :class:`plan_parallel.vector.PlanVectorEnv`'s.

    Raises:
        ValueError, TypeError: bad arguments.
        StateError: the env's state cannot be captured.
        RuntimeError: the ``env_fns`` sub-envs' spaces do not agree (gymnasium's message).
    """
    from plan_parallel.vector import make_vec as vector_make_vec  # loads the vector env when first asked for

    return vector_make_vec(
        env, num_envs, env_fns=env_fns, n_workers=n_workers, backend=backend, autoreset_mode=autoreset_mode,
        observation_mode=observation_mode, recover=recover, copy=copy, timeout=timeout, max_restarts=max_restarts,
        context=context, adapter=adapter, small_batch_inline=small_batch_inline, address=address,
        worker_options=worker_options, pin_workers=pin_workers, execution=execution, **env_kwargs,
    )
