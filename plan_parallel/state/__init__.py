"""The state protocol: capture and restore the complete state of a gymnasium env.

``get_state(env)`` / ``set_state(env, state)`` work on any env built by
``gymnasium.make`` (or by hand) with its whole wrapper stack, through one adapter
per env family, then the fallbacks (:mod:`plan_parallel.state.families`), and a registry for more.
"""
from __future__ import annotations

import weakref
from typing import Any

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, State, adapter_class_for, bind, register_adapter
from plan_parallel.state.families import (
    ActionLog,
    ActionReplayAdapter,
    AleAdapter,
    ClassicControlAdapter,
    GenericPickleAdapter,
    MujocoAdapter,
    ToyTextAdapter,
    UserMethodsAdapter,
)
from plan_parallel.state.state_batch import StateBatch
from plan_parallel.state.wrappers import STATELESS_WRAPPERS, register_wrapper

__all__ = [
    "STATELESS_WRAPPERS",
    "ActionLog",
    "ActionReplayAdapter",
    "Adapter",
    "AleAdapter",
    "ClassicControlAdapter",
    "GenericPickleAdapter",
    "MujocoAdapter",
    "State",
    "StateBatch",
    "ToyTextAdapter",
    "UserMethodsAdapter",
    "adapter_class_for",
    "bind",
    "get_state",
    "register_adapter",
    "register_wrapper",
    "set_state",
]

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
