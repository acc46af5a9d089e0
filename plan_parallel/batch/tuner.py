"""Tuner: where a batch runs (on the workers, here, or shared) and in how many chunks, from measured times.

A pure object: it is told what was measured and answers questions; it never
runs, waits or times anything itself, so it is tested without processes.
"""
from __future__ import annotations

from plan_parallel.batch.feeder import QUEUED_PER_WORKER

__all__ = ["CHUNK_SECONDS", "EXPLORE_EVERY", "MIN_CHUNK_SECONDS", "PLACES", "Tuner"]

EXPLORE_EVERY = 32  # batches of a size class run the faster way in a row before one re-measures the other
CHUNK_SECONDS = 1e-3  # below this, a chunk's fixed cost is a large share of its time
MIN_CHUNK_SECONDS = 100e-6  # env time worth a message of its own (a chunk's fixed cost is ~40 us here)
PLACES = ("workers", "here", "share")  # share: the workers take chunks from the front, this process from the back
MODES = ("auto", *PLACES)


class Tuner:
    """Decides where each batch runs and how it is chunked.

    Args:
        n_workers: the pool's worker count.
        mode: ``"auto"`` (measure each place per op and size class, take the
            fastest), or one of :data:`PLACES` for every batch: ``"workers"``,
            ``"here"`` (in the calling process; for tests and debugging) or
            ``"share"`` (the workers and the calling process run chunks of the
            same batch).

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
        # Measured seconds per env step, per (op, size class, place), how many batches
        # of a class ran the fastest way in a row, and which other place is re-measured next.
        self.speed: dict[tuple[str, int, str], float] = {}
        self.samples: dict[tuple[str, int, str], int] = {}
        self.streak: dict[tuple[str, int], int] = {}
        self.turn: dict[tuple[str, int], int] = {}
        self.step_seconds: float | None = None  # a worker's seconds per env step (EMA)

    @staticmethod
    def size_class(op: str, steps: int) -> tuple[str, int]:
        """Batches are compared per op and per power of two of their env-step count."""
        return op, steps.bit_length()

    def place(self, size_class: tuple[str, int]) -> str:
        """Where a batch of this size class runs: one of :data:`PLACES`.

        In ``"auto"`` mode each place is measured once, in the order of
        :data:`PLACES`; then the fastest wins, with one batch in
        :data:`EXPLORE_EVERY` (in ``4 * EXPLORE_EVERY`` when the runner-up is
        over twice as slow) sent to another place, in turns, so that every
        figure stays current.
        """
        if self.mode != "auto":
            return self.mode
        for p in PLACES:
            if (*size_class, p) not in self.speed:
                return p
        speed = {p: self.speed[(*size_class, p)] for p in PLACES}
        ranked = sorted(PLACES, key=speed.__getitem__)
        every = EXPLORE_EVERY if speed[ranked[1]] < 2 * speed[ranked[0]] else 4 * EXPLORE_EVERY
        k = self.streak.get(size_class, 0) + 1
        self.streak[size_class] = k % every
        if k < every:
            return ranked[0]
        turn = self.turn[size_class] = (self.turn.get(size_class, 0) + 1) % (len(PLACES) - 1)
        return ranked[1 + turn]

    def learn(self, size_class: tuple[str, int], place: str, seconds_per_step: float) -> None:
        """Record a batch's wall time per env step at ``place`` (one of :data:`PLACES`).

        The first three figures keep their best (first calls pay one-off costs:
        attaching slabs, warming caches); later ones enter an EMA.
        """
        key = (*size_class, place)
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

    def n_chunks(self, n: int, steps: int, share: bool = False) -> int:
        """Chunks for a batch: one per worker, or up to 3 per worker when each still takes >= 1 ms;
        fewer than the workers when a chunk would hold under MIN_CHUNK_SECONDS of env time.

        More chunks than workers, handed out as workers finish, keep a worker
        slowed by a noisy neighbour from holding the whole batch back; a chunk
        with less work than a message costs is better not split off.

        With ``share`` the calling process counts as one more worker, and there
        is at least one chunk more than the workers hold queued at once (the
        calling process takes chunks the workers have not taken).
        """
        if not share:
            return self._n_chunks(n, steps, self.n_workers)
        return max(self._n_chunks(n, steps, self.n_workers + 1), min(n, QUEUED_PER_WORKER * self.n_workers + 1))

    def _n_chunks(self, n: int, steps: int, w: int) -> int:
        if self.step_seconds is None:
            return min(n, w)
        work = steps * self.step_seconds
        if work < w * MIN_CHUNK_SECONDS or n < 4 * w:
            return max(1, min(n, w, int(work // MIN_CHUNK_SECONDS)))
        per_worker = work / w
        return min(n, w * int(max(1, min(3, per_worker // CHUNK_SECONDS))))
