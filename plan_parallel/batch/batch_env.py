"""BatchEnv: the planning API over a pool of workers (the ``"process"`` and ``"ray"`` backends).

A batch is split into contiguous chunks balanced by cost (the sum of dt) and
gathered in input order: the results are bit-identical to the inline backend
for any worker count and chunking, because every item carries its state and
runs the same code. Small batches may run in this process, and this process
may run a share of a larger one while it waits, when that is measured to be
faster (:mod:`plan_parallel.batch.placement`); never when a ``timeout`` is set,
since a timeout cannot stop code running here.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import numpy as np

from plan_parallel.action_inputs import check_action
from plan_parallel.batch.engine import STEP_OP, BatchEngine, wait_or_cancel
from plan_parallel.batch.future import BatchFuture
from plan_parallel.batch.jobs import rollout_job, step_job
from plan_parallel.batch.lane import Lane
from plan_parallel.batch.parts import dumps
from plan_parallel.batch.placement import Decision, Placement
from plan_parallel.batch.policy import ExecutionPolicy
from plan_parallel.batch.pool import WorkerPool
from plan_parallel.batch.sync_calls import call_all, call_one
from plan_parallel.batch.tuner import Tuner
from plan_parallel.env.loops import UniformPolicy
from plan_parallel.env.plan_env import PlanEnv
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.inputs import check_dt, check_kind, check_seed
from plan_parallel.results import RolloutBatch, StepBatch, step_batch_of, writable_observation
from plan_parallel.state import State, StateBatch
from plan_parallel.state.state_value import mark_checked
from plan_parallel.wire.codec import Job
from plan_parallel.wire.messages import Op
from plan_parallel.workers.backends import HostSettings, select_backend
from plan_parallel.workers.process import default_context

__all__ = ["BatchEnv", "batch_engine_of"]

log = logging.getLogger("plan_parallel")
# The tuner's mode for each placement of the execution policy.
TUNER_MODES = {"rule": "rule", "adaptive": "auto", "workers": "workers", "here": "here"}


class BatchEnv:
    """The planning API over ``n_workers`` workers. Built by :func:`plan_parallel.make`.

    Same methods and results as :class:`~plan_parallel.env.PlanEnv`, plus
    :meth:`step_batch_async`, :meth:`rollout_batch_async`, :attr:`pids` and its options
    (``timeout``, ``context``, ...).
    May be used from several threads (calls are serialized); :meth:`close`
    from another thread makes every pending and later call raise :class:`ClosedError`.

    Interruptions: a ``KeyboardInterrupt`` (or any exception) during a call
    leaves every worker either finished or killed and replaced, and the env
    usable; the interrupted call's work is dropped, so the next call does not
    wait for it. Results are matched to calls by id: none is ever handed to
    another call.

    Args:
        factory: a picklable env factory (:class:`~plan_parallel.factory.EnvFactory`).
        backend: ``"process"`` or ``"ray"``.
        n_workers: workers (a shorthand of the execution policy's; default: the CPUs this process may use).
        timeout: seconds a worker call may take (None: no limit). With a
            timeout every batch runs on the workers, where the timeout can act.
        max_restarts: dead or hung workers replaced over the env's life.
        context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: forkserver where available).
        adapter: an Adapter class overriding the registered one.
        small_batch_inline: False: every batch on the workers (a shorthand of the policy's
            ``placement="workers"``). Turn it off when env code may crash or hang the calling process.
        address: Ray's cluster address (see :func:`plan_parallel.make`).
        worker_options: Ray's actor options (see :func:`plan_parallel.make`).
        pin_workers: keep each process worker on a core of its own (a shorthand of the policy's).
        execution: where and how fast batches run (:class:`~plan_parallel.batch.policy.ExecutionPolicy`;
            default: its defaults, which change nothing outside the library). The one in force, with the
            shorthands above applied, is :attr:`execution`.
        tuner: decides where batches run and their chunks (default: the execution policy's; for tests).

    Raises:
        StateError: no adapter captures the env.
        WorkerCrashedError: a worker died while building its env.
        WorkerTimeoutError: a worker did not build its env in time.
        Exception: whatever building the env raises, with its own type.
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        backend: str = "process",
        n_workers: int | None = None,
        timeout: float | None = None,
        max_restarts: int = 3,
        context: str | None = None,
        adapter: Any = None,
        small_batch_inline: bool | None = None,
        address: str | None = None,
        worker_options: dict | Sequence[dict] | None = None,
        pin_workers: bool | None = None,
        execution: ExecutionPolicy | None = None,
        tuner: Tuner | None = None,
    ) -> None:
        if context is not None and context not in mp.get_all_start_methods():
            raise ValueError(f"context must be one of {mp.get_all_start_methods()} or None, got {context!r}")
        if execution is not None and not isinstance(execution, ExecutionPolicy):
            raise TypeError(f"execution must be an ExecutionPolicy or None, got {type(execution).__name__}")
        if tuner is not None and tuner.mode in ("here", "share") and timeout is not None:
            raise ValueError("a timeout cannot act on items run in this process: give timeout=None with "
                             f"mode {tuner.mode!r}")
        policy = (execution or ExecutionPolicy()).with_options(n_workers, small_batch_inline, pin_workers, timeout)
        n = policy.n_workers
        assert n is not None  # (with_options fills it in)
        #: The execution policy in force: the one given, with the shorthand options applied and the worker count.
        self.execution = policy
        self.backend = backend
        self.timeout = timeout
        self.max_restarts = max_restarts
        self.context = context or default_context()
        self._factory = factory
        self._state: State | None = None
        host = HostSettings(policy.pin_workers, policy.batch_scheduling, policy.move_caller)
        chosen = select_backend(backend, cloudpickle.dumps((factory, adapter)), n, self.context, address,
                                worker_options, host)
        self._where = chosen.where
        self._workers_here = chosen.workers_here
        self._pool = WorkerPool(chosen.new_worker, chosen.worker_type, n, timeout, max_restarts)
        self._pool.stats.update({"items": 0, "batches": 0, "inline_batches": 0, "shared_batches": 0, "shared_items": 0,
                                 "ipc_seconds": 0.0, "lent_batches": 0, "lane_batches": 0, "lane_chunks": 0,
                                 "lane_sourced": 0})
        self._placement = Placement(
            self._pool, tuner or Tuner(n, TUNER_MODES[policy.placement], chunk_seconds=chosen.worker_type.chunk_seconds,
                                       workers_here=chosen.workers_here, here_below=policy.here_below,
                                       max_chunks=policy.max_chunks_per_worker),
            lambda: PlanEnv(factory, adapter=adapter), self._pool.stats)
        try:
            info = self._pool.start()
        except BaseException:
            self._pool.close(0.5)
            raise
        self._observation_space = info.observation_space
        self._action_space = info.action_space
        self.kind: str = info.kind
        self._engine = BatchEngine(self._pool, self._placement, info.kind)
        self.reseedable: bool = info.reseedable
        self._spec = info.spec
        self._pool.feeder.observation_space = info.observation_space
        self._placement.observation_space = info.observation_space
        if policy.lane:
            self._placement.lane = Lane(self._pool, info, self._pool.feeder.trust)

    # ------------------------------------------------------------------ properties
    @property
    def observation_space(self) -> Any:
        """The env's observation space (a ``gymnasium.spaces.Space``, as the workers' env reported it)."""
        return self._observation_space

    @property
    def action_space(self) -> Any:
        """The env's action space (a ``gymnasium.spaces.Space``): every action is checked against it before sending."""
        return self._action_space

    @property
    def stats(self) -> dict[str, Any]:
        """Counters since the env was made, a live dict: ``items`` and ``batches`` run; ``env_seconds`` and
        ``busy_seconds`` (per worker) spent in env code; ``restarts`` and ``timeouts`` of workers; batches run
        in this process (``inline_batches``) or shared with it (``shared_batches``, ``shared_items``); and the
        plumbing's own (``ipc_seconds``, ``lent_batches``, ``resent``, ...)."""
        return self._pool.stats

    @property
    def n_workers(self) -> int:
        return len(self._pool.slots)

    @property
    def small_batch_inline(self) -> bool:
        """Whether small batches may run in this process (False: the policy's placement is ``"workers"``)."""
        return self.execution.placement != "workers"

    @property
    def pids(self) -> list[int | None]:
        """The worker processes' pids (they change when a worker is replaced; after :meth:`close`, the last ones).

        None for a worker whose pid is not known: a Ray actor reports its pid when it has built its env, so a
        replacement actor still starting (or one that died before it was ready) has None."""
        return [s.current.pid if s.current is not None else None for s in self._pool.slots]

    @property
    def closed(self) -> bool:
        return self._pool.closed

    @property
    def gym_env(self) -> Any:
        """A gymnasium env in this process at the current state (for rendering; built on first use)."""
        self._check_open()
        with self._placement.lock:
            local = self._placement.local()
            if self._state is not None:
                local.set_state(self._state)
            return local.gym_env

    def validate(self, state: State) -> None:
        """Check that ``state`` can restore this env (its kind, then its simulator part, in this process).

        On a Ray cluster whose actors may run on other machines only the kind is checked here (the env is
        never built in this process, which may lack its dependencies); a worker checks the rest when it
        first restores the state.

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._check_open()
        check_kind(state, self.kind)
        if self._workers_here:  # (a cluster's workers check the rest: the env is never built in its driver)
            self._placement.local().validate(state)

    def uniform_policy(self) -> UniformPolicy:
        """The policy of ``rollout_batch(actions=None, policy=None)``: uniform random actions."""
        return UniformPolicy(self.action_space)

    @property
    def spec(self) -> Any:
        """The env's ``EnvSpec`` (read from a local env when the workers' did not pickle)."""
        if self._spec is None:
            return self._placement.local().spec
        return self._spec

    # ------------------------------------------------------------------ helpers
    def _check_open(self) -> None:
        if self._pool.closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")

    def _current(self) -> State:
        if self._state is None:
            raise StateError("the env has no current state yet: call reset(seed) or set_state(state) first")
        return self._state

    def _set_current(self, state: State) -> None:
        self._state = state

    # ------------------------------------------------------------------ state
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """Reset (on worker 0) and make the new state current.

        Without a seed, the reset goes on from the current state (sent with the call), as
        :meth:`PlanEnv.reset` does.

        Raises:
            TypeError: bad seed or options.
            Exception: whatever the env's own reset raises, with its own type.
        """
        self._check_open()
        seed = check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        # Without a seed, the current state goes with the call (a replacement of worker 0 replays it too).
        current = dumps(self._state) if seed is None and self._state is not None else None
        state, obs, info = call_one(self._pool, 0, Op.RESET, (seed, options, current))
        mark_checked([state], self._pool.feeder.trust)  # a worker's env made it: the lane takes it as a result's
        self._pool.slots[0].held = state
        self._set_current(state)
        return state, writable_observation(obs), info

    def set_state(self, state: State) -> None:
        """Make ``state`` current (sent to workers lazily, when a batch starts from it).

        The state is checked here, as the inline backend checks it (:meth:`validate`).

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self.validate(state)
        self._set_current(state)

    def sync_states(self, state: State) -> None:
        """Make ``state`` current on every worker now (pickled once).

        Raises:
            StateError: ``state`` belongs to another env, does not pickle, or a worker rejects it.
        """
        self._check_open()
        check_kind(state, self.kind)
        call_all(self._pool, Op.SET_STATE, dumps(state), state)
        self._set_current(state)

    def get_state(self) -> State:
        """The current state (no worker is asked: the parent keeps it).

        Raises:
            StateError: no current state yet.
        """
        self._check_open()
        return self._current()

    # ------------------------------------------------------------------ stepping
    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """Advance the current state (or ``state``) by ``action`` repeated ``dt`` times; the result becomes current."""
        self._check_open()
        checked = check_dt(dt, 1)
        if not isinstance(checked, int):
            raise TypeError(f"step takes one integer dt >= 1, got {dt!r}")
        dt = checked
        action = check_action(self.action_space, action)
        if state is not None:
            check_kind(state, self.kind)
        start = state if state is not None else self._current()
        actions = np.asarray([action]) if isinstance(action, np.ndarray) or np.isscalar(action) else [action]
        b = wait_or_cancel(self._placement.submit(Job(1, actions, [start], dt, None, index_errors=False), True))
        s = b.states[0]
        self._set_current(s)
        return s, writable_observation(s.obs), float(b.rewards[0]), bool(b.terminations[0]), bool(b.truncations[0]), b.infos[0]

    def step_batch(
        self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *, seeds: Any = None
    ) -> StepBatch:
        """Run N (state, action, dt) items across the workers; results in input order.

        Bit-identical to the inline backend (see :meth:`PlanEnv.step_batch`, also
        for ``seeds``). The current state is left as it was.

        Raises:
            ValueError/TypeError: bad input (before anything is sent).
            StateError: a state of another env, or no current state.
            Exception: whatever the env's own step raises, with its own type (remote traceback as
                ``__cause__``; the env stays usable).
            WorkerTimeoutError: a worker exceeded ``timeout`` (it was replaced).
            WorkerCrashedError: workers died more than ``max_restarts`` times.
        """
        self._check_open()
        started = time.perf_counter()
        decided = None
        if type(dt) is int and dt >= 1 and type(states) in (list, tuple, StateBatch) and states:
            # The batch's size class is known before its checks: when the tuner places it here,
            # the local env takes the call as the inline backend would (the same checks and errors).
            n = len(states)
            steps = n * dt
            decided = self._placement.where(STEP_OP, steps, True, n)
            if decided[1] == "here":
                return self._placement.run_here_timed(
                    decided, steps, n, lambda local: local.step_batch(actions, states, dt, seeds=seeds))
        return wait_or_cancel(self._step_batch(actions, states, dt, seeds, True, decided, started))

    def step_batch_async(
        self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *, seeds: Any = None
    ) -> BatchFuture:
        """Send a batch and return at once; ``.result(timeout)`` gathers it. Several may be in flight."""
        return self._step_batch(actions, states, dt, seeds, False)

    def _step_batch(self, actions: Any, states: Sequence[State] | None, dt: Any, seeds: Any, waited_in_full: bool,
                    decided: Decision | None = None, started: float | None = None) -> BatchFuture:
        self._check_open()
        job = step_job(self.action_space, self.kind, self.reseedable, self._current, actions, states, dt, seeds)
        if job.n == 0:
            self.stats["batches"] += 1
            return BatchFuture.completed(0, step_batch_of(self.observation_space, ([], [], [], [], [], [])))
        return self._placement.submit(job, waited_in_full, decided, started)

    def rollout_batch(
        self,
        states: Sequence[State] | None,
        actions: Any = None,
        dt: Any = 1,
        *,
        horizon: int | None = None,
        policy: Callable[[Any, np.random.Generator], Any] | None = None,
        seeds: Any = None,
        return_all: bool = False,
    ) -> RolloutBatch:
        """Roll out N items for T steps each, every item's whole sequence inside one worker.

        Same arguments, results and errors as :meth:`PlanEnv.rollout_batch`
        (bit-identical for any worker count); worker failures as :meth:`step_batch`.
        """
        return wait_or_cancel(self._rollout_batch(states, actions, dt, horizon, policy, seeds, return_all, True))

    def rollout_batch_async(
        self,
        states: Sequence[State] | None,
        actions: Any = None,
        dt: Any = 1,
        *,
        horizon: int | None = None,
        policy: Callable[[Any, np.random.Generator], Any] | None = None,
        seeds: Any = None,
        return_all: bool = False,
    ) -> BatchFuture:
        """:meth:`rollout_batch` without waiting: a future whose ``result()`` is the :class:`RolloutBatch`."""
        return self._rollout_batch(states, actions, dt, horizon, policy, seeds, return_all, False)

    def _rollout_batch(self, states: Sequence[State] | None, actions: Any, dt: Any, horizon: int | None,
                       policy: Callable[[Any, np.random.Generator], Any] | None, seeds: Any, return_all: bool,
                       waited_in_full: bool) -> BatchFuture:
        self._check_open()
        job = rollout_job(self.action_space, self.kind, self.reseedable, self._current, states, actions, dt, horizon,
                          policy, seeds, return_all)
        return self._placement.submit(job, waited_in_full)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Stop every worker (bounded: about a second) and free shared memory. Idempotent; any thread.

        Batches still in flight fail with :class:`ClosedError`. A second
        ``close()`` after an interrupted one frees whatever the first did not.
        """
        self._pool.close(1.0)
        self._placement.close()

    def __enter__(self) -> BatchEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None and not pool.closed:
            try:
                self.close()
            except Exception:
                log.debug("plan_parallel: close() in __del__ failed", exc_info=True)

    def __repr__(self) -> str:
        closed = ", closed" if self.closed else ""
        return f"BatchEnv({self._factory!r}, n_workers={self.n_workers}, {self._where}{closed})"


def batch_engine_of(env: BatchEnv) -> BatchEngine:
    """The :class:`~plan_parallel.batch.engine.BatchEngine` of ``env``: its steps of canonical inputs, for the
    vector env. Not part of the public API (see :func:`plan_parallel.env.plan_env.engine_of`)."""
    return env._engine
