"""BatchFuture: the pending result of a batch sent to a :class:`~plan_parallel.batch.pool.WorkerPool`."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.wire.codec import Job
from plan_parallel.wire.gather import Gather

if TYPE_CHECKING:
    from plan_parallel.batch.parts import Part
    from plan_parallel.batch.pool import WorkerPool

__all__ = ["BatchFuture"]


class BatchFuture:
    """The pending result of :meth:`BatchEnv.step_batch_async` or ``rollout_batch_async``.

    Its ``result`` may be awaited from any thread. A reply reaches a future only
    through the id of the call that asked for it, so a future never returns
    another batch's data, whatever was interrupted before.
    """

    def __init__(self, pool: WorkerPool | None, n: int, job: Job | None = None, gather: Gather | None = None) -> None:
        self._pool = pool
        self.n = n
        self.job = job
        self.gather = gather
        self.parts: list[Part] = []
        self.pending: deque[tuple[int, int]] = deque()  # chunks (lo, hi) not sent yet
        self.value: Any = None
        self.error: BaseException | None = None
        self.finished = False  # value is set (a state op's value may be None)
        self.cancelled = False
        self.started = 0.0
        self.size_class: tuple[str, int] | None = None
        self.place = "workers"  # where the tuner sent it (see Tuner.place)
        self.timed_as = 1  # how many batches its time counts for in the tuner's figures (0: not timed)
        self.max_workers = 1 << 30  # its chunks go to the first max_workers workers only
        self.on_done: Any = None  # called with the future once every part is answered
        self.lease: Any = None  # the Lease its observations are lent in (wire.leases); its gather has the rows
        # A batch shared with the calling process: what result() runs before waiting (it takes
        # chunks from the back of ``pending``), the chunks running here, done here, and their env steps.
        self.helper: Any = None
        self.running_here = 0
        self.chunks_here = 0
        self.steps_here = 0
        # The lowest item that failed so far and its error (the env's, or a malformed state's): it fails the
        # batch once no part before it is left to run, so the first failing item's error is raised, as inline.
        self.item_error: tuple[int, BaseException] | None = None

    @classmethod
    def completed(cls, n: int, value: Any) -> BatchFuture:
        """A future that is already done (a batch run in the calling process, or an empty one)."""
        fut = cls(None, n)
        fut.set_result(value)
        return fut

    @property
    def settled(self) -> bool:
        """Finished, failed or cancelled: nothing more will happen to it."""
        return self.finished or self.error is not None or self.cancelled

    def set_result(self, value: Any) -> None:
        if not self.settled:
            self.value = value
            self.finished = True

    def all_answered(self) -> bool:
        """Sent in full and every part answered, but not settled yet."""
        return (not self.settled and bool(self.parts or self.chunks_here) and not self.pending
                and not self.running_here and all(p.answered for p in self.parts))

    def fail_at(self, item: int | None, error: BaseException) -> None:
        """Item ``item`` of the batch failed with ``error`` (None: no item did; the batch fails now).

        The batch fails with the lowest failing item's error once nothing before that item is left
        to run (see :meth:`progress`); the chunks after it are dropped.
        """
        if item is None:
            self.fail(error)
            return
        if self.item_error is None or item < self.item_error[0]:
            self.item_error = (item, error)
            self.pending = deque(c for c in self.pending if c[0] < item)
        self.progress()

    def progress(self) -> None:
        """After a part was answered or a piece ran here: settle the batch if it is done, or if its first
        failing item is known (no part before it unanswered, pending or running here)."""
        if self.settled:
            return
        if self.item_error is not None:
            at, error = self.item_error
            if (not self.running_here and not any(lo < at for lo, _ in self.pending)
                    and not any(p.lo < at and not p.answered for p in self.parts)):
                self.fail(error)
        elif self.all_answered():
            self.complete()

    def complete(self) -> None:
        """Every part answered: build the value (an error building it fails the batch)."""
        try:
            if self.gather is not None:
                self.value = self.gather.result()
            # In one step (Ctrl-C held back): accounted once, settled with it (a retried result() does not
            # account it again), and its answered parts dropped. Dropping them breaks the cycle future <->
            # part, so the batch (and the slab its observations are lent in) is freed when the caller
            # drops it. Never before it is settled: with no parts and not settled, all_answered() is False
            # and a retried result() would wait for nothing, for ever.
            with ctrl_c_deferred():
                if self.on_done is not None:
                    self.on_done(self)
                self.finished = True
                self.parts = []
        except Exception as e:
            self.fail(e)

    def fail(self, error: BaseException) -> None:
        """Fail the batch (the first error wins); its chunks not sent yet are dropped."""
        if not self.settled:
            self.error = error
        self.pending.clear()

    def done(self) -> bool:
        """True when the result (or an error) is ready; never blocks."""
        if not self.settled and self._pool is not None:
            self._pool.poll_nowait()
        return self.finished or self.error is not None

    def result(self, timeout: float | None = None) -> Any:
        """The batch's result, waiting up to ``timeout`` seconds (None: as long as it takes).

        A shared batch (see :class:`~plan_parallel.batch.tuner.Tuner`) has this
        thread run chunks the workers have not taken yet, when ``timeout`` is None.

        Raises:
            TimeoutError: not ready within ``timeout`` (the batch stays in flight;
                call ``result`` again later: results are never mixed up).
            WorkerTimeoutError: a worker exceeded ``timeout`` (it was replaced).
            WorkerCrashedError: workers died more than ``max_restarts`` times.
            ClosedError: the env was closed.
            Exception: whatever the env's own step raises, with its own type.
            KeyboardInterrupt: while waiting; the workers that were running
                anything are replaced and the batch is sent again, so a later
                ``result`` still returns this batch's own result.
        """
        if self.helper is not None and timeout is None and not self.settled:
            self.helper(self)
        if self._pool is not None and not self.settled:
            self._pool.wait_for(self, timeout)
        if self.error is not None:
            raise self.error
        if self.cancelled:
            raise RuntimeError("this batch was cancelled")
        return self.value

    def cancel(self) -> None:
        """Stop the batch: chunks not sent are dropped and workers running its chunks are replaced.

        The next call then does not wait for this batch's work. A finished batch is left as it is.
        """
        if self.settled:
            return
        self.cancelled = True
        self.pending.clear()
        if self._pool is not None:
            self._pool.cancel(self)

    def __repr__(self) -> str:
        state = "finished" if self.finished else "failed" if self.error else "cancelled" if self.cancelled else "pending"
        return f"BatchFuture({self.n} items, {state})"
