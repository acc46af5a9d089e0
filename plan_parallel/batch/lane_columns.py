"""The caller's side of the lane's row layouts: states written into the input rows (a result's columns copied
as they are when it is given back whole), and read from the output rows as a
:class:`~plan_parallel.state.state_batch.StateBatch` whose states are made when read.

A row holds a state's simulator array (float64), its bytes form (an ALE state's, one length a layout) or its tuple
of Python scalars packed (a user env's ``get_state`` value: :func:`~plan_parallel.wire.lane.scalar_format`), its
``extra`` as an integer or an (int, float) pair, its wrapper counters and, when the step draws, its RNG state as
words (:mod:`plan_parallel.wire.lane`); in a layout without RNG words the step draws nothing from the RNG, so
each result carries the RNG value of the state it started from.

A state read from a result's columns notes them and its row (:attr:`State.source_row`, with the very ``extra``,
``rng`` and ``wrappers`` objects it was given), so a list of such states given back to a call (a beam's best,
the leaves a search expands) is copied row by row of its sources' columns, without reading each state's fields;
a state whose fields were replaced since, or made otherwise, is written from its fields.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch, StateColumns
from plan_parallel.state.state_value import RowBytes
from plan_parallel.wire.lane import (
    Layout,
    decode_extra,
    encode_extra,
    encode_pair,
    pack_scalars,
    rng_of_words,
    rng_words,
    scalar_format,
    scalar_struct,
    write_blobs,
)

__all__ = ["F8", "MAX_SOURCES", "MIN_FROM_SOURCES", "RowForm", "Written", "read_row_states", "row_form",
           "write_row_states"]

F8 = np.dtype(np.float64)
# A list of states read from more result columns than this is written from its fields (a copy a source costs
# ~10 us of numpy calls, a state's fields ~1 us); so is a list shorter than MIN_FROM_SOURCES (numpy's fixed cost
# a call is then more than the fields': 4.4 against 3.3 us for one CartPole state, equal at 4, 14 against 35 at 64).
MAX_SOURCES = 8
MIN_FROM_SOURCES = 4


class Written(NamedTuple):
    """What :func:`write_row_states` wrote: the states' RNG values (empty when the layout's rows hold them) and
    where the workers read their rows (a :class:`~plan_parallel.wire.lane.StatePlace`, the rows ``in_source``
    names; None: the ``in_`` rows)."""

    rngs: list[Any]
    source: Any


class RowForm(NamedTuple):
    """The form of a row layout's state (:class:`~plan_parallel.wire.lane.Layout`'s fields of the same names): one
    of ``sim`` (float64 values), ``blob`` (bytes) and ``scalars`` (a tuple's form) is set."""

    sim: int
    wrappers: int
    blob: int = 0
    scalars: str = ""


def row_form(first: State) -> RowForm | None:
    """The row layout's form that the state ``first`` of a call would fit (a float64 array, a bytes form, a tuple of
    scalars), or None."""
    if not all(type(v) is int for v in first.wrappers):
        return None
    sim = first.wire_sim
    if type(sim) is np.ndarray and sim.dtype == F8 and sim.ndim == 1:
        return RowForm(sim.shape[0], len(first.wrappers))
    codes = scalar_format(sim)
    if codes is not None:
        return RowForm(0, len(first.wrappers), scalars=codes)
    try:
        blob = first.sim_blob()
    except Exception:  # a malformed value: the pickled path raises what the inline backend would
        return None
    return None if type(blob) is not bytes else RowForm(0, len(first.wrappers), len(blob))


def _fits(cols: dict[str, np.ndarray], columns: StateColumns, kind: str, layout: Layout) -> bool:
    """Whether a result's ``columns`` are of ``kind`` and have the rows of ``layout``'s input columns ``cols`` (tuples
    of scalars of its form: rows of one width may be of two forms)."""
    return (columns.kind == kind and columns.scalars == layout.scalars and tuple(columns.fields) == layout.state_stems()
            and all(col.shape[1:] == cols["in_" + stem].shape[1:] for stem, col in columns.fields.items()))


def _write_from_sources(cols: dict[str, np.ndarray], states: Any, kind: str, layout: Layout,
                        leases: Any) -> Written | None:
    """Write ``states`` into the input rows from the result columns of ``kind`` they were read from, unchanged
    since (or, all from one result's columns in a slab of ``leases``, name their rows in ``in_source``); None when
    one was not (or more than :data:`MAX_SOURCES` columns are named)."""
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
        if _readable(source, leases) and _fits(cols, source, kind, layout):
            cols["in_source"][:n] = taken
            return Written(rngs, source.place)
        groups = [(source, slice(0, n))]
    else:
        ids, first_at, group_of = np.unique(np.fromiter(map(id, owners), np.int64, n), return_index=True,
                                            return_inverse=True)
        if len(ids) > MAX_SOURCES:
            return None
        groups = [(owners[i], np.flatnonzero(group_of == g)) for g, i in enumerate(first_at.tolist())]
    if not all(_fits(cols, columns, kind, layout) for columns, _ in groups):
        return None
    for columns, where in groups:
        _copy_rows(cols, where, columns, taken[where])
    return Written(rngs, None)


def _readable(columns: StateColumns, leases: Any) -> bool:
    """Whether the workers of ``leases`` may read states from ``columns`` where they lie (a slab lent to them)."""
    return columns.place is not None and columns.place.leases is leases


def _copy_rows(cols: dict[str, np.ndarray], where: Any, columns: StateColumns, picked: Any) -> None:
    """Write rows ``picked`` of a result's ``columns`` into the input rows ``where`` of ``cols`` (into a slice of
    rows: gathered straight into them, one copy, where ``col[picked]`` would copy twice)."""
    for stem, col in columns.fields.items():
        if type(where) is slice and type(picked) is np.ndarray:
            np.take(col, picked, axis=0, out=cols["in_" + stem][where], mode="clip")  # (rows in range: no clip)
        else:
            cols["in_" + stem][where] = col[picked]


def _write_fields(cols: dict[str, np.ndarray], states: Any, layout: Layout) -> list[Any] | None:
    """Write ``states`` into the input rows from their fields; their RNG values (empty when the rows hold them),
    or None when one does not fit ``layout``."""
    n = len(states)
    if layout.blob:
        try:
            blobs = [s.sim_blob() for s in states]
        except Exception:  # a malformed value: the pickled path raises what the inline backend would
            return None
        if any(type(b) is not bytes or len(b) != layout.blob for b in blobs):
            return None
        write_blobs(cols["in_blob"], 0, blobs)
    elif layout.scalars:
        packed = pack_scalars([s.sim for s in states], layout.scalars)
        if packed is None:
            return None
        cols["in_scalars"][:n] = np.frombuffer(packed, np.uint8).reshape(n, -1)
    else:
        sims = [s.sim for s in states]
        if any(type(x) is not np.ndarray or x.dtype != F8 for x in sims):
            return None
        try:
            cols["in_sim"][:n] = sims
        except ValueError:  # ragged: a state of another shape
            return None
    if layout.pair:
        pairs = [encode_pair(s.extra) for s in states]
        if None in pairs:
            return None
        cols["in_extra"][:n] = [p[0] for p in pairs]  # type: ignore[index]
        cols["in_extra_f"][:n] = [p[1] for p in pairs]  # type: ignore[index]
    else:
        extras = [encode_extra(s.extra) for s in states]
        if None in extras:
            return None
        cols["in_extra"][:n] = extras
    rngs = [s.rng for s in states]
    if layout.rng:
        words = [rng_words(r) for r in rngs]
        if None in words:
            return None
        cols["in_rng"][:n] = words
        rngs = []
    elif any(r is None for r in rngs):
        return None
    if not cols["in_wrappers"].shape[1]:  # (no wrapper counters: an ALE v5 env's stack)
        return None if any(s.wrappers for s in states) else rngs
    try:
        wrappers = np.array([s.wrappers for s in states])
    except ValueError:  # ragged
        return None
    if wrappers.dtype.kind != "i" or wrappers.shape != cols["in_wrappers"][:n].shape:
        return None
    cols["in_wrappers"][:n] = wrappers
    return rngs


def write_row_states(cols: dict[str, np.ndarray], states: Any, kind: str, layout: Layout,
                     leases: Any = None) -> Written | None:
    """Write states of ``kind`` (a list, or a lane result's whole ``StateBatch``) into the input rows of a row
    layout's columns ``cols``, or, when they are rows of one result's state columns in a slab of ``leases`` (the
    workers' lease pool), name those rows in ``in_source``; None when a state does not fit (another form of
    simulator value or extra, no RNG value or another bit generator's)."""
    columns = getattr(states, "columns", None)
    n = len(states)
    if type(columns) is StateColumns and _fits(cols, columns, kind, layout):  # a result given back whole
        rngs = [] if layout.rng else columns.rngs or []
        if _readable(columns, leases):
            cols["in_source"][:n] = np.arange(n)
            return Written(rngs, columns.place)
        _copy_rows(cols, slice(0, n), columns, slice(None))  # its columns as they are
        return Written(rngs, None)
    written = _write_from_sources(cols, states, kind, layout, leases)
    if written is not None:
        return Written([], written.source) if layout.rng else written
    field_rngs = _write_fields(cols, states, layout)
    return None if field_rngs is None else Written(field_rngs, None)


def read_row_states(cols: dict[str, np.ndarray], n: int, kind: str, rngs: list[Any], observations: np.ndarray,
                    trust: Any, layout: Layout, place: Any = None) -> StateBatch:
    """The states of the first ``n`` output rows of ``cols`` (made when read; ``rngs``: each one's RNG value when
    the layout's rows hold none, ``trust``: the token of the workers that made them), and their columns: copies of
    the rows, or (``place``: where they lie in a slab lent to the result, a
    :class:`~plan_parallel.wire.lane.StatePlace`) the rows themselves."""
    copy = place is None
    fields = {stem: cols["out_" + stem][:n].copy() if copy else cols["out_" + stem][:n] for stem in layout.state_stems()}
    for col in fields.values():
        col.flags.writeable = False
    extra_col, wrappers_col = fields["extra"], fields["wrappers"]
    extras = extra_col.tolist()  # (the wrappers' rows are made tuples when a state is: N small lists made
    # here would stay tracked by the garbage collector, whose passes then cost more than the lists)
    columns = StateColumns(kind, fields, None if layout.rng else rngs, trust, layout.scalars, place)
    floats = fields["extra_f"].tolist() if layout.pair else None
    blobs, sims, words, scalars = fields.get("blob"), fields.get("sim"), fields.get("rng"), fields.get("scalars")
    unpack, packed, width = None, memoryview(b""), 0
    if scalars is not None:  # (each tuple unpacked from its row of the read-only copy, when its state is made)
        unpack, packed, width = scalar_struct(layout.scalars).unpack_from, scalars.data, scalars.shape[1]

    def make(k: int) -> State:
        extra = (extras[k], floats[k]) if floats is not None else decode_extra(extras[k])
        rng = rngs[k] if words is None else rng_of_words(words[k].tolist())
        wrappers = tuple(wrappers_col[k].tolist())
        if blobs is not None:
            state = State.from_blob(kind, RowBytes(blobs, k), extra, rng, wrappers, None, trust, frozen=True)
        elif unpack is not None:
            state = State.of_frozen(kind, unpack(packed, k * width), extra, rng, wrappers, None, trust)
        else:
            state = State.of_frozen(kind, sims[k], extra, rng, wrappers, None, trust)  # type: ignore[index]
        state.source_row = (columns, k, extra, rng, wrappers)
        return state

    return StateBatch(n, [(0, n, make)], observations, columns)
