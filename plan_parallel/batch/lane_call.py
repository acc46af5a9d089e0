"""One call of the lane on the workers: its headers, the wait for their replies, a death's resend, a timeout.

:class:`~plan_parallel.batch.lane.Lane` writes a call's inputs into a segment and reads its result; a
:class:`LaneCall` carries the call in between, under the pool's lock and guard: each of the ready workers is
sent a header naming a chunk's rows (a pickled layout's states in its tail), the next chunk goes to whichever
answers first, and the call ends when every chunk's reply is read.

* every header carries a call id, and a reply with another id is counted as a stray and dropped;
* a worker that dies is replaced and its header sent again (its input rows are intact: workers only read
  them), within ``max_restarts``; one past the deadline is killed and replaced, and the call raises
  :class:`~plan_parallel.errors.WorkerTimeoutError`;
* a header is a writer of the slab lent to the call's observations until its reply is read; a header
  unanswered when the call ends otherwise stays in its slot's ``lane_due``, and the pool's recovery kills
  its worker before anything else is sent.
"""
from __future__ import annotations

import time
from collections import deque
from typing import NamedTuple

import numpy as np

from plan_parallel.batch.pool import WorkerPool
from plan_parallel.errors import ClosedError, WorkerTimeoutError
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.state import State
from plan_parallel.wire.lane import (
    ERROR,
    FULL,
    HEADER,
    REPLY,
    TAG,
    Layout,
    StatePlace,
    pack_states_tail,
    state_bytes_for,
)
from plan_parallel.wire.leases import Lease
from plan_parallel.wire.slabs import Slab

__all__ = ["LaneCall", "LaneReply", "Lent", "Segment"]


class Segment(NamedTuple):
    """A shared segment of the lane, as the caller holds it."""

    slab: Slab
    layout: Layout
    key: bytes  # the layout as a header carries it
    cols: dict[str, np.ndarray]


class Lent(NamedTuple):
    """The slab lent to a call's results (:mod:`plan_parallel.wire.leases`): its observations, a row layout's state
    columns, or both, and the result's arrays over it."""

    lease: Lease
    observations: np.ndarray | None  # (None: they go to the segment)
    states: dict[str, np.ndarray] | None  # the results' state columns (``out_`` + stem; None: in the segment)
    name: bytes  # the slab's name, as a header carries it
    obs_at: int  # where in it the observations' rows and the state columns start (-1: not lent)
    states_at: int
    states_rows: int  # the state columns' rows (the call's items)


class LaneReply(NamedTuple):
    """A worker's answer to its lane header."""

    status: int  # wire.lane's OK, INFOS, FULL, ERROR or STATES
    tail: bytes  # the pickled infos, error, or states and infos
    rows: int  # how many rows it answers for
    env_seconds: float
    worker: str  # its name, for an error's note


class LaneCall:
    """One call's traffic with the workers (see the module docstring).

    Args:
        pool: the workers, whose lock and guard the caller holds.
        segment: the segment whose rows the call's inputs are written in.
        dt: the call's steps an item.
        check: whether the workers check the states first (a vector env's, that no worker made or checked).
        states: a pickled layout's states, sent in the headers' tails (None: they are in the rows).
        source: where the workers read a row layout's input states (the rows ``in_source`` names of a former
            result's state columns; None: the segment's ``in_`` rows).
        lent: the slab lent to the call's observations, or None.
        op: the call's op, for a timeout's message.
    """

    def __init__(self, pool: WorkerPool, segment: Segment, dt: int, check: bool, states: list[State] | None,
                 source: StatePlace | None, lent: Lent | None, op: str) -> None:
        self.pool = pool
        self.segment = segment
        self.dt = dt
        self.check = check
        self.states = states
        self.source = (b"", 0, -1, 0) if source is None else (source.name, source.size, source.at, source.rows)
        self.lent = lent
        self.op = op
        self.state_bytes = 0  # a pickled layout's bytes a row of its state regions, learned from the states sent
        self.sent_at: dict[int, float] = {}  # when each worker was sent its header (time.monotonic())
        self.due: dict[int, tuple[int, int]] = {}  # slot -> the rows (lo, hi) it was sent
        self.tails: dict[tuple[int, int], bytes] = {}  # (kept for a replacement of a worker that died)

    def run(self, ready: list[int], chunks: list[tuple[int, int]], expected: float) -> dict[int, LaneReply]:
        """Send each of the ``ready`` workers one of ``chunks`` and the next to whichever answers first, and wait for
        every reply, by each chunk's first row. ``expected``: the longest chunk's env seconds (0: not known), under
        which the wait polls (for a reply due within the worker class's spin time) instead of sleeping."""
        pool, due, lent = self.pool, self.due, self.lent
        queue = deque(chunks)
        replies: dict[int, LaneReply] = {}
        # The call's workers are polled in one order until it ends (the worker class reuses its poll object while
        # the same pipes are polled; one that answered its last chunk is still polled, for its death).
        # The list of their workers is made again only when one was replaced (it died in the call).
        for k in ready[:len(chunks)]:
            self._send(k, queue.popleft())
        polled = sorted(due)
        stale = True
        while due:
            if stale:
                ks = list(polled)
                workers = [pool.slots[k].worker for k in ks]
                stale = False
            left = None  # (seconds until the oldest header's timeout)
            if pool.timeout:
                left = max(0.0, min(self.sent_at[k] for k in due) + pool.timeout - time.monotonic())
            woken = pool.worker_type.wait_any(workers, left, pool.wake_fd, expected)
            if pool.closing:
                raise ClosedError("the env was closed while this batch was in flight")
            replaced = False  # (this turn waited for a replacement: the others' replies came meanwhile, unread)
            for j in woken:
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
                        self._send(k, queue.popleft())
                elif pool.slots[k].lane_due is None:  # it died: its replacement gets the same rows
                    if lent is not None:
                        lent.lease.writer_done(killed=True)
                    pool.wait_started(k)
                    self._send(k, due[k])
                    stale = replaced = True
            if pool.timeout is not None and not replaced:  # (else the next turn reads what came first)
                now = time.monotonic()
                for k in due:
                    if now > self.sent_at[k] + pool.timeout:
                        self._time_out(k, due[k])
        return replies

    def _tail(self, rows: tuple[int, int]) -> bytes:
        """The header's tail for ``rows``: their pickled states (those that fit go to the segment's state regions)."""
        tail = self.tails.get(rows)
        if tail is None:
            if self.states is None:
                tail = b""
            else:
                lo, hi = rows
                segment = self.segment
                tail, needed = pack_states_tail(self.states[lo:hi], None, segment.slab,
                                                segment.layout.region("in_states", lo, hi))
                self.state_bytes = max(self.state_bytes, state_bytes_for(needed, hi - lo))
            self.tails[rows] = tail
        return tail

    def _send(self, k: int, rows: tuple[int, int]) -> None:
        slot, lent, key = self.pool.slots[k], self.lent, self.segment.key
        tail = self._tail(rows)
        call_id = self.pool.next_id()
        name, size, obs_at, states_at, states_rows = ((b"", 0, -1, -1, 0) if lent is None else (
            lent.name, lent.lease.slab.size, lent.obs_at, lent.states_at, lent.states_rows))
        src_name, src_size, src_at, src_rows = self.source
        header = HEADER.pack(TAG, call_id, rows[0], rows[1] - rows[0], self.dt, self.check, len(key), len(name),
                             size, obs_at, states_at, states_rows, len(src_name), src_size, src_at,
                             src_rows) + key + name + src_name + tail
        self.sent_at[k] = time.monotonic()  # (its timeout counts from here: a replacement's anew)
        with ctrl_c_deferred():  # a header written is a header due (and a writer of the lent slab)
            if lent is not None:
                lent.lease.add_writer()
            slot.lane_due = (call_id, rows[0], rows[1] - rows[0], self.op)
            try:
                slot.worker.send(header)
            except OSError:
                pass  # gone: the wait sees its sentinel and sends the header to its replacement
        self.due[k] = rows

    def _read(self, k: int) -> LaneReply | None:
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
        return LaneReply(status, bytes(data[REPLY.size:]), rows, env_seconds, worker.name)

    def _time_out(self, k: int, rows: tuple[int, int]) -> None:
        pool, slot = self.pool, self.pool.slots[k]
        lo, hi = rows
        name = slot.worker.name
        slot.worker.kill()
        pool.stats["timeouts"] += 1
        pool.on_death(k, f"timed out after {pool.timeout} s")
        raise WorkerTimeoutError(f"{name} did not finish {self.op} ({hi - lo} items) within {pool.timeout} s; "
                                 "it was killed and replaced")
