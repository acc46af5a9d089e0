"""What a restore leaves behind, named: the unwrapped env's attributes that a restore does not put back.

Used by :func:`~plan_parallel.check_clonable` when a replay diverges, and by ``make(..., check=True)``:
one live step against the same step replayed from a restored state, before a long run.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, bind
from plan_parallel.state.values import values_equal

__all__ = ["attribute_snapshot", "check_one_step", "differing_attributes"]

_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic)
# gymnasium's record of the last reset seed (no step reads it), and np_random (a part of every state: a
# state that does not restore it differs in its rng part, which the report names).
_BOOKKEEPING = frozenset({"_np_random_seed", "_np_random"})


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return False


def attribute_snapshot(unwrapped: Any) -> dict[str, Any]:
    """Copies of ``unwrapped``'s plain attributes (numbers, strings, arrays, containers of them) and its
    generators' states. Reads the env's ``__dict__``, after which CPython reads its attributes slower: for
    the envs of a check only."""
    out: dict[str, Any] = {}
    for name, value in vars(unwrapped).items():
        if name in _BOOKKEEPING:
            continue
        if isinstance(value, np.random.Generator):
            out[name] = copy.deepcopy(value.bit_generator.state)
        elif _plain(value):
            out[name] = copy.deepcopy(value)
    return out


def differing_attributes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The attributes in both snapshots whose values differ (bitwise)."""
    return sorted(k for k in before.keys() & after.keys() if not values_equal(before[k], after[k]))


def check_one_step(factory: Callable[[], Any], adapter: type[Adapter] | None = None, seed: int = 0) -> None:
    """One step from a reset, live and again from the captured state restored: the two must be bitwise equal.

    Cheap (a reset and two steps), where :func:`~plan_parallel.check_clonable` is thorough; it catches a
    ``get_state`` that leaves out a field the step changes.

    Raises:
        StateError: the replayed step differs; the message names the fields of the step and the env's
            attributes that the restore did not put back.
    """
    env = factory()
    try:
        ad = bind(env, adapter)
        step = ad.make_step()
        obs, _ = ad.reset(seed, None)
        start = ad.capture(None, obs)
        before = attribute_snapshot(env.unwrapped)
        space = copy.deepcopy(env.action_space)
        space.seed(seed)
        action = space.sample()
        live = step(action)[:4]
        live_state = ad.capture(None, live[0])
        ad.restore(start)
        left = differing_attributes(before, attribute_snapshot(env.unwrapped))
        again = step(action)[:4]
        again_state = ad.capture(None, again[0])
    finally:
        env.close()
    fields = [name for name, a, b in zip(("observation", "reward", "terminated", "truncated"), live, again)
              if not values_equal(a, b)]
    if not values_equal(live_state, again_state):
        fields.append(f"state ({', '.join(live_state.diff(again_state))})")
    if fields or left:
        where = type(env.unwrapped).__name__
        named = f"; the restore left {', '.join(f'{where}.{k}' for k in left)} as the step had changed it" if left else ""
        raise StateError(f"a step replayed from a restored state differs from the live step in "
                         f"{', '.join(fields) or 'nothing the step returns'}{named}: the env's state misses a field "
                         "its step reads (plan_parallel.check_clonable gives the whole report)")
