"""The op server: what a worker does with each :class:`~plan_parallel.wire.messages.Call`.

Shared by every backend's worker (a process in :mod:`.process`, a Ray actor in
:mod:`.ray_actor`). The server hosts one :class:`~plan_parallel.env.PlanEnv`,
reads a chunk from its slab, validates every state exactly as the inline
backend does (so bad input is answered alike wherever it runs) unless the chunk
says its states passed that check or were made by the workers (see
:class:`~plan_parallel.batch.feeder.Feeder`), runs the items, and writes the results back.
"""
from __future__ import annotations

import math
import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.errors import failed_item
from plan_parallel.factory import quiet_ale_for_good
from plan_parallel.wire.columns import pack_infos, pack_outcomes, pack_states, stack_rows
from plan_parallel.wire.held import NOT_HELD, HeldStates, unpack_held
from plan_parallel.wire.messages import (
    READY,
    Call,
    ChunkReply,
    ChunkRequest,
    Op,
    Reply,
    WorkerInfo,
    remote_error,
    reply_wire,
)
from plan_parallel.wire.slabs import PROTOCOL, ArrayWriter, Slab, read_columns, write_rows
from plan_parallel.workers.kept_envs import KeptEnvs
from plan_parallel.workers.lane_rows import LaneRows

__all__ = ["MAX_ATTACHED", "MAX_ATTACHED_BYTES", "MIN_MESSAGE_ROW_BYTES", "Server", "answer", "build_server", "ready_reply",
           "serve"]

# Slabs a worker keeps attached, at most this many and this many bytes (least recently used ones
# are unmapped): the parent reuses its slabs, but the ones lent to batches whose results the caller
# keeps are new each time, and a slab the parent freed stays in memory while a worker maps it.
MAX_ATTACHED = 32
MAX_ATTACHED_BYTES = 256 << 20
# A Ray actor's chunk makes its observations in one array when each is at least this big, instead of
# stacking them after (server + reply CPU per 256-item chunk, in place / stacked: Pong RGB 0.93-0.96;
# with every size in place, HalfCheetah's 136 bytes 1.006 and CartPole's 16 bytes 1.057).
MIN_MESSAGE_ROW_BYTES = 4096


class Server:
    """A worker's env, the slabs it attached, and its op handlers (the allow-list is :class:`Op`)."""

    def __init__(self, env: PlanEnv, new_env: Callable[[], PlanEnv] | None = None) -> None:
        self.env = env
        self.engine = engine_of(env)  # the checked work a worker runs on its env
        self.kept = KeptEnvs(new_env, env) if new_env is not None else None  # envs kept for a vector env's sub-envs
        self.lane = LaneRows(self.engine, env.kind, self.attached_slab)  # the rows of the lane's segment (wire.lane)
        self.slabs: dict[str, Slab] = {}
        self.held = HeldStates()  # the states chunks brought, for later chunks to name by key
        self._policy_blob: bytes | None = None
        self._policy_obj: Any = None
        self.handlers: dict[Op, Callable[..., Any]] = {
            Op.RESET: self.reset,
            Op.STEP_BATCH: self.step_batch,
            Op.ROLLOUT_BATCH: self.rollout_batch,
            Op.SET_STATE: self.set_state,
        }

    def close(self) -> None:
        self.lane.close()
        for s in self.slabs.values():
            s.close()
        self.slabs.clear()
        try:
            if self.kept is not None:
                self.kept.close()
        finally:
            self.env.close()

    def attached_slab(self, name: str | None, size: int) -> Slab | None:
        """The parent's slab ``name`` of ``size`` bytes, mapped here (kept for later calls, see :data:`MAX_ATTACHED`).

        Making room never unmaps the slab asked for just before, so a message's two slabs stay mapped together: a
        chunk's own and the one lent to its results, a lane call's lent one and the former result it reads."""
        if name is None:
            return None
        s = self.slabs.pop(name, None)
        if s is not None and s.size != size:
            s.close()
            s = None
        if s is None:
            s = Slab(name, size, create=False)
            held = sum(x.size for x in self.slabs.values())
            # (the most recently used one stays: see the docstring)
            while len(self.slabs) > 1 and (len(self.slabs) >= MAX_ATTACHED or held + size > MAX_ATTACHED_BYTES):
                oldest = self.slabs.pop(next(iter(self.slabs)))
                held -= oldest.size
                oldest.close()
        self.slabs[name] = s  # the most recently used last
        return s

    # --- ops -------------------------------------------------------------------
    def reset(self, seed: Any, options: Any, current: bytes | None) -> tuple:
        """Reset the env; ``current``: the caller's current state (pickled), restored first."""
        if current is not None:
            self.env.set_state(pickle.loads(current))
        return self.env.reset(seed, options)

    def set_state(self, blob: bytes) -> None:
        self.env.set_state(pickle.loads(blob))

    def _read(self, req: ChunkRequest) -> tuple[Slab | None, dict[str, np.ndarray], list | None, Any, Any, Any] | None:
        """A chunk's slab, input columns, validated states, actions, dt and seeds; None when it names a state
        this worker does not hold (:mod:`plan_parallel.wire.held`)."""
        slab = self.attached_slab(req.slab, req.slab_size)
        cols = read_columns(slab, req.layout)
        states = None
        if req.states is not None:
            states, fresh = unpack_held(req.states, cols, "in_", req.n, self.held)
            if states is None:
                return None
            if not req.validated:
                self.engine.validate_all(states, req.first_index, req.index_errors)
            if req.states.get("keep"):
                self.held.keep(req.states, [fresh[j] for j in req.states["keep"]])  # type: ignore[index]
        actions = cols.get("actions", req.actions)
        dt = cols.get("dt", req.dt)
        seeds = cols.get("seeds", req.seeds) if req.has_seeds else None
        return slab, cols, states, actions, dt, seeds

    @staticmethod
    def _write_items(w: ArrayWriter, prefix: str, states: list, obs: list,
                     unique: bool = False) -> tuple[dict, np.ndarray | list | None]:
        """N result states (without their observations) and observations (slab rows, or in the message:
        :func:`~plan_parallel.wire.columns.stack_rows`). ``unique``: pack each state listed as its own, without
        looking for objects listed twice (items' final states are one capture each; one listed twice would
        travel twice, equal: CartPole, 512 states, 216 -> 182 us)."""
        packed = pack_states(states, w, prefix, with_obs=False, unique=unique)
        return packed, None if w.put_rows(prefix + "obs", obs) else stack_rows(obs)

    def _write_final(self, w: ArrayWriter, req: ChunkRequest, states: list,
                     obs: list) -> tuple[dict, np.ndarray | list | None, bool]:
        """A chunk's final states and observations: :meth:`_write_items`, with the observations written into
        the batch's lent slab when the request has one and they fit it (then True)."""
        if req.obs_out is not None:
            name, size, offset, dtype, shape = req.obs_out
            if write_rows(self.attached_slab(name, size), offset, np.dtype(dtype), shape, obs):  # type: ignore[arg-type]
                return pack_states(states, w, "", with_obs=False, unique=True), None, True
        return (*self._write_items(w, "", states, obs, unique=True), False)

    def _lent_rows(self, req: ChunkRequest) -> np.ndarray | None:
        """The chunk's rows of the batch's lent slab, when the env makes its observations in place there
        (:meth:`EnvEngine.observation_form`): then nothing is copied into them after."""
        if req.obs_out is None:
            return None
        name, size, offset, dtype, shape = req.obs_out
        form = self.engine.observation_form()
        if form is None or form != (np.dtype(dtype), tuple(shape)) or offset + form[0].itemsize * math.prod(shape) * req.n > size:
            return None
        return self.attached_slab(name, size).array(offset, form[0], (req.n, *form[1]))  # type: ignore[union-attr]

    def _message_rows(self, req: ChunkRequest) -> np.ndarray | None:
        """An array the env makes a chunk's observations in, when they travel in the message (no slab: a Ray
        actor's), the env makes them in place (:meth:`EnvEngine.observation_form`) and an observation is at
        least :data:`MIN_MESSAGE_ROW_BYTES`: sent as it is, not stacked."""
        form = None if req.slab is not None else self.engine.observation_form()
        if form is None or form[0].itemsize * math.prod(form[1]) < MIN_MESSAGE_ROW_BYTES:
            return None
        return np.empty((req.n, *form[1]), dtype=form[0])

    def step_batch(self, req: ChunkRequest) -> ChunkReply | str:
        read = self._read(req)
        if read is None:
            return NOT_HELD
        slab, _, states, actions, dt, seeds = read
        kept = self.kept if req.kept is not None and states is not None and dt == 1 and seeds is None else None
        lent = self._lent_rows(req)
        rows = lent if lent is not None else self._message_rows(req)
        if kept is not None:  # each item on the env kept for its key
            out_states, obs, rewards, terms, truncs, infos = kept.run(req.kept, states, actions, rows,  # type: ignore[arg-type]
                                                                      req.timeout)
        else:
            out_states, obs, rewards, terms, truncs, infos = self.engine.run_raw(states, actions, dt, seeds, rows)
        w = ArrayWriter(slab, req.out_offset)
        listed: np.ndarray | list | None
        if rows is not None:  # in the lent slab already, or in the message as the array they were made in
            packed = pack_states(out_states, w, "", with_obs=False, unique=True)
            listed, written = (rows, False) if lent is None else (None, True)
        else:
            packed, listed, written = self._write_final(w, req, out_states, obs)
        outcomes = pack_outcomes(
            w, rewards=np.array(rewards, dtype=np.float64), terminations=np.array(terms, dtype=bool),
            truncations=np.array(truncs, dtype=bool),
            n_steps=np.fromiter((i.pop("n_steps") for i in infos), dtype=np.int64, count=req.n),
        )
        return self._reply(w, req, outcomes, infos, states=packed, obs=listed, obs_written=written)

    @staticmethod
    def _reply(w: ArrayWriter, req: ChunkRequest, outcomes: dict, infos: list[dict], **fields: Any) -> ChunkReply:
        """A chunk's reply: its info columns written to ``w`` last, then the slab layout and the bytes it needed."""
        info_cols = pack_infos(infos, w)
        checked = 0 if req.validated or req.states is None else req.n
        return ChunkReply(**outcomes, infos=info_cols, layout=w.layout, needed=w.needed - req.out_offset, checked=checked,
                          **fields)

    def _policy(self, blob: bytes | None) -> Any:
        """The policy a request ships (cloudpickled), unpickled once while the same bytes keep coming."""
        if blob is None:
            return None
        if blob != self._policy_blob:
            self._policy_obj = pickle.loads(blob)
            self._policy_blob = blob
        return self._policy_obj

    def rollout_batch(self, req: ChunkRequest) -> ChunkReply | str:
        spec = req.rollout
        assert spec is not None, "a rollout chunk carries its RolloutSpec"
        read = self._read(req)
        if read is None:
            return NOT_HELD
        slab, _, states, actions, dt, seeds = read
        parts = self.engine.rollout_raw(
            states, actions, dt, spec.horizon, policy=self._policy(spec.policy), seeds=seeds,
            first_index=req.first_index, return_all=spec.return_all, n=req.n,
        )
        w = ArrayWriter(slab, req.out_offset)
        packed, listed, written = self._write_final(w, req, parts.states, parts.observations)
        all_packed = all_listed = None
        if spec.return_all:
            flat_states = [s for row in parts.all_states for s in row]  # type: ignore[union-attr]
            flat_obs = [o for row in parts.all_observations for o in row]  # type: ignore[union-attr]
            all_packed, all_listed = self._write_items(w, "all_", flat_states, flat_obs)
        outcomes = pack_outcomes(
            w, rewards=parts.rewards, terminations=np.array(parts.terminations, dtype=bool),
            truncations=np.array(parts.truncations, dtype=bool), n_steps=np.array(parts.n_steps, dtype=np.int64),
        )
        return self._reply(w, req, outcomes, parts.infos, states=packed, obs=listed, all_states=all_packed,
                           all_obs=all_listed, obs_written=written)


def build_server(blob: bytes) -> tuple[Server, WorkerInfo]:
    """Build the env from a cloudpickled ``(factory, adapter)``: the server and what it reports."""
    factory, adapter = pickle.loads(blob)
    quiet_ale_for_good()  # this process is ours: no ALE banner from any env it builds
    env = PlanEnv(factory, adapter=adapter)
    spec = env.spec
    try:
        pickle.dumps(spec, PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        spec = None  # e.g. a wrapper holding a lambda: the parent reads the spec from its own env
    info = WorkerInfo(env.observation_space, env.action_space, env.kind, env.reseedable, os.getpid(), spec,
                      engine_of(env).adapter.row_extra(), engine_of(env).adapter.row_rng())
    return Server(env, lambda: PlanEnv(factory, adapter=adapter)), info


def ready_reply(blob: bytes) -> tuple[Server | None, Reply]:
    """Build the server; the reply to :data:`READY` (its :class:`WorkerInfo`, or the error building raised)."""
    try:
        server, info = build_server(blob)
    except BaseException as e:
        return None, Reply(READY, error=remote_error(e))
    return server, Reply(READY, info)


def answer(server: Server, call: Call) -> Reply:
    """Run one call on ``server``: its :class:`Reply` (env errors travel inside it, with their traceback)."""
    fn = server.handlers.get(call.op)
    t0 = time.perf_counter()
    if fn is None:
        return Reply(call.id, error=remote_error(RuntimeError(
            f"plan_parallel bug: a worker got op {call.op!r}; it answers {sorted(o.value for o in server.handlers)}")))
    try:
        value = fn(*call.args)
    except BaseException as e:
        return Reply(call.id, error=remote_error(e, failed_item(e)),
                     env_seconds=time.perf_counter() - t0)
    return Reply(call.id, value, env_seconds=time.perf_counter() - t0)


def serve(server: Server, call: Call) -> bytes:
    """:func:`answer`, pickled for the pipe (an unpicklable result becomes an error reply)."""
    reply = answer(server, call)
    try:
        return pickle.dumps(reply_wire(reply), PROTOCOL)
    except Exception as e:
        return pickle.dumps(reply_wire(Reply(call.id, error=remote_error(e))), PROTOCOL)
