"""Synchronous calls on a pool's workers: a reset on one, a state set on all.

Each is sent as parts of a batch of no items, so a worker that dies before answering gets it again on
its replacement, and an interruption cancels it, as any batch's parts.
"""
from __future__ import annotations

from typing import Any

from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.parts import Part
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.state import State
from plan_parallel.wire.messages import Call, Op

__all__ = ["call_all", "call_one"]


def call_one(pool: WorkerPool, i: int, op: Op, args: tuple, holds: State | None = None) -> Any:
    """``op(*args)`` on worker ``i``; its value. ``holds``: the state the call leaves the worker holding."""
    fut = BatchFuture(pool, 0)
    with pool.guarded(fut):
        pool.check_usable()
        pool.slots[i].send(Part(Call(pool.next_id(), op, args), fut, holds=holds))
    pool.wait_for(fut, None)
    return fut.result()


def call_all(pool: WorkerPool, op: Op, blob: bytes, holds: State) -> None:
    """``op(blob)`` on every worker (``blob`` pickled once, or put in Ray's store once); waits for all."""
    fut = BatchFuture(pool, 0)
    shared, args = pool.worker_type.broadcast_args(blob)
    with pool.guarded(fut):
        pool.check_usable()
        for i in range(len(pool.slots)):
            pool.slots[i].send(Part(Call(pool.next_id(), op, args), fut, holds=holds, shared=shared))
    pool.wait_for(fut, None)
    fut.result()
