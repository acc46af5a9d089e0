"""The lane: step and rollout calls of fixed-layout states on process workers, without the general path's layers.

A ``step_batch`` (or a ``rollout_batch`` of given actions) the caller waits for, of states the workers or
this process made or checked, with one int ``dt`` and no seeds, of an env whose observations are arrays of
one form, runs here when the pool is idle (:class:`~plan_parallel.batch.placement.Placement`): its inputs
are written once into the columns of a shared segment (:mod:`plan_parallel.wire.lane`), each worker gets a
header naming the rows of a chunk (the next chunk goes to whichever worker answers first), and the results
are read from the output columns. States whose family fits a fixed row
(:meth:`~plan_parallel.state.Adapter.row_extra`) are columns too; any other states travel pickled in the
headers and replies, when an observation is small enough (:data:`MAX_PICKLED_OBS_BYTES`). A call's observations
large enough to lend (ALE's screens), and the result states' columns when theirs are (ALE's 7.7 KB a state), are
written by the workers into a slab lent to its result (:mod:`plan_parallel.wire.leases`), not into the segment.
No chunk, part, codec, future or gather is made; the items run through the workers' engine, so the results equal
the general path's (and the inline backend's).

The headers, the wait for the replies, a death's resend and a timeout are one call's traffic
(:class:`~plan_parallel.batch.lane_call.LaneCall`): what the pool guarantees holds there too, under its lock
and its guard.
"""
from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from plan_parallel.batch.lane_call import LaneCall, LaneReply, Lent, Segment
from plan_parallel.batch.lane_columns import RowForm, read_row_states, row_form, write_row_states
from plan_parallel.batch.parts import SlotState
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.errors import failed_item
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.results import RolloutBatch, StepBatch
from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch, StateColumns
from plan_parallel.state.state_value import checked_by
from plan_parallel.wire.codec import Job, split_by_cost
from plan_parallel.wire.columns import state_maker, unpack_infos
from plan_parallel.wire.lane import (
    ALIGN,
    ERROR,
    FULL,
    INFOS,
    MAX_SEGMENTS,
    RNG_WORDS,
    STATES,
    Layout,
    StatePlace,
    unpack_states_tail,
)
from plan_parallel.wire.leases import LEND_MIN_BYTES, row_layout
from plan_parallel.wire.messages import WorkerInfo, reraise
from plan_parallel.workers.cores import pinned_order

__all__ = ["MAX_PICKLED_OBS_BYTES", "MAX_ROWS", "MIN_ROWS_PER_WORKER", "WAKE_SECONDS", "Lane"]

MAX_ROWS = 4096  # a larger batch takes the general path (its chunks stream; the lane's rows are one segment)
# A chunk holds at least WAKE_SECONDS of env time, up to MIN_ROWS_PER_WORKER items (that many while a step's time
# is not known yet): a woken worker spends ~150 us of CPU on a chunk besides its items (docs/measurements.md, the
# lane), so fewer wake-ups beat more workers for CartPole's ~20-40 us items, and an item of 1 ms is worth a worker.
MIN_ROWS_PER_WORKER = 4
WAKE_SECONDS = 150e-6
# States that travel pickled take the lane when an observation has at most this many bytes: larger ones are
# copied out of the segment a call, where the general path's workers write them into the result's own array.
MAX_PICKLED_OBS_BYTES = 16384


class Inputs(NamedTuple):
    """What :meth:`Lane._write_inputs` wrote: a row layout's states' RNG values, or a pickled layout's states."""

    rngs: list[Any] | None  # (empty when the layout's rows hold them)
    states: list[State] | None
    source: StatePlace | None  # where the workers read a row layout's states (None: the segment's in_ rows)


class Lane:
    """The caller's side of the lane for one pool (see the module docstring).

    Args:
        pool: the workers (process workers only: ``takes_lane``).
        info: what the workers reported (the kind, the spaces, whether states fit a row).
        trust: the token of the states the workers made or checked (``Feeder.trust``); the states the env in
            this process made or checked (its adapter's ``checker``, :attr:`local_token`) are taken too.
    """

    def __init__(self, pool: WorkerPool, info: WorkerInfo, trust: Any) -> None:
        self.pool = pool
        self.kind = info.kind
        self.trust = trust
        self.local_token: Any = None  # the token of the states the env in this process checked or made
        self.last_step_seconds = 0.0  # the last call's env seconds a step, on the workers' clocks
        space = self.observation_space = info.observation_space
        box = isinstance(space, spaces.Box) and pool.worker_type.takes_lane
        self.obs_form = (np.dtype(space.dtype).str, tuple(space.shape)) if box else None
        self.rows = info.row_extra is not None  # states may fit a row layout
        self.pair = info.row_extra == "sticky"  # their extra as an (int, float) pair
        self.rng_words = RNG_WORDS if info.row_rng else 0  # their RNG states in the rows (the step draws)
        self.pickled = box and space.dtype.itemsize * int(np.prod(space.shape)) <= MAX_PICKLED_OBS_BYTES
        # The segment of the last call, and those of the last MAX_SEGMENTS forms of call (a planner alternates
        # steps and rollouts: each keeps its own, mapped by the workers once).
        self.segment: Segment | None = None
        self.segments: dict[tuple, Segment] = {}
        self.state_bytes = 0  # a pickled layout's bytes a row of its state regions, learned from the states sent

    @property
    def layout(self) -> Layout | None:
        """The last call's layout (None: no call yet)."""
        return None if self.segment is None else self.segment.layout

    @property
    def key(self) -> bytes:
        """The last call's layout as a header carries it."""
        return b"" if self.segment is None else self.segment.key

    @property
    def cols(self) -> dict[str, np.ndarray]:
        """The last call's columns."""
        return {} if self.segment is None else self.segment.cols

    def close(self) -> None:
        """Give the segments back to the pool's slabs (they are freed when the pool closes, at exit too)."""
        with ctrl_c_deferred():  # released once: a slab in the free list twice would serve two calls
            for segment in self.segments.values():
                self.pool.feeder.slabs.release(segment.slab)
            self.segments = {}
            self.segment = None

    def takes(self, job: Job) -> bool:
        """Whether ``job`` may run in the lane (the pool's idleness is asked under its lock, in :meth:`run`)."""
        spec = job.rollout  # a rollout of given actions, its final results only
        return (self.obs_form is not None and (self.rows or self.pickled) and job.states is not None and job.keys is None
                and (spec is None or (not spec.return_all and spec.policy is None and job.policy is None))
                and job.seeds is None and type(job.dt) is int and 0 < job.n <= MAX_ROWS
                and isinstance(job.actions, np.ndarray) and not job.actions.dtype.hasobject
                and (job.validated or self._trusted(job.states)))

    def _trusted(self, states: Any) -> bool:
        """Whether the workers or the env in this process made or checked every one of ``states`` (a job's
        ``validated`` states, a vector env's, are taken too: the workers check them, :meth:`_call`)."""
        local, columns = self.local_token, getattr(states, "columns", None)
        if type(columns) is StateColumns:
            return columns.token is self.trust or (local is not None and columns.token is local)
        return checked_by(states, self.trust) or (local is not None and checked_by(states, local))

    def run(self, job: Job, step_seconds: float | None, n_chunks: int) -> StepBatch | RolloutBatch | None:
        """``job``'s StepBatch (or RolloutBatch), run in the lane; None when it cannot (the caller takes the
        general path). ``step_seconds``: a worker's env seconds a step, as the tuner learned it (None: not yet);
        ``n_chunks``: the chunks the tuner would split it in (handed out as workers finish, for balance)."""
        pool = self.pool
        with pool.guarded():
            pool.check_usable()
            if any(s.state is not SlotState.READY for s in pool.slots):
                pool.poll_nowait()  # (replacements started, and their READY replies read)
            ready = pool.ready_idle()
            if not ready:
                return None
            ready = [ready[j] for j in pinned_order([pool.slots[k].worker.core for k in ready])]
            inputs = self._write_inputs(job)
            if inputs is None:
                return None
            lent = self._lend(job.n)
            try:
                replies = self._call(job, ready, step_seconds or 0.0, n_chunks, inputs, lent)
            except BaseException:
                if lent is not None:  # (the workers of headers unanswered are killed before anything else is sent)
                    lent.lease.abandon()
                raise
            if any(r.status == FULL for r in replies.values()):
                return None  # results that do not fit the columns: the general path runs the call again
            result = self._result(job, replies, inputs.rngs, lent)
            pool.stats["lane_sourced"] += inputs.source is not None
            return result

    # ------------------------------------------------------------------ inputs
    def _ensure_layout(self, job: Job, form: RowForm | None) -> None:
        """Make current a segment whose rows fit ``job``: the one kept for its forms of rows, made anew when there
        is none or it has too few rows. ``form``: its states' row (None: they travel pickled)."""
        assert self.obs_form is not None
        actions = job.actions
        pickled = form is None
        row = form or RowForm(0, 0)
        action, steps = (actions.dtype.str, actions.shape[1:]), job.rollout.horizon if job.rollout else 0
        state_bytes = self.state_bytes if pickled else 0
        forms = (row.sim, row.wrappers, action, steps, pickled, row.blob, row.scalars)
        segment = self.segments.get(forms)
        if segment is not None and job.n <= segment.layout.capacity and state_bytes <= segment.layout.state_bytes:
            if segment is not self.segment:
                with ctrl_c_deferred():  # (the most recently used last)
                    self.segments[forms] = self.segments.pop(forms)
                    self.segment = segment
            return
        lay = Layout("", 1 << max(6, (job.n - 1).bit_length()), row.sim, row.wrappers, action, self.obs_form, steps,
                     pickled, state_bytes, row.blob, self.pair and not pickled, 0 if pickled else self.rng_words,
                     row.scalars)
        with ctrl_c_deferred():  # the segments, the current one's layout and its columns change together
            segment = self.segments.pop(forms, None)
            if segment is None or job.n > segment.layout.capacity or lay.state_bytes > segment.layout.state_bytes:
                if segment is not None:  # (workers mapping the old one keep it until their next header names another)
                    self.pool.feeder.slabs.release(segment.slab)
                if len(self.segments) >= MAX_SEGMENTS:
                    self.pool.feeder.slabs.release(self.segments.pop(next(iter(self.segments))).slab)
                slab = self.pool.feeder.slabs.acquire(lay.offsets()[1])
                layout = dataclasses.replace(lay, name=slab.name)
                segment = Segment(slab, layout, layout.key(), layout.columns(slab.buf))
            self.segments[forms] = segment  # (the most recently used last)
            self.segment = segment

    def _write_inputs(self, job: Job) -> Inputs | None:
        """Write ``job``'s actions, and its states when they fit a row layout, into the input rows; None when the
        states fit neither form (the caller takes the general path)."""
        states = job.states
        assert states is not None
        n, written = job.n, None
        if self.rows:
            form = row_form(states[0])
            if form is not None:
                self._ensure_layout(job, form)
                assert self.layout is not None
                written = write_row_states(self.cols, states, self.kind, self.layout, self.pool.feeder.leases)
        if written is None:
            if not self.pickled:
                return None
            self._ensure_layout(job, None)
        self.cols["actions"][:n] = job.actions
        if written is None:
            return Inputs(None, list(states), None)
        return Inputs(written.rngs, None, written.source)

    def _lend(self, n: int) -> Lent | None:
        """A slab lent to the results of ``n`` items: their observations when they are large enough
        (:func:`~plan_parallel.wire.leases.row_layout`: a copy out of the segment would cost more than the lease),
        and a row layout's state columns when theirs are (an ALE state is 7.7 KB); None: both go to the segment."""
        form = row_layout(self.observation_space, n)
        layout = self.layout
        assert layout is not None
        lend_states = not layout.pickled and layout.state_row_bytes * n >= LEND_MIN_BYTES
        if form is None and not lend_states:
            return None
        obs_bytes = 0 if form is None else -(-math.prod(form[1]) * form[0].itemsize // ALIGN) * ALIGN
        states_bytes = layout.state_columns_bytes(n) if lend_states else 0
        lease = self.pool.feeder.leases.lease(obs_bytes + states_bytes)
        buf = lease.view(obs_bytes + states_bytes)
        observations = None if form is None else buf[:math.prod(form[1]) * form[0].itemsize].view(form[0]).reshape(form[1])
        columns = layout.state_columns(buf, obs_bytes, n) if states_bytes else None
        return Lent(lease, observations, columns, lease.slab.name.encode("ascii"), 0 if form else -1,
                    obs_bytes if states_bytes else -1, n)

    # ------------------------------------------------------------------ the call
    def _call(self, job: Job, ready: list[int], step_seconds: float, n_chunks: int, inputs: Inputs,
              lent: Lent | None) -> dict[int, LaneReply]:
        """Split ``job`` in ``n_chunks`` chunks (of :data:`WAKE_SECONDS` of env time at least) and run them on the
        ``ready`` workers (:class:`~plan_parallel.batch.lane_call.LaneCall`): their replies, by each chunk's first
        row. ``inputs``: what was written (a pickled layout's states are sent with their rows; a row layout's may
        be read where a former result's lie); ``lent``: the slab the observations go to."""
        dt = job.dt
        assert isinstance(dt, int) and self.segment is not None
        # A vector env's states (validated with its own env in this process) that no worker made or checked are
        # checked by the workers first, as a chunk's are.
        check = job.validated and not self._trusted(job.states)
        item = job.cost(0, 1) * step_seconds  # an item's env seconds (0: not measured yet)
        least = MIN_ROWS_PER_WORKER if item <= 0 else max(1, min(MIN_ROWS_PER_WORKER, math.ceil(WAKE_SECONDS / item)))
        chunks = split_by_cost(dt, job.n, max(1, min(max(len(ready), n_chunks), job.n // least)))
        # How long the longest chunk takes, from the env time a step took so far: the wait polls (for a reply due
        # within the worker class's spin time) only in a call that short, where a wake-up is a large share of it.
        expected = max(job.cost(lo, hi) for lo, hi in chunks) * step_seconds
        call = LaneCall(self.pool, self.segment, dt, check, inputs.states, inputs.source, lent, job.op.value)
        try:
            return call.run(ready, chunks, expected)
        finally:
            self.state_bytes = max(self.state_bytes, call.state_bytes)  # (the next segment's)

    # ------------------------------------------------------------------ the result
    def _result(self, job: Job, replies: dict[int, LaneReply], rngs: list[Any] | None,
                lent: Lent | None) -> StepBatch | RolloutBatch:
        """The call's result (``rngs``: a row layout's states' RNG values; None: the states came pickled; ``lent``:
        the slab its observations were written to)."""
        errors = [reraise(r.tail, f"raised in {r.worker} during {job.op.value}", lo)
                  for lo, r in replies.items() if r.status == ERROR]
        if errors:
            raise min(errors, key=lambda e: (failed_item(e) is None, failed_item(e) or 0))
        segment = self.segment
        assert segment is not None
        n, c = job.n, segment.cols
        observations = c["obs"][:n].copy() if lent is None or lent.observations is None else lent.observations
        observations.flags.writeable = False
        steps = c["n_steps"][:n].tolist()
        rollout = job.rollout is not None
        infos = [{} for _ in range(n)] if rollout else [{"n_steps": k} for k in steps]  # (a rollout's: a field)
        parts = []
        for lo, r in sorted(replies.items()):
            got = None
            if r.status == INFOS:
                got = unpack_infos(pickle.loads(r.tail), r.rows)
            elif r.status == STATES:
                packed, got, cols = unpack_states_tail(r.tail, segment.slab)
                parts.append((lo, lo + r.rows, state_maker(packed, cols, "", self.trust)))
            if got is not None:  # (the env's keys first, "n_steps" last, as the general path's)
                if not rollout:
                    for info, k in zip(got, steps[lo:lo + len(got)]):
                        info["n_steps"] = k
                infos[lo:lo + len(got)] = got
        out, place = c, None  # (the state columns lent: read as they are, and a later call's workers read them there)
        if lent is not None and lent.states is not None:
            out = lent.states
            place = StatePlace(self.pool.feeder.leases, lent.name, lent.lease.slab.size, lent.states_at, lent.states_rows)
        states = (StateBatch(n, parts, observations) if rngs is None
                  else read_row_states(out, n, self.kind, rngs, observations, self.trust, segment.layout, place))
        stats = self.pool.stats
        stats["batches"] += 1
        stats["items"] += n
        stats["lane_batches"] += 1
        stats["lent_batches"] += lent is not None
        env_seconds = sum(r.env_seconds for r in replies.values())
        stats["env_seconds"] += env_seconds
        self.last_step_seconds = env_seconds / max(1, sum(steps))
        outcomes = (c["rewards"][:n].copy(), c["terminations"][:n].copy(), c["truncations"][:n].copy())
        if rollout:
            return RolloutBatch(states, observations, *outcomes, c["n_steps"][:n].copy(), infos)
        return StepBatch(states, observations, *outcomes, infos)
