"""ExternalProcess: the calling process's handle on one worker process hosting one env.

The env is built inside the worker from a factory shipped with cloudpickle, so
lambdas and closures work under fork, spawn and forkserver, and the user's
``__main__`` is never run again in a worker (a script needs no main guard). The
parent talks to the worker over a duplex pipe (pickled
:class:`~plan_parallel.wire.messages.Call` / ``Reply`` messages with call ids)
and moves arrays through shared-memory slabs (:mod:`plan_parallel.wire.slabs`).

The loop the worker runs, and how it dies with its parent, is
:mod:`plan_parallel.workers.process_main`; the forkserver that forks workers exits with the parent.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import select
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from plan_parallel.wire.frames import read_message, write_message
from plan_parallel.wire.messages import Call, Op, Reply, call_wire, reply_from_wire
from plan_parallel.wire.slabs import PROTOCOL
from plan_parallel.workers.cores import move_off, restore_cores
from plan_parallel.workers.process_main import worker_main

__all__ = ["PIPE_SAFE_BYTES", "ExternalProcess", "default_context", "describe_exit"]

# Bytes that may wait in a worker's pipe behind the call it is running: well under
# the smallest socket buffer of a duplex Pipe (~200 KB on Linux, less on macOS).
PIPE_SAFE_BYTES = 32 * 1024
SPIN_SECONDS = 300e-6  # the parent, waiting for replies, polls this long before it blocks
# The parent blocks at most this long at a time: a Ctrl-C the kernel hands to another
# thread interrupts no system call here, and Python acts on it only between slices.
BLOCK_SLICE_SECONDS = 0.1
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def _preload_workers_in_forkserver() -> None:
    """Have the forkserver import this module (numpy, gymnasium and plan_parallel with it) once, when it starts.

    A worker forked from a forkserver that has them imported starts without
    importing them again: ~0.3 s less CPU per worker started or replaced. The
    modules the user asked the forkserver to preload stay in its list (read
    defensively: a CPython detail). No effect on a forkserver already running.
    """
    import multiprocessing.forkserver as fs

    wanted = getattr(getattr(fs, "_forkserver", None), "_preload_modules", None)
    if not isinstance(wanted, list):
        wanted = ["__main__"]  # CPython's default
    if __name__ not in wanted:
        fs.set_forkserver_preload([*wanted, __name__])


def default_context() -> str:
    """``forkserver`` where it exists (Linux, macOS; Python 3.14's default), else ``spawn``.

    ``fork`` is not the default: forking a parent that runs threads (Ray, a
    GUI, a data loader) can deadlock the child.
    """
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """Start processes that do not re-run the user's ``__main__`` (spawn and forkserver would).

    multiprocessing hands a child the path (or module name) of ``__main__`` so it
    can import it again; a script without an ``if __name__ == "__main__":`` guard
    would then start workers from inside its workers. The factory travels
    cloudpickled (functions and classes of ``__main__`` by value), so the workers
    never need ``__main__``: it is hidden while the process starts.
    """
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None  # type: ignore[union-attr]
            else:
                del main.__dict__[k]  # type: ignore[union-attr]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


_LIVE: weakref.WeakSet[ExternalProcess] = weakref.WeakSet()  # the workers this process started


def _disown_workers() -> None:
    """In a child forked by ``os.fork`` (not a multiprocessing process): forget the parent's workers.

    multiprocessing's exit handler terminates every daemonic process it started,
    and a forked copy of its list names the parent's workers: a child that exits
    normally would kill them (the parent replaced them, using up its restarts).
    The list is multiprocessing's private ``process._children``; without it
    (another Python) nothing changes.
    """
    children = getattr(mp.process, "_children", None)
    if isinstance(children, set):
        for worker in list(_LIVE):
            children.discard(worker.process)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_workers)


class ExternalProcess:
    """Parent-side proxy of one worker process (a :class:`~plan_parallel.workers.base.Worker`).

    Starting it does not wait for the env to be built: the worker's first reply
    (call ``READY``) says it is ready, or carries the error building it raised.

    Args:
        index: the worker's index in its pool (for messages).
        blob: cloudpickled ``(factory, adapter)``.
        context: multiprocessing start method.
        core: the core the worker runs on (None: wherever the OS puts it).
        batch_scheduling: run the worker under ``SCHED_BATCH`` (see :func:`_yield_to_the_caller_on_wakeup`).
        move_caller: a caller that blocks for this worker's reply waits off its core
            (:func:`~plan_parallel.workers.cores.move_off`; with ``core`` only).
    """

    uses_shared_memory = True
    keeps_states = True
    takes_lane = True
    bootstrap_hint = (
        ". If a traceback above comes from multiprocessing's bootstrap, the worker could not import what the "
        "env needs: define the env and its factory in an importable module, or pass context='fork'"
    )
    max_queued_bytes: int | None = PIPE_SAFE_BYTES
    chunk_seconds: float | None = None

    def __init__(self, index: int, blob: bytes, context: str, core: int | None = None,
                 batch_scheduling: bool = False, move_caller: bool = False) -> None:
        self.index = index
        self.core = core
        self.move_caller = move_caller and core is not None
        ctx: Any = mp.get_context(context)  # a start method's context: typeshed's BaseContext lacks Process
        if context == "forkserver":
            _preload_workers_in_forkserver()
        self.conn, child = ctx.Pipe(duplex=True)
        # The kernel may kill a worker when the *thread* that forked it ends: only
        # when that thread lives as long as the parent (the forkserver, or the main thread).
        tie = context == "forkserver" or threading.current_thread() is threading.main_thread()
        self.process = ctx.Process(
            target=worker_main, args=(child, blob, os.getpid(), tie, core, batch_scheduling), daemon=True,
            name=f"plan_parallel-worker-{index}",
        )
        try:
            with _main_not_rerun():
                self.process.start()
        finally:
            child.close()
        self._pid: int | None = self.process.pid  # kept: a closed Process object no longer tells it
        self._handles = (self.conn.fileno(), self.process.sentinel)
        self._poller = select.poll()
        self._poller.register(self.conn.fileno(), select.POLLIN)
        self._sentinel = select.poll()
        self._sentinel.register(self.process.sentinel, select.POLLIN)
        self._gone = False
        self._closed = False
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def name(self) -> str:
        return f"worker {self.index} (pid {self.pid})"

    def handles(self) -> tuple[int, int]:
        """The pipe's fd and the process sentinel: readable when a reply or a death is due."""
        return self._handles

    def send(self, data: bytes, shared: tuple = ()) -> None:
        assert not shared, "a process worker reads shared values from the message itself"
        write_message(self.conn.fileno(), data)  # (fileno raises OSError once the pipe was closed here)

    def receive(self) -> bytes | None:
        """The next message as it came (a lane reply, :mod:`plan_parallel.wire.lane`); None once the pipe closed.
        For a caller that knows one is there."""
        if self._gone:
            return None
        try:
            return read_message(self.conn.fileno())
        except (EOFError, OSError):
            self._gone = True
            return None

    def poll(self) -> list[Reply]:
        out: list[Reply] = []
        while not self._gone and self._poller.poll(0):
            data = self.receive()  # (None: the pipe closed, the process died; its sentinel says how)
            if data is not None:
                out.append(reply_from_wire(pickle.loads(data)))
        return out

    def dead(self) -> str | None:
        if not self._gone and not self._sentinel.poll(0):
            return None  # the sentinel becomes readable when the process ends (cheaper than asking multiprocessing)
        code = self._exitcode()
        if code is None and self._gone:
            self.process.join(1.0)  # the pipe closed first: the exit follows at once
            code = self._exitcode()
            if code is None:
                return "its pipe closed"
        return None if code is None else describe_exit(code)

    def _exitcode(self) -> int | None:
        """The process's exit code; -9 once its handle was closed (by a close() an interrupt cut short)."""
        try:
            return self.process.exitcode
        except ValueError:
            self._closed = True
            return -signal.SIGKILL

    def kill(self) -> None:
        if self._exitcode() is None:
            self.process.kill()
        if not self._closed:
            self.process.join(2.0)

    def close(self, timeout: float) -> None:
        """Idempotent: a close interrupted half-way is finished by the next one."""
        code = self._exitcode()
        if self._closed:
            return
        if code is None:
            with contextlib.suppress(OSError):  # already gone: the join decides
                self.send(pickle.dumps(call_wire(Call(-1, Op.CLOSE)), PROTOCOL))
            self.process.join(timeout)
            if self._exitcode() is None:
                self.kill()
        self.conn.close()
        self.process.join(0.1)
        with contextlib.suppress(ValueError):  # still running after a kill: the kernel reaps it later
            self.process.close()
        self._closed = True

    @classmethod
    def broadcast_args(cls, blob: bytes) -> tuple[tuple, tuple]:
        """Each worker's message carries ``blob`` itself."""
        return (), (blob,)

    # The workers polled last (and the wake fd), their poller, which worker each fd is, and the cores a caller
    # moving off them avoids.
    _last_poller: tuple[tuple, Any, dict[int, int], set[int]] | None = None

    @classmethod
    def _poller_for(cls, workers: Sequence[ExternalProcess], wake: int | None) -> tuple[Any, dict[int, int], set[int]]:
        """A poll object for ``workers``' handles and ``wake``, which worker each fd is, and the cores of those
        whose caller moves off them; the last one is reused while the same workers are polled (the pool polls
        the same workers call after call, and a wait turn after turn: nothing a worker is computed again)."""
        key = (tuple(workers), wake)
        last = cls._last_poller
        if last is not None and last[0] == key:
            return last[1], last[2], last[3]
        poller = select.poll()
        owner: dict[int, int] = {}
        for k, w in enumerate(workers):
            for fd in w.handles():
                poller.register(fd, select.POLLIN)
                owner[fd] = k
        if wake is not None:
            poller.register(wake, select.POLLIN)
        cores = {w.core for w in workers if w.move_caller and w.core is not None}
        cls._last_poller = (key, poller, owner, cores)
        return poller, owner, cores

    @classmethod
    def wait_any(cls, workers: Sequence[ExternalProcess], timeout: float | None, wake: int | None,
                 due_in: float | None = None) -> list[int]:
        """Block until a pipe or sentinel is ready (for at most ``BLOCK_SLICE_SECONDS``: the pool calls
        again); when the first reply is due within ``SPIN_SECONDS`` (or when is unknown), poll,
        yielding the CPU, for that long first.

        A blocked reader costs the writer a cross-core wake-up (25-50 us on a
        small VM); a reader that polls and yields answers in a few us. But a
        poller takes CPU time from the workers when they outnumber the free
        cores, so it polls only for replies that are due at once (tiny calls).
        With the policy's ``move_caller``, a caller about to block on the core of a worker in flight waits
        on another (:func:`~plan_parallel.workers.cores.move_off`).
        """
        poller, owner, cores = cls._poller_for(workers, wake)
        spin = SPIN_SECONDS if due_in is None or due_in <= SPIN_SECONDS else 0.0
        if timeout is not None:
            spin = min(spin, timeout)
        end = time.perf_counter() + spin
        events = poller.poll(0)
        while not events and time.perf_counter() < end:
            _yield()
            events = poller.poll(0)
        if not events and (timeout is None or timeout > spin):
            left = BLOCK_SLICE_SECONDS if timeout is None else min(BLOCK_SLICE_SECONDS, timeout - spin)
            try:
                move_off(cores)
                events = poller.poll(max(0, int(left * 1000) + 1))
            finally:
                restore_cores()
        return sorted({owner[fd] for fd, _ in events if fd in owner})
