"""The RNG a policy draws with for one item of a rollout: the same on every backend and worker split.

Without a seed it is derived from a digest of the item's start state and its index in the caller's batch
(never from its place in a chunk); see :mod:`plan_parallel.env.loops`.
"""
from __future__ import annotations

import collections
import hashlib
import pickle
from typing import Any

import numpy as np

from plan_parallel.state import ActionLog, State
from plan_parallel.state.values import Pickled

__all__ = ["item_rng"]


def item_rng(seed: int | None, state: State, index: int) -> np.random.Generator:
    """The RNG a policy draws with for one item; the same on every backend and worker split.

    Args:
        seed: the item's seed, or None.
        state: the item's start state.
        index: the item's index in the caller's batch.

    Returns:
        With a seed, a generator on the first child of ``SeedSequence(seed)``: a
        stream independent of the env's (reseeded to ``PCG64(seed)``), and
        depending on nothing but the seed. Without, a generator on
        ``SeedSequence(digest of the state, spawn_key=(index,))``: reproducible
        for the same batch, and different for different start states and for
        copies of one state at different indices.
    """
    if seed is not None:
        ss = np.random.SeedSequence(seed, spawn_key=(0,))
    else:
        ss = np.random.SeedSequence(_state_entropy(state), spawn_key=(index,))
    return np.random.Generator(np.random.PCG64(ss))


def _state_entropy(state: State) -> int:
    """A 128-bit digest of a state's value (kind, sim, extra, RNG, wrappers; not the observation).

    Computed from the values, not from object identity, so a state that
    travelled to a worker (arrays through shared memory, the rest pickled)
    digests as the original does.
    """
    h = hashlib.blake2b(digest_size=16)
    for v in (state.kind, state.sim, state.extra, state.rng, state.wrappers):
        _feed(h, v)
    return int.from_bytes(h.digest(), "little")


def _feed(h: Any, v: Any) -> None:
    """Hash ``v`` into ``h`` canonically: equal plain values (and equal arrays) hash alike."""
    t = type(v)
    if v is None or t in (bool, int, str):
        h.update(f"{t.__name__}:{v!r};".encode())
    elif t is float:
        h.update(f"f:{v.hex()};".encode())
    elif isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            h.update(f"O{v.shape}(".encode())
            for x in v.ravel():
                _feed(h, x)
            h.update(b")")
        else:
            h.update(f"a{v.dtype.str}{v.shape}:".encode())
            h.update(np.ascontiguousarray(v).data)
    elif isinstance(v, np.generic):
        h.update(f"g{v.dtype.str}:".encode())
        h.update(v.tobytes())
    elif isinstance(v, (tuple, list, collections.deque)):
        h.update(f"{t.__name__}{len(v)}(".encode())
        for x in v:
            _feed(h, x)
        h.update(b")")
    elif isinstance(v, dict):
        h.update(f"d{len(v)}(".encode())
        for k in sorted(v, key=repr):
            _feed(h, k)
            _feed(h, v[k])
        h.update(b")")
    elif isinstance(v, (bytes, bytearray)):
        h.update(b"b%d:" % len(v))
        h.update(v)
    elif isinstance(v, Pickled):
        _feed(h, v.data)
    elif isinstance(v, ActionLog):
        _feed(h, v.to_list())
    else:  # simulator objects (ale_py.ALEState, enums): their pickle is their value
        h.update(b"p:")
        h.update(pickle.dumps(v, protocol=4))
