"""The checked, owned inputs of a batch of a :class:`~plan_parallel.batch.batch_env.BatchEnv`: its :class:`Job`.

Every input is checked here, before anything is sent, as the inline backend
checks it (the same errors), and the job gets its own copies of the caller's
arrays: the caller may reuse them while chunks wait to be sent.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from plan_parallel.action_inputs import check_actions
from plan_parallel.env.loops import UniformPolicy
from plan_parallel.inputs import check_dt, check_rollout, check_seeds, check_states
from plan_parallel.state import State
from plan_parallel.state.sim_blobs import sim_blobs
from plan_parallel.state.state_batch import StateBatch
from plan_parallel.wire.codec import Job
from plan_parallel.wire.messages import RolloutSpec

__all__ = ["checked_job", "rollout_job", "step_job"]


def _owned(x: Any) -> Any:
    """A private copy of an input array."""
    return x.copy() if isinstance(x, np.ndarray) else x


def _owned_states(states: Sequence[State]) -> Sequence[State]:
    """The batch's own states: a list of the items, or a StateBatch as it is (a value already: the caller
    cannot change it)."""
    return states if isinstance(states, StateBatch) else list(states)


def _owned_actions(actions: Any) -> Any:
    """The batch's own actions: a copy of the array, or a list of the items."""
    return actions.copy() if isinstance(actions, np.ndarray) else list(actions)


def step_job(space: spaces.Space, kind: str, reseedable: bool, current: Callable[[], State], actions: Any,
             states: Sequence[State] | None, dt: Any, seeds: Any) -> Job:
    """A step_batch's job (``current()`` is every item's start when ``states`` is None).

    Raises:
        ValueError/TypeError/StateError: as :meth:`PlanEnv.step_batch`.
    """
    start = None
    if states is None:
        actions = check_actions(space, actions)
        n = len(actions)
        start = current()
    else:
        n = len(states) if hasattr(states, "__len__") else -1
        actions = check_actions(space, actions, n if n >= 0 else None)
        states = _owned_states(check_states(states, kind, len(actions), None))
    dt = check_dt(dt, n)
    seeds = check_seeds(seeds, n, reseedable)
    return Job(n, _owned_actions(actions), states, _owned(dt), _owned(seeds), start)


def checked_job(kind: str, actions: Any, states: Sequence[State], dt: int, validated: bool,
                here: Callable[..., tuple] | None = None, keys: np.ndarray | None = None) -> Job:
    """The job of N canonical actions and N states (see :meth:`BatchEngine.step_batch_checked`, also for ``keys``).

    Unless ``validated``, the states' kind is checked here, as :func:`step_job` checks it
    (a chunk travels with one kind: the workers could not tell another env's state).
    """
    if not validated:
        states = check_states(states, kind, len(actions), None)
    # Workers keep envs for a family whose states have a bytes form (where a restore costs more than matching
    # a state's value to the one its env holds), and step them once an item.
    kept = None if keys is None or dt != 1 or sim_blobs(kind) is None else np.array(keys, dtype=np.int64)
    return Job(len(states), _owned_actions(actions), list(states), dt, None, validated=validated, here=here, keys=kept)


def rollout_job(space: spaces.Space, kind: str, reseedable: bool, current: Callable[[], State],
                states: Sequence[State] | None, actions: Any, dt: Any, horizon: int | None,
                policy: Callable[[Any, np.random.Generator], Any] | None, seeds: Any, return_all: bool) -> Job:
    """A rollout_batch's job (``current()`` is every item's start when ``states`` is None).

    Raises:
        ValueError/TypeError/StateError: as :meth:`PlanEnv.rollout_batch`.
    """
    start = current() if states is None else None
    req = check_rollout(space, kind, None, states, actions, dt, horizon=horizon, policy=policy, seeds=seeds,
                        return_all=return_all, current=start, reseedable=reseedable)
    if req.actions is None and req.policy is None:
        UniformPolicy(space)  # the space has a sampler, or this raises before sending
    acts = req.actions
    if acts is not None:
        acts = acts.copy() if isinstance(acts, np.ndarray) else [list(a) for a in acts]
    spec = RolloutSpec(req.horizon, req.policy_blob, req.return_all)
    states_list = None if req.states is None else _owned_states(req.states)
    return Job(req.n, acts, states_list, _owned(req.dt), _owned(req.seeds), start, spec, req.policy)
