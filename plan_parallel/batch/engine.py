"""BatchEngine: the checked step of a :class:`~plan_parallel.batch.batch_env.BatchEnv`, for the vector env.

A vector env checks its actions and keeps its sub-envs' states validated, so it
steps its planning env with canonical inputs (:meth:`BatchEngine.step_batch_checked`),
not through ``step_batch``'s checks. That is plumbing, not part of the public face:
the vector env reaches a BatchEnv's engine with
:func:`plan_parallel.batch.batch_env.batch_engine_of` (a PlanEnv's is
:func:`plan_parallel.env.plan_env.engine_of`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.jobs import checked_job
from plan_parallel.batch.placement import Decision, Placement
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.errors import ClosedError
from plan_parallel.results import StepBatch, step_batch_of
from plan_parallel.state import State
from plan_parallel.wire.messages import Op

__all__ = ["BatchEngine", "wait_or_cancel"]

STEP_OP = Op.STEP_BATCH.value  # the tuner's name of step batches (read once: an Enum's value is slow to read)


def wait_or_cancel(fut: BatchFuture) -> Any:
    """A call's result; on any exception (Ctrl-C included) its work is cancelled first."""
    try:
        return fut.result()
    except BaseException:
        fut.cancel()
        raise


class BatchEngine:
    """Steps of canonical inputs on a BatchEnv's pool, placed as its batches are (``kind``: the env's state kind)."""

    def __init__(self, pool: WorkerPool, placement: Placement, kind: str) -> None:
        self.pool = pool
        self.placement = placement
        self.kind = kind

    def place_step(self, n: int) -> Decision:
        """Where a step of ``n`` items with dt=1 that runs its own way here (a vector env's step) runs (the tuner's
        decision, counted as made): pass it to :meth:`run_placed_here` when it is ``"here"``, else to
        :meth:`step_batch_checked`."""
        return self.placement.where(STEP_OP, n, True, n, resident=True)

    def run_placed_here(self, decided: Decision, n: int, run: Callable[[], Any]) -> Any:
        """``run()``: a step of ``n`` items with dt=1 placed here (:meth:`place_step`), run its own way in this
        process and timed for the tuner (a vector env's step on its resident envs)."""
        return self.placement.run_here_timed(decided, n, n, lambda local: run())

    def check_open(self) -> None:
        if self.pool.closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")

    def step_batch_checked(self, actions: Any, states: Sequence[State], dt: int = 1, *, validated: bool = False,
                           here: Callable[..., tuple] | None = None,
                           decided: Decision | None = None, keys: Any = None) -> StepBatch:
        """:meth:`BatchEnv.step_batch` of N canonical actions (see :mod:`plan_parallel.inputs`) and N states of this
        env's kind.

        ``validated``: the states were validated against this env already (a vector
        env's sub-env states): only the workers check them again. ``here(lo, hi, rows=None)``:
        how items lo..hi run in this process (the whole batch placed here, or this
        process's share of it) instead of on the local env, with ``EnvEngine.run_raw``'s lists
        back (the observations made in ``rows`` when given, as ``run_raw``'s ``obs_rows``);
        it must give the same results (a vector env's sub-envs kept at their
        states by envs of their own). ``decided``: :meth:`place_step` was asked already.
        ``keys``: N ints, the items' sub-envs: a worker steps each on an env it keeps for its key, which
        holds the sub-env's state after its last step there (see :mod:`plan_parallel.workers.kept_envs`).
        """
        self.check_open()
        placement = self.placement
        if here is not None and states:  # placed before the job is made: a step run here needs none
            n = len(states)
            decided = decided or placement.where(STEP_OP, n * dt, True, n, resident=True)
            if decided[1] == "here":
                return placement.run_here_timed(
                    decided, n * dt, n, lambda local: step_batch_of(local.observation_space, here(0, n)))
        return wait_or_cancel(placement.submit(checked_job(self.kind, actions, states, dt, validated, here, keys), True,
                                               decided))

    def step_batch_checked_async(self, actions: Any, states: Sequence[State], dt: int = 1, *, validated: bool = False,
                                 here: Callable[..., tuple] | None = None, keys: Any = None) -> BatchFuture:
        """:meth:`step_batch_checked`, sent at once (see :meth:`BatchEnv.step_batch_async`)."""
        self.check_open()
        return self.placement.submit(checked_job(self.kind, actions, states, dt, validated, here, keys), False)
