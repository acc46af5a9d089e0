"""Tuner: where a batch runs (here or on the workers) and in how many chunks, from measured times.

A pure object: it is told what was measured and answers questions; it never
runs, waits or times anything itself, so it is tested without processes.
"""
from __future__ import annotations

__all__ = ["CHUNK_SECONDS", "EXPLORE_EVERY", "MIN_CHUNK_SECONDS", "Tuner"]

EXPLORE_EVERY = 32  # batches of a size class run the faster way in a row before one re-measures the other
CHUNK_SECONDS = 1e-3  # below this, a chunk's fixed cost is a large share of its time
MIN_CHUNK_SECONDS = 100e-6  # env time worth a message of its own (a chunk's fixed cost is ~40 us here)
MODES = ("auto", "workers", "here")


class Tuner:
    """Decides where each batch runs and how it is chunked.

    Args:
        n_workers: the pool's worker count.
        mode: ``"auto"`` (measure both ways per op and size class, take the
            faster), ``"workers"`` (every batch on the workers), or ``"here"``
            (every batch in the calling process; for tests and debugging).

    Raises:
        ValueError: unknown mode, or n_workers < 1.
    """

    def __init__(self, n_workers: int, mode: str = "auto") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers!r}")
        self.n_workers = n_workers
        self.mode = mode
        # Measured seconds per env step, per (op, size class, here?), and how many
        # batches of a class ran the faster way in a row.
        self.speed: dict[tuple[str, int, bool], float] = {}
        self.samples: dict[tuple[str, int, bool], int] = {}
        self.streak: dict[tuple[str, int], int] = {}
        self.step_seconds: float | None = None  # a worker's seconds per env step (EMA)

    @staticmethod
    def size_class(op: str, steps: int) -> tuple[str, int]:
        """Batches are compared per op and per power of two of their env-step count."""
        return op, steps.bit_length()

    def run_here(self, size_class: tuple[str, int]) -> bool:
        """Run a batch of this size class in the calling process rather than on the workers?

        In ``"auto"`` mode: the workers are measured first, then this process;
        then the faster way wins, with one batch in :data:`EXPLORE_EVERY` (in
        ``4 * EXPLORE_EVERY`` when one way is over twice as fast) sent the
        other way so that both figures stay current.
        """
        if self.mode != "auto":
            return self.mode == "here"
        there = self.speed.get((*size_class, False))
        if there is None:
            return False
        here = self.speed.get((*size_class, True))
        if here is None:
            return True
        faster_here = here <= there
        every = EXPLORE_EVERY if max(here, there) < 2 * min(here, there) else 4 * EXPLORE_EVERY
        k = self.streak.get(size_class, 0) + 1
        self.streak[size_class] = k % every
        return faster_here if k < every else not faster_here

    def learn(self, size_class: tuple[str, int], here: bool, seconds_per_step: float) -> None:
        """Record a batch's wall time per env step, here or on the workers.

        The first three figures keep their best (first calls pay one-off costs:
        attaching slabs, warming caches); later ones enter an EMA.
        """
        key = (*size_class, here)
        old = self.speed.get(key)
        seen = self.samples[key] = self.samples.get(key, 0) + 1
        if old is None:
            self.speed[key] = seconds_per_step
        elif seen <= 3:
            self.speed[key] = min(old, seconds_per_step)
        else:
            self.speed[key] = 0.7 * old + 0.3 * seconds_per_step

    def learn_step(self, seconds_per_step: float) -> None:
        """Record the env time per step the workers reported for a batch."""
        old = self.step_seconds
        self.step_seconds = seconds_per_step if old is None else 0.8 * old + 0.2 * seconds_per_step

    def n_chunks(self, n: int, steps: int) -> int:
        """Chunks for a batch: one per worker, or up to 3 per worker when each still takes >= 1 ms;
        fewer than the workers when a chunk would hold under MIN_CHUNK_SECONDS of env time.

        More chunks than workers, handed out as workers finish, keep a worker
        slowed by a noisy neighbour from holding the whole batch back; a chunk
        with less work than a message costs is better not split off.
        """
        w = self.n_workers
        if self.step_seconds is None:
            return min(n, w)
        work = steps * self.step_seconds
        if work < w * MIN_CHUNK_SECONDS or n < 4 * w:
            return max(1, min(n, w, int(work // MIN_CHUNK_SECONDS)))
        per_worker = work / w
        return min(n, w * int(max(1, min(3, per_worker // CHUNK_SECONDS))))
