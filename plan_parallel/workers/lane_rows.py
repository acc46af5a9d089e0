"""A worker's side of the lane (:mod:`plan_parallel.wire.lane`): the rows a header names, run on its env.

The items run through the engine's own ``run_raw``, as a chunk of the general path does, so their
results are the inline backend's; only where the inputs come from and the results go differs. The states
of a pickled layout come in the header's tail and go back in the reply's (:func:`~plan_parallel.wire.lane.pack_states_tail`),
their arrays and blobs in the segment's state regions where they fit.
"""
from __future__ import annotations

import math
import pickle
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from plan_parallel.env.engine import EnvEngine
from plan_parallel.errors import failed_item
from plan_parallel.state import State
from plan_parallel.state.core import get_rng_state
from plan_parallel.wire import lane as wire
from plan_parallel.wire.columns import pack_infos, unpack_states
from plan_parallel.wire.messages import remote_error
from plan_parallel.wire.slabs import PROTOCOL, Slab

__all__ = ["LaneRows", "Mapped"]

F8 = np.dtype(np.float64)


class Mapped(NamedTuple):
    """A lane segment as this worker mapped it."""

    slab: Slab
    cols: dict[str, np.ndarray]
    layout: wire.Layout


class LaneRows:
    """The lane segments this worker attached (the last :data:`~plan_parallel.wire.lane.MAX_SEGMENTS` keys headers
    named, as the caller keeps them) and the current one's columns.

    The items' states of a row layout without RNG words carry one RNG value, the env's own (read once): such
    layouts are only made for envs whose step draws nothing, and the caller gives each result the RNG value of
    the state it started from. A layout with RNG words, and a pickled layout, carry each state's own.
    """

    def __init__(self, engine: EnvEngine, kind: str, attach: Callable[[str, int], Slab | None]) -> None:
        self.engine = engine
        self.kind = kind
        self.attach = attach  # maps a slab the parent lent to a call's observations (by name and size), kept
        self.key = b""
        self.mapped: dict[bytes, Mapped] = {}  # key -> its mapping (last used last)
        self.segment: Mapped | None = None  # the current one (the last header's)
        self.rng: dict | None = None

    def close(self) -> None:
        for mapped in self.mapped.values():
            mapped.slab.close()
        self.mapped, self.key, self.segment = {}, b"", None

    def _attach(self, key: bytes) -> Mapped:
        """The segment ``key`` names, made current (mapped when it is not yet)."""
        if key == self.key:
            assert self.segment is not None
            return self.segment
        got = self.mapped.pop(key, None)
        if got is None:
            if len(self.mapped) >= wire.MAX_SEGMENTS:
                self.mapped.pop(next(iter(self.mapped))).slab.close()
            layout = wire.Layout.from_key(key)
            slab = Slab(layout.name, layout.offsets()[1], create=False)
            got = Mapped(slab, layout.columns(slab.buf), layout)
        self.mapped[key] = self.segment = got
        self.key = key
        if self.rng is None:
            self.rng = get_rng_state(self.engine.adapter.u.np_random)
        return got

    def serve(self, data: bytes) -> bytes:
        """The reply to one lane header (env errors travel in it, as a chunk's do)."""
        (_, call_id, lo, n, dt, check, key_len, lent_len, lent_size, obs_at, states_at, states_rows, src_len, src_size,
         src_at, src_rows) = wire.HEADER.unpack_from(data)
        t0 = time.perf_counter()
        try:
            at = wire.HEADER.size + key_len
            segment = self._attach(bytes(data[wire.HEADER.size:at]))
            layout = segment.layout
            slab = self.attach(bytes(data[at:at + lent_len]).decode("ascii"), lent_size) if lent_len else None
            lent = None if slab is None or obs_at < 0 else self._lent_rows(layout, slab, obs_at, lo, n)
            out = segment.cols if slab is None or states_at < 0 else {
                **segment.cols, **layout.state_columns(slab.buf, states_at, states_rows)}
            at += lent_len
            # (a former result's state columns, in the slab lent to it: mapped beside this call's own, which stays)
            source = self.attach(bytes(data[at:at + src_len]).decode("ascii"), src_size) if src_len else None
            t0 = time.perf_counter()  # (a segment's first mapping is not env time: the tuner reads it as a step's)
            if segment.layout.pickled:
                packed, _, cols = wire.unpack_states_tail(data[at + src_len:], segment.slab)
                states = unpack_states(packed, cols, "", n)
            elif source is None:
                states = self._states(segment.cols, "in_", slice(lo, lo + n), layout)
            else:
                states = self._states(layout.state_columns(source.buf, src_at, src_rows), "out_",
                                      segment.cols["in_source"][lo:lo + n], layout)
            if check:  # (states the caller's vector env validated with its own env: checked here as a chunk's are)
                self.engine.validate_all(states, lo)
            status, tail = self._run(segment, lo, lo + n, dt, states, lent, out)
        except Exception as e:
            status, tail = wire.ERROR, remote_error(e, failed_item(e))
        return wire.REPLY.pack(wire.TAG, call_id, status, time.perf_counter() - t0) + tail

    def _states(self, c: dict[str, np.ndarray], prefix: str, rows: Any, layout: wire.Layout) -> list[State]:
        """The states of ``rows`` (a slice, or an array of row numbers) of a row layout's state columns ``c`` (their
        names ``prefix`` + each stem: the segment's ``in_`` columns, or a former result's ``out_`` columns)."""
        kind = self.kind
        extras, wrappers = c[prefix + "extra"][rows].tolist(), c[prefix + "wrappers"][rows].tolist()
        n = len(extras)
        pairs = (list(zip(extras, c[prefix + "extra_f"][rows].tolist())) if layout.pair
                 else [wire.decode_extra(x) for x in extras])
        rngs = [wire.rng_of_words(w) for w in c[prefix + "rng"][rows].tolist()] if layout.rng else [self.rng] * n
        if layout.blob:
            blobs = c[prefix + "blob"]  # (each row copied once, into its state's bytes)
            at = range(rows.start, rows.stop) if type(rows) is slice else rows.tolist()
            return [State.from_blob(kind, blobs[r].tobytes(), pairs[k], rngs[k], tuple(wrappers[k]), frozen=True)
                    for k, r in enumerate(at)]
        sims: Any
        if layout.scalars:
            sims = list(wire.scalar_struct(layout.scalars).iter_unpack(c[prefix + "scalars"][rows].tobytes()))
        else:
            sims = c[prefix + "sim"][rows]
            if type(rows) is slice:
                sims = sims.copy()  # (rows picked by number are a copy already)
            sims.setflags(write=False)  # (each state's value a row of it, read-only: the states' parts are frozen)
        made = State.of_frozen  # (their extras, tuples of scalars and wrapper counters are ints, floats and None)
        return [made(kind, sims[k], pairs[k], rngs[k], tuple(wrappers[k]), None, None) for k in range(n)]

    @staticmethod
    def _lent_rows(layout: wire.Layout, slab: Slab, start: int, lo: int, n: int) -> np.ndarray:
        """Rows lo..lo+n of the observations lent in ``slab`` from byte ``start``."""
        dtype, shape = np.dtype(layout.obs[0]), layout.obs[1]
        return slab.array(start + lo * dtype.itemsize * math.prod(shape), dtype, (n, *shape))

    def _run(self, segment: Mapped, lo: int, hi: int, dt: int, states: list[State],
             lent: np.ndarray | None, out: dict[str, np.ndarray]) -> tuple[int, bytes]:
        """Run rows lo..hi; their observations go to ``lent`` (rows of the slab lent to them), or to the segment; a row
        layout's result states to the state columns in ``out`` (the segment's, or those lent with the results)."""
        c, layout = segment.cols, segment.layout
        actions = c["actions"][lo:hi].copy()
        in_place = lent is not None and not layout.steps and self.engine.observation_form() == (lent.dtype, lent.shape[1:])
        if layout.steps:  # a rollout of T steps an item (infos without "n_steps": that is a field of its own)
            parts = self.engine.rollout_raw(states, actions, dt, layout.steps, first_index=lo, n=hi - lo)
            out_states, obs, rewards, terms, truncs = (parts.states, parts.observations, parts.rewards,
                                                       parts.terminations, parts.truncations)
            steps, infos = parts.n_steps, parts.infos
        else:
            out_states, obs, rewards, terms, truncs, infos = self.engine.run_raw(states, actions, dt, None,
                                                                                 lent if in_place else None)
            steps = [info.pop("n_steps") for info in infos]
        if not self._fits(c, layout, out_states, obs):
            return wire.FULL, b""
        if not in_place:  # (made in the lent rows already otherwise)
            (c["obs"][lo:hi] if lent is None else lent)[:] = obs
        c["rewards"][lo:hi] = np.array(rewards, dtype=np.float64)
        c["terminations"][lo:hi] = np.array(terms, dtype=bool)
        c["truncations"][lo:hi] = np.array(truncs, dtype=bool)
        c["n_steps"][lo:hi] = steps
        if layout.pickled:  # (each result its own capture: packed without looking for one listed twice)
            return wire.STATES, wire.pack_states_tail(out_states, infos if any(infos) else None, segment.slab,
                                                      layout.region("out_states", lo, hi), unique=True)[0]
        if not self._write_states(out, layout, lo, hi, out_states):
            return wire.FULL, b""
        if any(infos):  # (numpy scalars as a column a key: MuJoCo's, 2 us each to pickle one by one)
            return wire.INFOS, pickle.dumps(pack_infos(infos), PROTOCOL)
        return wire.OK, b""

    @staticmethod
    def _write_states(c: dict[str, np.ndarray], layout: wire.Layout, lo: int, hi: int, states: list[State]) -> bool:
        """Write the result ``states`` into output rows lo..hi of a row layout; False when one does not fit (another
        length of bytes, another form of tuple, extra or RNG: the arrays, counts and wrapper counters :meth:`_fits`
        checked)."""
        if layout.blob:
            blobs = [s.sim_blob() for s in states]
            if any(type(b) is not bytes or len(b) != layout.blob for b in blobs):
                return False
            wire.write_blobs(c["out_blob"], lo, blobs)
        elif layout.scalars:
            packed = wire.pack_scalars([s.sim for s in states], layout.scalars)
            if packed is None:
                return False
            c["out_scalars"][lo:hi] = np.frombuffer(packed, np.uint8).reshape(hi - lo, -1)
        else:
            c["out_sim"][lo:hi] = [s.sim for s in states]
        if layout.pair:
            pairs = [wire.encode_pair(s.extra) for s in states]
            if None in pairs:
                return False
            c["out_extra"][lo:hi] = [p[0] for p in pairs]  # type: ignore[index]
            c["out_extra_f"][lo:hi] = [p[1] for p in pairs]  # type: ignore[index]
        else:
            extras = [wire.encode_extra(s.extra) for s in states]
            if None in extras:
                return False
            c["out_extra"][lo:hi] = extras
        if layout.rng:
            words = [wire.rng_words(s.rng) for s in states]
            if None in words:
                return False
            c["out_rng"][lo:hi] = words
        if layout.wrappers:
            c["out_wrappers"][lo:hi] = [s.wrappers for s in states]
        return True

    @staticmethod
    def _fits(c: dict[str, np.ndarray], layout: wire.Layout, states: list[State], obs: list) -> bool:
        """Whether the results' observations, and their states' arrays and wrapper counters, fit the columns ``c``
        of ``layout`` exactly (else the caller runs the call on the general path): what a write into a column would
        cast or broadcast. A pickled layout's states travel pickled (only the observations are columns); bytes
        forms, tuples, extras, pairs and RNG words are checked as they are written (:meth:`_write_states`)."""
        obs_col = c["obs"]
        dtype, shape = obs_col.dtype, obs_col.shape[1:]
        if not all(type(o) is np.ndarray and o.dtype == dtype and o.shape == shape for o in obs):
            return False
        if layout.pickled:
            return True
        if not layout.blob and not layout.scalars:
            sim_shape = c["out_sim"].shape[1:]
            if not all(type(sim := s.sim) is np.ndarray and sim.dtype == F8 and sim.shape == sim_shape for s in states):
                return False
        n_wrappers = c["out_wrappers"].shape[1]
        wrappers = [s.wrappers for s in states]
        return all(len(w) == n_wrappers for w in wrappers) and all(type(v) is int for w in wrappers for v in w)
