"""``make_vec(env_fns=[...])``: gymnasium's list of sub-env constructors, checked before anything starts.

Each callable is run once here to compare the envs. Callables whose envs are
the same env (same class and ``spec``: id, kwargs, wrappers) share one recipe
group, built from the first of them (see :mod:`plan_parallel.vector.groups`):
they may differ in what they do after building it (``make_env(id, seed)``
resetting each with its own seed), which is kept, as a sub-env never reset,
reset or read without a seed, is a fresh env from its own callable, as each of
SyncVectorEnv's is. Callables whose envs differ (another class, other kwargs),
or may differ (distinct callables building envs without a spec), get a group
each: their own planning env and workers.

The sub-envs' action spaces must be equal, and their observation spaces too
with ``observation_mode="same"``; with ``"different"`` they are batched by
gymnasium's ``batch_differing_spaces`` and must share shape and dtype. Otherwise
the errors SyncVectorEnv raises are raised, in its order.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces

from plan_parallel.vector.inputs import is_int

__all__ = ["EnvFns", "check_env_fns", "check_spaces", "is_env_fns", "same_env"]


class EnvFns(NamedTuple):
    """The checked ``env_fns``: the callables, per sub-env the first sub-env whose env is the same, and,
    with ``observation_mode="different"``, the batched observation space (else None)."""

    fns: list[Callable[[], Any]]
    bases: list[int]
    observation_space: Any


def is_env_fns(env: Any) -> bool:
    """Is ``env`` a list or tuple of callables (gymnasium's ``env_fns``)?"""
    return isinstance(env, (list, tuple))


def same_env(a: Any, b: Any, same_callable: bool) -> bool:
    """Are envs ``a`` and ``b`` the same env: same class and spec (repr: kwargs may hold arrays)?

    Without a spec nothing tells what a callable passed to the env's
    constructor, so spec-less envs are the same only from the same callable.
    """
    if a.spec is None or b.spec is None:
        return same_callable and type(a.unwrapped) is type(b.unwrapped)
    return type(a.unwrapped) is type(b.unwrapped) and repr(a.spec) == repr(b.spec)


def check_spaces(envs: Sequence[Any], observation_mode: str) -> None:
    """Raise gymnasium's RuntimeError when the sub-envs' spaces do not agree (see the module docstring)."""
    first = envs[0]
    for env in envs[1:]:
        single, sub = first.observation_space, env.observation_space
        if observation_mode == "same" and sub != single:
            raise RuntimeError(
                "make_vec(env_fns=..., observation_mode='same') however the sub-environments observation spaces are "
                f"not equivalent. single_observation_space={single}, sub-environment observation_space={sub}. "
                "If this is intentional, use `observation_mode='different'` instead.")
        if observation_mode == "different" and not is_space_dtype_shape_equiv(sub, single):
            raise RuntimeError(
                "make_vec(env_fns=..., observation_mode='different') however the sub-environments observation "
                f"spaces do not share a common shape and dtype, single_observation_space={single}, "
                f"sub-environment observation space={sub}")
        if env.action_space != first.action_space:
            raise RuntimeError(
                "make_vec(env_fns=...) however the sub-environments action spaces are not equivalent. "
                f"single_action_space={first.action_space}, sub-environment action_space={env.action_space}.")


def check_env_fns(env_fns: Any, num_envs: int | None, observation_mode: str = "same") -> EnvFns:
    """The callables, which sub-envs share an env, and the batched space; each callable is run once (and closed).

    Raises:
        TypeError: not a non-empty list of callables.
        ValueError: ``num_envs`` given and not ``len(env_fns)``.
        RuntimeError: the sub-envs' spaces do not agree (gymnasium's message, see the module docstring).
        ValueError/TypeError: (``"different"``) gymnasium's ``batch_differing_spaces`` cannot batch them.
        Exception: whatever a callable raises, with its own type.
    """
    if not is_env_fns(env_fns) or not env_fns or not all(callable(f) for f in env_fns):
        raise TypeError(f"env_fns must be a non-empty list of callables returning gymnasium envs, got {env_fns!r:.200}")
    fns: Sequence[Callable[[], Any]] = env_fns
    if num_envs is not None and (not is_int(num_envs) or num_envs != len(fns)):
        raise ValueError(f"num_envs={num_envs!r} but env_fns has {len(fns)} callables: give one or the other")
    envs: list[Any] = []
    try:
        for f in fns:
            envs.append(f())
        batched = None
        if observation_mode == "different":  # first, as SyncVectorEnv
            batched = batch_differing_spaces([env.observation_space for env in envs])
        check_spaces(envs, observation_mode)
        bases = [next(k for k in range(j + 1) if same_env(envs[k], env, fns[k] is fns[j]))
                 for j, env in enumerate(envs)]
    finally:
        for env in envs:
            env.close()
    return EnvFns(list(fns), bases, batched)
