"""Checking what callers pass, and the shape of what they get back.

Every public entry point (inline or parallel) runs its arguments through these
functions *before* anything touches an env or a worker, so bad input fails the
same way on every backend, naming what was expected and what was given.
"""
from __future__ import annotations

import numbers
from typing import Any, NamedTuple, Sequence

import numpy as np
from gymnasium import spaces

from plan_parallel.errors import StateError
from plan_parallel.state import State

__all__ = [
    "StepBatch",
    "check_dt",
    "check_seed",
    "check_actions",
    "check_action",
    "check_states",
    "stack_observations",
]


class StepBatch(NamedTuple):
    """The result of ``step_batch``, in input order.

    Attributes:
        states: the state after each item (a sequence of N :class:`State`).
        observations: stacked observations, shape ``(N, *obs_shape)`` (a dict or
            tuple of such arrays for Dict/Tuple observation spaces).
        rewards: float64 ``(N,)``, each the sum over the item's env steps.
        terminations: bool ``(N,)``.
        truncations: bool ``(N,)``.
        infos: N dicts: the last step's info, plus ``"n_steps"``, the env steps taken.
    """

    states: Sequence[State]
    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: list


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
        return int(dt)
    if isinstance(dt, (list, tuple, np.ndarray)):
        arr = np.asarray(dt)
        if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
            raise TypeError(f"dt must be integers >= 1 with shape ({n},), got dtype {arr.dtype}: {dt!r:.200}")
        if arr.shape != (n,):
            raise ValueError(f"dt must be integers >= 1 with shape ({n},), got shape {arr.shape}: {dt!r:.200}")
        if n and arr.min() < 1:
            raise ValueError(f"dt must be integers >= 1 with shape ({n},), got {dt!r:.200}")
        return arr.astype(np.int64, copy=False)
    raise TypeError(f"dt must be an integer >= 1 or integers >= 1 with shape ({n},), got {type(dt).__name__}: {dt!r:.200}")


def check_seed(seed: Any) -> int | None:
    """Validate a reset seed: None or an int >= 0."""
    if seed is None:
        return None
    if not _is_int(seed) or seed < 0:
        raise TypeError(f"seed must be None or an integer >= 0, got {type(seed).__name__}: {seed!r:.100}")
    return int(seed)


def _discrete_bounds(space: spaces.Space) -> tuple[Any, Any] | None:
    if isinstance(space, spaces.Discrete):
        return int(space.start), int(space.start + space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return space.start, space.start + space.nvec
    if isinstance(space, spaces.MultiBinary):
        return 0, 2
    return None


def check_actions(space: spaces.Space, actions: Any, n: int | None = None) -> Any:
    """Validate a batch of actions against ``space`` and return it in canonical form.

    Discrete, MultiDiscrete and MultiBinary actions become an int64 array of shape
    ``(N, *space.shape)``; Box actions a float array of shape ``(N, *space.shape)``
    (float32/float64 kept as given, integers cast to the space's dtype); other
    spaces a list of N items.

    Args:
        space: the env's action space.
        actions: the batch.
        n: the expected N (from ``states``), or None to take it from ``actions``.

    Raises:
        TypeError: wrong dtype (e.g. floats for a Discrete space).
        ValueError: wrong length or shape, NaN, or values outside the space.
    """
    bounds = _discrete_bounds(space)
    if bounds is not None or isinstance(space, spaces.Box):
        try:
            arr = np.asarray(actions)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"actions must be array-like for {space}, got {type(actions).__name__}: {exc}") from exc
        if arr.dtype == object:
            raise TypeError(f"actions must be numeric for {space}, got an object array: {actions!r:.200}")
        want = (n if n is not None else (arr.shape[0] if arr.ndim else -1),) + tuple(space.shape)
        if arr.shape != want or arr.ndim == 0:
            exp = f"({n if n is not None else 'N'}, {', '.join(map(str, space.shape))})".replace(", )", ",)")
            raise ValueError(f"actions for {space} must have shape {exp}, got shape {arr.shape}")
        if bounds is not None:
            if arr.dtype.kind not in "iu" and arr.dtype != np.bool_:
                raise TypeError(f"actions for {space} must be integers, got dtype {arr.dtype}")
            arr = arr.astype(np.int64, copy=False)
            lo, hi = bounds
            bad = (arr < lo) | (arr >= hi)
            if bad.any():
                i = int(np.argwhere(bad.reshape(len(arr), -1).any(axis=1))[0, 0])
                raise ValueError(f"action {i} is outside {space}: {arr[i]!r}")
            return arr
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"actions for {space} must be numeric, got dtype {arr.dtype}")
        if arr.dtype.kind != "f":
            arr = arr.astype(space.dtype)
        if arr.size:
            flat = arr.reshape(len(arr), -1)
            bad = ~np.isfinite(flat).all(axis=1) | (flat < space.low.ravel()).any(axis=1) | (
                flat > space.high.ravel()
            ).any(axis=1)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(
                    f"action {i} is outside {space} (low={space.low.tolist()}, high={space.high.tolist()}): {arr[i]!r}"
                )
        return arr
    items = list(actions)
    if n is not None and len(items) != n:
        raise ValueError(f"expected {n} actions, got {len(items)}")
    return items


def check_action(space: spaces.Space, action: Any) -> Any:
    """Validate one action (as :func:`check_actions` does for a batch); returns it canonical."""
    bounds = _discrete_bounds(space)
    if bounds is not None or isinstance(space, spaces.Box):
        return check_actions(space, np.asarray(action)[None], 1)[0]
    if not space.contains(action):
        raise ValueError(f"action is outside {space}: {action!r:.200}")
    return action


def check_states(states: Any, kind: str, n: int, validate: Any) -> Sequence[State]:
    """Validate a batch of N states for an env of ``kind``.

    Args:
        states: a sequence of :class:`State`.
        kind: the env's state kind.
        n: the number of actions.
        validate: the env adapter's ``validate`` (full check, used on a mismatch).

    Raises:
        TypeError: ``states`` is not a sequence.
        ValueError: its length is not ``n``.
        StateError: an item is not a state of this env.
    """
    if isinstance(states, (State, np.ndarray, str, bytes)) or not hasattr(states, "__len__"):
        raise TypeError(f"states must be a sequence of {n} State (or None), got {type(states).__name__}")
    if len(states) != n:
        raise ValueError(f"expected {n} states (one per action), got {len(states)}")
    for i, s in enumerate(states):
        if type(s) is not State or (s.kind is not kind and s.kind != kind):
            try:
                _check_kind(s, kind) if validate is None else validate(s)
            except StateError as exc:
                raise StateError(f"states[{i}]: {exc}") from None
    return states


def _check_kind(s: Any, kind: str) -> None:
    """The check a process without the env can make: a State of the same kind."""
    if not isinstance(s, State):
        raise StateError(f"expected a plan_parallel State, got {type(s).__name__}: {s!r:.200}")
    if s.kind != kind:
        raise StateError(
            f"state of kind {s.kind!r} cannot restore an env of kind {kind!r} "
            "(another env family, env class or wrapper stack)"
        )


def stack_observations(space: spaces.Space, obs: list) -> Any:
    """Stack N observations into the batched form of ``space``."""
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        if not obs:
            return np.empty((0,) + tuple(space.shape), dtype=space.dtype)
        return np.array(obs, dtype=space.dtype)
    from gymnasium.vector.utils import concatenate, create_empty_array

    out = create_empty_array(space, n=len(obs))
    return concatenate(space, obs, out)
