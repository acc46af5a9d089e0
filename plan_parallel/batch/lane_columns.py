"""The caller's side of the lane's row layouts: states written into the input rows (a result's columns copied
as they are when it is given back whole), and read from the output rows as a
:class:`~plan_parallel.state.state_batch.StateBatch` whose states are made when read.

A row holds a state's simulator array (float64), its ``extra`` as an integer and its wrapper counters
(:mod:`plan_parallel.wire.lane`); a row layout is only made for families whose step draws nothing from the
RNG, so each result carries the RNG value of the state it started from.

A state read from a result's columns notes them and its row (:attr:`State.source_row`, with the very ``extra``,
``rng`` and ``wrappers`` objects it was given), so a list of such states given back to a call (a beam's best,
the leaves a search expands) is copied row by row of its sources' columns, without reading each state's fields;
a state whose fields were replaced since, or made otherwise, is written from its fields.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch, StateColumns
from plan_parallel.wire.lane import decode_extra, encode_extra

__all__ = ["F8", "read_row_states", "write_row_states"]

F8 = np.dtype(np.float64)
# A list of states read from more result columns than this is written from its fields (a copy a source costs
# ~10 us of numpy calls, a state's fields ~1 us); so is a list shorter than MIN_FROM_SOURCES (numpy's fixed cost
# a call is then more than the fields': 4.4 against 3.3 us for one CartPole state, equal at 4, 14 against 35 at 64).
MAX_SOURCES = 8
MIN_FROM_SOURCES = 4


def _write_from_sources(cols: dict[str, np.ndarray], states: Any, kind: str) -> list[Any] | None:
    """Write ``states`` into the input rows from the result columns of ``kind`` they were read from, unchanged
    since; their RNG values, or None when one was not (or more than :data:`MAX_SOURCES` columns are named)."""
    first = states[0].source_row
    if first is None or len(states) < MIN_FROM_SOURCES:
        return None
    source = first[0]
    rows, rngs, owners = [], [], []
    mixed = False
    for s in states:
        src = s.source_row
        if src is None or src[2] is not s.extra or src[3] is not s.rng or src[4] is not s.wrappers:
            return None
        rows.append(src[1])
        rngs.append(src[3])
        owners.append(src[0])
        mixed = mixed or src[0] is not source
    n, taken = len(states), np.array(rows, np.intp)
    groups: list[tuple[StateColumns, Any]]  # (columns, the positions of the states read from them)
    if not mixed:
        groups = [(source, slice(0, n))]
    else:
        ids, first_at, group_of = np.unique(np.fromiter(map(id, owners), np.int64, n), return_index=True,
                                            return_inverse=True)
        if len(ids) > MAX_SOURCES:
            return None
        groups = [(owners[i], np.flatnonzero(group_of == g)) for g, i in enumerate(first_at.tolist())]
    if any(columns.kind != kind for columns, _ in groups):
        return None
    for columns, where in groups:
        _copy_rows(cols, where, columns, taken[where])
    return rngs


def _copy_rows(cols: dict[str, np.ndarray], where: Any, columns: StateColumns, picked: Any) -> None:
    """Write rows ``picked`` of a result's ``columns`` into the input rows ``where`` of ``cols``."""
    cols["in_sim"][where] = columns.sims[picked]
    cols["in_extra"][where] = columns.extras[picked]
    cols["in_wrappers"][where] = columns.wrappers[picked]


def write_row_states(cols: dict[str, np.ndarray], states: Any, kind: str) -> list[Any] | None:
    """Write states of ``kind`` (a list, or a lane result's whole ``StateBatch``) into the input rows of a row
    layout's columns ``cols``; their RNG values, or None when a state does not fit (another form of simulator value
    or extra, no RNG value)."""
    columns = getattr(states, "columns", None)
    if type(columns) is StateColumns and columns.kind == kind:  # a result given back whole: its columns as they are
        _copy_rows(cols, slice(0, len(states)), columns, slice(None))
        return columns.rngs
    rngs = _write_from_sources(cols, states, kind)
    if rngs is not None:
        return rngs
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
    columns = StateColumns(kind, sims, extra_col, wrappers_col, rngs, trust)

    def make(k: int) -> State:
        extra, rng, wrappers = decode_extra(extras[k]), rngs[k], tuple(wrappers_col[k].tolist())
        state = State.of_frozen(kind, sims[k], extra, rng, wrappers, None, trust)
        state.source_row = (columns, k, extra, rng, wrappers)
        return state

    return StateBatch(n, [(0, n, make)], observations, columns)
