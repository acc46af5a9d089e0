"""LaneFuture: a lane call sent without waiting (``step_batch_async``, ``rollout_batch_async``).

The lane (:mod:`plan_parallel.batch.lane`) runs one call at a time on idle workers. A call sent without
waiting leaves its headers with the workers and returns a :class:`LaneFuture`, which the pool keeps as its
call in flight (``WorkerPool.in_flight``): the next operation on the pool (this future's ``result``, another
call from any thread, a close) first waits for the call's replies and builds its result, so no other call
reaches the workers or the lane's rows before it is done. Meanwhile the calling process is free: a planner
advances other searches while the workers run this batch.

What becomes of it, as of a :class:`~plan_parallel.batch.future.BatchFuture`:

* its result, or the env's error of the first item that failed, kept until ``result`` asks;
* a worker's timeout, a close, workers that died too often: that error, kept;
* results that do not fit the lane's columns, or an interruption (Ctrl-C) while the call was waited for: the
  workers of its unanswered headers are replaced, and ``result`` sends the batch again the general way, so
  it still returns this batch's own result;
* ``cancel``: the workers of its unanswered headers are replaced; ``result`` raises.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.lane_call import LaneCall, LaneReply
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.interrupts import ctrl_c_deferred

__all__ = ["LaneFuture"]


class LaneFuture(BatchFuture):
    """The pending result of a lane call sent without waiting (see the module docstring).

    Args:
        pool: the workers, whose call in flight it is.
        n: the batch's items.
        call: the call, its headers sent.
        build: the result of its replies, or None when they did not fit the columns (it raises the env's error).
        again: sends the batch the general way (a future of it).
    """

    def __init__(self, pool: WorkerPool, n: int, call: LaneCall, build: Callable[[dict[int, LaneReply]], Any],
                 again: Callable[[], BatchFuture]) -> None:
        super().__init__(None, n)
        self.pool = pool
        self.call = call
        self.build = build
        self.again = again
        self.sent_again: BatchFuture | None = None
        self.must_resend = False  # it must go the general way (did not fit, or was interrupted)

    def settle(self, deadline: float | None) -> bool:
        """Wait for the call's replies until ``deadline`` (``time.monotonic()``; None: as long as it takes) and build
        its result; False when the deadline came first. Under the pool's lock (``WorkerPool.guarded``), which
        calls it again after an interruption: a call cut short is then sent again the general way."""
        if self.settled or self.must_resend:
            return True
        if not self.call.intact():
            self.must_resend = True
            self.abandon()
            return True
        try:
            replies = self.call.finish(deadline)
            if replies is None:
                return False
            with ctrl_c_deferred():  # built once, kept with it
                value = self.build(replies)
                if value is None:
                    self.must_resend = True
                else:
                    self.set_result(value)
                    if self.on_done is not None:
                        self.on_done(self)
        except Exception as e:
            self.pool.recover()  # the workers of its headers unanswered are replaced before anything else is sent
            self.fail(e)
        return True

    def abandon(self) -> None:
        """The slab lent to its observations is freed once nobody views it, never lent again."""
        if self.call.lent is not None:
            self.call.lent.lease.abandon()

    def fail(self, error: BaseException) -> None:
        if not self.settled:
            self.abandon()
        super().fail(error)

    def _waited(self, deadline: float | None) -> None:
        """Let the pool settle this call (it is its call in flight until it is settled), until ``deadline``."""
        pool = self.pool
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not pool.lock.acquire(timeout=-1 if left is None else left):
            return
        try:
            with pool.guarded(deadline=deadline):
                pass
        finally:
            pool.lock.release()

    def done(self) -> bool:
        """True when the result (or an error) is ready; never blocks."""
        if not self.settled and not self.must_resend:
            self._waited(time.monotonic())
        if self.must_resend and not self.cancelled:
            if self.sent_again is None:
                self.sent_again = self.again()
            return self.sent_again.done()
        return self.settled

    def result(self, timeout: float | None = None) -> Any:
        """The batch's result, waiting up to ``timeout`` seconds (None: as long as it takes); see
        :meth:`BatchFuture.result <plan_parallel.batch.future.BatchFuture.result>`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.settled and not self.must_resend:
            self._waited(deadline)
            if not self.settled and not self.must_resend:
                raise TimeoutError(f"the batch of {self.n} items is not done after {timeout} s; it is still running")
        if self.must_resend and not self.cancelled:
            if self.sent_again is None:
                self.sent_again = self.again()
            return self.sent_again.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return super().result()

    def cancel(self) -> None:
        """Stop the batch: the workers of its unanswered headers are replaced; a finished batch is left as it is."""
        if self.settled:
            return
        self.cancelled = True
        if self.sent_again is not None:
            self.sent_again.cancel()
            return
        with self.pool.lock:
            if self.pool.in_flight is self:
                self.pool.in_flight = None
                self.abandon()
                self.pool.recover()
