"""The env arguments every subcommand takes: an env id and ``--kw key=value`` pairs, tried here before any worker starts."""
from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

__all__ = ["parse_env_kwargs", "probe_env"]


def parse_env_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``["is_slippery=True", "map_name=8x8"]`` -> kwargs; values are Python literals, else strings.

    Raises:
        ValueError: a pair without ``=``.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"env kwargs must look like key=value, got {pair!r}")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def probe_env(env_id: str, pairs: Sequence[str]) -> Any:
    """Build one env of ``env_id`` with the ``--kw`` pairs, here and now; returns its action space.

    A user's mistake in the id or the kwargs is found this way before any worker
    starts (a worker would report it only after it started).

    Raises:
        ValueError: a pair without ``=``, or kwargs the env refuses.
        gymnasium.error.Error: an id gymnasium does not know, or a missing dependency.
    """
    from plan_parallel.factory import EnvFactory

    factory = EnvFactory(env_id, parse_env_kwargs(pairs))
    try:
        env = factory()
    except TypeError as e:  # gymnasium.make refusing the kwargs
        kw = ", ".join(pairs) or "no kwargs"
        raise ValueError(f"cannot build {env_id} with {kw}: {str(e).splitlines()[0]}") from e
    try:
        return env.action_space
    finally:
        env.close()
