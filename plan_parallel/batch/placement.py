"""Placement: where each batch of a :class:`~plan_parallel.batch.batch_env.BatchEnv` runs, and running it here.

The :class:`~plan_parallel.batch.tuner.Tuner` picks one of three places per
batch, from the times it measured:

* ``"workers"``: the chunks go to the workers; this process waits;
* ``"here"``: the whole batch runs in this process, on its local env (small
  batches, whose message costs more than their work);
* ``"share"``: the chunks go to the workers from the front, one at a time to
  each, and the thread that waits for the result runs the batch from the back on
  the local env, a piece at a time, handling the workers' replies between its
  pieces so that they wait at most a piece. On a machine with as many cores as
  workers, this process would otherwise sit idle while its cores run the
  workers, and an item run here costs no message.

Each item carries its state, so where it runs does not change its result. A
batch is shared only while the caller waits for it in full (``step_batch``,
``rollout_batch``, ``step``): an exception there (Ctrl-C included) cancels the
batch, so a chunk this process took is never left half-run for another caller.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.lane import Lane
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.batch.tuner import MIN_CHUNK_SECONDS, Tuner
from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.errors import failed_item
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.results import step_batch_of
from plan_parallel.wire.codec import Job

__all__ = ["Decision", "Placement", "run_chunk"]

# Where the tuner placed a batch (Placement.where): its size class, its place, and how many batches its time
# counts for (0: it is not timed).
Decision = tuple[tuple[str, int], str, int]


def run_chunk(env: PlanEnv, job: Job, lo: int, hi: int, rows: Any = None) -> Any:
    """Items ``lo..hi`` of ``job`` on ``env`` (or the job's own way here): ``run_raw``'s lists, or ``rollout_raw``'s parts
    (:class:`~plan_parallel.env.engine.EnvEngine`'s).

    The states are checked as a worker checks them (errors name the item's index in the batch). ``rows``: where
    a step chunk's observations are made (:meth:`Gather.rows_here`).
    """
    if job.here is not None:
        return job.here(lo, hi, rows)
    engine = engine_of(env)
    states = job.states_of(lo, hi)
    if not job.validated:
        engine.validate_all(states, lo, job.index_errors)
    actions = None if job.actions is None else job.actions[lo:hi]
    dt = job.dt if isinstance(job.dt, int) else job.dt[lo:hi]
    seeds = None if job.seeds is None else job.seeds[lo:hi]
    if job.rollout is None:
        return engine.run_raw(states, actions, dt, seeds, rows)
    return engine.rollout_raw(states, actions, dt, job.rollout.horizon, policy=job.policy, seeds=seeds,
                              first_index=lo, return_all=job.rollout.return_all, n=hi - lo)


class Placement:
    """Sends each batch where the tuner says, and owns the local env that runs batches here.

    Args:
        pool: the workers.
        tuner: decides where batches run and their chunks.
        new_local: builds the local env (on first use).
        stats: the env's telemetry (``batches``, ``items``, ``inline_batches``,
            ``shared_batches``, ``shared_items`` (items of shared batches run here),
            ``env_seconds``, ``ipc_seconds``, ``lent_batches`` (batches whose observations the
            workers wrote into shared memory handed to the caller as is)), updated in place.
    """

    def __init__(self, pool: WorkerPool, tuner: Tuner, new_local: Callable[[], PlanEnv], stats: dict) -> None:
        self.pool = pool
        self.tuner = tuner
        self.stats = stats
        self.lock = threading.RLock()  # one thread at a time runs items on the local env
        self.observation_space: Any = None
        self._new_local = new_local
        self._local: PlanEnv | None = None
        self.lane: Lane | None = None  # step calls of fixed-layout states (batch.lane), once the workers report

    def local(self) -> PlanEnv:
        """The env in this process (built on first use).

        It does not follow the env's current state: items run here pass their states.
        """
        with self.lock:
            if self._local is None:
                self._local = self._new_local()
                if self.lane is not None:  # its states restore the workers' envs (one factory)
                    self.lane.local_token = engine_of(self._local).adapter.checker
            return self._local

    def close(self) -> None:
        if self.lane is not None:
            self.lane.close()
        if self._local is not None:
            self._local.close()

    # ------------------------------------------------------------------ submitting
    def where(self, op: str, steps: int, can_share: bool, n: int = 0, resident: bool = False) -> Decision:
        """The size class of a batch of ``n`` items and ``steps`` env steps of ``op``, where the tuner runs it, and
        how many batches its time counts for (0: not timed; see :meth:`Tuner.choose` and
        :meth:`Tuner.for_the_workers`). ``can_share``: its caller waits for it in full; ``resident``: its items
        run their own way here (:meth:`Tuner.may_share`)."""
        size_class = Tuner.size_class(op, steps)
        if self.tuner.mode == "rule":  # (a future no caller waits for runs on the workers)
            return size_class, self.tuner.by_rule(steps) if can_share else "workers", 0
        if self.tuner.for_the_workers(steps, n, resident):
            return size_class, "workers", 0
        return (size_class, *self.tuner.choose(size_class, can_share and self.tuner.may_share(resident)))

    def submit(self, job: Job, waited_in_full: bool = False, decided: Decision | None = None,
               started: float | None = None) -> BatchFuture:
        """Run ``job`` where the tuner says; a future of its result.

        ``waited_in_full``: the caller waits for the result at once and cancels
        the batch if waiting raises, so the batch may be shared with this thread.
        ``decided``: :meth:`where` asked already for this batch. ``started``: when
        the call began (its checks count in its time, as in :meth:`run_here_timed`).
        """
        steps = job.cost(0, job.n)
        decided = decided or self.where(job.op.value, steps, waited_in_full, job.n, job.here is not None)
        size_class, place, timed_as = decided
        if place == "here":
            value = self.run_here_timed(decided, steps, job.n, lambda local: self.run_here(local, job), started)
            return BatchFuture.completed(job.n, value)
        if place == "workers" and waited_in_full and self.lane is not None and self.lane.takes(job):
            t0 = time.perf_counter() if started is None else started
            value = self.lane.run(job, self.tuner.step_seconds, self.tuner.n_chunks(job.n, steps))
            if value is not None:
                if timed_as:
                    self.tuner.learn(size_class, place, (time.perf_counter() - t0) / max(1, steps), timed_as)
                self.tuner.learn_step(self.lane.last_step_seconds)
                return BatchFuture.completed(job.n, value)
        if place == "share":
            self.local()  # built before the clock starts: its cost is not a step's
        fut = BatchFuture(self.pool, job.n, job, job.gatherer(self.observation_space))
        fut.size_class = size_class
        fut.place = place
        fut.timed_as = timed_as
        fut.started = time.perf_counter() if started is None else started
        fut.on_done = self.account
        if place == "share":
            fut.max_workers = self.tuner.share_workers
            fut.helper = self.help_with
            self.stats["shared_batches"] += 1
        self.pool.submit(fut, self.tuner.n_chunks(job.n, steps, share=place == "share"))
        if fut.lease is not None:
            self.stats["lent_batches"] += 1
        return fut

    def run_here_timed(self, decided: Decision, steps: int, n: int, run: Callable[[PlanEnv], Any],
                       started: float | None = None) -> Any:
        """``run(local env)``, a batch of ``n`` items and ``steps`` env steps placed here (``decided``: see
        :meth:`where`), timed for the tuner when the tuner asked.

        Its time counts from ``started`` (when the call began: its checks, as a batch sent to the
        workers counts them), less any wait for another thread's batch here.
        """
        size_class, _, batches = decided
        checks = 0.0 if started is None or not batches else time.perf_counter() - started
        with self.lock:  # threads take turns on the one local env
            local = self._local if self._local is not None else self.local()  # built outside the timing
            t0 = time.perf_counter() if batches else 0.0  # (a settled place times one batch in a few)
            value = run(local)
            if batches:
                self.tuner.learn(size_class, "here", (time.perf_counter() - t0 + checks) / max(1, steps), batches)
        stats = self.stats
        stats["inline_batches"] += 1
        stats["batches"] += 1  # batches that ran, as the inline backend counts them: not one refused
        stats["items"] += n
        return value

    @staticmethod
    def run_here(local: PlanEnv, job: Job) -> Any:
        """The whole of ``job`` on ``local`` (or its own way here): its StepBatch or RolloutBatch."""
        if job.here is not None:
            return step_batch_of(local.observation_space, job.here(0, job.n))
        states = job.states_of(0, job.n)
        if job.rollout is None:
            return engine_of(local).step_batch_checked(job.actions, states, job.dt, job.seeds, job.index_errors,
                                                       validated=job.validated)
        return local.rollout_batch(states, job.actions, job.dt, horizon=job.rollout.horizon, policy=job.policy,
                                   seeds=job.seeds, return_all=job.rollout.return_all)

    def account(self, fut: BatchFuture) -> None:
        """Telemetry, and the measured times that size chunks and decide where batches run."""
        env_each = [p.env_seconds for p in fut.parts]
        wall = time.perf_counter() - fut.started
        self.stats["batches"] += 1  # batches that ran, as the inline backend counts them: not one refused
        self.stats["items"] += fut.n
        self.stats["env_seconds"] += sum(env_each)
        self.stats["ipc_seconds"] += max(0.0, wall - max(env_each, default=0.0))
        job = fut.job
        assert job is not None and fut.size_class is not None
        if fut.timed_as:
            self.tuner.learn(fut.size_class, fut.place, wall / max(1, job.cost(0, job.n)), fut.timed_as)
        on_workers = (fut.gather.total_steps if fut.gather is not None else 0) - fut.steps_here
        if on_workers > 0:
            self.tuner.learn_step(sum(env_each) / on_workers)

    # ------------------------------------------------------------------ sharing
    def help_with(self, fut: BatchFuture) -> None:
        """Run ``fut``'s chunks that no worker has taken yet, from the back, until none is left.

        Between chunks the workers' replies are handled (and the workers fed).
        When another thread is running items here, the workers are left the whole batch.
        """
        if not self.lock.acquire(blocking=False):
            return
        try:
            local = self.local()
            while (chunk := self._take(fut)) is not None:
                self._run(local, fut, *chunk)
                self.pool.poll_nowait()
        finally:
            self.lock.release()

    def _take(self, fut: BatchFuture) -> tuple[int, int] | None:
        """The last piece of the last chunk no worker has taken (now running here), or None.

        A piece is about ``MIN_CHUNK_SECONDS`` of env time (the rest of the chunk stays
        pending, at the back): between pieces this process handles the workers' replies and
        feeds them, so a worker that finished its chunk waits at most a piece for the next.
        """
        with ctrl_c_deferred():  # no Ctrl-C between taking the lock and the try that releases it
            if not self.pool.lock.acquire(blocking=False):
                return None  # another thread is waiting on the workers: leave them the rest
            try:
                if fut.settled or not fut.pending or fut.item_error is not None:
                    return None  # (after an error, the workers run what is left before it)
                fut.running_here += 1
                lo, hi = fut.pending.pop()
                step = self.tuner.step_seconds
                job = fut.job
                if step is not None and job is not None and hi - lo > 1:
                    per_item = step * job.cost(lo, hi) / (hi - lo)
                    piece = max(1, math.ceil(MIN_CHUNK_SECONDS / max(per_item, 1e-9)))
                    if piece < hi - lo:
                        fut.pending.append((lo, hi - piece))
                        lo = hi - piece
                return lo, hi
            finally:
                self.pool.lock.release()

    def _run(self, local: PlanEnv, fut: BatchFuture, lo: int, hi: int) -> None:
        """Run chunk lo..hi here and put its results in the batch (or fail the batch with the env's error)."""
        job = fut.job
        assert job is not None and fut.gather is not None
        try:
            rows = fut.gather.rows_here(lo, hi, engine_of(local).observation_form())
            out = run_chunk(local, job, lo, hi, rows)
        except Exception as exc:
            item = failed_item(exc)
            exc.add_note(f"raised in the calling process during {job.op.value}"
                         + (f", at item {lo + item} of the batch" if item is not None else ""))
            with self.pool.lock, ctrl_c_deferred():
                # The workers' chunks, earlier in the batch, may fail at an earlier item: the first
                # failing item's error is raised, as inline (BatchFuture.fail_at).
                fut.running_here -= 1
                fut.fail_at(lo + (item or 0), exc)
            return
        with self.pool.lock, ctrl_c_deferred():
            fut.running_here -= 1
            if fut.settled:
                return
            fut.steps_here += fut.gather.absorb_local(lo, hi, out)
            fut.chunks_here += 1
            self.stats["shared_items"] += hi - lo
            fut.progress()
