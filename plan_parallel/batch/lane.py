"""The lane: step and rollout calls of fixed-layout states on process workers, without the general path's layers.

A ``step_batch`` (or a ``rollout_batch`` of given actions) the caller waits for, of states the workers or
this process made or checked, with one int ``dt`` and no seeds, of an env whose observations are arrays of
one form, runs here when the pool is idle (:class:`~plan_parallel.batch.placement.Placement`): its inputs
are written once into the columns of a shared segment (:mod:`plan_parallel.wire.lane`), each worker gets a
header naming the rows of a chunk (the next chunk goes to whichever worker answers first), and the results
are read from the output columns. States whose family fits a fixed row
(:meth:`~plan_parallel.state.Adapter.row_extra`) are columns too; any other states travel pickled in the
headers and replies, when an observation is small enough (:data:`MAX_PICKLED_OBS_BYTES`). A call's observations
large enough to lend (ALE's screens) are written by the workers into a slab lent to its result
(:mod:`plan_parallel.wire.leases`), not into the segment. No chunk, part, codec, future or gather is made;
the items run through the workers' engine, so the results equal the general path's (and the inline backend's).

What the pool guarantees holds here too, under its lock and its guard:

* every header carries a call id, and a reply with another id is counted as a stray and dropped;
* a worker that dies is replaced and its header sent again (its input rows are intact: workers only
  read them), within ``max_restarts``; one past the deadline is killed and replaced, and the call raises
  :class:`~plan_parallel.errors.WorkerTimeoutError`;
* an exception while headers are unanswered (Ctrl-C, a timeout, a close from another thread) leaves
  them in their slots' ``lane_due``, and the pool's recovery kills those workers before anything else
  is sent: no worker reads rows that a later call rewrites.
"""
from __future__ import annotations

import dataclasses
import math
import pickle
import time
from collections import deque
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from plan_parallel.batch.lane_columns import read_row_states, row_form, write_row_states
from plan_parallel.batch.parts import SlotState
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.errors import ClosedError, WorkerTimeoutError, failed_item
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.results import RolloutBatch, StepBatch
from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch, StateColumns
from plan_parallel.state.state_value import checked_by
from plan_parallel.wire.codec import Job, split_by_cost
from plan_parallel.wire.columns import state_maker
from plan_parallel.wire.lane import (
    ERROR,
    FULL,
    HEADER,
    INFOS,
    MAX_SEGMENTS,
    REPLY,
    RNG_WORDS,
    STATES,
    TAG,
    Layout,
    pack_states_tail,
    state_bytes_for,
    unpack_states_tail,
)
from plan_parallel.wire.leases import Lease, row_layout
from plan_parallel.wire.messages import WorkerInfo, reraise
from plan_parallel.wire.slabs import Slab

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


class Segment(NamedTuple):
    """A shared segment of the lane, as the caller holds it."""

    slab: Slab
    layout: Layout
    key: bytes  # the layout as a header carries it
    cols: dict[str, np.ndarray]


class Inputs(NamedTuple):
    """What :meth:`Lane._write_inputs` wrote: a row layout's states' RNG values, or a pickled layout's states."""

    rngs: list[Any] | None  # (empty when the layout's rows hold them)
    states: list[State] | None


class Lent(NamedTuple):
    """The slab lent to a call's observations (:mod:`plan_parallel.wire.leases`) and the result's array over it."""

    lease: Lease
    observations: np.ndarray
    name: bytes  # the slab's name, as a header carries it


class Reply(NamedTuple):
    """A worker's answer to its lane header."""

    status: int  # wire.lane's OK, INFOS, FULL, ERROR or STATES
    tail: bytes  # the pickled infos, error, or states and infos
    rows: int  # how many rows it answers for
    env_seconds: float
    worker: str  # its name, for an error's note


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
        self.sent_at: dict[int, float] = {}  # when each worker was sent its header (time.monotonic())
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
            inputs = self._write_inputs(job)
            if inputs is None:
                return None
            lent = self._lend(job.n)
            try:
                replies = self._call(job, ready, step_seconds or 0.0, n_chunks, inputs.states, lent)
            except BaseException:
                if lent is not None:  # (the workers of headers unanswered are killed before anything else is sent)
                    lent.lease.abandon()
                raise
            if any(r.status == FULL for r in replies.values()):
                return None  # results that do not fit the columns: the general path runs the call again
            return self._result(job, replies, inputs.rngs, lent)

    # ------------------------------------------------------------------ inputs
    def _ensure_layout(self, job: Job, sim: int, wrappers: int, blob: int, pickled: bool) -> None:
        """Make current a segment whose rows fit ``job``: the one kept for its forms of rows, made anew when there
        is none or it has too few rows. ``sim`` values, ``wrappers`` entries and ``blob`` bytes a state (0 when
        ``pickled``)."""
        assert self.obs_form is not None
        actions = job.actions
        lay = Layout("", 1 << max(6, (job.n - 1).bit_length()), sim, wrappers, (actions.dtype.str, actions.shape[1:]),
                     self.obs_form, job.rollout.horizon if job.rollout else 0, pickled,
                     self.state_bytes if pickled else 0, blob, self.pair and not pickled,
                     0 if pickled else self.rng_words)
        forms = (lay.sim, lay.wrappers, lay.action, lay.steps, lay.pickled, lay.blob)
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
        n, rngs = job.n, None
        if self.rows:
            form = row_form(states[0])
            if form is not None:
                self._ensure_layout(job, *form, False)
                assert self.layout is not None
                rngs = write_row_states(self.cols, states, self.kind, self.layout)
        if rngs is None:
            if not self.pickled:
                return None
            self._ensure_layout(job, 0, 0, 0, True)
        self.cols["actions"][:n] = job.actions
        return Inputs(rngs, None if rngs is not None else list(states))

    def _lend(self, n: int) -> Lent | None:
        """A slab lent to ``n`` observations when they are large enough (:func:`~plan_parallel.wire.leases.row_layout`:
        a copy out of the segment would cost more than the lease), or None: they go to the segment."""
        form = row_layout(self.observation_space, n)
        if form is None:
            return None
        dtype, shape = form
        lease = self.pool.feeder.leases.lease(math.prod(shape) * dtype.itemsize)
        return Lent(lease, lease.array(dtype, shape), lease.slab.name.encode("ascii"))

    # ------------------------------------------------------------------ the call
    def _call(self, job: Job, ready: list[int], step_seconds: float, n_chunks: int,
              states: list[State] | None, lent: Lent | None) -> dict[int, Reply]:
        """Split ``job`` in ``n_chunks`` chunks (of :data:`WAKE_SECONDS` of env time at least), send each of the ``ready``
        workers one (with ``states``' of its rows, a pickled layout's) and the next to whichever answers first, and
        wait for every reply, by each chunk's first row. Each header sent is a writer of ``lent``'s slab until its
        reply is read; one unanswered when the call ends otherwise (a death, an exception) leaves the slab tainted:
        freed, never lent again."""
        pool, dt = self.pool, job.dt
        assert isinstance(dt, int)
        # A vector env's states (validated with its own env in this process) that no worker made or checked are
        # checked by the workers first, as a chunk's are.
        check = job.validated and not self._trusted(job.states)
        item = job.cost(0, 1) * step_seconds  # an item's env seconds (0: not measured yet)
        least = MIN_ROWS_PER_WORKER if item <= 0 else max(1, min(MIN_ROWS_PER_WORKER, math.ceil(WAKE_SECONDS / item)))
        chunks = split_by_cost(dt, job.n, max(1, min(max(len(ready), n_chunks), job.n // least)))
        queue = deque(chunks)
        due: dict[int, tuple[int, int]] = {}  # slot -> the rows (lo, hi) it was sent
        tails: dict[tuple[int, int], bytes] = {}  # (kept for a replacement of a worker that died)

        segment = self.segment
        assert segment is not None

        def send(k: int, rows: tuple[int, int]) -> None:
            tail = tails.get(rows)
            if tail is None:
                if states is None:
                    tail = b""
                else:
                    lo, hi = rows
                    tail, needed = pack_states_tail(states[lo:hi], None, segment.slab,
                                                    segment.layout.region("in_states", lo, hi))
                    self.state_bytes = max(self.state_bytes, state_bytes_for(needed, hi - lo))  # (the next segment's)
                tails[rows] = tail
            self._send(k, rows, dt, check, tail, lent)
            due[k] = rows

        replies: dict[int, Reply] = {}
        # How long the longest chunk takes, from the env time a step took so far: the wait polls (for a reply due
        # within the worker class's spin time) only in a call that short, where a wake-up is a large share of it.
        expected = max(job.cost(lo, hi) for lo, hi in chunks) * step_seconds
        # The call's workers are polled in one order until it ends (the worker class reuses its poll object while
        # the same pipes are polled; one that answered its last chunk is still polled, for its death).
        # The list of their workers is made again only when one was replaced (it died in the call).
        for k in ready[:len(chunks)]:
            send(k, queue.popleft())
        polled = sorted(due)
        stale = True
        while due:
            if stale:
                ks = list(polled)
                workers = [pool.slots[k].worker for k in ks]
                stale = False
            now = time.monotonic()
            oldest = min(self.sent_at[k] for k in due)
            first = oldest + pool.timeout if pool.timeout else None
            due_at = oldest + expected
            ready = pool.worker_type.wait_any(workers, None if first is None else max(0.0, first - now), pool.wake_fd,
                                              max(due_at - now, expected))
            if pool.closing:
                raise ClosedError("the env was closed while this batch was in flight")
            for j in ready:
                k = ks[j]
                if k not in due:  # done with this call: its death (it is replaced) or a stray reply woke it
                    worker = pool.slots[k].worker
                    self._read(k)
                    if pool.slots[k].worker is not worker:
                        polled.remove(k)
                        stale = True
                    continue
                got = self._read(k)
                if got is not None:
                    if lent is not None:
                        lent.lease.writer_done(killed=False)
                    lo = due.pop(k)[0]
                    replies[lo] = got
                    if got.status == FULL:
                        queue.clear()  # the general path runs the call again
                    elif got.status == ERROR:  # the chunks before it still run: the first item that fails raises
                        queue = deque(rows for rows in queue if rows[0] < lo)
                    if queue:
                        send(k, queue.popleft())
                elif pool.slots[k].lane_due is None:  # it died: its replacement gets the same rows
                    if lent is not None:
                        lent.lease.writer_done(killed=True)
                    pool.wait_started(k)
                    send(k, due[k])
                    stale = True
            now = time.monotonic()
            for k in due:
                if pool.timeout is not None and now > self.sent_at[k] + pool.timeout:
                    self._time_out(k, due[k], job.op.value)
        return replies

    def _send(self, k: int, rows: tuple[int, int], dt: int, check: bool, tail: bytes, lent: Lent | None) -> None:
        slot = self.pool.slots[k]
        call_id = self.pool.next_id()
        key = self.key
        name, size = (b"", 0) if lent is None else (lent.name, lent.lease.slab.size)
        header = HEADER.pack(TAG, call_id, rows[0], rows[1] - rows[0], dt, check, len(key), len(name), size) + key + name + tail
        self.sent_at[k] = time.monotonic()  # (its timeout counts from here: a replacement's anew)
        with ctrl_c_deferred():  # a header written is a header due (and a writer of the lent slab)
            if lent is not None:
                lent.lease.add_writer()
            slot.lane_due = (call_id, rows[0], rows[1] - rows[0])
            try:
                slot.worker.send(header)
            except OSError:
                pass  # gone: the wait sees its sentinel and sends the header to its replacement

    def _read(self, k: int) -> Reply | None:
        """Worker ``k``'s reply to its header; None when it has none (a stray was dropped, or it died)."""
        pool, slot = self.pool, self.pool.slots[k]
        worker = slot.worker
        data = worker.receive()
        if data is None:
            how = worker.dead()
            pool.on_death(k, f"died with {how or 'its pipe closed'}")
            return None
        if data[:1] != TAG or len(data) < REPLY.size:
            pool.stats["stray_replies"] += 1
            return None
        _, call_id, status, env_seconds = REPLY.unpack_from(data)
        if slot.lane_due is None or call_id != slot.lane_due[0]:
            pool.stats["stray_replies"] += 1
            return None
        rows = slot.lane_due[2]
        slot.lane_due = None
        pool.stats["busy_seconds"][k] += env_seconds
        pool.stats["lane_chunks"] += 1
        return Reply(status, bytes(data[REPLY.size:]), rows, env_seconds, worker.name)

    def _time_out(self, k: int, rows: tuple[int, int], op: str) -> None:
        pool, slot = self.pool, self.pool.slots[k]
        lo, hi = rows
        name = slot.worker.name
        slot.worker.kill()
        pool.stats["timeouts"] += 1
        pool.on_death(k, f"timed out after {pool.timeout} s")
        raise WorkerTimeoutError(f"{name} did not finish {op} ({hi - lo} items) within {pool.timeout} s; "
                                 "it was killed and replaced")

    # ------------------------------------------------------------------ the result
    def _result(self, job: Job, replies: dict[int, Reply], rngs: list[Any] | None,
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
        observations = c["obs"][:n].copy() if lent is None else lent.observations
        observations.flags.writeable = False
        steps = c["n_steps"][:n].tolist()
        rollout = job.rollout is not None
        infos = [{} for _ in range(n)] if rollout else [{"n_steps": k} for k in steps]  # (a rollout's: a field)
        parts = []
        for lo, r in sorted(replies.items()):
            got = None
            if r.status == INFOS:
                got = pickle.loads(r.tail)
            elif r.status == STATES:
                packed, got, cols = unpack_states_tail(r.tail, segment.slab)
                parts.append((lo, lo + r.rows, state_maker(packed, cols, "", self.trust)))
            if got is not None:  # (the env's keys first, "n_steps" last, as the general path's)
                if not rollout:
                    for info, k in zip(got, steps[lo:lo + len(got)]):
                        info["n_steps"] = k
                infos[lo:lo + len(got)] = got
        states = (StateBatch(n, parts, observations) if rngs is None
                  else read_row_states(c, n, self.kind, rngs, observations, self.trust, segment.layout))
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
