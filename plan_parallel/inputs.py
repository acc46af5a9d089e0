"""Checking what callers pass, and the shape of what they get back (actions: :mod:`plan_parallel.action_inputs`).

Every public entry point (inline or parallel) runs its arguments through these
functions *before* anything touches an env or a worker, so bad input fails the
same way on every backend, naming what was expected and what was given.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import cloudpickle
import numpy as np
from gymnasium import spaces

from plan_parallel.action_inputs import check_action_sequences
from plan_parallel.errors import StateError
from plan_parallel.state import State
from plan_parallel.state.identity import kind_mismatch
from plan_parallel.state.own_rng import SEEDS_REFUSED
from plan_parallel.state.state_batch import StateColumns
from plan_parallel.state.state_value import validate_each

__all__ = ["MAX_DT", "RolloutRequest", "check_dt", "check_horizon", "check_kind", "check_policy", "check_rollout",
           "check_seed", "check_seeds", "check_states"]


class RolloutRequest(NamedTuple):
    """The checked arguments of ``rollout_batch`` (see :func:`check_rollout`).

    Attributes:
        n: the number of items N.
        horizon: the number of steps T (>= 1).
        states: the checked states, or None (every item starts from the current state).
        actions: canonical actions of shape ``(N, T, *action_shape)`` (a list of
            N lists of T actions for non-array spaces), or None (a policy acts).
        dt: an int, or an int64 array of shape ``(N,)``.
        seeds: a uint64 array of shape ``(N,)``, or None.
        policy: the user's policy, or None (given actions, or uniform random actions).
        policy_blob: ``cloudpickle.dumps(policy)`` for shipping, or None.
        return_all: whether every intermediate state and observation is returned.
    """

    n: int
    horizon: int
    states: Sequence[State] | None
    actions: Any
    dt: int | np.ndarray
    seeds: np.ndarray | None
    policy: Callable[[Any, np.random.Generator], Any] | None
    policy_blob: bytes | None
    return_all: bool


MAX_DT = 2**62  # far beyond any episode, and int64 on every backend


def _is_int(x: Any) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_dt(dt: Any, n: int) -> int | np.ndarray:
    """Validate ``dt``: an int >= 1, or integers >= 1 of shape (n,).

    Returns:
        an ``int`` when one dt applies to every item, else an int64 array.

    Raises:
        TypeError: not integers (floats, bools, NaN, objects).
        ValueError: values < 1, or the wrong shape.
    """
    if _is_int(dt):
        if dt < 1:
            raise ValueError(f"dt must be an integer >= 1 (or integers >= 1 with shape ({n},)), got {dt!r}")
        if dt > MAX_DT:
            raise ValueError(f"dt must be at most 2**62 (far beyond any episode), got {dt!r}")
        return int(dt)
    if isinstance(dt, (list, tuple, np.ndarray)):
        arr = np.asarray(dt)
        if arr.shape == (0,) and isinstance(dt, (list, tuple)):
            arr = arr.astype(np.int64)  # an empty list has no dtype of its own
        if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
            raise TypeError(f"dt must be integers >= 1 with shape ({n},), got dtype {arr.dtype}: {dt!r:.200}")
        if arr.shape != (n,):
            raise ValueError(f"dt must be integers >= 1 with shape ({n},), got shape {arr.shape}: {dt!r:.200}")
        if n and arr.min() < 1:
            raise ValueError(f"dt must be integers >= 1 with shape ({n},), got {dt!r:.200}")
        if n and arr.max() > MAX_DT:
            raise ValueError(f"dt must be at most 2**62 (far beyond any episode), got {dt!r:.200}")
        return arr.astype(np.int64, copy=False)
    raise TypeError(f"dt must be an integer >= 1 or integers >= 1 with shape ({n},), got {type(dt).__name__}: {dt!r:.200}")


def check_seed(seed: Any) -> int | None:
    """Validate a reset seed: None or an int >= 0."""
    if seed is None:
        return None
    if not _is_int(seed) or seed < 0:
        raise TypeError(f"seed must be None or an integer >= 0, got {type(seed).__name__}: {seed!r:.100}")
    return int(seed)


def check_seeds(seeds: Any, n: int | None, reseedable: bool = True) -> np.ndarray | None:
    """Validate per-item seeds: None, or integers >= 0 with shape (n,).

    Args:
        seeds: the seeds.
        n: the batch size, or None to take it from ``seeds``.
        reseedable: whether the env's adapter can reseed its RNG
            (:attr:`~plan_parallel.state.Adapter.reseedable`).

    Returns:
        None, or a uint64 array of shape ``(n,)``.

    Raises:
        TypeError: not a sequence of integers (a scalar, floats, bools).
        ValueError: the wrong shape, or values < 0.
        StateError: seeds were given but the env cannot be reseeded.
    """
    if seeds is None:
        return None
    want = f"({'N' if n is None else n},)"
    if not isinstance(seeds, (list, tuple, np.ndarray)):
        raise TypeError(
            f"seeds must be None or integers >= 0 with shape {want}, got {type(seeds).__name__}: {seeds!r:.200}"
        )
    arr = np.asarray(seeds)
    if arr.size == 0 and arr.ndim == 1:
        arr = arr.astype(np.uint64)  # np.asarray([]) is float64
    if arr.dtype.kind not in "iu":
        raise TypeError(f"seeds must be None or integers >= 0 with shape {want}, got dtype {arr.dtype}: {seeds!r:.200}")
    if arr.ndim != 1 or (n is not None and arr.shape != (n,)):
        raise ValueError(f"seeds must be None or integers >= 0 with shape {want}, got shape {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"seeds must be None or integers >= 0 with shape {want}, got {seeds!r:.200}")
    if not reseedable:
        raise StateError(SEEDS_REFUSED)
    return arr.astype(np.uint64)


def check_horizon(horizon: Any) -> int | None:
    """Validate a rollout horizon: None or an int >= 1."""
    if horizon is None:
        return None
    if not _is_int(horizon) or horizon < 1:
        raise ValueError(f"horizon must be None or an integer >= 1, got {type(horizon).__name__}: {horizon!r:.100}")
    return int(horizon)


def check_policy(policy: Any) -> bytes:
    """Validate a policy: a callable ``(obs, rng) -> action`` that cloudpickle can ship to the workers.

    Returns:
        ``cloudpickle.dumps(policy)``.

    Raises:
        TypeError: not callable, or not picklable.
    """
    if not callable(policy):
        raise TypeError(f"policy must be a callable (obs, rng) -> action, got {type(policy).__name__}: {policy!r:.100}")
    try:
        return cloudpickle.dumps(policy)
    except Exception as exc:
        raise TypeError(
            f"policy must be picklable with cloudpickle (it runs in the workers), but pickling {policy!r:.100} "
            f"failed: {type(exc).__name__}: {exc}"
        ) from exc


def check_states(states: Any, kind: str, n: int | None, validate: Any, checker: Any = None) -> Sequence[State]:
    """Validate a batch of N states for an env of ``kind``.

    Args:
        states: a sequence of :class:`State`.
        kind: the env's state kind.
        n: the number of actions, or None when ``states`` fixes N.
        validate: the env adapter's ``validate`` (full check, used on a mismatch).
        checker: the adapter's token, with ``validate`` (see :func:`~plan_parallel.state.state_value.validate_each`).

    Raises:
        TypeError: ``states`` is not a sequence.
        ValueError: its length is not ``n``.
        StateError: an item is not a state of this env.
    """
    if isinstance(states, (State, np.ndarray, str, bytes)) or not hasattr(states, "__len__"):
        hint = ""
        if isinstance(states, np.ndarray):
            hint = " (step_batch takes (actions, states), rollout_batch takes (states, actions))"
        raise TypeError(
            f"states must be a sequence of {'N' if n is None else n} State (or None), got {type(states).__name__}{hint}"
        )
    if n is not None and len(states) != n:
        raise ValueError(f"expected {n} states (one per action), got {len(states)}")
    columns = getattr(states, "columns", None)  # a StateBatch whose states are columns: all of one kind
    if validate is None and type(columns) is StateColumns and columns.kind == kind:
        return states
    # The full check (kind and a cheap look at the simulator state) where the adapter is
    # at hand; the kind alone in a process without the env (its workers check the rest).
    if validate is None:
        for s in states:  # the common case in one plain loop (~0.1 us a state); the messages below
            if type(s) is not State or s.kind != kind:
                break
        else:
            return states
    if validate is None:  # the kind alone: not the check a checker token stands for
        validate_each(states, lambda s: check_kind(s, kind))
    else:
        validate_each(states, validate, checker=checker)
    return states


def check_rollout(
    space: spaces.Space,
    kind: str,
    validate: Any,
    states: Any,
    actions: Any,
    dt: Any,
    *,
    horizon: Any = None,
    policy: Any = None,
    seeds: Any = None,
    return_all: Any = False,
    current: State | None = None,
    reseedable: bool = True,
) -> RolloutRequest:
    """Validate the arguments of ``rollout_batch`` (see :meth:`plan_parallel.PlanEnv.rollout_batch`).

    N comes from ``states``; with ``states=None`` (every item starts from the
    current state), from ``actions``, else from ``seeds``. T comes from
    ``actions`` (shape ``(N, T, *action_shape)``), else from ``horizon``.

    Args:
        space: the env's action space.
        kind: the env's state kind.
        validate: the env adapter's ``validate``, or None where no adapter is at hand.
        states: as given by the caller.
        actions: as given by the caller.
        dt: as given by the caller.
        horizon: as given by the caller.
        policy: as given by the caller.
        seeds: as given by the caller.
        return_all: as given by the caller.
        current: the env's current state, used when ``states`` is None (a policy
            needs its observation); the caller has checked that it exists.
        reseedable: whether the env's RNG can be reseeded (for ``seeds``).

    Raises:
        TypeError: wrong types (states, dtypes, seeds, an uncallable or unpicklable policy).
        ValueError: shapes or lengths that disagree, ``horizon`` missing or not matching
            T, both ``actions`` and ``policy`` given, values outside the action space.
        StateError: a state of another env; a policy without the start observation it
            needs; seeds for an env that cannot be reseeded.
    """
    horizon = check_horizon(horizon)
    if actions is None and horizon is None:
        raise ValueError("horizon is required when actions is None (a policy, or uniform random actions, "
                         "then acts for horizon steps)")
    if actions is not None and policy is not None:
        raise ValueError("pass actions or policy, not both (policy acts only when actions is None)")
    if not isinstance(return_all, (bool, np.bool_)):
        raise TypeError(f"return_all must be a bool, got {type(return_all).__name__}: {return_all!r:.100}")
    n: int | None = None
    if states is not None:
        states = check_states(states, kind, None, validate)
        n = len(states)
    if actions is not None:
        actions, horizon = check_action_sequences(space, actions, n, horizon)
        n = len(actions)
    seeds = check_seeds(seeds, n, reseedable)
    if n is None:
        if seeds is None:
            raise ValueError("with states=None, pass actions or seeds to fix the batch size N "
                             "(states=None starts every item from the current state)")
        n = len(seeds)
    dt = check_dt(dt, n)
    blob = None
    if policy is not None:
        blob = check_policy(policy)
        starts = states if states is not None else [current] * min(n, 1)
        for i, s in enumerate(starts):
            if s is not None and s.obs is None:
                where = f"states[{i}]" if states is not None else "the current state"
                raise StateError(f"{where} carries no observation, and the policy needs one to choose the first "
                                 "action: use states returned by reset, step, step_batch or rollout_batch")
    assert horizon is not None
    return RolloutRequest(n, horizon, states, actions, dt, seeds, policy, blob, bool(return_all))


def check_kind(s: Any, kind: str) -> None:
    """The check a process without the env can make: a State of the same kind."""
    if not isinstance(s, State):
        raise StateError(f"expected a plan_parallel State, got {type(s).__name__}: {s!r:.200}")
    if s.kind != kind:
        raise StateError(kind_mismatch(s.kind, kind))
