"""WorkerPool: the workers, what each is running, and everything that can go wrong with them.

Each worker sits in a :class:`Slot` with an explicit state (starting, ready,
dead, closed) and the queue of :class:`Part` messages it was sent and has not
answered. A reply is matched to its part by call id; a reply no part waits for
is discarded and counted (``stats["stray_replies"]``), never delivered.

Nothing is lost, nothing hangs, nothing is mixed up:

* every wait is on the workers' pipes *and* their process sentinels, with a
  deadline (``timeout``), through the worker class's own ``wait_any``;
* a dead worker is replaced and its unanswered parts are sent again (bounded by
  ``max_restarts``); a worker past its deadline is killed, replaced, and its
  call fails with :class:`WorkerTimeoutError`;
* any exception inside the pool (a ``KeyboardInterrupt`` at any line, a thread
  closing the env) marks it *suspect*: every worker that had something
  unanswered is killed, its parts are queued again for their batches, dead
  slots are refilled lazily, and the thread's cores are given back if a wait
  had narrowed them. A cancelled batch's parts are dropped, so the next call
  never waits for an interrupted one;
* one lock serializes the pool between threads; ``close`` from another thread
  wakes a waiting thread through a pipe, and every pending and later call
  raises :class:`ClosedError`.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from plan_parallel.batch.at_exit import close_at_exit
from plan_parallel.batch.feeder import QUEUED_PER_WORKER, Feeder
from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.parts import Part, Slot, SlotState
from plan_parallel.errors import ClosedError, WorkerCrashedError, WorkerTimeoutError, failed_item
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.wire.held import Table
from plan_parallel.wire.leases import LeasePool
from plan_parallel.wire.messages import READY, Op, Reply, WorkerInfo, reraise
from plan_parallel.wire.slabs import SlabPool
from plan_parallel.workers.base import Worker
from plan_parallel.workers.cores import restore_cores

__all__ = ["WorkerPool"]

log = logging.getLogger("plan_parallel")
CLOSE_LOCK_SECONDS = 5.0  # close() from another thread waits this long for the pool's lock


class WorkerPool:
    """``n`` workers of one backend, started by ``new_worker(index)``; see the module docstring.

    Args:
        new_worker: starts worker ``index`` without waiting for its env.
        worker_type: the worker class (its ``wait_any`` is how the pool waits).
        n: the number of workers.
        timeout: seconds a call may run on a worker (None: no limit).
        max_restarts: workers that died or hung, replaced over the pool's life.
    """

    def __init__(self, new_worker: Callable[[int], Worker], worker_type: type[Worker], n: int, timeout: float | None,
                 max_restarts: int) -> None:
        self._new_worker = new_worker
        self.worker_type = worker_type
        self.timeout = timeout
        self.max_restarts = max_restarts
        self.slots = [Slot() for _ in range(n)]
        self.lock = threading.RLock()
        self.wake_fd, self._wake_w = os.pipe()
        self.closing = False
        self.closed = False
        self._suspect = False  # an exception left the pool mid-operation: recover before going on
        self._broken: str | None = None
        self._requeue: list[tuple[int, Part]] = []
        self._step_seconds: float | None = None  # a worker's env seconds per step (EMA), to know when replies are due
        self.next_id: Callable[[], int] = itertools.count(READY + 1).__next__  # call ids, after READY's
        self._owner = os.getpid()  # a copy in a child forked by os.fork owns neither the workers nor the slabs
        self.info: WorkerInfo | None = None
        self.stats: dict[str, Any] = {
            "restarts": 0, "timeouts": 0, "busy_seconds": [0.0] * n, "env_seconds": 0.0,
            "stray_replies": 0, "interrupted": 0, "states_checked": 0, "states_by_key": 0, "resent": 0,
        }
        self.feeder = Feeder(SlabPool(), LeasePool(), self.stats, timeout)
        close_at_exit(self)

    # ------------------------------------------------------------------ starting
    def start(self) -> WorkerInfo:
        """Start every worker and wait until each has built its env; what the first one reports.

        Raises:
            WorkerCrashedError: a worker died while building its env.
            WorkerTimeoutError: a worker did not build its env within ``parts.START_TIMEOUT``.
            Exception: whatever building the env raised in a worker (its own type).
        """
        with self.guarded():
            for i in range(len(self.slots)):
                self._start_slot(i)
            while any(s.state is SlotState.STARTING for s in self.slots):
                self._pump(1.0)
        assert self.info is not None
        return self.info

    def _start_slot(self, i: int) -> None:
        slot = self.slots[i]
        with ctrl_c_deferred():  # a worker half-started is neither in its slot nor stopped
            slot.held, slot.table = None, Table() if self.worker_type.keeps_states else None
            slot.current = self._new_worker(i)
            slot.started_at = time.monotonic()
            slot.state = SlotState.STARTING

    def _on_ready(self, i: int, reply: Reply) -> None:
        slot = self.slots[i]
        w = slot.worker
        if reply.error is not None:
            err = reraise(reply.error, f"{w.name} building the env")
            if self.info is None:
                raise err  # the first start: the env's own error, from make()
            self._break(f"worker {i} was replaced, but the replacement failed to build its env: "
                        f"{type(err).__name__}: {err}", cause=err)
        if self.info is None:
            self.info = reply.value
        slot.ready()

    # ------------------------------------------------------------------ guard and recovery
    @contextlib.contextmanager
    def guarded(self, victim: BatchFuture | None = None) -> Iterator[None]:
        """Run a pool operation; on any exception, cancel ``victim`` and recover before re-raising."""
        with self.lock:
            if self._suspect:
                self._recover()
            try:
                yield
            except BaseException:
                if victim is not None:
                    victim.cancelled = True
                self._suspect = True
                self._recover()
                raise

    def _recover(self) -> None:
        """Kill every worker that had something unanswered; queue its parts again for their batches.

        Idempotent: an interruption inside it leaves the pool suspect, and the
        next operation recovers again.
        """
        for i, slot in enumerate(self.slots):
            if slot.active or slot.lane_due is not None:  # (a lane call's worker may still read its rows)
                self._retire(i, kill=True)
                self.stats["interrupted"] += 1
        restore_cores()  # this thread's, if a wait cut short had narrowed them (workers.cores.move_off)
        self._suspect = False

    def cancel(self, fut: BatchFuture) -> None:
        """Drop a batch: its unsent chunks, and the workers running its parts (replaced lazily)."""
        with self.guarded():
            fut.cancelled = True
            fut.pending.clear()
            for i, slot in enumerate(self.slots):
                if any(p.future is fut for p in slot.queue):
                    dropped = [p for p in slot.queue if p.future is fut]
                    self._retire(i, kill=True, keep=lambda p: p.future is not fut)
                    for p in dropped:
                        self.feeder.drop_slab(p)
                    self.stats["interrupted"] += 1

    def _retire(self, i: int, kill: bool, keep: Callable[[Part], bool] = lambda p: True) -> None:
        """Worker ``i`` is gone (killed first when ``kill``); its unanswered parts (those kept) go to the requeue.

        In this order, each step whole, so that an interruption anywhere loses no
        part: the list is built, then added in one step, then the queue cleared.
        A part that ends up in the requeue twice is sent once (see :meth:`_revive`).
        """
        slot = self.slots[i]
        if kill:
            slot.worker.kill()
        moved = [(i, p) for p in slot.queue if keep(p)]
        self._requeue.extend(moved)
        slot.retire()

    # ------------------------------------------------------------------ sending
    def _fill(self) -> None:
        if self._broken is None:
            self.feeder.fill(self.slots, self.next_id)

    def submit(self, fut: BatchFuture, n_chunks: int) -> None:
        """Send a batch's chunks: two queued per worker, the rest as workers finish."""
        with self.guarded(fut):
            self.check_usable()
            if not self.feeder.add(fut, n_chunks):  # an empty batch: nothing to send
                fut.complete()
                return
            for i, slot in enumerate(self.slots):  # an idle worker's death is seen here, or never waited on
                how = slot.worker.dead() if slot.state is SlotState.READY and not slot.queue else None
                if how is not None:
                    self.on_death(i, f"died with {how}")
            self._revive()
            self._fill()

    def ready_idle(self) -> list[int]:
        """The workers a lane call (:mod:`plan_parallel.batch.lane`) may have: the ready ones, when no worker owes
        anything and nothing waits to be sent or recovered (else none). Under :attr:`lock`, after
        :meth:`poll_nowait` (which starts replacements and reads their READY replies)."""
        if (self._suspect or self._requeue or self._broken is not None or self.closing
                or any(f.pending and not f.settled for f in self.feeder.waiting)
                or any(s.queue or s.lane_due for s in self.slots)):
            return []
        return [i for i, s in enumerate(self.slots) if s.state is SlotState.READY]

    def wait_started(self, i: int) -> None:
        """Wait until worker ``i`` (a replacement a call waits for: :meth:`Slot.start_limit`) has built its env,
        handling what else arrives meanwhile."""
        slot = self.slots[i]
        slot.awaited = True
        try:
            while slot.state is SlotState.STARTING:
                self.check_usable()  # (closed meanwhile: the pump fails what waits and returns at once)
                self._pump(1.0)
        finally:
            slot.awaited = False
        self.check_usable()

    # ------------------------------------------------------------------ waiting
    def wait_for(self, fut: BatchFuture, timeout: float | None) -> None:
        """Pump until ``fut`` is settled or ``timeout`` passes; any thread may call it.

        Raises:
            TimeoutError: ``fut`` not settled within ``timeout`` (it stays in flight).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut.settled:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"the batch of {fut.n} items is not done after {timeout} s; it is still running")
            if not self.lock.acquire(timeout=-1 if left is None else left):
                continue
            try:
                fut.progress()  # an interruption may have come between its last answer and its settling
                if not fut.settled:
                    with self.guarded():
                        self._pump(left)
            finally:
                self.lock.release()

    def poll_nowait(self) -> None:
        """Handle what has arrived, without waiting (and without waiting for the lock)."""
        if self.lock.acquire(blocking=False):
            try:
                with self.guarded():
                    self._pump(0.0)
            finally:
                self.lock.release()

    def _pump(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` for replies, deaths or a close, and handle what arrived."""
        if self.closing:
            self._fail_all(ClosedError("the env was closed while this batch was in flight"))
            return
        if self._broken is not None:  # an interruption cut _break short: finish failing what waits
            self._fail_all(WorkerCrashedError(self._broken))
            return
        self._revive()
        self._fill()  # after an interruption a batch may have chunks that no worker was given
        active = [i for i, s in enumerate(self.slots) if s.active]
        if not active:
            return
        now = time.monotonic()
        wait = timeout
        for due in (self.slots[i].due(self.timeout) for i in active):
            if due is not None:
                wait = max(0.0, due - now) if wait is None else max(0.0, min(wait, due - now))
        ready = self.worker_type.wait_any([self.slots[i].worker for i in active], wait, self.wake_fd, self._due_in(active, now))
        if self.closing:
            self._fail_all(ClosedError("the env was closed while this batch was in flight"))
            return
        for k in ready:
            self._drain(active[k])
        self._check_deadlines(active)

    def _due_in(self, active: list[int], now: float) -> float | None:
        """Seconds until the first reply is expected (None: unknown), from the env time per step measured so far."""
        if self._step_seconds is None:
            return None
        due = [d for d in (self.slots[i].reply_due_in(self._step_seconds, now) for i in active) if d is not None]
        return min(due, default=None)

    def _drain(self, i: int) -> None:
        slot = self.slots[i]
        for reply in slot.worker.poll():
            if reply.id == READY and slot.state is SlotState.STARTING:
                self._on_ready(i, reply)
                continue
            part = next((p for p in slot.queue if p.call.id == reply.id), None)
            if part is None:
                self.stats["stray_replies"] += 1  # never delivered: no call waits for it
                continue
            if self.feeder.resent(slot, part, reply.value):  # it named states the worker does not hold
                continue
            self.stats["busy_seconds"][i] += reply.env_seconds
            if part.cost:  # the env seconds a step takes, an EMA
                per, old = reply.env_seconds / part.cost, self._step_seconds
                self._step_seconds = per if old is None else 0.8 * old + 0.2 * per
            self._deliver(i, part, reply)
            slot.answered(part)
            self.feeder.release_slab(part)  # last: interrupted before, the part is sent again into it
            if len(slot.queue) < QUEUED_PER_WORKER and self._broken is None:
                fut = self.feeder.next_batch(i, slot)
                if fut is not None:
                    self.feeder.feed(slot, fut, self.next_id)
        how = slot.worker.dead()
        if how is not None and slot.state in (SlotState.READY, SlotState.STARTING):
            self.on_death(i, f"died with {how}")

    def _deliver(self, i: int, part: Part, reply: Reply) -> None:
        fut = part.future
        if reply.error is not None:
            if part.holds is not None and self.slots[i].held is part.holds:
                self.slots[i].held = None  # it rejected the state: it holds nothing known
            w = self.slots[i].worker
            error = reraise(reply.error, f"raised in {w.name} during {part.call.op.value}", part.lo)
            part.answered = True
            fut.fail_at(failed_item(error), error)
            return
        if fut.settled:
            part.answered = True
            return
        if part.call.op in (Op.STEP_BATCH, Op.ROLLOUT_BATCH):
            self.feeder.absorb(part, reply.value)
        elif part.call.op is Op.RESET:
            fut.value = reply.value
        part.env_seconds = reply.env_seconds
        part.answered = True
        fut.progress()

    # ------------------------------------------------------------------ faults
    def _check_deadlines(self, active: list[int]) -> None:
        now = time.monotonic()
        for i in active:
            slot = self.slots[i]
            due = slot.due(self.timeout)
            if due is None or now <= due:
                continue
            if slot.state is SlotState.STARTING:
                slot.worker.kill()
                self._break(f"{slot.worker.name} did not build its env within {slot.start_limit(self.timeout):g} s",
                            timeout=True)
            else:
                head = slot.queue[0]
                slot.worker.kill()
                self.stats["timeouts"] += 1
                head.future.fail(WorkerTimeoutError(
                    f"{slot.worker.name} did not finish {head.describe()} within "
                    f"{self.timeout} s; it was killed and replaced"))
                self.on_death(i, f"timed out after {self.timeout} s")

    def on_death(self, i: int, why: str) -> None:
        """Worker ``i`` is gone: queue its parts again and replace it (bounded by max_restarts)."""
        slot = self.slots[i]
        what = slot.doing()
        self._retire(i, kill=False)
        used = self.stats["restarts"]
        msg = f"{slot.worker.name} {why} {what}"
        if self.info is None:
            self._break(msg + slot.worker.bootstrap_hint)
        if used >= self.max_restarts:
            self._break(f"{msg}; {used} restarts used of {self.max_restarts}")
        self.stats["restarts"] += 1
        log.warning("plan_parallel: %s; starting a replacement (%d of %d restarts)", msg, used + 1, self.max_restarts)
        self._revive()

    def _revive(self) -> None:
        """Start a worker in every dead slot, and send again the parts they had not answered."""
        for i, slot in enumerate(self.slots):
            if slot.state is SlotState.DEAD and self._broken is None and not self.closing:
                if slot.current is not None:
                    slot.worker.close(0.0)
                self._start_slot(i)
        while self._requeue:
            i, part = self._requeue[0]
            if part in self.slots[i].queue:
                pass  # queued again before an interruption: its slab is in use
            elif part.future.settled or part.answered:
                self.feeder.drop_slab(part)
            else:
                if part.needs is not None:
                    self.slots[i].ensure_holds(part.needs, part.future, self.next_id())
                self.slots[i].send(part)
            self._requeue.pop(0)

    def _break(self, msg: str, cause: BaseException | None = None, timeout: bool = False) -> None:
        """The pool cannot go on: fail every batch in flight or queued. Always raises."""
        self._broken = msg
        err: Exception = WorkerTimeoutError(msg) if timeout else WorkerCrashedError(msg)
        if cause is not None:
            err.__cause__ = cause
        self._fail_all(err)
        raise err

    def _fail_all(self, err: BaseException) -> None:
        for _, p in self._requeue:
            p.future.fail(err)
            self.feeder.drop_slab(p)
        self._requeue.clear()
        for slot in self.slots:
            for p in slot.queue:
                p.future.fail(err)
        self.feeder.fail_all(err)

    def check_usable(self) -> None:
        if self.closing or self.closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")
        if self._broken is not None:
            raise WorkerCrashedError(self._broken)

    # ------------------------------------------------------------------ closing
    def close(self, timeout: float = 1.0) -> None:
        """Stop every worker (bounded) and free shared memory. Idempotent; safe from any thread.

        A thread waiting on the pool is woken and its batch fails with :class:`ClosedError`.
        """
        if self.closed:
            return
        if os.getpid() != self._owner:  # a forked copy (at its exit): nothing here is its own to stop or free
            self.closed = True
            return
        self.closing = True
        with contextlib.suppress(OSError):  # a full pipe wakes the waiter all the same
            os.write(self._wake_w, b"x")
        got = self.lock.acquire(timeout=CLOSE_LOCK_SECONDS)
        try:
            self._fail_all(ClosedError("the env was closed while this batch was in flight"))
            deadline = time.monotonic() + timeout
            for slot in self.slots:
                if slot.current is not None and slot.state is not SlotState.CLOSED:
                    slot.worker.close(max(0.0, deadline - time.monotonic()))
                slot.state = SlotState.CLOSED
                slot.queue.clear()
            self.feeder.close()
            if not self.closed:
                self.closed = True
                os.close(self.wake_fd)
                os.close(self._wake_w)
        finally:
            if got:
                self.lock.release()

