"""``make_vec(env_fns=[...])``: gymnasium's list of sub-env constructors, checked before anything starts.

The planning workers run one env recipe for every sub-env, so the N callables
must build the same env (same class, same ``spec`` and kwargs): they may differ
in what they do after building it (``make_env(id, seed)`` resetting each with its
own seed), which is kept: a sub-env never reset, reset or read without a seed,
is a fresh env from its own callable, as each of SyncVectorEnv's is.

Sub-envs whose spaces differ raise gymnasium's ``RuntimeError``; sub-envs whose
spaces agree but whose envs differ (another class, other kwargs), or may differ
(distinct callables building envs without a spec), raise ``NotImplementedError``:
the workers would step them all as the first one.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from plan_parallel.vector_inputs import is_int

__all__ = ["check_env_fns", "is_env_fns"]


def is_env_fns(env: Any) -> bool:
    """Is ``env`` a list or tuple of callables (gymnasium's ``env_fns``)?"""
    return isinstance(env, (list, tuple))


def _recipe(env: Any) -> tuple[Any, ...]:
    """What makes two envs the same env: class and spec (id, kwargs, wrappers; repr: kwargs may hold arrays)."""
    return (type(env.unwrapped), repr(env.spec))


def check_env_fns(env_fns: Any, num_envs: int | None) -> tuple[list[Callable[[], Any]], int]:
    """The callables as a list and N; each callable is run once here (and its env closed) to compare them.

    Raises:
        TypeError: not a non-empty list of callables. ValueError: ``num_envs`` given and not ``len(env_fns)``.
        RuntimeError: the sub-envs' observation or action spaces are not equal (gymnasium's message).
        NotImplementedError: equal spaces, but not the same env (class, spec or kwargs).
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
        first = envs[0]
        for env in envs[1:]:
            for what in ("observation", "action"):
                single, sub = getattr(first, f"{what}_space"), getattr(env, f"{what}_space")
                if sub != single:
                    raise RuntimeError(
                        f"make_vec(env_fns=...) however the sub-environments {what} spaces are not equivalent. "
                        f"single_{what}_space={single}, sub-environment {what}_space={sub}.")
        for j, env in enumerate(envs[1:], 1):
            if env.spec is None and fns[j] is not fns[0]:
                # Without a spec nothing tells what the callables passed to the env's
                # constructor: equal classes may still be different envs.
                raise NotImplementedError(
                    f"make_vec(env_fns=...): env_fns[{j}] is another callable than env_fns[0] and its "
                    f"{type(env.unwrapped).__name__} has no spec, so nothing shows it is the same env; the planning "
                    "workers step every sub-env with one env recipe: give one callable (env_fns=[f] * n), "
                    "or register the env with gymnasium.register and build it with gymnasium.make")
            if _recipe(env) != _recipe(first):
                raise NotImplementedError(
                    f"make_vec(env_fns=...): env_fns[{j}] builds another env than env_fns[0] "
                    f"({type(env.unwrapped).__name__} {env.spec} vs {type(first.unwrapped).__name__} {first.spec}); "
                    "the planning workers step every sub-env with one env recipe, so sub-envs must be the same env")
    finally:
        for env in envs:
            env.close()
    return list(fns), len(fns)
