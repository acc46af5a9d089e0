"""plan_parallel: roll out many (state, action, dt) transitions of gymnasium envs, exactly and in parallel.

>>> import plan_parallel as pp
>>> env = pp.make("CartPole-v1", backend="inline")
>>> state, obs, info = env.reset(seed=0)
>>> batch = env.step_batch([0, 1], states=[state, state], dt=[1, 4])
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plan_parallel.batch import BatchEnv
from plan_parallel.build import BACKENDS, make
from plan_parallel.env.plan_env import PlanEnv
from plan_parallel.errors import (
    ClosedError,
    PlanParallelError,
    RemoteTraceback,
    StateError,
    WaitTimeoutError,
    WorkerCrashedError,
    WorkerTimeoutError,
)
from plan_parallel.factory import EnvFactory
from plan_parallel.results import RolloutBatch, StepBatch
from plan_parallel.state import State, StateBatch, get_state, set_state

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "BatchEnv",
    "ClosedError",
    "EnvFactory",
    "PlanEnv",
    "PlanParallelError",
    "RemoteTraceback",
    "RolloutBatch",
    "State",
    "StateBatch",
    "StateError",
    "StepBatch",
    "WaitTimeoutError",
    "WorkerCrashedError",
    "WorkerTimeoutError",
    "check_clonable",
    "get_state",
    "make",
    "make_vec",
    "set_state",
]

def make_vec(env: Any = None, num_envs: int | None = None, **kwargs: Any):
    """A ``gymnasium.vector.VectorEnv`` of ``num_envs`` sub-envs over the planning workers.

    ``env``: an env id, an env callable, or a list of callables (``env_fns=``), one per sub-env.
    See :func:`plan_parallel.vector.make_vec` for the arguments.
    """
    from plan_parallel.vector.vector_env import make_vec as _make_vec

    return _make_vec(env, num_envs, **kwargs)


def check_clonable(env: str | Callable[..., Any], **kwargs: Any):
    """Prove or refute bit-identical replay from captured states; see :mod:`plan_parallel.state.check`."""
    from plan_parallel.state.check import check_clonable as _check

    return _check(env, **kwargs)
