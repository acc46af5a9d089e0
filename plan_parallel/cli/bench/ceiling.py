"""What the machine allows, measured beside the figures: how much faster W processes run than one, right now.

On a shared 2-core VM a second busy process does not get a second core's
worth of work done: while one vCPU is busy, the other runs the same code
1.1-1.9x slower (an ALE loop, measured alone and beside another), and that
factor moves from minute to minute. A speed-up of the process backend over
inline is bounded by the same factor, so the bench measures it with the
figures it bounds:

- :func:`parallel_ceiling`: a pure Python loop in W processes against one;
- :class:`RawCrew`: W processes that each run the raw loop of a bench row, a
  contestant timed in alternation with the others, so each row has its own
  ceiling (the crew's items/s over the raw loop's) and the CPU an item costs
  when every core is busy;
- :func:`pipe_round_trip`: the floor under a worker call's round trip.

(What a small call costs right after a pause of this process, a developers' measurement, is
``benchmarks/cold_caches.py`` in the repository.)
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import select
import statistics
import time
from typing import Any

from plan_parallel.cli.bench.common import make_workload, raw_loop

__all__ = ["RawCrew", "parallel_ceiling", "pipe_round_trip"]


def _context() -> Any:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def _burn(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def parallel_ceiling(workers: int, n: int = 2_000_000, repeats: int = 3) -> float:
    """How much faster ``workers`` CPU-bound processes finish than one, right now (2.0 on a quiet 2-core box).

    Printed with the ratios: on a shared machine the ceiling moves, and a
    ratio means little without it.
    """
    ratios = []
    with _context().Pool(workers) as pool:
        pool.map(_burn, [1000] * workers)
        for _ in range(repeats):
            alone = _burn(n)
            t0 = time.perf_counter()
            pool.map(_burn, [n] * workers)
            both = time.perf_counter() - t0
            ratios.append(workers * alone / both)
    return statistics.median(ratios)


def _echo(conn: Any) -> None:
    """Send back each message until an empty one."""
    while msg := conn.recv_bytes():
        conn.send_bytes(msg)


def pipe_round_trip(calls: int = 2000) -> float:
    """Median seconds of a bare round trip between two Python processes here, right now.

    100 bytes go through a pipe to a process blocked reading it (as a worker waits for its next call)
    and come back to this one, which polls for them (as the pool waits for a reply that is due): the
    floor under a worker call's round trip, with no env, no pickling and no plan_parallel.
    """
    ctx = _context()
    here, there = ctx.Pipe()
    child = ctx.Process(target=_echo, args=(there,), daemon=True)
    child.start()
    there.close()  # the child's end
    pause = getattr(os, "sched_yield", lambda: time.sleep(0))
    try:
        poller = select.poll()
        poller.register(here.fileno(), select.POLLIN)
        msg, times = bytes(100), []
        for _ in range(calls):
            t0 = time.perf_counter()
            here.send_bytes(msg)
            while not poller.poll(0):
                pause()
            here.recv_bytes()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[calls // 10:])  # the first ones wake a cold process
    finally:
        with contextlib.suppress(OSError):  # (gone already: nothing to stop)
            here.send_bytes(b"")
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
        here.close()


_RAW: dict[str, Any] = {}  # in a pool process of this module: its raw loop


def _build_raw(env_id: str, kw: dict, b: int) -> None:
    import plan_parallel as pp

    ref = pp.make(env_id, backend="inline", **kw)
    states, actions = make_workload(ref, b)
    _RAW["env"], _RAW["run"] = raw_loop(env_id, kw, ref, states, actions, lambda e: e.unwrapped.step)


def _raw_calls(args: tuple[int, int, int]) -> int:
    """Run the raw loop over its first ``b`` items, ``dt`` steps each, ``calls`` times: the items run."""
    b, dt, calls = args
    for _ in range(calls):
        _RAW["run"](b, dt)
    return b * calls


class RawCrew:
    """``workers`` processes, each with the bench's raw loop over the same first ``b`` items of the workload.

    :meth:`run` has them all run it at once, a contestant of
    :func:`~plan_parallel.cli.bench.timing.measure`: its items/s over the raw loop's
    in the same samples is the ceiling of that row, and :attr:`pids` give the CPU
    an item costs with every core busy.
    """

    def __init__(self, env_id: str, kw: dict, workers: int, b: int) -> None:
        self.workers = workers
        before = {p.pid for p in mp.active_children()}
        self._pool = _context().Pool(workers, initializer=_build_raw, initargs=(env_id, kw, b))
        self.pids = sorted(p.pid for p in mp.active_children() if p.pid is not None and p.pid not in before)

    def run(self, b: int, dt: int, calls: int) -> int:
        """Each process runs the raw loop over ``b`` items ``calls`` times, all at once: the items run in all."""
        return sum(self._pool.map(_raw_calls, [(b, dt, calls)] * self.workers, chunksize=1))

    def close(self) -> None:
        self._pool.terminate()
        self._pool.join()

    def __enter__(self) -> RawCrew:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
