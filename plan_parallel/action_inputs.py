"""Checking actions against an env's action space (the part of :mod:`plan_parallel.inputs` about actions).

Array spaces (Discrete, MultiDiscrete, MultiBinary, Box) are checked as arrays and
returned in canonical form; other spaces item by item with ``space.contains``.
"""
from __future__ import annotations

from math import isfinite
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from plan_parallel.state import State

__all__ = ["check_action", "check_action_sequences", "check_actions"]

# Discrete actions checked as a Python list's min and max up to this many values (65,536: a list of 2 MB),
# not with numpy's comparisons, after which the env's steps ran slower (see _FEW_FLOATS; CartPole B=512 inline
# ~2 % faster: docs/measurements.md, *Action checks and Ray chunks*).
_FEW_VALUES = 1 << 16
# Box actions checked as Python floats up to this many values: numpy's float comparisons run AVX-512 kernels
# on this machine, and the env steps after them ran slower (as ALE's frames after a numpy comparison: see
# plan_parallel.state.families.ale_sticky; HalfCheetah B=8 inline 3-4 % faster).
_FEW_FLOATS = 512


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

    Discrete, MultiDiscrete and MultiBinary actions become an array of the space's
    dtype (what ``space.contains`` accepts), shape ``(N, *space.shape)``; Box actions a float array of shape ``(N, *space.shape)``
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
    if _discrete_bounds(space) is not None or isinstance(space, spaces.Box):
        return _check_action_array(space, actions, (n,), ("N",))
    items = list(actions)
    if n is not None and len(items) != n:
        raise ValueError(f"expected {n} actions, got {len(items)}")
    return items


def check_action_sequences(space: spaces.Space, actions: Any, n: int | None, horizon: int | None) -> tuple[Any, int]:
    """Validate N action sequences of T steps each, as :func:`check_actions` validates N actions.

    Args:
        space: the env's action space.
        actions: shape ``(N, T, *action_shape)`` (for non-array spaces: N sequences of T actions).
        n: the expected N, or None to take it from ``actions``.
        horizon: the expected T, or None to take it from ``actions``.

    Returns:
        ``(actions, T)``: the canonical actions (an array of shape ``(N, T, *space.shape)``,
        or a list of N lists) and the horizon.

    Raises:
        TypeError: wrong dtype.
        ValueError: wrong shape, ``horizon`` not matching T, T == 0, or values outside the space.
    """
    if _discrete_bounds(space) is not None or isinstance(space, spaces.Box):
        shape = np.shape(actions) if isinstance(actions, (np.ndarray, list, tuple)) else ()
        if horizon is not None and len(shape) >= 2 and shape[1] != horizon:
            raise ValueError(
                f"horizon={horizon} does not match the actions, whose shape (N, T, *action_shape) is {shape}: "
                f"T={shape[1]}"
            )
        arr = _check_action_array(space, actions, (n, horizon), ("N", "T"))
        t = arr.shape[1]
        seqs: Any = arr
    else:
        seqs = [list(seq) for seq in actions]
        if n is not None and len(seqs) != n:
            raise ValueError(f"expected {n} action sequences, got {len(seqs)}")
        t = horizon if horizon is not None else (len(seqs[0]) if seqs else 1)
        for i, seq in enumerate(seqs):
            if len(seq) != t:
                raise ValueError(f"action sequence {i} has {len(seq)} actions, expected T={t} (horizon)")
    if t < 1:
        raise ValueError(f"actions must hold at least one step per item (T >= 1), got T={t}")
    return seqs, t


def _outside(space: spaces.Space, arr: np.ndarray, bad: Any, single: bool, bounds_text: str = "") -> ValueError:
    """The error naming the first item (or [item, step]) of ``arr`` with a bad value in ``bad`` (its lead shape)."""
    idx = tuple(int(x) for x in np.argwhere(bad)[0])
    if single:
        return ValueError(f"action {arr[idx].tolist()!r} is outside {space}{bounds_text}")
    return ValueError(f"actions[{', '.join(map(str, idx))}] = {arr[idx].tolist()!r} is outside {space}{bounds_text}")


def _check_action_array(
    space: spaces.Space, actions: Any, lead: tuple[int | None, ...], names: tuple[str, ...], single: bool = False
) -> np.ndarray:
    """Canonical actions of an array space, shape ``(*lead, *space.shape)`` (None in ``lead``: any size)."""
    bounds = _discrete_bounds(space)
    try:
        arr = np.asarray(actions)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"actions must be array-like for {space}, got {type(actions).__name__}: {exc}") from exc
    if arr.dtype.kind == "O":
        if single and any(isinstance(a, State) for a in arr.ravel()[:1]):
            raise TypeError(f"an action for {space} must be numeric, got a State: step takes (action, state)")
        hint = ""
        if any(isinstance(a, State) for a in arr.ravel()[:8]):
            hint = " of State: step_batch takes (actions, states), rollout_batch takes (states, actions)"
        raise TypeError(f"actions must be numeric for {space}, got an object array{hint}: {actions!r:.200}")
    k = len(lead)
    shape = tuple(space.shape or ())
    if arr.shape == (0,) and isinstance(actions, (list, tuple)):
        # An empty list has no dtype nor trailing shape of its own.
        inner = tuple(d if d is not None else 0 for d in lead[1:])
        arr = np.empty((0, *inner, *shape), dtype=np.int64 if bounds is not None else space.dtype)
    if k == 1 and lead[0] is not None:
        want: tuple[int, ...] = cast(tuple[int], lead)
    else:
        want = tuple(d if d is not None else (arr.shape[j] if arr.ndim > j else -1) for j, d in enumerate(lead))
    if arr.shape != want + shape:
        if single:
            raise ValueError(f"an action for {space} must have shape {shape}, got shape {arr.shape[1:]}: {actions[0]!r:.200}")
        dims = [str(d) if d is not None else names[j] for j, d in enumerate(lead)] + [str(d) for d in shape]
        exp = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
        raise ValueError(f"actions for {space} must have shape {exp}, got shape {arr.shape}")

    if bounds is not None:
        if arr.dtype.kind not in "iu" and arr.dtype != np.bool_:
            raise TypeError(f"{'an action' if single else 'actions'} for {space} must be integers, got dtype {arr.dtype}")
        lo, hi = bounds
        if type(lo) is int and arr.size <= _FEW_VALUES:  # Python's min and max of the values
            values = arr.ravel().tolist()
            inside = not values or (lo <= min(values) and max(values) < hi)
        else:
            inside = not ((arr < lo) | (arr >= hi)).any()
        if not inside:
            bad = (arr < lo) | (arr >= hi)
            raise _outside(space, arr, bad.reshape(arr.shape[:k] + (-1,)).any(axis=-1), single)
        return arr.astype(space.dtype, copy=False)  # the dtype space.contains accepts
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{'an action' if single else 'actions'} for {space} must be numeric, got dtype {arr.dtype}")
    if arr.dtype.kind != "f":
        arr = arr.astype(space.dtype)
    box = cast(spaces.Box, space)  # the array space without discrete bounds
    if 0 < arr.size <= _FEW_FLOATS and box.low.dtype.kind == "f" and _in_box(arr.ravel().tolist(), box):
        return arr
    if arr.size:
        flat = arr.reshape(arr.shape[:k] + (-1,))
        bad = ~np.isfinite(flat).all(axis=-1) | (flat < box.low.ravel()).any(axis=-1) | (
            flat > box.high.ravel()
        ).any(axis=-1)
        if bad.any():
            raise _outside(space, arr, bad, single, f" (low={box.low.tolist()}, high={box.high.tolist()})")
    return arr


def check_action(space: spaces.Space, action: Any) -> Any:
    """Validate one action (as :func:`check_actions` does for a batch); returns it canonical."""
    bounds = _discrete_bounds(space)
    if bounds is not None or isinstance(space, spaces.Box):
        return _check_action_array(space, np.asarray(action)[None], (1,), ("N",), single=True)[0]
    if not space.contains(action):
        raise ValueError(f"action is outside {space}: {action!r:.200}")
    return action


def _in_box(values: list[float], box: spaces.Box) -> bool:
    """Whether every one of ``values`` (the actions flattened, one after the other) is finite and within the box's
    bounds, in C loops over Python floats: a sum, and each dimension's min and max (``check_actions`` of 64
    HalfCheetah actions: 33 us, against 71 with a comparison of each value in Python). False may also mean a
    sum too big for a float: the caller checks again value by value."""
    if not isfinite(sum(values)):  # a NaN or an infinity anywhere makes the sum one
        return False
    lows, highs = box.low.ravel().tolist(), box.high.ravel().tolist()
    d = len(lows)
    return all(lo <= min(values[j::d]) and max(values[j::d]) <= hi for j, (lo, hi) in enumerate(zip(lows, highs)))
