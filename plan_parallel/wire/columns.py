"""States and infos as columns: arrays and bytes go to a slab, the rest is pickled once per chunk.

Pickling all the non-array parts of a chunk in one ``dumps`` call lets pickle's
memo share repeated objects (the same RNG dict, the same kind string) instead of
copying them per item.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plan_parallel.state import State
from plan_parallel.state.sim_blobs import sim_blobs
from plan_parallel.state.state_value import freeze
from plan_parallel.wire.messages import ChunkReply
from plan_parallel.wire.slabs import BLOB_BYTES, ArrayWriter, rows_fit

__all__ = ["INFO_PREFIX", "OUTCOMES", "listed_rows", "pack_infos", "pack_outcomes", "pack_states", "shared_equal", "stack_rows",
           "state_maker", "unpack_infos", "unpack_outcomes", "unpack_states"]

INFO_PREFIX = "info:"  # the slab column of the j-th info key that pack_infos put there is this + str(j)


def pack_states(states: Sequence[State], w: ArrayWriter, prefix: str, with_obs: bool, unique: bool = False) -> dict[str, Any]:
    """Split states into array columns (written to ``w``) and a picklable remainder.

    Simulator values that do not fit the slab travel in the remainder: a family's bytes forms as
    ``"sim_blobs"``, arrays as one array (:func:`stack_rows`), anything else as a list.

    A state object listed more than once (N items from one start) is packed once; the
    remainder's ``"index"`` then maps each item to it, and :func:`unpack_states` lists
    one object for those items again. ``unique``: the caller knows no object is listed twice.
    """
    rest: dict[str, Any] = {}
    if not unique:
        firsts = list({id(s): s for s in states}.values())  # first-seen order
        if len(firsts) < len(states):
            at = {id(s): k for k, s in enumerate(firsts)}
            rest["index"] = [at[id(s)] for s in states]
            states = firsts
    rest.update({
        "kind": states[0].kind if states else "",
        "extra": [s.extra for s in states],
        "rng": shared_equal([s.rng for s in states]),
        "wrappers": [s.wrappers for s in states],
    })
    if not w.put_rows(prefix + "sim", [s.wire_sim for s in states]):
        blobs_ = _sim_blobs(states) if sim_blobs(rest["kind"]) is not None else None
        if blobs_ is not None:
            if not w.put_blobs(prefix + "sim", blobs_):
                rest["sim_blobs"] = blobs_  # in the message as bytes: nothing decoded to be serialized again
        else:
            rest["sim"] = stack_rows([s.sim for s in states])
    if with_obs:
        obs = [s.obs for s in states]
        if not w.put_rows(prefix + "obs", obs):
            rest["obs"] = stack_rows(obs)
    return rest


def shared_equal(values: list) -> list:
    """``values`` with each value equal to the one before it replaced by that very object.

    Pickled once per chunk, one object is one copy (pickle's memo): N items of an env
    whose step never draws from its RNG carry one RNG dict, not N equal ones (HalfCheetah,
    16 items: ~50 us less to unpickle), and arrive as one object, which a worker restores
    once (:meth:`Adapter.restore` skips the RNG its env holds already).
    """
    out = values[:1]
    for v in values[1:]:
        prev = out[-1]
        out.append(prev if v is not prev and type(v) is dict and type(prev) is dict and v == prev else v)
    return out


def _sim_blobs(states: Sequence[State]) -> list | None:
    """The states' simulator values in bytes form; None if one cannot be serialized.

    Each state keeps the bytes it was made of or made once (:meth:`State.sim_blob`), so a
    batch that starts N items from one state serializes it once.
    """
    try:
        return [s.sim_blob() for s in states]
    except Exception:  # a malformed state: pickled as given, for the worker's check to name it
        return None


def unpack_states(rest: dict[str, Any], cols: dict[str, np.ndarray], prefix: str, n: int,
                  checker: Any = None) -> list[State]:
    """Rebuild the ``n`` states of :func:`pack_states` output (array rows are views of ``cols``).

    States whose simulator values came as bytes (in the slab or in the message) keep them, decoded on
    first use (:meth:`State.from_blob`).
    A state packed once for several items is one object listed for each of them.
    ``checker``: the token of the workers that made them (see :func:`~plan_parallel.state.state_value.validate_each`).
    """
    make = _packed_state(rest, cols, prefix, keep=False, checker=checker)
    index = rest.get("index")
    obs = rest.get("obs")
    if obs is None:
        obs = cols.get(prefix + "obs")
    unique = [make(u, None if obs is None else obs[u]) for u in range(n if index is None else len(rest["extra"]))]
    return unique if index is None else [unique[k] for k in index]


def state_maker(rest: dict[str, Any], cols: dict[str, np.ndarray], prefix: str,
                checker: Any = None) -> Callable[[int], State]:
    """``make(k)``: the k-th state of :func:`pack_states` output, made when called (without its observation).

    What it needs is kept out of the slab now (the slab is reused): the bytes
    column of serialized simulator values as one bytes object, sliced per state
    when made; array columns are copies already (:func:`read_columns`). The states
    equal those of :func:`unpack_states`; a state packed once for several items is
    one object for each of them. ``checker``: as :func:`unpack_states`'.
    """
    make = _packed_state(rest, cols, prefix, keep=True, checker=checker)
    index = rest.get("index")
    if index is None:
        return lambda k: make(k, None)
    made: dict[int, State] = {}

    def shared(k: int) -> State:
        u = index[k]
        state = made.get(u)
        if state is None:
            state = made[u] = make(u, None)
        return state

    return shared


def _packed_state(rest: dict[str, Any], cols: dict[str, np.ndarray], prefix: str,
                  keep: bool, checker: Any = None) -> Callable[[int, Any], State]:
    """``make(u, obs)``: a new object of the u-th state :func:`pack_states` packed (once each), with ``obs``.

    ``keep``: copy the slab's bytes column out now, for states made after the slab is reused;
    otherwise each state's bytes are copied out of it when made.
    """
    kind, extra, rng, wrappers = rest["kind"], rest["extra"], rest["rng"], rest["wrappers"]
    for column in (extra, rng, wrappers):  # read-only once for the chunk, not a state at a time
        freeze(column)
    sims = rest.get("sim")
    raw: Any = rest.get("sim_blobs")
    if sims is None and raw is None:
        ends = cols.get(prefix + "sim:ends")
        if ends is None:
            sims = cols[prefix + "sim"]  # rows of one array (a slab column copied out)
        else:
            column = cols[prefix + "sim" + BLOB_BYTES]
            data = column.tobytes() if keep else column.data  # sliced as bytes, or as a memoryview of the slab
            bounds = [0, *ends.tolist()]
            return lambda u, obs: State.from_blob(kind, bytes(data[bounds[u]:bounds[u + 1]]), extra[u], rng[u],
                                                  wrappers[u], obs, checker, frozen=True)
    if raw is not None:
        return lambda u, obs: State.from_blob(kind, raw[u], extra[u], rng[u], wrappers[u], obs, checker, frozen=True)
    freeze(sims)  # one array (its rows are read-only) or a list of them
    return lambda u, obs: State.of_frozen(kind, sims[u], extra[u], rng[u], wrappers[u], obs, checker)  # type: ignore[index]


def pack_infos(infos: list[dict], w: ArrayWriter | None = None) -> Any:
    """Infos for the wire: None when all empty; numpy-scalar values as one array per key, in ``w``'s slab
    when it has room (then None in the message, the column named :data:`INFO_PREFIX` + the key's position:
    a key need not be a string).

    Unpickling thousands of numpy scalars (MuJoCo's infos hold several per
    step) costs more than the step itself; as columns they cost one array each,
    and a column in the slab costs no unpickling at all (HalfCheetah, 32 items:
    a reply unpickled in 33 us with its 4 info arrays in it, 11 us without).
    Values of any other type travel as they are, so the rebuilt dicts are equal
    in value and type.
    """
    if not any(infos):
        return None
    keys = list(infos[0])
    if any(list(i) != keys for i in infos):
        return infos
    cols: dict[Any, Any] = {}
    for j, k in enumerate(keys):
        vals = [i[k] for i in infos]
        t = type(vals[0])
        if issubclass(t, np.generic) and not issubclass(t, (np.object_, np.void, np.str_, np.bytes_)) and all(
            type(v) is t for v in vals
        ):
            arr = np.array(vals, dtype=t)
            cols[k] = None if w is not None and w.put_array(f"{INFO_PREFIX}{j}", arr) else arr
        else:
            cols[k] = vals
    return ("cols", keys, cols)


def unpack_infos(packed: Any, n: int, slab_cols: dict[str, np.ndarray] | None = None) -> list[dict]:
    """The list of dicts :func:`pack_infos` was given (fresh dicts); columns it put in the slab are read
    from ``slab_cols``."""
    if packed is None:
        return [{} for _ in range(n)]
    if isinstance(packed, list):
        return packed
    _, keys, cols = packed

    def values(j: int, column: Any) -> list:
        if isinstance(column, list):
            return column
        return list(slab_cols[f"{INFO_PREFIX}{j}"] if column is None else column)  # type: ignore[index]

    per_key = [values(j, cols[k]) for j, k in enumerate(keys)]
    return [dict(zip(keys, vals)) for vals in zip(*per_key)]


# A chunk's per-item outcomes: small arrays that cost more to pickle (~3 us each way) than to put in the slab.
OUTCOMES = ("rewards", "terminations", "truncations", "n_steps")


def pack_outcomes(w: ArrayWriter, **arrays: np.ndarray) -> dict[str, Any]:
    """The :data:`OUTCOMES` arrays for a :class:`ChunkReply`: None for each one written to ``w``'s slab."""
    return {k: None if w.put_array(k, v) else v for k, v in arrays.items()}


def unpack_outcomes(reply: ChunkReply, cols: dict[str, np.ndarray]) -> tuple[Any, Any, Any, Any]:
    """``reply``'s :data:`OUTCOMES` (rewards, terminations, truncations, n_steps), those that travelled in
    the slab read from ``cols``."""
    rewards, terms, truncs, n_steps = reply.rewards, reply.terminations, reply.truncations, reply.n_steps
    return (cols["rewards"] if rewards is None else rewards, cols["terminations"] if terms is None else terms,
            cols["truncations"] if truncs is None else truncs, cols["n_steps"] if n_steps is None else n_steps)


def stack_rows(rows: list) -> np.ndarray | list:
    """Observations that travel in the message (no slab room): one array when they are ndarrays of one
    shape (at least one axis) and dtype, else the list as it is.

    One array pickles as one buffer, and is read back with one copy (Ray's object store hands each
    buffer back separately: 512 Pong rows were 512 buffers, each copied out, then each copied again
    into the batch's array).
    """
    first = rows[0] if rows else None
    if (isinstance(first, np.ndarray) and first.ndim and not first.dtype.hasobject
            and rows_fit(rows, first.dtype, first.shape)):
        return np.stack(rows)
    return rows


def listed_rows(listed: np.ndarray | list | None) -> list:
    """The rows :func:`stack_rows` sent (read-only rows of its array, which nothing else holds)."""
    if isinstance(listed, np.ndarray):
        listed.flags.writeable = False  # the states keep these rows; callers get stacked copies
        return list(listed)
    return listed or []
