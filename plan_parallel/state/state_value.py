"""The state value: what restores a gymnasium env exactly.

A :class:`State` is a self-contained, picklable value that restores a gymnasium
env -- simulator, hidden Python fields, the env's ``np_random`` and the state of
every wrapper on the stack -- exactly, in this process or in another one built
from the same env id and kwargs. Adapters (:mod:`plan_parallel.state.core`)
capture and restore it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from plan_parallel.errors import StateError, mark_failed_item
from plan_parallel.state.sim_blobs import sim_blobs
from plan_parallel.state.values import value_digest, values_equal

__all__ = ["MAX_TOKENS", "RowBytes", "State", "checked_by", "freeze", "mark_checked", "validate_each"]

_ATOMS = frozenset({int, float, bool, str, bytes, type(None)})


def freeze(value: Any) -> Any:
    """Make every ndarray in ``value`` read-only: ``value`` itself, or one nested in its tuples, lists and
    dict values (a PCG64 bit-generator state holds Python ints only: not walked). Returns ``value``.

    Only the array objects a state holds are marked: an array viewed by them elsewhere keeps its flags.
    """
    t = type(value)
    if t is np.ndarray:
        if value.flags.writeable:
            value.setflags(write=False)
    elif t in _ATOMS:
        pass
    elif t is tuple or t is list:
        last: Any = None
        for v in value:  # (a chunk's column: the same RNG dict item after item, tuples of ints: no call for those)
            tv = type(v)
            if v is last or tv in _ATOMS:
                continue
            if tv is tuple:
                for x in v:
                    if type(x) not in _ATOMS:
                        break
                else:
                    continue
            freeze(v)
            last = v
    elif t is dict:
        if value.get("bit_generator") != "PCG64":
            for v in value.values():
                freeze(v)
    elif isinstance(value, np.ndarray):
        value.setflags(write=False)
    return value


def _freeze_parts(sim: Any, extra: Any, wrappers: tuple) -> None:
    """:func:`freeze` of a new state's simulator value, hidden fields and wrapper entries (the common cases
    spelt out, without a call of :func:`freeze`: :meth:`State.captured` runs once an item)."""
    if type(sim) is np.ndarray:
        sim.setflags(write=False)
    elif sim is not None and type(sim) not in _ATOMS:
        freeze(sim)
    if extra is not None and type(extra) not in _ATOMS:
        freeze(extra)
    for v in wrappers:
        if type(v) not in _ATOMS:
            freeze(v)


class RowBytes(NamedTuple):
    """A simulator value's bytes form kept as row ``row`` of a read-only uint8 ``column`` (a lane result's), until a
    state made of it needs it as bytes (:meth:`State.sim_blob`): a state that is only given back to the lane never
    copies it out. Until then the state keeps the whole column alive, as its ``obs`` keeps its batch's
    observations (a 64-item Pong result's column is 490 KB)."""

    column: np.ndarray
    row: int

    def read(self) -> bytes:
        return self.column[self.row].tobytes()


class State:
    """The complete state of one env, as a picklable value.

    Attributes:
        kind: which adapter, env class and wrapper stack produced this state,
            e.g. ``"classic:CartPoleEnv|TimeLimit"``. A state restores only into an
            env of the same kind.
        sim: the simulator's state (an ndarray for classic control and MuJoCo, an
            ``ale_py.ALEState`` for Atari, plain Python values for toy text). A state
            that came from a worker holds an ALEState as its bytes until ``sim`` is
            first read (:meth:`from_blob`).
        extra: hidden Python fields the env's ``step`` reads (a tuple, or None).
        rng: the env's ``np_random`` bit-generator state (a dict), or None.
        wrappers: one entry per stateful wrapper on the stack, outermost first.
        obs: the observation the env returned at this state (None if unknown).
            It is kept so that a restored env can report its observation.
        held_by: the library's own record of the process workers holding this state (see
            :mod:`plan_parallel.wire.held`); not part of its value: never compared, pickled or copied.
        source_row: the library's own record of the batch columns this state was read from (see
            :func:`~plan_parallel.batch.lane_columns.read_row_states`), so that a call given it back copies its
            row; not part of its value: never compared, pickled or copied.

    States compare equal when every field is bitwise equal, and hash by
    :meth:`key`. They are values: every array a state holds (in ``sim``, ``extra``,
    ``rng``, ``wrappers`` and ``obs``) is read-only from the state's creation on
    (:func:`freeze`), so no backend can step a state other than the one the caller
    holds. To change a state, build a new one from copies::

        sim = state.sim.copy(); sim[2] += 0.05
        edited = State(state.kind, sim, state.extra, state.rng, state.wrappers, state.obs)

    The dicts, lists and other objects a state holds are values too: replace them, never edit them
    in place (a worker that holds the state would keep the old value).
    """

    __slots__ = ("_blob", "_checked", "_key", "_obs", "_sim", "extra", "held_by", "kind", "rng", "source_row",
                 "wrappers")

    def __init__(
        self,
        kind: str,
        sim: Any,
        extra: Any = None,
        rng: dict | None = None,
        wrappers: tuple = (),
        obs: Any = None,
    ) -> None:
        self.kind = kind
        self._sim = sim
        self._blob: bytes | RowBytes | None = None
        self._checked: Any = None  # the token(s) of the checks it passed, or of the envs that made it (validate_each)
        self.held_by: Any = None  # the workers' tables holding it: {table id: its key and fields}, or SENT_ONCE (wire.held)
        self.source_row: Any = None  # (columns, row, extra, rng, wrappers) it was read from, or None (batch.lane_columns)
        self.extra = freeze(extra)
        self.rng = freeze(rng)
        self.wrappers = freeze(wrappers)
        self._obs = freeze(obs)
        freeze(sim)

    @classmethod
    def captured(cls, kind: str, sim: Any, extra: Any, rng: dict | None, wrappers: tuple, obs: Any,
                 checker: Any) -> State:
        """A state an adapter has just captured from its env: it restores that env by construction, so
        :func:`validate_each` with the adapter's ``checker`` token does not check it. ``rng`` is frozen
        where it was read (an adapter's :func:`~plan_parallel.state.core.get_rng_state`, a chunk's column).

        ``obs`` is frozen where the state reaches a caller (:meth:`obs`): most states get a row of their
        batch's read-only array instead, and a worker's states only travel, so freezing the env's array
        here would be spent for nothing.
        """
        _freeze_parts(sim, extra, wrappers)
        s = cls.__new__(cls)
        s.kind, s._sim, s._blob, s._checked, s.held_by, s.source_row = kind, sim, None, checker, None, None
        s.extra, s.rng, s.wrappers, s._obs = extra, rng, wrappers, obs
        return s

    @classmethod
    def of_frozen(cls, kind: str, sim: Any, extra: Any, rng: dict | None, wrappers: tuple, obs: Any,
                  checker: Any, blob: bytes | RowBytes | None = None) -> State:
        """:meth:`captured`, of parts its caller made read-only already (rows of a chunk's columns, frozen once a
        chunk: :func:`freeze`); with ``blob``, the simulator value's bytes form (``sim`` is then not decoded)."""
        s = cls.__new__(cls)
        s.kind, s._sim, s._blob, s._checked, s.held_by, s.source_row = kind, sim, blob, checker, None, None
        s.extra, s.rng, s.wrappers, s._obs = extra, rng, wrappers, obs
        return s

    @classmethod
    def from_blob(cls, kind: str, blob: bytes | RowBytes, extra: Any = None, rng: dict | None = None, wrappers: tuple = (),
                  obs: Any = None, checker: Any = None, frozen: bool = False) -> State:
        """A state whose simulator value is given in its family's bytes form (:func:`register_sim_blobs`).

        It is decoded the first time :attr:`sim` is read. A state that only
        travels (from a worker, back to a worker, pickled) is never decoded. ``blob`` may be a :class:`RowBytes`,
        copied out when first needed.
        ``checker``: the token of the check it passed, or of the envs that made it (see :func:`validate_each`).
        ``rng`` is frozen where it was read, as :meth:`captured`'s; ``frozen``: ``extra`` and ``wrappers`` too.
        """
        if not frozen:
            _freeze_parts(None, extra, wrappers)
        return cls.of_frozen(kind, _UNDECODED, extra, rng, wrappers, obs, checker, blob)

    @property
    def sim(self) -> Any:
        """The simulator's state (see the class docstring)."""
        sim = self._sim
        if sim is _UNDECODED:
            codec = sim_blobs(self.kind)
            blob = self.sim_blob()
            assert codec is not None and blob is not None, "only a family with a bytes form makes such a state"
            sim = self._sim = freeze(codec.from_bytes(blob))
        return sim

    @sim.setter
    def sim(self, value: Any) -> None:
        self._sim = freeze(value)
        if hasattr(self, "_key"):
            del self._key  # digested again from the new value
        self._blob = None
        self._checked = None  # a new value is checked again
        self.held_by = None  # and sent again
        self.source_row = None  # (its row holds the old value)

    @property
    def obs(self) -> Any:
        """The observation the env returned at this state (see the class docstring); read-only once the state
        reaches a caller (made by :meth:`captured`, it is frozen there: :func:`freeze`)."""
        return self._obs

    @obs.setter
    def obs(self, value: Any) -> None:
        if type(value) is not np.ndarray or value.flags.writeable:  # a row of its batch's read-only array: as it is
            freeze(value)
        self._obs = value

    @staticmethod
    def share_rows(states: Sequence[State], rows: Any) -> None:
        """Each state's ``obs`` becomes its row of ``rows``, an array made read-only here first (rows of a
        read-only array are read-only: nothing is checked or set a state)."""
        rows.setflags(write=False)
        for s, row in zip(states, rows):
            s._obs = row

    @property
    def wire_sim(self) -> Any:
        """The simulator value as this object holds it: :attr:`sim`, or its bytes form when not decoded yet."""
        return self.sim_blob() if self._sim is _UNDECODED else self._sim

    def sim_blob(self) -> bytes | None:
        """The simulator value in its family's bytes form (None for a family without one), kept once made.

        Raises:
            Exception: the family's serializer's own error for a malformed value.
        """
        blob = self._blob
        if type(blob) is RowBytes:  # copied out once
            blob = self._blob = blob.read()
        if blob is not None:
            return blob  # type: ignore[return-value]  # (bytes: a RowBytes was read above)
        codec = sim_blobs(self.kind)
        if codec is None:
            return None
        blob = self._blob = codec.to_bytes(self._sim)  # kept: a state sent again is not serialized again
        return blob

    @property
    def family(self) -> str:
        """The adapter family name, e.g. ``"classic"``, ``"ale"``, ``"mujoco"``."""
        return self.kind.split(":", 1)[0]

    def __reduce__(self):
        if self._sim is _UNDECODED:
            return (State.from_blob, (self.kind, self.sim_blob(), self.extra, self.rng, self.wrappers, self.obs))
        return (State, (self.kind, self._sim, self.extra, self.rng, self.wrappers, self.obs))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return (
            self.kind == other.kind
            and values_equal(self.sim, other.sim)
            and values_equal(self.extra, other.extra)
            and values_equal(self.rng, other.rng)
            and values_equal(self.wrappers, other.wrappers)
            and values_equal(self.obs, other.obs)
        )

    def key(self) -> bytes:
        """A stable 16-byte digest of what the state restores (kind, sim, extra, rng, wrappers).

        Equal states have equal keys, in any process and run: for transposition
        tables and deduplication. The observation is left out (it follows from the
        rest). Computed once per state object.
        """
        k = getattr(self, "_key", None)
        if k is None:
            k = self._key = value_digest((self.kind, self.sim, self.extra, self.rng, self.wrappers))
        return k

    def __hash__(self) -> int:
        return int.from_bytes(self.key()[:8], "little")

    def diff(self, other: State) -> list[str]:
        """Names of the fields that differ from ``other`` (empty when equal)."""
        out = []
        for name in ("kind", "sim", "extra", "rng", "wrappers", "obs"):
            if not values_equal(getattr(self, name), getattr(other, name)):
                out.append(name)
        return out

    def __repr__(self) -> str:
        sim = self.sim
        if isinstance(sim, np.ndarray):
            sim_r = f"array{sim.shape}:{sim.dtype}"
        else:
            sim_r = type(sim).__name__
        return f"State({self.kind!r}, sim={sim_r}, extra={self.extra!r}, wrappers={self.wrappers!r})"


_UNDECODED = object()  # State._sim of a state made from_blob, until it is decoded


def validate_each(states: Sequence[State], check: Any, first_index: int = 0, index_errors: bool = True,
                  checker: Any = None) -> None:
    """``check(state)`` for each of ``states``, items ``first_index ...`` of a batch; an item that is the
    same object as the one before it (N items from one start) is not checked again.

    With ``checker`` (the token of the adapter whose full check ``check`` is), a state that check passed
    once, or that the adapter captured (:meth:`State.captured`), is not checked again: states are
    values (one changed in place is a bug of its own: its key would be stale too), and a planner
    passes the states a batch returned straight back (CartPole: ~1 us of ~10 an item). The token is
    the adapter's own, not its kind: two MuJoCo envs of one class may load different models. A state
    keeps the tokens of the last :data:`MAX_TOKENS` checks it passed (a process env's workers mark the
    states they checked with a token of their own: :class:`~plan_parallel.batch.feeder.Feeder`).

    Raises:
        StateError: ``states[k]: ...`` (the check's own message when ``index_errors`` is False), with
            the item's index in ``states`` (:func:`~plan_parallel.errors.failed_item`).
    """
    last: object = object()  # no item is this
    for i, s in enumerate(states):
        if s is last or (checker is not None and type(s) is State and (
                (c := s._checked) is checker or (type(c) is tuple and checker in c))):  # (_has, without a call a state)
            last = s
            continue
        try:
            check(s)
        except StateError as exc:
            err = StateError(f"states[{first_index + i}]: {exc}") if index_errors else exc
            mark_failed_item(err, i)
            raise err from None
        if checker is not None and type(s) is State:
            _add(s, checker)
        last = s


MAX_TOKENS = 4  # a state remembers the checks of this many envs at most (the latest ones)


def _has(checked: Any, token: Any) -> bool:
    """Whether a state's ``_checked`` holds ``token``: it is the token, or a tuple of tokens with it (tokens
    compare as themselves: ``object()``, or an adapter's weak reference)."""
    return checked is token or (type(checked) is tuple and token in checked)


def _add(s: State, token: Any) -> None:
    """Add ``token`` to the tokens ``s`` holds (one env's check does not erase another's: a state passed to
    two envs in turn, or to the workers and the local env of one, is not checked again and again)."""
    c = s._checked
    if c is None or c is token:
        s._checked = token
    elif type(c) is tuple:
        if not _has(c, token):
            s._checked = (*c[1 - MAX_TOKENS:], token)
    else:
        s._checked = (c, token)


def checked_by(states: Sequence[State], token: Any) -> bool:
    """Whether every one of ``states`` passed the check ``token`` stands for, or was made by the envs it
    stands for (see :func:`validate_each`)."""
    for s in states:  # (the calls of _has spelled out: ~1 us a state in place with them, CartPole B=512)
        if type(s) is not State:
            return False
        c = s._checked
        if c is not token and not (type(c) is tuple and token in c):
            return False
    return True


def mark_checked(states: Sequence[State], token: Any) -> None:
    """Note that ``states`` passed the check ``token`` stands for (see :func:`validate_each`)."""
    for s in states:
        if type(s) is State:
            _add(s, token)
