"""The lane's wire: fixed columns in one shared segment, and the headers that name rows of them.

A step or rollout call of states with a fixed row layout (a family's :meth:`~plan_parallel.state.Adapter.row_extra`:
classic control and MuJoCo whose step draws nothing, ALE, user envs) needs no pickle: the caller writes every input
once into columns of rows ``0..n`` (the states' simulator arrays, their bytes forms of one length, or tuples of
Python floats, ints and bools of one form packed as bytes (:func:`scalar_format`), their ``extra``
as an integer or an (int, float) pair, their wrapper counters, their RNG states as words when the step draws,
the actions), sends each worker a :data:`HEADER` naming its rows ``lo..lo+m``, and reads the results from the
output columns of the same rows. A reply is a :data:`REPLY` header alone, unless it
carries a pickled tail: the items' infos, the env's error, or results that do not fit the columns.

States of any other form (a user env's ``get_state`` values, an RNG the step draws from) travel *pickled*
(:attr:`Layout.pickled`): a header carries its rows' states as one pickle after the layout's key
(:func:`pack_states_tail`), and the reply its results' states and infos (status :data:`STATES`); the
actions, observations and outcomes stay in the columns. Their simulator arrays and bytes forms (an ALE
state's 7.7 KB) go to the segment's state regions when they fit (:attr:`Layout.state_bytes` a row, one
region for the inputs and one for the results), not through the pipe.

A call's observations, when they are large (a screen each), and a row layout's result states, when theirs are (an
ALE state's 7.7 KB), go to a slab lent to the call's result (:mod:`plan_parallel.wire.leases`) whose name the
header carries, not to the segment: the result's arrays are that slab, not a copy.

Every lane message starts with :data:`TAG`; a pickle starts with ``0x80``, so a worker tells the two
apart on the one pipe it reads in order (a ``set_state`` then a lane step run in that order).
"""
from __future__ import annotations

import functools
import math
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from plan_parallel.state import State
from plan_parallel.wire.columns import pack_states
from plan_parallel.wire.slabs import PROTOCOL, ArrayWriter, Slab, read_columns

__all__ = ["ALIGN", "ERROR", "FULL", "HEADER", "INFOS", "MAX_SCALARS", "MAX_SEGMENTS", "MAX_STATE_BYTES", "OK",
           "REPLY", "RNG_WORDS", "STATES", "TAG", "Layout", "StatePlace", "decode_extra", "encode_extra", "encode_pair",
           "pack_scalars", "pack_states_tail", "rng_of_words", "rng_words", "scalar_format", "scalar_struct", "state_bytes_for",
           "unpack_states_tail", "write_blobs"]

TAG = b"L"
# TAG, call id, lo, n, dt, check (1: the worker checks the states first), length of the layout's key that follows,
# length of the name of the slab lent to the call's results that follows the key (0: none), that slab's size, where
# in it the observations' rows start and where the results' state columns start (:meth:`Layout.state_columns`;
# -1: they go to the segment's columns), the rows of those columns (the call's items); then the length of the
# name of the slab the input states' rows are read from (0: the segment's ``in_`` columns; else the rows
# ``in_source`` names of a former result's state columns there, :class:`StatePlace`), that slab's size, where
# its state columns start, and their rows. The names follow the key in that order.
HEADER = struct.Struct("<cqiiiBHHqqqiHqqi")
REPLY = struct.Struct("<cqBd")  # TAG, call id, status, env seconds; a pickled tail follows unless OK
# statuses: columns only; + infos (pickle.dumps(wire.columns.pack_infos(infos))); results that do not fit (run
# again on the general path); the env's error; a pickled layout's states and infos (pickle.dumps((the states
# packed, infos or None)))
OK, INFOS, FULL, ERROR, STATES = 0, 1, 2, 3, 4


class StatePlace(NamedTuple):
    """A lane result's state columns in the slab lent to it (:meth:`Layout.state_columns`), as a later call's
    header names them for its workers to read its input states from: the slab's lease pool (only the workers of
    that pool map it), its name and size, where the columns start in it, and their rows."""

    leases: Any
    name: bytes
    size: int
    at: int
    rows: int

MAX_SEGMENTS = 4  # segments a lane keeps (one a form of call: a planner alternates steps and rollouts), mapped by each worker
NO_EXTRA = -1  # an ``extra`` of None in its column (a count of steps is never negative)
_I64 = (1 << 63) - 1  # an int column's largest value: a larger int does not fit the lane
ALIGN = 64
# A pickled layout's state regions hold at most this many bytes a row (each direction): larger states travel in
# the messages (a segment of 4096 rows holds 2 x 128 MB of regions at most; pages never written cost nothing).
MAX_STATE_BYTES = 32768
MAX_SCALARS = 256  # a longer tuple of scalars travels pickled
_SCALAR_CODES = {float: "d", int: "q", bool: "?"}  # struct's: exact for a float, a 64-bit int, a bool


def encode_extra(extra: Any) -> int | None:
    """``extra`` as its column's integer: None, or a plain int >= 0 of 64 bits (CartPole's
    ``steps_beyond_terminated``); None when it is neither (the state does not fit the lane)."""
    if extra is None:
        return NO_EXTRA
    if type(extra) is int and 0 <= extra <= _I64:
        return extra
    return None


def decode_extra(value: int) -> int | None:
    return None if value == NO_EXTRA else value


def encode_pair(extra: Any) -> tuple[int, float] | None:
    """``extra`` as a pair layout's two columns (ALE's sticky ``(previous action, strength)``): itself when it is a
    tuple of a plain int of 64 bits and a float; None when it is not (the state does not fit the lane)."""
    if type(extra) is tuple and len(extra) == 2 and type(extra[0]) is int and type(extra[1]) is float and (
            -_I64 - 1 <= extra[0] <= _I64):
        return extra
    return None


def scalar_format(sim: Any) -> str | None:
    """A tuple of plain Python floats, ints and bools (not their subclasses: numpy's scalars) as the
    :mod:`struct` codes of its items, which pack it into a row's bytes and unpack it as it was ("d", "q", "?");
    None for any other value, or an empty or longer tuple than :data:`MAX_SCALARS`."""
    if type(sim) is not tuple or not 0 < len(sim) <= MAX_SCALARS:
        return None
    try:
        return "".join([_SCALAR_CODES[type(v)] for v in sim])
    except KeyError:
        return None


@functools.lru_cache(maxsize=64)
def scalar_struct(codes: str) -> struct.Struct:
    """The packer of tuples of the form ``codes`` (:func:`scalar_format`): little-endian, no padding."""
    return struct.Struct("<" + codes)


def pack_scalars(sims: Sequence[Any], codes: str) -> bytes | None:
    """The tuples ``sims``, each of the form ``codes``, packed one after the other; None when one is of another
    form or holds an int beyond 64 bits (the states do not fit the lane)."""
    if any(scalar_format(sim) != codes for sim in sims):
        return None
    pack = scalar_struct(codes).pack
    try:
        return b"".join([pack(*sim) for sim in sims])
    except struct.error:
        return None


def write_blobs(col: np.ndarray, lo: int, blobs: Sequence[Any]) -> None:
    """Write ``blobs``, each as long as a row of the uint8 column ``col``, into its rows from ``lo``: each copied once,
    straight into its row (the column seen as one fixed-length bytes item a row)."""
    col[lo:lo + len(blobs)].view(np.dtype((np.bytes_, col.shape[1])))[:, 0] = blobs


RNG_WORDS = 6  # a PCG64 state in a row: state and inc (128 bits each, low word first), has_uint32, uinteger
_M64 = (1 << 64) - 1


def rng_words(rng: Any) -> tuple[int, ...] | None:
    """A PCG64 bit-generator state (numpy's dict) as :data:`RNG_WORDS` unsigned 64-bit words; None for any other
    value (another bit generator, a key more or less, a number out of range: the state does not fit the lane)."""
    try:
        if type(rng) is not dict or len(rng) != 4 or rng["bit_generator"] != "PCG64":
            return None
        inner = rng["state"]
        s, i, has, u = inner["state"], inner["inc"], rng["has_uint32"], rng["uinteger"]
        # (one test a value, no generator: this runs for every state of an ALE call, on both sides)
        if not (len(inner) == 2 and type(s) is int and type(i) is int and type(has) is int and type(u) is int):
            return None
    except (KeyError, TypeError):
        return None
    if not (0 <= s < 1 << 128 and 0 <= i < 1 << 128 and has in (0, 1) and 0 <= u <= _M64):
        return None
    return s & _M64, s >> 64, i & _M64, i >> 64, has, u


def rng_of_words(w: Sequence[int]) -> dict:
    """The PCG64 state that :func:`rng_words` wrote (numpy's dict, its keys in numpy's order)."""
    return {"bit_generator": "PCG64", "state": {"state": w[0] | w[1] << 64, "inc": w[2] | w[3] << 64},
            "has_uint32": w[4], "uinteger": w[5]}


@dataclass(frozen=True)
class Layout:
    """Where each column of a lane's segment is: the segment's name and its rows, and each row's form.

    Args:
        name: the shared-memory segment.
        capacity: rows in each column.
        sim: float64 values of a state's simulator array.
        wrappers: integer entries of a state's wrapper stack (a TimeLimit's elapsed steps).
        action: the actions' dtype (``np.dtype.str``) and the shape of one action.
        obs: the observations' dtype and the shape of one observation.
        steps: a rollout's horizon T (the actions' and rewards' rows hold T steps); 0: a ``step_batch``.
        pickled: the states travel pickled, in the headers and replies (``sim`` and ``wrappers`` are 0).
        state_bytes: a pickled layout's bytes a row in each state region, ``in_states`` and ``out_states``: a
            chunk's states' arrays and blobs are written in its rows' part of the region where they fit.
        blob: the length of a state's simulator value in its bytes form (``sim`` is then 0; an ALE state's).
        scalars: the form of a state's simulator value that is a tuple of scalars (:func:`scalar_format`), packed in
            ``*_scalars`` (``sim`` and ``blob`` are then 0; a user env's ``get_state`` value).
        pair: ``extra`` is an (int, float) pair (:func:`encode_pair`), in ``*_extra`` and ``*_extra_f``.
        rng: the words of a state's RNG a row (:data:`RNG_WORDS`; 0: the step draws nothing, and each result
            takes its input's RNG value in the caller).
    """

    name: str
    capacity: int
    sim: int
    wrappers: int
    action: tuple[str, tuple[int, ...]]
    obs: tuple[str, tuple[int, ...]]
    steps: int = 0
    pickled: bool = False
    state_bytes: int = 0
    blob: int = 0
    pair: bool = False
    rng: int = 0
    scalars: str = ""

    def forms(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(column, dtype, row shape)`` for every column, in the segment's order."""
        f8, i8, u1, u8 = "<f8", "<i8", "|u1", "<u8"
        state = [("sim", f8, (self.sim,)), ("extra", i8, ()), ("wrappers", i8, (self.wrappers,)),
                 ("blob", u1, (self.blob,)), ("extra_f", f8, ()), ("rng", u8, (self.rng,)),
                 ("scalars", u1, (scalar_struct(self.scalars).size if self.scalars else 0,))]
        return [
            *[("in_" + stem, dtype, shape) for stem, dtype, shape in state],
            ("actions", self.action[0], self.action[1]), ("in_source", i8, ()),
            *[("out_" + stem, dtype, shape) for stem, dtype, shape in state],
            ("obs", self.obs[0], self.obs[1]), ("rewards", f8, (self.steps,) if self.steps else ()),
            ("terminations", "|b1", ()),
            ("truncations", "|b1", ()), ("n_steps", i8, ()),
            ("in_states", "|u1", (self.state_bytes,)), ("out_states", "|u1", (self.state_bytes,)),
        ]

    def state_stems(self) -> tuple[str, ...]:
        """The columns a state's row fills (each as ``in_`` and ``out_``), without their prefix."""
        sim = "blob" if self.blob else "scalars" if self.scalars else "sim"
        return (sim, "extra", "wrappers") + (("extra_f",) if self.pair else ()) + (
            ("rng",) if self.rng else ())

    def offsets(self) -> tuple[dict[str, int], int]:
        """Each column's byte offset, and the segment's size (computed once a layout)."""
        return self._offsets

    @functools.cached_property
    def _offsets(self) -> tuple[dict[str, int], int]:
        at, pos = {}, 0
        for column, dtype, shape in self.forms():
            at[column] = pos
            pos += -(-self.capacity * np.dtype(dtype).itemsize * math.prod(shape) // ALIGN) * ALIGN
        return at, max(pos, ALIGN)

    @functools.cached_property
    def state_row_bytes(self) -> int:
        """The bytes of one row of the results' state columns (``out_`` + each of :meth:`state_stems`)."""
        stems = self.state_stems()
        return sum(np.dtype(dtype).itemsize * math.prod(shape) for column, dtype, shape in self.forms()
                   if column.startswith("out_") and column[4:] in stems)

    def state_columns_bytes(self, rows: int) -> int:
        """The bytes of ``rows`` rows of the results' state columns (``out_`` + each of :meth:`state_stems`) laid out
        on their own, as :meth:`state_columns` places them in a slab lent to a call's results."""
        return _state_places(self, rows)[1]

    def state_columns(self, buf: Any, start: int, rows: int) -> dict[str, np.ndarray]:
        """``rows`` rows of the results' state columns (``out_`` + each of :meth:`state_stems`) over ``buf`` from
        byte ``start``."""
        return {column: np.ndarray((rows, *shape), dtype=dtype, buffer=buf, offset=start + at)
                for column, (at, dtype, shape) in _state_places(self, rows)[0].items()}

    def region(self, column: str, lo: int, hi: int) -> tuple[int, int]:
        """The byte range of rows lo..hi of a state region (``in_states`` or ``out_states``) in the segment."""
        start = self.offsets()[0][column]
        return start + lo * self.state_bytes, start + hi * self.state_bytes

    def columns(self, buf: Any) -> dict[str, np.ndarray]:
        """Every column as an array over ``buf`` (the segment's mapping)."""
        at, _ = self.offsets()
        return {column: np.ndarray((self.capacity, *shape), dtype=dtype, buffer=buf, offset=at[column])
                for column, dtype, shape in self.forms()}

    def key(self) -> bytes:
        """The layout as the bytes a header carries (a worker parses it once while it stays the same)."""
        a, o = self.action, self.obs
        return ";".join([self.name, str(self.capacity), str(self.sim), str(self.wrappers), a[0],
                         ",".join(map(str, a[1])), o[0], ",".join(map(str, o[1])), str(self.steps),
                         str(int(self.pickled)), str(self.state_bytes), str(self.blob), str(int(self.pair)),
                         str(self.rng), self.scalars]).encode("ascii")

    @classmethod
    def from_key(cls, key: bytes) -> Layout:
        (name, capacity, sim, wrappers, adtype, ashape, odtype, oshape, steps, pickled, state_bytes, blob, pair,
         rng, scalars) = key.decode("ascii").split(";")

        def shape(text: str) -> tuple[int, ...]:
            return tuple(int(x) for x in text.split(",")) if text else ()

        return cls(name, int(capacity), int(sim), int(wrappers), (adtype, shape(ashape)), (odtype, shape(oshape)),
                   int(steps), pickled == "1", int(state_bytes), int(blob), pair == "1", int(rng), scalars)


@functools.lru_cache(maxsize=64)
def _state_places(layout: Layout, rows: int) -> tuple[dict[str, tuple[int, str, tuple[int, ...]]], int]:
    """Each result state column's byte offset, dtype and row shape in a region of ``rows`` rows, and its size."""
    places, pos = {}, 0
    stems = layout.state_stems()
    for column, dtype, shape in layout.forms():
        if column.startswith("out_") and column[4:] in stems:
            places[column] = (pos, dtype, shape)
            pos += -(-rows * np.dtype(dtype).itemsize * math.prod(shape) // ALIGN) * ALIGN
    return places, pos


def pack_states_tail(states: Sequence[State], infos: list[dict] | None, slab: Slab, region: tuple[int, int],
                     unique: bool = False) -> tuple[bytes, int]:
    """``(states packed, infos, their columns' places)`` as one pickle: a pickled layout's header tail (``infos``
    None) and the tail of its replies (status :data:`STATES`; ``infos`` None when every one is empty). The states
    are packed as the general path packs them (:func:`~plan_parallel.wire.columns.pack_states`; ``unique``: no
    state object is listed twice, as a worker's results, one capture each): their arrays and blobs written in
    ``region`` of ``slab`` where they fit, the rest in the pickle. Also returns the bytes the region would have
    needed to hold them all."""
    w = ArrayWriter(slab, *region)
    packed = pack_states(states, w, "", False, unique)
    return pickle.dumps((packed, infos, w.layout), PROTOCOL), w.needed - region[0]


def unpack_states_tail(tail: bytes, slab: Slab) -> tuple[dict[str, Any], list[dict] | None, dict[str, np.ndarray]]:
    """A :func:`pack_states_tail`'s packed states, its infos, and the columns it wrote in ``slab`` (arrays copied
    out; blobs as views of the slab, for :func:`~plan_parallel.wire.columns.unpack_states` or ``state_maker``)."""
    packed, infos, places = pickle.loads(tail)
    return packed, infos, read_columns(slab, places) if places else {}


def state_bytes_for(needed: int, rows: int) -> int:
    """The bytes a row of a state region that holds ``rows`` states needing ``needed`` bytes, with room for
    larger ones (a quarter more, and each column's alignment), in whole :data:`ALIGN` units; 0 when they need
    none (no arrays or blobs) or above :data:`MAX_STATE_BYTES` (the states travel in the messages)."""
    if needed <= 0:
        return 0
    row = -(-(needed * 5 // 4 // max(1, rows) + 4 * ALIGN) // ALIGN) * ALIGN
    return row if row <= MAX_STATE_BYTES else 0
