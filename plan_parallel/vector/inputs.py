"""Checking what callers pass to :class:`~plan_parallel.vector.PlanVectorEnv`, before anything runs.

Messages follow gymnasium's vector envs where gymnasium checks the same thing
(``reset_mask``, seed lists), so code written against SyncVectorEnv sees the
same errors.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space, iterate

from plan_parallel.action_inputs import check_actions
from plan_parallel.inputs import check_seed

__all__ = [
    "check_autoreset_flags",
    "check_indices",
    "check_observation_mode",
    "check_plan_options",
    "check_reset_options",
    "check_reset_seeds",
    "check_vector_actions",
    "is_array_space",
    "is_int",
]

_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_array_space(space: spaces.Space) -> bool:
    """Whether a batch of this space is one ndarray (Box, Discrete, MultiDiscrete, MultiBinary)."""
    return isinstance(space, _ARRAY_SPACES)


def check_indices(indices: Any, n: int) -> np.ndarray:
    """Sub-env ids: None (all n), an int, or a sequence of unique ints in [0, n); as int64.

    Raises:
        TypeError: not ints.
        ValueError: out of range or repeated.
    """
    if indices is None:
        return np.arange(n)
    if is_int(indices):
        indices = [indices]
    arr = np.asarray(indices)
    if arr.size == 0 and arr.ndim == 1:
        arr = arr.astype(np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(f"indices must be None or a sequence of sub-env ids (ints), got {indices!r:.200}")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        raise ValueError(f"indices must be in [0, {n}), got {arr.tolist()}")
    if len(np.unique(arr)) != len(arr):
        raise ValueError(f"indices must not repeat, got {arr.tolist()}")
    return arr.astype(np.int64)


def check_vector_actions(single: spaces.Space, actions: Any, k: int, batched: dict[int, spaces.Space]) -> Any:
    """k actions of the single action space, in the batched form gymnasium uses.

    Returns:
        an array of shape ``(k, *single.shape)`` for array spaces (as
        :func:`~plan_parallel.action_inputs.check_actions`), else a list of k actions.

    Args:
        batched: a cache of ``batch_space(single, k)`` by k.

    Raises:
        TypeError: wrong dtype, or a scalar where a batch is due (as gymnasium's ``iterate``).
        ValueError: not k actions, or an action outside the space.
    """
    if is_array_space(single):
        if np.ndim(actions) == 0:
            raise TypeError(f"actions must be a batch of {k} actions of {single}, got a scalar {actions!r:.100} "
                            "(unable to iterate over it)")
        return check_actions(single, actions, k)
    space = batched.get(k)
    if space is None:
        space = batched[k] = batch_space(single, k)
    try:
        items = list(iterate(space, actions))
    except TypeError as exc:
        raise TypeError(f"actions must be a batch of {k} actions of {single}: {exc}") from exc
    except Exception as exc:
        raise ValueError(f"actions must be a batch of {k} actions of {single}: {type(exc).__name__}: {exc}") from exc
    if len(items) != k:
        raise ValueError(f"expected {k} actions, got {len(items)}")
    for i, a in enumerate(items):
        try:
            inside = single.contains(a)
        except Exception as exc:  # a custom space whose contains() cannot judge this value
            raise TypeError(f"action {i} cannot be checked against {single!r:.100}: its contains() raised "
                            f"{type(exc).__name__}: {exc}") from exc
        if not inside:
            raise ValueError(f"action {i} is outside {single}: {a!r:.200}")
    return items


def check_observation_mode(mode: Any) -> str:
    """``observation_mode``: ``"same"`` (every sub-env's observation space equal) or ``"different"``.

    Raises:
        ValueError: anything else (gymnasium's message; make_vec takes no tuple of spaces).
    """
    if not isinstance(mode, str) or mode not in ("same", "different"):
        raise ValueError("Invalid `observation_mode`, expected: 'same' or 'different' (make_vec takes no tuple of "
                         f"spaces), actual got {mode!r:.200}")
    return mode


def check_plan_options(recover: Any, max_restarts: Any, **options: Any) -> dict[str, Any]:
    """:func:`plan_parallel.make`'s options for a vector env's planning envs (None values left out).

    ``recover`` (a bool) sets ``max_restarts``: 3 by default with it, 0 without.

    Raises:
        TypeError: ``recover`` is not a bool.
        ValueError: ``max_restarts`` contradicts ``recover``.
    """
    if not isinstance(recover, bool):
        raise TypeError(f"recover must be a bool, got {recover!r}")
    if not recover and max_restarts:
        raise ValueError(f"recover=False means max_restarts=0, got max_restarts={max_restarts!r}")
    if recover and max_restarts == 0:
        raise ValueError("recover=True needs max_restarts >= 1 (or None: 3); use recover=False for none")
    opts = {k: v for k, v in options.items() if v is not None or k == "n_workers"}
    opts["max_restarts"] = (3 if max_restarts is None else max_restarts) if recover else 0
    return opts


def check_reset_seeds(seed: Any, n: int) -> list[int | None]:
    """A vector reset's seed as one seed per sub-env: None, an int (``seed + i``) or a list of n ints/None.

    Raises:
        TypeError: not ints >= 0.
        ValueError: a list whose length is not n.
    """
    if seed is None:
        return [None] * n
    if is_int(seed):
        check_seed(seed)
        return [int(seed) + i for i in range(n)]
    if not isinstance(seed, (list, tuple, np.ndarray)):
        raise TypeError(f"seed must be None, an int >= 0 or a list of {n} ints/None, got {seed!r:.200}")
    seeds = [check_seed(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"If seeds are passed as a list the length must match num_envs={n} "
                         f"but got length={len(seeds)}.")
    return seeds


def check_reset_options(options: Any, n: int) -> tuple[dict | None, np.ndarray | None]:
    """``(options without "reset_mask", reset_mask or None)``; the caller's dict is not changed.

    Raises:
        TypeError: options not a dict; a mask that is not a bool ndarray.
        ValueError: a mask of the wrong shape, or with no True value.
    """
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    if options is None or "reset_mask" not in options:
        return options, None
    options = dict(options)
    mask = options.pop("reset_mask")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise ValueError("`options['reset_mask']` must contain a boolean array with at least one True value, "
                         f"got reset_mask={mask}")
    return options, mask.copy()


def check_autoreset_flags(autoreset: Any, k: int) -> np.ndarray:
    """``set_states``' autoreset: one bool for all k sub-envs, or k bools; as a bool array (k,).

    Raises:
        TypeError: not bools, or the wrong shape.
    """
    flags = np.asarray(autoreset)
    if flags.dtype != np.bool_ or flags.shape not in ((), (k,)):
        raise TypeError(f"autoreset must be a bool or {k} bools, got {autoreset!r:.200}")
    return np.broadcast_to(flags, (k,))
