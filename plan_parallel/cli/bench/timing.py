"""Timing for ``plan-parallel bench``: wall time, the caller's CPU and the workers' CPU, side by side.

On a small machine the calling process shares the cores with the workers, so
a backend's cost is three figures, not one: the wall time of a call, the CPU
the caller spent on it (taken from the workers when cores are scarce), and the
CPU the workers spent. Functions compared are run in alternation, so a noisy
neighbour slows them alike; each sample repeats its call until it lasts a few
milliseconds, so the clock's resolution and one-off hiccups do not dominate.
"""
from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WARMUP_CALLS", "Timing", "calls_lasting", "measure", "process_cpu_seconds"]

SAMPLE_SECONDS = 0.02  # a sample repeats its call until it lasts about this long
WARMUP_CALLS = 12  # untimed calls of each function before the samples (3 per place the tuner measures, and 3)
# ... and for at least this long: a process env's tuner has then placed 20-40 batches of 10-20 ms (Pong B=64),
# past its first measurements (in 20 calls, all it had before, its three places' figures still moved by
# +-30 % a batch and it chose among them at random).
WARMUP_SECONDS = 0.4


@dataclass(frozen=True)
class Timing:
    """Medians per call of one function, measured in alternation with others; and each sample's wall."""

    wall: float  # seconds per call
    caller_cpu: float  # CPU seconds this process spent per call
    worker_cpu: float  # CPU seconds the workers spent per call (0 for in-process work)
    walls: tuple[float, ...] = ()  # seconds per call of each sample, in the order they ran

    def speedup(self, base: Timing) -> float:
        """How many times faster a call of this function ran than one of ``base``: the median over the
        samples of the ratio of the two samples taken in the same turn (seconds apart), so that the
        machine's slower and faster minutes cancel out of each ratio."""
        return statistics.median(b / a for a, b in zip(self.walls, base.walls))


def process_cpu_seconds(pids: Sequence[int | None]) -> float:
    """CPU seconds of the live processes ``pids`` (Linux /proc; 0 elsewhere or when gone).

    Read from ``/proc/<pid>/schedstat`` (nanoseconds on the CPU) where the kernel
    keeps it, else from ``/proc/<pid>/stat`` (user + system, in clock ticks).
    """
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
            continue
        except (OSError, IndexError, ValueError):
            pass
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15 of stat)
    return total


def calls_lasting(fn: Callable[[], Any], seconds: float = SAMPLE_SECONDS) -> int:
    """How many calls of ``fn`` last about ``seconds`` (1 to 1000), from one call timed now."""
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    return max(1, min(1000, round(seconds / once)))


def measure(fns: dict[str, Callable[[], Any]], repeats: int,
            pids: dict[str, Callable[[], Sequence[int | None]]] | None = None, warmup: int = WARMUP_CALLS) -> dict[str, Timing]:
    """Median wall and caller CPU per call of each function over ``repeats`` alternating samples.

    Args:
        fns: name -> a call to time.
        repeats: samples per function; the functions take turns, in an order shuffled each repeat (seeded:
            the one after a function that ran W processes starts with cold caches; see :mod:`.vector`).
        pids: name -> the worker pids whose CPU that function's calls use
            (their total over every sample, per call: /proc counts in ticks).
        warmup: untimed calls of each function first, and for :data:`WARMUP_SECONDS` at least
            (a parallel env's tuner measures where its batches run fastest during its first calls); 0: none.
    """
    pids = pids or {}
    for f in fns.values():
        end = time.perf_counter() + (WARMUP_SECONDS if warmup else 0.0)
        done = 0
        while done < warmup or time.perf_counter() < end:
            f()
            done += 1
    per_sample = {k: calls_lasting(f) for k, f in fns.items()}  # also the warm-up
    walls: dict[str, list[float]] = {k: [] for k in fns}
    cpus: dict[str, list[float]] = {k: [] for k in fns}
    worker_total = dict.fromkeys(fns, 0.0)
    order = random.Random(0)  # each repeat in another order: no function always runs after the same one
    for _ in range(repeats):
        for k in order.sample(list(fns), len(fns)):
            f, n = fns[k], per_sample[k]
            w0 = process_cpu_seconds(pids[k]()) if k in pids else 0.0
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                f()
            walls[k].append((time.perf_counter() - t0) / n)
            cpus[k].append((time.process_time() - c0) / n)
            if k in pids:
                worker_total[k] += max(0.0, process_cpu_seconds(pids[k]()) - w0)
    return {
        k: Timing(statistics.median(walls[k]), statistics.median(cpus[k]),
                  worker_total[k] / (repeats * per_sample[k]), tuple(walls[k]))
        for k in fns
    }
