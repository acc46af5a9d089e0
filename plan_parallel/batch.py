"""BatchEnv: a batch of (state, action, dt) items spread over worker processes.

A batch is split into contiguous chunks balanced by cost (the sum of dt), one
per worker, sent at once, and gathered in input order: the results are
bit-identical to the inline backend for any worker count and chunking, because
every item carries its state and runs the same code.

Nothing is lost and nothing hangs: every wait watches the reply pipes *and* the
process sentinels with a deadline. A dead worker is replaced and its chunks are
sent again (bounded by ``max_restarts``); a worker past its call deadline is
killed, replaced, and the call fails with :class:`WorkerTimeoutError`.
"""
from __future__ import annotations

import logging
import math
import os
import pickle
import select
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import cloudpickle
import numpy as np

from plan_parallel.env import PlanEnv
from plan_parallel.errors import ClosedError, StateError, WorkerCrashedError, WorkerTimeoutError
from plan_parallel.inputs import (
    check_action,
    check_actions,
    check_dt,
    check_kind,
    check_rollout,
    check_seed,
    check_seeds,
    check_states,
)
from plan_parallel.results import RolloutBatch, StepBatch, stack_observations
from plan_parallel.chunks import Gathered, Job, encode, gather_rollout, out_bytes_guess, owned, split_by_cost
from plan_parallel.loops import UniformPolicy
from plan_parallel.state import State
from plan_parallel.transport import PROTOCOL, SlabPool, read_columns
from plan_parallel.workers.base import Call, Reply, reraise
from plan_parallel.workers.process import SPIN_SECONDS, ExternalProcess, default_context, spin_wait

__all__ = ["BatchEnv", "BatchFuture", "split_by_cost"]

# Bytes that may wait in a worker's pipe behind the call it is running: well under
# the smallest socket buffer of a duplex Pipe (~200 KB on Linux, less on macOS).
PIPE_SAFE_BYTES = 32 * 1024
EXPLORE_EVERY = 32  # small batches run here in a row before one goes to the workers to re-measure
CHUNK_SECONDS = 1e-3  # below this, a chunk's fixed cost is a large share of its time

log = logging.getLogger("plan_parallel")


def _describe(parts: list[_Part]) -> str:
    """What a worker was running, for messages: ' during step_batch (12 items), set_state'."""
    ops = [f"{p.call.op} ({p.hi - p.lo} items)" if p.hi else p.call.op for p in parts]
    return f" during {', '.join(ops)}" if ops else " while idle"


def _per_worker_options(options: Any, n: int) -> list[dict]:
    """Ray actor options per worker: one dict for all, or a sequence of one dict per worker."""
    if options is None or isinstance(options, dict):
        return [dict(options or {}) for _ in range(n)]
    if isinstance(options, (list, tuple)) and all(isinstance(o, dict) for o in options):
        if len(options) != n:
            raise ValueError(f"worker_options has {len(options)} dicts for {n} workers: give one per worker")
        return [dict(o) for o in options]
    raise TypeError("worker_options must be a dict of Ray actor options or a list of one dict per worker, "
                    f"got {type(options).__name__}")


def _dumps(obj: Any) -> bytes:
    """Pickle a call; an unpicklable state is the caller's error (StateError), raised before sending."""
    try:
        return pickle.dumps(obj, PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise StateError(f"cannot send to a worker: the input does not pickle ({type(e).__name__}: {e})") from e


@dataclass
class _Part:
    """One chunk of a batch on one worker: what was sent, so it can be sent again."""

    call: Call
    worker: int
    lo: int
    hi: int
    future: "BatchFuture"
    slab: Any = None
    sent_at: float = 0.0
    cost: int = 0  # env steps at most (sum of dt), for the expected duration
    needs: State | None = None  # the current state this part starts from (states=None)
    holds: State | None = None  # the state a set_state part leaves the worker at
    reply: Reply | None = None
    shared: tuple = ()  # values sent once for many workers (Ray: ray.put), see SharedArg
    data: bytes = b""  # the pickled call
    written: bool = False  # written to the worker's pipe (see BatchEnv._write)


@dataclass
class BatchFuture:
    """The pending result of :meth:`BatchEnv.step_batch_async`."""

    env: "BatchEnv"
    n: int
    parts: list[_Part] = field(default_factory=list)
    error: BaseException | None = None
    value: StepBatch | None = None
    started: float = 0.0
    _finisher: Callable[["BatchFuture"], StepBatch] | None = None
    pending: deque = field(default_factory=deque)  # chunks (lo, hi) not sent yet
    job: "Job | None" = None  # the batch's inputs, for encoding pending chunks
    acc: "Gathered | None" = None  # step_batch results gathered so far
    size_class: tuple[str, int] | None = None  # (op, bits of its env-step count), for _run_here
    finished: bool = False  # value is set (it may be None: a state op returns nothing)

    def done(self) -> bool:
        """True when the result (or an error) is ready; never blocks."""
        if not self.finished and self.error is None:
            self.env._pump(0.0)
            self._try_finish()
        return self.finished or self.error is not None

    def result(self, timeout: float | None = None) -> StepBatch:
        """The :class:`StepBatch`, waiting up to ``timeout`` seconds (None: as long as it takes).

        Raises:
            TimeoutError: not ready within ``timeout`` (the batch stays in flight;
                call ``result`` again later: results are never mixed up).
            WorkerTimeoutError, WorkerCrashedError, ClosedError, or the env's own exception.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._try_finish()
            if self.error is not None:
                raise self.error
            if self.finished:
                return self.value  # type: ignore[return-value]
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"the batch of {self.n} items is not done after {timeout} s; it is still running")
            self.env._pump(left)

    def _try_finish(self) -> None:
        if self.finished or self.error is not None:
            return
        if not self.pending and all(p.reply is not None for p in self.parts):
            try:
                self.value = self._finisher(self) if self._finisher else None
                self.finished = True
            except BaseException as e:  # noqa: BLE001 - kept for result() to raise
                self.error = e

    def _set(self, value: Any) -> None:
        self.value = value
        self.finished = True

    def _fail(self, error: BaseException) -> None:
        if not self.finished and self.error is None:
            self.error = error
        self.pending.clear()  # chunks not sent yet are dropped with the batch


class BatchEnv:
    """The planning API over ``n_workers`` worker processes (the ``"process"`` backend).

    Built by :func:`plan_parallel.make`. Same methods and results as
    :class:`~plan_parallel.env.PlanEnv`, plus :meth:`step_batch_async` and :attr:`stats`.

    Args:
        factory: a picklable env factory (:class:`~plan_parallel.factory.EnvFactory`).
        n_workers: worker processes (default: the CPU count).
        timeout: seconds a worker call may take (None: no limit).
        max_restarts: dead or hung workers replaced over the env's life.
        context: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: forkserver where available).
        adapter: an Adapter class overriding the registered one.
        small_batch_inline: run batches too small to gain from workers in this
            process (decided from measured step and round-trip times). Turn it
            off when env code may crash or hang the calling process.

    Raises:
        StateError: no adapter captures the env; the env's own error if building it fails.
    """

    backend = "process"

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
        small_batch_inline: bool = True,
        address: str | None = None,
        worker_options: dict | Sequence[dict] | None = None,
    ) -> None:
        if backend not in ("process", "ray"):
            raise ValueError(f"BatchEnv runs the 'process' or 'ray' backend, got {backend!r}")
        import multiprocessing as mp

        if context is not None and context not in mp.get_all_start_methods():
            raise ValueError(f"context must be one of {mp.get_all_start_methods()} or None, got {context!r}")
        if backend != "ray" and (address is not None or worker_options):
            raise ValueError("address and worker_options are options of backend='ray'")
        self._n = n_workers or os.cpu_count() or 1
        self._worker_options = _per_worker_options(worker_options, self._n)
        self.backend = backend
        if backend == "ray":
            from plan_parallel.workers import ray_actor

            ray_actor.connect(address)
        self._factory = factory
        self._adapter_cls = adapter
        self.timeout = timeout
        self.max_restarts = max_restarts
        self.context = context or default_context()
        self.small_batch_inline = small_batch_inline
        self._blob = cloudpickle.dumps((factory, adapter))
        self._closed = False
        self._ids = 0
        self._pool = SlabPool()
        self._inflight: list[deque[_Part]] = [deque() for _ in range(self._n)]
        self._held: list[State | None] = [None] * self._n  # the state worker i holds, as sent
        self._state: State | None = None
        self._local: PlanEnv | None = None
        self._out_per_item: dict[str, int] = {}  # output bytes per item, learned per op
        self._step_s: float | None = None  # measured seconds per env step in a worker
        # Measured seconds per env step, per (op, size class, "here"|"workers"), and how many
        # batches of a class ran the faster way in a row (see _run_here).
        self._speed: dict[tuple[str, int, str], float] = {}
        self._streak: dict[tuple[str, int], int] = {}
        self._samples: dict[tuple[str, int, str], int] = {}
        self._broken: str | None = None
        self._poll: Any = None
        self._futures: deque[BatchFuture] = deque()  # batches with chunks not sent yet
        self._fd_owner: dict[int, int] = {}
        self.stats: dict[str, Any] = {
            "items": 0, "batches": 0, "inline_batches": 0, "restarts": 0, "timeouts": 0,
            "busy_seconds": [0.0] * self._n, "env_seconds": 0.0, "ipc_seconds": 0.0,
        }
        self._workers: list[ExternalProcess] = []
        try:
            self._workers = [self._new_worker(i) for i in range(self._n)]
            infos = [w.wait_ready() for w in self._workers]
        except BaseException:
            self._shutdown(0.5)
            raise
        info = infos[0]
        self.observation_space = info["observation_space"]
        self.action_space = info["action_space"]
        self.kind: str = info["kind"]
        self._reseedable: bool = info["reseedable"]
        self.spec = info["spec"]

    # ------------------------------------------------------------------ properties
    @property
    def n_workers(self) -> int:
        return self._n

    @property
    def pids(self) -> list[int | None]:
        """The worker processes' pids (they change when a worker is replaced)."""
        return [w.pid for w in self._workers]

    # ------------------------------------------------------------------ plumbing
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")
        if self._broken is not None:
            raise WorkerCrashedError(self._broken)

    def _new_worker(self, i: int) -> Any:
        """Start worker ``i`` (not waiting for it): a process, or a Ray actor."""
        if self.backend == "ray":
            from plan_parallel.workers.ray_actor import RayWorker

            return RayWorker(i, self._blob, self._worker_options[i])
        return ExternalProcess(i, self._blob, self.context)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _send(self, part: _Part) -> None:
        """Queue ``part`` on its worker. Pickled first: a part that cannot be sent is never registered."""
        part.data = _dumps(part.call)
        part.written = False
        part.sent_at = time.monotonic()
        part.reply = None
        if part.holds is not None:
            self._held[part.worker] = part.holds  # optimistic; undone if the worker rejects it
        elif part.call.op == "reset":
            self._held[part.worker] = None
        self._inflight[part.worker].append(part)
        self._write(part.worker)

    def _write(self, i: int) -> None:
        """Write worker ``i``'s queued parts to its pipe, in order, as far as that cannot block.

        The worker reads a whole call before running it, and the parent reads
        replies only between writes: a write that blocks on a full pipe while
        the worker blocks writing a large reply would wait forever. So a call
        goes out while the worker is busy only if it fits, with whatever is
        already waiting in the pipe, in :data:`PIPE_SAFE_BYTES`; a larger one waits
        until the worker is idle (then the worker is reading, and the write ends).
        """
        w = self._workers[i]
        queued = 0
        for k, part in enumerate(self._inflight[i]):
            if part.written:
                if k:
                    queued += len(part.data)
                continue
            if k and self.backend == "process" and queued + len(part.data) > PIPE_SAFE_BYTES:
                return  # sent by _drain once the parts before it are answered
            part.written = True
            part.sent_at = time.monotonic()
            try:
                if part.shared:
                    w.send_bytes(part.data, part.shared)
                else:
                    w.send_bytes(part.data)
            except OSError:
                return  # the worker is dead: the next pump sees its sentinel and sends these parts again
            if k:
                queued += len(part.data)

    def _call(self, worker: int, op: str, *args: Any) -> Any:
        """One synchronous call on one worker (restarted and retried like any part)."""
        fut = BatchFuture(self, 0)
        part = _Part(Call(self._next_id(), op, args), worker, 0, 0, fut)
        fut.parts.append(part)
        fut._finisher = lambda f: f.parts[0].reply.value  # type: ignore[union-attr]
        self._send(part)
        return fut.result()

    def _poller(self) -> Any:
        """A select.poll over every worker's pipe and sentinel (rebuilt when a worker is replaced)."""
        if self._poll is None:
            self._poll = select.poll()
            self._fd_owner = {}
            for i, w in enumerate(self._workers):
                for h in (w.conn.fileno(), w.process.sentinel):
                    self._poll.register(h, select.POLLIN)
                    self._fd_owner[h] = i
        return self._poll

    def _pump(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` for replies or deaths, and handle what arrived.

        Spins (poll + yield) briefly when a reply is due soon, else blocks.
        """
        busy = [i for i in range(self._n) if self._inflight[i]]
        if not busy:
            return
        now = time.monotonic()
        wait_for = timeout
        if self.timeout is not None:
            first = min(self._inflight[i][0].sent_at for i in busy) + self.timeout - now
            wait_for = max(0.0, first) if wait_for is None else max(0.0, min(wait_for, first))
        if self.backend == "ray":
            from plan_parallel.workers.ray_actor import ray_wait

            ready = ray_wait(self._workers, busy, wait_for)
        else:
            ready = self._wait_pipes(busy, now, wait_for)
        for i in ready:
            self._drain(i)
        if self.timeout is not None:
            now = time.monotonic()
            for i in range(self._n):
                q = self._inflight[i]
                if q and now - q[0].sent_at > self.timeout:
                    self._on_timeout(i)

    def _wait_pipes(self, busy: list[int], now: float, wait_for: float | None) -> list[int]:
        """Process backend: the workers whose pipe or sentinel is ready within ``wait_for``."""
        poller = self._poller()
        due = self._due_in(busy, now)
        if due > 2 * SPIN_SECONDS and (wait_for is None or wait_for > due):
            # Not due for a while: sleep (a wake-up costs ~50 us, negligible here), then spin.
            events = poller.poll(int((due - SPIN_SECONDS) * 1000))
            if events:
                wait_for = 0.0
            elif wait_for is not None:
                wait_for = max(0.0, wait_for - (time.monotonic() - now))
        events = spin_wait(poller, min(SPIN_SECONDS, wait_for) if wait_for is not None else SPIN_SECONDS)
        if not events and wait_for != 0.0:
            left = None if wait_for is None else max(0.0, wait_for - SPIN_SECONDS)
            events = poller.poll(None if left is None else int(math.ceil(left * 1000)))
        return sorted({self._fd_owner[fd] for fd, _ in events if fd in self._fd_owner})

    def _due_in(self, busy: list[int], now: float) -> float:
        """Seconds until the first busy worker is expected to answer (0 when unknown)."""
        if self._step_s is None:
            return 0.0
        due = math.inf
        for i in busy:
            head = self._inflight[i][0]
            due = min(due, head.sent_at + head.cost * self._step_s - now)
        return max(0.0, due)

    def _drain(self, i: int) -> None:
        w = self._workers[i]
        while True:
            try:
                reply = w.poll()
            except (EOFError, OSError):
                reply = None
            if reply is None:
                break
            q = self._inflight[i]
            part = q.popleft()
            assert part.call.id == reply.id, f"reply {reply.id} for call {part.call.id}: pipe out of order"
            part.reply = reply
            part.data = b""
            self.stats["busy_seconds"][i] += reply.env_seconds
            if q:
                q[0].sent_at = time.monotonic()  # the next call starts now
                self._write(i)  # calls held back until the worker was idle
            self._deliver(part)
            if len(q) < 2 and not self._closed and self._broken is None:
                self._feed(i)
        if w.dead() is not None:
            self._on_death(i, w.dead())

    def _deliver(self, part: _Part) -> None:
        fut = part.future
        if part.reply is not None and part.reply.error is not None:
            if part.holds is not None and self._held[part.worker] is part.holds:
                self._held[part.worker] = None  # it rejected the state: it holds nothing known
            w = self._workers[part.worker]
            fut._fail(reraise(part.reply.error, f"raised in worker {part.worker} (pid {w.pid}) during {part.call.op}",
                              part.lo))
        if fut.error is not None:  # this batch already failed: its other parts are dropped
            self._release(part)
            return
        if part.call.op == "step_batch":
            # Copied out now, while other chunks still run: the slab is free at once,
            # and little is left to do when the last chunk arrives.
            self._absorb(part)
        fut._try_finish()

    def _release(self, part: _Part) -> None:
        if part.slab is not None:
            self._pool.release(part.slab)
            part.slab = None

    def _replace(self, i: int, why: str, pending: list[_Part]) -> None:
        """Start a new worker ``i`` after a death or a kill; bounded by max_restarts.

        Past the bound (or when the replacement cannot start) the env is broken:
        every batch in flight or queued fails with :class:`WorkerCrashedError`
        naming the worker, how it ended and what it was running.
        """
        old = self._workers[i]
        used = self.stats["restarts"]
        if used >= self.max_restarts:
            self._break(f"worker {i} (pid {old.pid}) {why}{_describe(pending)}; "
                        f"{used} restarts used of {self.max_restarts}", pending)
        self.stats["restarts"] += 1
        log.warning("plan_parallel: worker %d (pid %s) %s%s; starting a replacement (%d of %d restarts)",
                    i, old.pid, why, _describe(pending), used + 1, self.max_restarts)
        old.close(0.0)
        self._poll = None  # new fds
        self._held[i] = None
        try:
            new = self._new_worker(i)
            self._workers[i] = new
            new.wait_ready()
        except BaseException as e:  # noqa: BLE001 - the env cannot go on without worker i
            self._break(f"worker {i} (pid {old.pid}) {why}{_describe(pending)}, and its replacement "
                        f"failed to start: {type(e).__name__}: {e}", pending, cause=e)

    def _break(self, msg: str, pending: list[_Part], cause: BaseException | None = None) -> None:
        """Mark the env broken and fail every batch in flight or queued. Always raises."""
        self._broken = msg
        err = WorkerCrashedError(msg)
        if cause is not None:
            err.__cause__ = cause
        for p in pending:
            self._discard(p)
            p.future._fail(err)
        for q in self._inflight:
            for p in q:
                self._discard(p)
                p.future._fail(err)
            q.clear()
        for fut in self._futures:
            fut._fail(err)
        self._futures.clear()
        raise err

    def _discard(self, part: _Part) -> None:
        if part.slab is not None:
            self._pool.discard(part.slab)
            part.slab = None

    def _on_death(self, i: int, how: str) -> None:
        pending = list(self._inflight[i])
        self._inflight[i].clear()
        self._replace(i, f"died with {how}", pending)
        self._resend(i, pending)

    def _on_timeout(self, i: int) -> None:
        pending = list(self._inflight[i])
        self._inflight[i].clear()
        head = pending[0]
        w = self._workers[i]
        w.kill()
        self.stats["timeouts"] += 1
        err = WorkerTimeoutError(
            f"worker {i} (pid {w.pid}) did not finish {head.call.op}"
            + (f" ({head.hi - head.lo} items)" if head.hi else "")
            + f" within {self.timeout} s; it was killed and replaced"
        )
        head.future._fail(err)
        self._replace(i, f"timed out after {self.timeout} s", pending)
        self._resend(i, pending)

    def _resend(self, i: int, pending: list[_Part]) -> None:
        """Send a replaced worker the parts its predecessor had not answered, with the states they need."""
        for part in pending:
            if part.future.error is not None:
                self._discard(part)
                continue
            if part.needs is not None:
                self._ensure_holds(i, part.needs, part.future)
            self._send(part)

    def _ensure_holds(self, i: int, state: State, fut: BatchFuture) -> None:
        """Queue a set_state on worker ``i`` unless what was sent to it already leaves it at ``state``.

        The set_state is a part of ``fut``: if the worker rejects the state or
        times out, that batch fails with the error.
        """
        if self._held[i] is not state:
            part = _Part(Call(self._next_id(), "set_state", (_dumps(state),)), i, 0, 0, fut, holds=state)
            fut.parts.append(part)
            self._send(part)

    def _current(self) -> State:
        if self._state is None:
            raise StateError("the env has no current state yet: call reset(seed) or set_state(state) first")
        return self._state

    # ------------------------------------------------------------------ public API
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """Reset (on worker 0) and make the new state current on every worker.

        Raises:
            TypeError: bad seed or options. The env's own error if its reset raises.
        """
        self._check_open()
        seed = check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        state, obs, info = self._call(0, "reset", seed, options)
        self._set_current(state, holder=0)
        return state, obs, info

    def _set_current(self, state: State, holder: int | None) -> None:
        self._state = state
        if holder is not None:
            self._held[holder] = state
        if self._local is not None:
            self._local.set_state(state)

    def set_state(self, state: State) -> None:
        """Make ``state`` current (sent to workers lazily, when a batch starts from it).

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._check_open()
        check_kind(state, self.kind)
        self._set_current(state, holder=None)

    def sync_states(self, state: State) -> None:
        """Make ``state`` current on every worker now (pickled once, written to each pipe).

        Raises:
            StateError: ``state`` belongs to another env, or a worker rejects it.
        """
        self._check_open()
        check_kind(state, self.kind)
        blob = _dumps(state)
        fut = BatchFuture(self, 0)
        fut._finisher = lambda f: None
        if self.backend == "ray":  # one ray.put for every actor
            from plan_parallel.workers.ray_actor import SharedArg

            args, shared = (SharedArg(0),), (blob,)
        else:  # one pickle, written to every pipe
            args, shared = (blob,), ()
        for i in range(self._n):
            part = _Part(Call(self._next_id(), "set_state", args), i, 0, 0, fut, holds=state, shared=shared)
            fut.parts.append(part)
            self._send(part)
        fut.result()
        self._set_current(state, holder=None)

    def get_state(self) -> State:
        """The current state (no worker is asked: the parent keeps it).

        Raises:
            StateError: no current state yet.
        """
        self._check_open()
        return self._current()

    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """Advance the current state (or ``state``) by ``action`` repeated ``dt`` times; the result becomes current."""
        self._check_open()
        dt = check_dt(dt, 1)
        if not isinstance(dt, int):
            raise TypeError(f"step takes one integer dt >= 1, got {dt!r}")
        action = check_action(self.action_space, action)
        if state is not None:
            check_kind(state, self.kind)
        start = state if state is not None else self._current()
        b = self.step_batch([action], [start], dt)
        s = b.states[0]
        self._set_current(s, holder=None)
        # The env's own observation value, as inline returns it (any space); the state keeps its copy.
        obs = s.obs.copy() if isinstance(s.obs, np.ndarray) else s.obs
        return s, obs, float(b.rewards[0]), bool(b.terminations[0]), bool(b.truncations[0]), b.infos[0]

    def step_batch(
        self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *, seeds: Any = None
    ) -> StepBatch:
        """Run N (state, action, dt) items across the workers; results in input order.

        Bit-identical to the inline backend (see :meth:`PlanEnv.step_batch`, also
        for ``seeds``). The current state is left as it was.

        Raises:
            ValueError/TypeError: bad input (before anything is sent). StateError.
            The env's own exception (remote traceback as ``__cause__``; the env stays usable).
            WorkerTimeoutError: a worker exceeded ``timeout`` (it was replaced).
            WorkerCrashedError: workers died more than ``max_restarts`` times.
        """
        return self.step_batch_async(actions, states, dt, seeds=seeds).result()

    def step_batch_async(
        self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *, seeds: Any = None
    ) -> BatchFuture:
        """Send a batch and return at once; ``.result(timeout)`` gathers it. Several may be in flight."""
        self._check_open()
        if states is None:
            actions = check_actions(self.action_space, actions)
            n = len(actions)
            self._current()
        else:
            n = len(states) if hasattr(states, "__len__") else -1
            actions = check_actions(self.action_space, actions, n if n >= 0 else None)
            states = list(check_states(states, self.kind, len(actions), None))  # any sequence; a copy
        dt = check_dt(dt, n)
        seeds = check_seeds(seeds, n, self._reseedable)
        # The batch owns its inputs: the caller may reuse its arrays while chunks wait to be sent.
        actions = actions.copy() if isinstance(actions, np.ndarray) else list(actions)
        job = Job("step_batch", actions, states, owned(dt), owned(seeds), self._state if states is None else None)
        fut = BatchFuture(self, n, started=time.perf_counter())
        if n == 0:
            self.stats["batches"] += 1  # counted as inline counts it
            empty = np.empty(0)
            fut._set(StepBatch([], stack_observations(self.observation_space, []), empty.astype(np.float64),
                               empty.astype(bool), empty.astype(bool), []))
            return fut
        return self._submit(fut, job)

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
        return self.rollout_batch_async(
            states, actions, dt, horizon=horizon, policy=policy, seeds=seeds, return_all=return_all
        ).result()

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
        self._check_open()
        current = self._current() if states is None else None
        req = check_rollout(
            self.action_space, self.kind, None, states, actions, dt, horizon=horizon, policy=policy,
            seeds=seeds, return_all=return_all, current=current, reseedable=self._reseedable,
        )
        if req.actions is None and req.policy is None:
            UniformPolicy(self.action_space)  # the space has a sampler, or this raises before sending
        acts = req.actions
        if acts is not None:
            acts = acts.copy() if isinstance(acts, np.ndarray) else [list(a) for a in acts]
        job = Job(
            "rollout_batch", acts, None if req.states is None else list(req.states), owned(req.dt),
            owned(req.seeds), current, steps_per_item=req.horizon, policy=req.policy,
            extra={"horizon": req.horizon, "policy": req.policy_blob, "return_all": req.return_all},
        )
        fut = BatchFuture(self, req.n, started=time.perf_counter())
        return self._submit(fut, job)

    def _submit(self, fut: BatchFuture, job: Job) -> BatchFuture:
        """Run ``job`` here when it is too small to gain from workers, else send its chunks."""
        steps = job.cost(0, fut.n)
        fut.size_class = (job.op, steps.bit_length())
        if self._run_here(fut.size_class):
            self._ensure_local()  # built outside the timing: its cost is not a step's
            t0 = time.perf_counter()
            fut._set(self._run_local(job, fut.n))
            self._learn(fut.size_class, "here", (time.perf_counter() - t0) / max(1, steps))
            return fut
        try:
            self._dispatch(fut, job)
        except BaseException as e:
            # Nothing of this batch may leak into the next one: drop its unsent chunks.
            fut._fail(e)
            if fut in self._futures:
                self._futures.remove(fut)
            raise
        return fut

    # ------------------------------------------------------------------ dispatch
    def _run_here(self, size_class: tuple[str, int]) -> bool:
        """Run a batch of this size class in this process rather than on the workers?

        Decided by measurement, per op and per power-of-two number of env steps:
        the seconds per step each way (EMA), whichever is faster, with one batch
        in EXPLORE_EVERY sent the other way so that both figures stay current
        (a noisy early measurement is corrected; a machine that gets busy is seen).
        """
        if not self.small_batch_inline:
            return False
        there = self._speed.get((*size_class, "workers"))
        if there is None:
            return False  # measure the workers first
        here = self._speed.get((*size_class, "here"))
        if here is None:
            return True  # then this process
        faster_here = here <= there
        # Re-measure the slower way less often when it is far slower: exploring costs its gap.
        every = EXPLORE_EVERY if max(here, there) < 2 * min(here, there) else 4 * EXPLORE_EVERY
        k = self._streak.get(size_class, 0) + 1
        self._streak[size_class] = k % every
        return faster_here if k < every else not faster_here

    def _learn(self, size_class: tuple[str, int] | None, where: str, per_step: float) -> None:
        if size_class is None:
            return
        key = (*size_class, where)
        old = self._speed.get(key)
        seen = self._samples[key] = self._samples.get(key, 0) + 1
        if old is None:
            self._speed[key] = per_step
        elif seen <= 3:  # the first calls pay one-off costs (attaching slabs, caches): keep the best
            self._speed[key] = min(old, per_step)
        else:
            self._speed[key] = 0.7 * old + 0.3 * per_step

    def _ensure_local(self) -> PlanEnv:
        """The env in this process for batches run here (built on first use, at the current state)."""
        if self._local is None:
            self._local = PlanEnv(self._factory, adapter=self._adapter_cls)
            if self._state is not None:
                self._local.set_state(self._state)
        return self._local

    def _run_local(self, job: Job, n: int) -> Any:
        self._ensure_local()
        self.stats["inline_batches"] += 1
        self.stats["batches"] += 1
        self.stats["items"] += n
        if job.op == "step_batch":
            states = job.states if job.states is not None else [self._local.get_state()] * n
            return self._local.step_batch_checked(job.actions, states, job.dt, job.seeds)
        return self._local.rollout_batch(
            job.states, job.actions, job.dt, horizon=job.extra["horizon"], policy=job.policy, seeds=job.seeds,
            return_all=job.extra["return_all"],
        )

    def _n_chunks(self, n: int, steps: int) -> int:
        """Chunks for a batch: one per worker, or up to 3 per worker when each would still take >= 1 ms.

        More chunks than workers, handed out as workers finish, keep a worker
        slowed by a noisy neighbour from holding the whole batch back.
        """
        w = self._n
        if self._step_s is None or n < 4 * w:
            return min(n, w)
        per_worker = steps * self._step_s / w
        return min(n, w * int(max(1, min(3, per_worker // CHUNK_SECONDS))))

    def _dispatch(self, fut: BatchFuture, job: Job) -> None:
        n = fut.n
        fut.pending.extend(split_by_cost(job.dt, n, self._n_chunks(n, job.cost(0, n))))
        fut.job = job
        fut._finisher = self._finish if job.op == "step_batch" else self._finish_rollout
        self._futures.append(fut)
        # Two chunks queued per worker at most: a worker never waits for the parent.
        for _ in range(2):
            for wi in range(self._n):
                if fut.pending and len(self._inflight[wi]) < 2:
                    self._feed_one(fut, wi)
        self.stats["batches"] += 1
        self.stats["items"] += n

    def _feed_one(self, fut: BatchFuture, wi: int) -> None:
        lo, hi = fut.pending.popleft()
        job = fut.job
        assert job is not None
        if job.needs is not None:
            self._ensure_holds(wi, job.needs, fut)
        req, slab = self._encode(job, lo, hi)
        part = _Part(Call(self._next_id(), job.op, (req,)), wi, lo, hi, fut, slab, cost=job.cost(lo, hi),
                     needs=job.needs)
        fut.parts.append(part)
        self._send(part)

    def _feed(self, wi: int) -> None:
        """Give worker ``wi`` the next unsent chunk of the oldest batch that has one."""
        while self._futures and not self._futures[0].pending:
            self._futures.popleft()
        for fut in self._futures:
            if fut.pending and fut.error is None:
                self._feed_one(fut, wi)
                return

    def _encode(self, job: Job, lo: int, hi: int) -> tuple[dict, Any]:
        """Chunk lo..hi's request (see :func:`plan_parallel.chunks.encode`); a slab on the process backend only."""
        per_out = self._out_per_item.get(job.op)
        if per_out is None:
            first = job.states[lo] if job.states is not None else self._state
            per_out = out_bytes_guess(self.observation_space, first) * (
                1 + (job.steps_per_item if job.extra.get("return_all") else 0))
        # No shared memory on Ray (the actor may be on another machine): arrays go in the pickle.
        return encode(job, lo, hi, per_out, self._pool.acquire if self.backend == "process" else None)

    def _read(self, part: _Part) -> tuple[dict, dict[str, np.ndarray]]:
        """A chunk reply and its slab columns (``obs`` a view: copy it before :meth:`_release`)."""
        rep = part.reply.value  # type: ignore[union-attr]
        m, op = part.hi - part.lo, part.call.op
        self._out_per_item[op] = max(self._out_per_item.get(op, 0), -(-rep["needed"] // m) + 64)
        return rep, read_columns(part.slab, rep["layout"], views=("obs",))

    def _absorb(self, part: _Part) -> None:
        """Copy one step_batch chunk's results into its future's :class:`Gathered`, then free its slab."""
        fut = part.future
        acc = fut.acc = fut.acc or Gathered(fut.n)
        rep, cols = self._read(part)
        try:
            acc.absorb(part.lo, part.hi, rep, cols)
        finally:
            self._release(part)

    def _finish(self, fut: BatchFuture) -> StepBatch:
        acc = fut.acc or Gathered(fut.n)
        self._account(fut, acc.total_steps)
        return acc.result(self.observation_space)

    def _finish_rollout(self, fut: BatchFuture) -> RolloutBatch:
        job = fut.job
        assert job is not None

        def chunks() -> Iterator[tuple[int, int, dict, dict[str, np.ndarray]]]:
            for part in sorted((p for p in fut.parts if p.call.op == job.op), key=lambda p: p.lo):
                rep, cols = self._read(part)
                try:
                    yield part.lo, part.hi, rep, cols
                finally:
                    self._release(part)

        batch, steps = gather_rollout(self.observation_space, job.extra["horizon"], job.extra["return_all"], chunks())
        self._account(fut, steps)
        return batch

    def _account(self, fut: BatchFuture, total_steps: int) -> None:
        """Telemetry, and the measured times that size chunks and decide where batches run."""
        env_each = [p.reply.env_seconds for p in fut.parts]  # type: ignore[union-attr]
        env_s = max(env_each, default=0.0)
        wall = time.perf_counter() - fut.started
        self.stats["env_seconds"] += sum(env_each)
        self.stats["ipc_seconds"] += max(0.0, wall - env_s)  # time not spent in env code, the slowest chunk's
        if fut.job is not None:
            self._learn(fut.size_class, "workers", wall / max(1, fut.job.cost(0, fut.n)))
        if total_steps:
            per = sum(env_each) / total_steps
            self._step_s = per if self._step_s is None else 0.8 * self._step_s + 0.2 * per

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Stop every worker (bounded: about a second) and free shared memory. Idempotent.

        Batches still in flight fail with :class:`ClosedError`.
        """
        if self._closed:
            return
        self._closed = True
        closed = ClosedError("the env was closed while this batch was in flight")
        for q in self._inflight:
            for p in q:
                p.future._fail(closed)
            q.clear()
        for fut in self._futures:
            fut._fail(closed)
        self._futures.clear()
        self._shutdown(1.0)

    def _shutdown(self, timeout: float) -> None:
        for w in self._workers if self.backend == "process" else ():  # a Ray actor is killed by close()
            try:
                w.send(Call(-1, "close"))
            except (OSError, EOFError, ValueError):
                pass  # already gone; close() below joins or kills it
        deadline = time.monotonic() + timeout
        for w in self._workers:
            w.close(max(0.0, deadline - time.monotonic()))
        self._pool.close()
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> "BatchEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown: workers exit on their own
                log.debug("plan_parallel: close() in __del__ failed", exc_info=True)

    def __repr__(self) -> str:
        where = f"context={self.context!r}" if self.backend == "process" else "backend='ray'"
        return f"BatchEnv({self._factory!r}, n_workers={self._n}, {where})"
