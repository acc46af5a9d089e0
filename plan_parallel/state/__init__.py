"""The state protocol: capture and restore the complete state of a gymnasium env.

``get_state(env)`` / ``set_state(env, state)`` work on any env built by
``gymnasium.make`` (or by hand) with its whole wrapper stack, through one adapter
per env family, then the fallbacks (:mod:`plan_parallel.state.families`), and a registry for more.
"""
from __future__ import annotations

from plan_parallel.state.access import get_state, set_state
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
