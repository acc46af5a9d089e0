"""The loop a worker process runs (:func:`worker_main`): it builds its env, says it is ready, then answers each
call from its pipe until the pipe closes, a CLOSE call comes, or its parent is gone.

A worker dies with its parent: on Linux the kernel kills it when the process that forked it exits
(``PR_SET_PDEATHSIG``), even inside a hung env call; elsewhere (and as a second line) the loop checks every second
that the parent is alive. SIGINT is ignored: Ctrl-C is the parent's to handle. The parent's side of the pipe is
:class:`~plan_parallel.workers.process.ExternalProcess`.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import sys
from multiprocessing.connection import Connection

from plan_parallel.wire.frames import read_message, write_message
from plan_parallel.wire.lane import TAG
from plan_parallel.wire.messages import Op, call_from_wire, reply_wire
from plan_parallel.wire.slabs import PROTOCOL
from plan_parallel.workers.cores import run_on
from plan_parallel.workers.server import ready_reply, serve

__all__ = ["worker_main"]

PR_SET_PDEATHSIG = 1


def _yield_to_the_caller_on_wakeup() -> None:
    """Run this worker under ``SCHED_BATCH`` (Linux; the execution policy's opt-in ``batch_scheduling``):
    woken by a call, it waits for a free core instead of preempting the process that sent the call.

    A pipe write wakes its reader on the writer's core, and a worker that slept preempts the writer
    there, which stalls sending the other workers' chunks (2-core VM, W=2: 20-30 % of sends took
    0.5-3 ms; under ``SCHED_BATCH`` 0-3 %; the gains and losses: ``docs/measurements.md``, *Worker processes*).
    """
    setter = getattr(os, "sched_setscheduler", None)
    if setter is None:
        return
    try:
        setter(0, os.SCHED_BATCH, os.sched_param(0))
    except (OSError, AttributeError):
        return  # not allowed here: the default policy


def _tie_to_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent ends (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl: the liveness check in the loop remains


def _let_the_forkserver_go() -> None:
    """Drop this process's copy of the forkserver's liveness pipe, so that the forkserver exits with the parent.

    A forkserver exits when every copy of the write end of its "alive" pipe is
    closed; CPython hands one to each process it forks (for grandchildren this
    worker never starts). A worker that kept it would keep the forkserver alive
    after the parent died, and the forkserver, being this worker's parent, would
    never trigger its ``PR_SET_PDEATHSIG``: a worker hung in env code would run
    on as an orphan. (A CPython detail, looked up defensively: tested by
    ``test_workers_die_with_a_killed_parent_even_inside_a_hung_env_call``.)
    """
    server = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def _parent_alive(parent_pid: int, first_ppid: int) -> bool:
    """False once the process that created us is gone (we were re-parented, or it no longer exists)."""
    if os.getppid() != first_ppid:
        return False
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else (pid reuse is not our parent, but rare)
    return True


def worker_main(conn: Connection, blob: bytes, parent_pid: int, tie: bool, core: int | None = None,
                batch_scheduling: bool = False) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    first_ppid = os.getppid()  # the parent, or the forkserver that forked this process
    _let_the_forkserver_go()
    if tie:
        _tie_to_parent()
    if batch_scheduling:
        _yield_to_the_caller_on_wakeup()
    run_on(core)
    if not _parent_alive(parent_pid, first_ppid):
        return  # the parent died before the tie was made
    server, ready = ready_reply(blob)
    fd = conn.fileno()
    try:
        write_message(fd, pickle.dumps(reply_wire(ready), PROTOCOL))
    except OSError:
        return  # the parent is gone, or gave up on this worker while it started

    if server is None:
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        while True:
            try:
                # Blocked until the next call, not polling for it: on 2 cores, W=2, workers that polled
                # up to 2 ms for back-to-back calls were slower in 7 of 8 paired runs (median 4 %;
                # CartPole B=8 spent 125 against 67 us of worker CPU an item), and no faster with W=1.
                while not poller.poll(1000):
                    if not _parent_alive(parent_pid, first_ppid):
                        return
                data = read_message(fd)
                call = None if data[:1] == TAG else call_from_wire(pickle.loads(data))
            except (EOFError, OSError):
                return  # the parent closed the pipe or died
            if call is None:
                data = server.lane.serve(data)  # a lane header (wire.lane): rows of the lane's segment
            elif call.op is Op.CLOSE:
                return
            else:
                data = serve(server, call)
            try:
                write_message(fd, data)
            except OSError:
                return
    finally:
        server.close()
