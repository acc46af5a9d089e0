"""``get_state(env)`` / ``set_state(env, state)``: the complete state of any gymnasium env (with its wrappers),
through the adapter bound to it once (kept per env, for as long as the env lives)."""
from __future__ import annotations

import weakref
from typing import Any

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, State, bind

__all__ = ["get_state", "set_state"]

_BOUND: weakref.WeakKeyDictionary[Any, Adapter] = weakref.WeakKeyDictionary()


def _adapter(env: Any) -> Adapter:
    adapter = _BOUND.get(env)
    if adapter is None:
        adapter = bind(env)
        if adapter.includes_wrappers:
            raise StateError(
                f"{type(env.unwrapped).__name__} has no capturable simulator; its exact state is an "
                "action-replay history that only plan_parallel.make(...) can record (every reset and "
                "step must go through it)"
            )
        _BOUND[env] = adapter
    # The env may have been stepped or reset behind our back: trust nothing cached.
    adapter.forget_rng()
    return adapter


def get_state(env: Any) -> State:
    """The complete state of ``env`` (a gymnasium env with its wrappers).

    Raises:
        StateError: no adapter captures this env exactly, or it has no state yet.
    """
    return _adapter(env).capture()


def set_state(env: Any, state: State) -> None:
    """Restore ``state`` into ``env``; works on an env that was never reset.

    Raises:
        StateError: ``state`` belongs to another env family, class or wrapper stack,
            or is malformed.
    """
    adapter = _adapter(env)
    adapter.validate(state)
    adapter.restore(state)
