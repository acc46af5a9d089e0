"""A worker's side of the lane (:mod:`plan_parallel.wire.lane`): the rows a header names, run on its env.

The items run through the engine's own ``run_raw``, as a chunk of the general path does, so their
results are the inline backend's; only where the inputs come from and the results go differs. The states
of a pickled layout come in the header's tail and go back in the reply's (:func:`~plan_parallel.wire.lane.pack_states_tail`),
their arrays and blobs in the segment's state regions where they fit.
"""
from __future__ import annotations

import pickle
import time
from typing import Any

import numpy as np

from plan_parallel.env.engine import EnvEngine
from plan_parallel.errors import failed_item
from plan_parallel.state import State
from plan_parallel.state.core import get_rng_state
from plan_parallel.wire import lane as wire
from plan_parallel.wire.columns import unpack_states
from plan_parallel.wire.messages import remote_error
from plan_parallel.wire.slabs import PROTOCOL, Slab

__all__ = ["LaneRows"]

F8 = np.dtype(np.float64)


class LaneRows:
    """The lane segments this worker attached (the last :data:`~plan_parallel.wire.lane.MAX_SEGMENTS` keys headers
    named, as the caller keeps them) and the current one's columns.

    The items' states of a row layout carry one RNG value, the env's own (read once): such layouts are only
    made for envs whose step draws nothing, and the caller gives each result the RNG value of the state it
    started from. A pickled layout's states carry their own.
    """

    def __init__(self, engine: EnvEngine, kind: str) -> None:
        self.engine = engine
        self.kind = kind
        self.key = b""
        self.mapped: dict[bytes, tuple[Slab, dict[str, np.ndarray], wire.Layout]] = {}  # key -> its mapping (last used last)
        self.cols: dict[str, np.ndarray] = {}
        self.segment: tuple[Slab, dict[str, np.ndarray], wire.Layout] | None = None  # the current one's mapping
        self.rng: dict | None = None
        self.steps = 0  # the current layout's: a rollout's horizon, or 0 (step calls)
        self.pickled = False  # the current layout's: states travel pickled

    def close(self) -> None:
        for slab, _, _ in self.mapped.values():
            slab.close()
        self.mapped, self.key, self.cols, self.segment = {}, b"", {}, None

    def _attach(self, key: bytes) -> None:
        if key == self.key:
            return
        got = self.mapped.pop(key, None)
        if got is None:
            if len(self.mapped) >= wire.MAX_SEGMENTS:
                self.mapped.pop(next(iter(self.mapped)))[0].close()
            layout = wire.Layout.from_key(key)
            slab = Slab(layout.name, layout.offsets()[1], create=False)
            got = (slab, layout.columns(slab.buf), layout)
        self.mapped[key] = got
        self.segment = got
        _, self.cols, layout = got
        self.steps, self.pickled = layout.steps, layout.pickled
        self.key = key
        if self.rng is None:
            self.rng = get_rng_state(self.engine.adapter.u.np_random)

    def serve(self, data: bytes) -> bytes:
        """The reply to one lane header (env errors travel in it, as a chunk's do)."""
        _, call_id, lo, n, dt, check, key_len = wire.HEADER.unpack_from(data)
        t0 = time.perf_counter()
        try:
            self._attach(bytes(data[wire.HEADER.size:wire.HEADER.size + key_len]))
            t0 = time.perf_counter()  # (a segment's first mapping is not env time: the tuner reads it as a step's)
            if self.pickled:
                assert self.segment is not None
                packed, _, cols = wire.unpack_states_tail(data[wire.HEADER.size + key_len:], self.segment[0])
                states = unpack_states(packed, cols, "", n)
            else:
                states = self._states(lo, lo + n)
            if check:  # (states the caller's vector env validated with its own env: checked here as a chunk's are)
                self.engine.validate_all(states, lo)
            status, tail = self._run(lo, lo + n, dt, states)
        except Exception as e:
            status, tail = wire.ERROR, remote_error(e, failed_item(e))
        return wire.REPLY.pack(wire.TAG, call_id, status, time.perf_counter() - t0) + tail

    def _states(self, lo: int, hi: int) -> list[State]:
        """The states of rows lo..hi of a row layout."""
        c, kind, rng = self.cols, self.kind, self.rng
        sims = c["in_sim"][lo:hi].copy()
        return [State.captured(kind, sim, wire.decode_extra(extra), rng, tuple(wrappers), None, None)
                for sim, extra, wrappers in zip(sims, c["in_extra"][lo:hi].tolist(), c["in_wrappers"][lo:hi].tolist())]

    def _run(self, lo: int, hi: int, dt: int, states: list[State]) -> tuple[int, bytes]:
        c = self.cols
        actions = c["actions"][lo:hi].copy()
        if self.steps:  # a rollout of T steps an item (infos without "n_steps": that is a field of its own)
            parts = self.engine.rollout_raw(states, actions, dt, self.steps, first_index=lo, n=hi - lo)
            out_states, obs, rewards, terms, truncs = (parts.states, parts.observations, parts.rewards,
                                                       parts.terminations, parts.truncations)
            steps, infos = parts.n_steps, parts.infos
        else:
            out_states, obs, rewards, terms, truncs, infos = self.engine.run_raw(states, actions, dt)
            steps = [info.pop("n_steps") for info in infos]
        if not self._fits(out_states, obs):
            return wire.FULL, b""
        c["obs"][lo:hi] = obs
        c["rewards"][lo:hi] = np.array(rewards, dtype=np.float64)
        c["terminations"][lo:hi] = np.array(terms, dtype=bool)
        c["truncations"][lo:hi] = np.array(truncs, dtype=bool)
        c["n_steps"][lo:hi] = steps
        if self.pickled:
            assert self.segment is not None
            slab, _, layout = self.segment
            return wire.STATES, wire.pack_states_tail(out_states, infos if any(infos) else None, slab,
                                                      layout.region("out_states", lo, hi))[0]
        c["out_sim"][lo:hi] = [s.sim for s in out_states]
        c["out_extra"][lo:hi] = [wire.encode_extra(s.extra) for s in out_states]
        c["out_wrappers"][lo:hi] = [s.wrappers for s in out_states]
        if any(infos):
            return wire.INFOS, pickle.dumps(infos, PROTOCOL)
        return wire.OK, b""

    def _fits(self, states: list[State], obs: list) -> bool:
        """Whether the results fit the columns exactly (else the caller runs the call on the general path)."""
        c = self.cols
        sim_shape, n_wrappers = c["out_sim"].shape[1:], c["out_wrappers"].shape[1]
        obs_col = c["obs"]
        for s, o in zip(states, obs):
            if type(o) is not np.ndarray or o.dtype != obs_col.dtype or o.shape != obs_col.shape[1:]:
                return False
            if self.pickled:
                continue
            sim: Any = s.sim
            if type(sim) is not np.ndarray or sim.dtype != F8 or sim.shape != sim_shape or wire.encode_extra(s.extra) is None:
                return False
            if len(s.wrappers) != n_wrappers or any(type(v) is not int for v in s.wrappers):
                return False
        return True
