"""The caller's side of the lane's row layouts: states written into the input rows, and read from the output
rows as a :class:`~plan_parallel.state.state_batch.StateBatch` whose states are made when read.

A row holds a state's simulator array (float64), its ``extra`` as an integer and its wrapper counters
(:mod:`plan_parallel.wire.lane`); a row layout is only made for families whose step draws nothing from the
RNG, so each result carries the RNG value of the state it started from.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch, StateColumns
from plan_parallel.wire.lane import decode_extra, encode_extra

__all__ = ["F8", "read_row_states", "write_row_states"]

F8 = np.dtype(np.float64)


def write_row_states(cols: dict[str, np.ndarray], states: Any) -> list[Any] | None:
    """Write a list of states into the input rows of a row layout's columns ``cols``; their RNG values, or None
    when a state does not fit (another form of simulator value or extra, no RNG value)."""
    n = len(states)
    sims = [s.sim for s in states]
    extras = [encode_extra(s.extra) for s in states]
    rngs = [s.rng for s in states]
    if None in extras or any(r is None for r in rngs) or any(
            type(x) is not np.ndarray or x.dtype != F8 for x in sims):
        return None
    try:
        wrappers = np.array([s.wrappers for s in states])
        cols["in_sim"][:n] = sims
    except ValueError:  # ragged: a state of another shape
        return None
    if wrappers.dtype.kind != "i" or wrappers.shape != cols["in_wrappers"][:n].shape:
        return None
    cols["in_wrappers"][:n] = wrappers
    cols["in_extra"][:n] = extras
    return rngs


def read_row_states(cols: dict[str, np.ndarray], n: int, kind: str, rngs: list[Any], observations: np.ndarray,
                    trust: Any) -> StateBatch:
    """The states of the first ``n`` output rows of ``cols`` (made when read; ``rngs``: each one's RNG value,
    ``trust``: the token of the workers that made them), and their columns."""
    sims = cols["out_sim"][:n].copy()
    sims.flags.writeable = False
    extra_col, wrappers_col = cols["out_extra"][:n].copy(), cols["out_wrappers"][:n].copy()
    extras = extra_col.tolist()  # (the wrappers' rows are made tuples when a state is: N small lists made
    # here would stay tracked by the garbage collector, whose passes then cost more than the lists)

    def make(k: int) -> State:
        return State.of_frozen(kind, sims[k], decode_extra(extras[k]), rngs[k], tuple(wrappers_col[k].tolist()),
                               None, trust)

    return StateBatch(n, [(0, n, make)], observations, StateColumns(kind, sims, extra_col, wrappers_col, rngs, trust))
