"""Feeder: which chunk of which batch a worker gets next, encoded; and a chunk's results taken back.

It builds :class:`~plan_parallel.batch.parts.Part` messages, hands them to
workers' slots and copies replies out of their slabs; it never waits (the pool
does), so the order in which batches are served is decided in one place: oldest
batch first, chunks in input order, round-robin over the live workers.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.parts import Part, Slot, SlotState, dumps
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.state.state_value import mark_checked
from plan_parallel.wire.codec import Job, encode, out_bytes_guess, split_by_cost
from plan_parallel.wire.gather import RolloutGather, StepGather
from plan_parallel.wire.held import NOT_HELD, Table
from plan_parallel.wire.leases import Lease, LeasePool, row_layout
from plan_parallel.wire.messages import Call, ChunkReply, Op, call_wire
from plan_parallel.wire.slabs import Slab, SlabPool, read_columns
from plan_parallel.workers.cores import pinned_order

__all__ = ["QUEUED_PER_WORKER", "Feeder"]

QUEUED_PER_WORKER = 2  # chunks queued per worker: a worker never waits for the parent


def _results_kind(job: Job) -> tuple[Op, bool]:
    """What sizes an item's results: the op, and whether a rollout returns every step's state and observation."""
    return job.op, job.rollout is not None and job.rollout.return_all


class Feeder:
    """The batches with chunks not sent yet, and the slabs their chunks travel in.

    Args:
        slabs: where shared-memory slabs come from (and go back to).
        leases: where the slabs lent to batches' large observations come from
            (:mod:`plan_parallel.wire.leases`). Workers with shared memory write their rows
            into the lent slab; others' rows (Ray's) are copied into it on arrival, into
            memory a dropped batch has touched already.
        stats: the pool's telemetry: ``states_checked`` counts the states the workers checked.
        timeout: the seconds a call may take on a worker (None: no limit).

    The workers check each state a chunk brings before they restore it, as the
    inline backend does, once: the states of a chunk they answered, and those they
    made, carry :attr:`trust`, and a chunk of such states tells them not to check
    again (CartPole: the check is ~1.3 us of a ~14 us item; a planner passes back
    the states a batch returned). One token for the pool: its workers' envs are made
    by one factory, so a state one of them checked or made restores any of them.
    """

    def __init__(self, slabs: SlabPool, leases: LeasePool, stats: dict[str, Any], timeout: float | None = None) -> None:
        self.slabs = slabs
        self.leases = leases
        self.timeout = timeout  # told to the workers (ChunkRequest.timeout)
        self.trust = object()  # the token of the states the workers checked or made (see validate_each)
        self.stats = stats
        self.observation_space: Any = None
        self.waiting: deque[BatchFuture] = deque()  # batches with chunks not sent yet, oldest first
        self._out_per_item: dict[tuple[Op, bool], int] = {}  # result bytes per item seen so far, per op and return_all

    def add(self, fut: BatchFuture, n_chunks: int) -> bool:
        """Split ``fut``'s job into chunks to send; False when it has none (an empty batch)."""
        job = fut.job
        assert job is not None
        fut.pending.extend(split_by_cost(job.dt, job.n, n_chunks, funnel=fut.helper is not None))  # shared: funnel
        if not fut.pending:
            return False
        layout = row_layout(self.observation_space, job.n)
        if layout is not None and isinstance(fut.gather, (StepGather, RolloutGather)):
            dtype, shape = layout
            fut.lease = self.leases.lease(math.prod(shape) * dtype.itemsize)
            fut.gather.lend(fut.lease.array(dtype, shape))
        self.waiting.append(fut)
        return True

    def next_batch(self, worker: int, slot: Slot) -> BatchFuture | None:
        """The oldest batch that still has a chunk to send to worker ``worker`` (settled ones are skipped),
        when that chunk may join the worker's queue (``slot``'s) now; else None.

        A batch goes to its first ``max_workers`` workers only (a shared batch leaves a core to this process),
        and a shared batch's chunk to an idle worker only: this process takes the chunks no worker holds
        (see :meth:`Placement.help_with`), and a chunk queued behind another would be taken from it.
        """
        while self.waiting and (not self.waiting[0].pending or self.waiting[0].settled):
            self.waiting.popleft()
        for fut in self.waiting:
            if fut.pending and not fut.settled and worker < fut.max_workers:
                return fut if fut.helper is None or not slot.queue else None
        return None

    def fill(self, slots: list[Slot], next_id: Callable[[], int]) -> None:
        """Queue unsent chunks, oldest batch first, round-robin, up to QUEUED_PER_WORKER per live worker.

        Round-robin from the worker :func:`~plan_parallel.workers.cores.pinned_order` puts first, unless
        a batch's items have keys (a vector env's): those go to the workers in index order, step after
        step, for each worker keeps envs at its items' states (:mod:`plan_parallel.workers.kept_envs`).
        """
        if not self.waiting:  # (the pool fills at every pump: most find nothing to send)
            return
        order: Sequence[int] = range(len(slots))
        if not any(f.job is not None and f.job.keys is not None for f in self.waiting):
            order = pinned_order([s.worker.core for s in slots])
        for _ in range(QUEUED_PER_WORKER):
            for i in order:
                slot = slots[i]
                if slot.state in (SlotState.READY, SlotState.STARTING) and len(slot.queue) < QUEUED_PER_WORKER:
                    fut = self.next_batch(i, slot)
                    if fut is not None:
                        self.feed(slot, fut, next_id)

    def feed(self, slot: Slot, fut: BatchFuture, next_id: Callable[[], int]) -> None:
        """Send ``fut``'s next chunk to ``slot`` (after a set_state to the batch's start, if it needs one)."""
        assert fut.job is not None
        if fut.job.start is not None:
            slot.ensure_holds(fut.job.start, fut, next_id())
        slot.send(self.chunk(fut, next_id(), slot))
        fut.pending.popleft()  # after queueing: an interruption in between sends a chunk twice, never none

    def chunk(self, fut: BatchFuture, call_id: int, slot: Slot) -> Part:
        """``fut``'s next chunk as a part for ``slot``'s worker (still pending in ``fut`` until the pool has queued it)."""
        job = fut.job
        assert job is not None
        lo, hi = fut.pending[0]
        shared_memory = slot.worker.uses_shared_memory
        lease = fut.lease if shared_memory else None
        call, slab, keeps = self._encoded(fut, lo, hi, call_id, slot.table, shared_memory, lease)
        part = Part(call, fut, lo, hi, slab, cost=job.cost(lo, hi), needs=job.start, table=slot.table, keeps=keeps)
        if lease is not None:
            part.lease = lease
            lease.add_writer()
        return part

    def _encoded(self, fut: BatchFuture, lo: int, hi: int, call_id: int, table: Table | None, shared_memory: bool,
                 lease: Lease | None) -> tuple[Call, Slab | None, list[tuple]]:
        """The call of chunk lo..hi of ``fut``, its slab and the states its worker is to hold (see
        :func:`~plan_parallel.wire.codec.encode`)."""
        job = fut.job
        assert job is not None
        per_out = self._out_per_item.get(_results_kind(job))
        if per_out is None:
            first = job.states[lo] if job.states is not None else job.start
            per_out = out_bytes_guess(self.observation_space, first, job)
        obs_to = None if lease is None else (lease.slab, fut.gather.lent)  # type: ignore[union-attr]
        by_key = 0 if table is None else table.by_key
        req, slab, keeps = encode(job, lo, hi, per_out, self.slabs.acquire if shared_memory else None, obs_to,
                                  self.timeout, self.trust, table)
        if table is not None:
            self.stats["states_by_key"] += table.by_key - by_key
        return Call(call_id, job.op, (req,)), slab, keeps

    def resent(self, slot: Slot, part: Part, answer: Any) -> bool:
        """Whether ``slot``'s worker answered ``part`` :data:`~plan_parallel.wire.held.NOT_HELD` (it does not hold
        a state the chunk refers to: a replacement, or a table it reset) and the part was sent again: the worker
        gets a new table, and the part every state (counted in ``stats["resent"]``). A settled batch's part is not."""
        if type(answer) is not str or answer != NOT_HELD or part.future.settled:
            return False
        with ctrl_c_deferred():  # the part's call, slab and bytes change together, or not at all
            table = slot.table = Table()
            old = part.slab
            call, slab, keeps = self._encoded(part.future, part.lo, part.hi, part.call.id, table,
                                              slot.worker.uses_shared_memory, part.lease)
            part.call, part.slab, part.table, part.keeps, part.data = call, slab, table, keeps, dumps(call_wire(call))
            if old is not None:
                self.slabs.release(old)  # the worker answered without writing it
            slot.again(part)
        self.stats["resent"] += 1
        return True

    def absorb(self, part: Part, reply: ChunkReply) -> None:
        """Copy a chunk's results out of its slab into its batch's gatherer.

        The slab stays the part's until :meth:`release_slab`: interrupted before
        the part is marked answered, the part is sent again, into the same slab.
        """
        m = part.hi - part.lo
        kind = _results_kind(part.future.job)  # type: ignore[arg-type]
        self._out_per_item[kind] = max(self._out_per_item.get(kind, 0), -(-reply.needed // m) + 64)
        gather = part.future.gather
        assert gather is not None, "a batch's chunk is gathered"
        gather.absorb(part.lo, part.hi, reply, read_columns(part.slab, reply.layout, views=gather.views), self.trust)
        self.stats["states_checked"] += reply.checked
        if part.keeps:  # (only a part with a table has any)
            part.table.confirm(part.keeps)  # type: ignore[union-attr]
        job = part.future.job
        if reply.checked and job is not None and job.states is not None:
            mark_checked(job.states[part.lo:part.hi], self.trust)

    def release_slab(self, part: Part) -> None:
        """An answered part's slab goes back to the pool for the next chunk (its lease counts it done)."""
        if part.slab is not None:
            slab, part.slab = part.slab, None
            self.slabs.release(slab)
        if part.lease is not None:
            lease, part.lease = part.lease, None
            lease.writer_done(killed=False)

    def drop_slab(self, part: Part) -> None:
        """Forget a part's slab without reusing it: a killed worker may have been writing it (or its lease)."""
        if part.slab is not None:
            self.slabs.discard(part.slab)
            part.slab = None
        if part.lease is not None:
            lease, part.lease = part.lease, None
            lease.writer_done(killed=True)

    def close(self) -> None:
        """Free every slab (lent arrays the caller still holds stay readable)."""
        self.slabs.close()
        self.leases.close()

    def fail_all(self, err: BaseException) -> None:
        for fut in self.waiting:
            fut.fail(err)
        self.waiting.clear()
