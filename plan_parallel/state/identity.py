"""Which configuration of an env a state belongs to, and how two differ.

A state's :attr:`~plan_parallel.state.State.kind` names the adapter family, the env class and the wrapper
stack, then the configuration the env was built with, from its ``EnvSpec``: the constructor arguments that
differ from the constructor's defaults (``render_mode`` aside: it changes no step), the time limit and
the settings of wrappers added after ``gymnasium.make``::

    classic:PendulumEnv|TimeLimit,OrderEnforcing,PassiveEnvChecker {g=2.0; max_episode_steps=50}

A Pendulum state made with ``g=2.0`` therefore refuses a default Pendulum, and :func:`kind_mismatch` names
the difference. An env built by a callable has no spec: its configuration is the callable's, which the kind
cannot see.
"""
from __future__ import annotations

import inspect
from typing import Any

__all__ = ["configuration", "env_creator", "kind_mismatch"]

_NOT_CONFIG = frozenset({"render_mode"})
_PLAIN = (type(None), bool, int, float, str, bytes)


def _shown(value: Any) -> str:
    """``repr`` of a plain value (the same in every process); a type name for anything else."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_shown(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_shown(k)}: {_shown(v)}" for k, v in value.items()) + "}"
    return f"<{type(value).__qualname__}>"


def env_creator(spec: Any) -> Any:
    """What an ``EnvSpec``'s entry point names: the env class or function ``gymnasium.make`` calls."""
    entry_point = spec.entry_point
    if isinstance(entry_point, str):
        from gymnasium.envs.registration import load_env_creator

        return load_env_creator(entry_point)
    return entry_point


def _defaults(creator: Any) -> dict[str, Any]:
    """The default of each argument the env's creator has one for."""
    try:
        params = inspect.signature(creator).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params if p.default is not p.empty}


def _is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` is the default (``10`` is ``10.0``; ``True`` is not ``1``)."""
    if value is default:
        return True
    if not (isinstance(value, _PLAIN) and isinstance(default, _PLAIN)) or isinstance(value, bool) != isinstance(default, bool):
        return False
    return bool(value == default)


def configuration(env: Any) -> str:
    """The configuration part of the kind of states of ``env`` (a wrapped gymnasium env): ``""`` when it has
    no spec, else `` {key=value; ...}`` (empty braces are left out)."""
    spec = getattr(env, "spec", None)
    if spec is None:
        return ""
    defaults = _defaults(env_creator(spec))
    items = {k: _shown(v) for k, v in spec.kwargs.items()
             if k not in _NOT_CONFIG and not (k in defaults and _is_default(v, defaults[k]))}
    if spec.max_episode_steps is not None:
        items["max_episode_steps"] = repr(spec.max_episode_steps)
    for w in spec.additional_wrappers:
        items[w.name] = _shown(w.kwargs)
    if not items:
        return ""
    return " {" + "; ".join(f"{k}={items[k]}" for k in sorted(items)) + "}"


def _split(kind: str) -> tuple[str, dict[str, str]]:
    """A kind's family, class and wrappers; its configuration as ``{key: shown value}``."""
    base, sep, rest = kind.partition(" {")
    if not sep or not rest.endswith("}"):
        return kind, {}
    items = {}
    for item in rest[:-1].split("; "):
        key, _, value = item.partition("=")
        items[key] = value
    return base, items


def kind_mismatch(state_kind: str, env_kind: str) -> str:
    """The message for a state of ``state_kind`` given to an env of ``env_kind`` (the two differ)."""
    head = f"state of kind {state_kind!r} cannot restore an env of kind {env_kind!r}"
    state_base, state_items = _split(state_kind)
    env_base, env_items = _split(env_kind)
    if state_base != env_base:
        return f"{head} (another env family, env class or wrapper stack)"
    diffs = [
        f"{key}={state_items.get(key, 'default')} in the state, {env_items.get(key, 'default')} in this env"
        for key in sorted(state_items.keys() | env_items.keys()) if state_items.get(key) != env_items.get(key)
    ]
    return f"{head} (another configuration: {'; '.join(diffs)})"
