"""Tuner: where a batch runs (on the workers, here, or shared) and in how many chunks.

It carries out the execution policy's placement (:mod:`plan_parallel.batch.policy`): the default ``"rule"``
mode (:meth:`Tuner.by_rule`), a forced place, or the opt-in ``"auto"`` mode, which measures each place and
takes the fastest. A pure object: it is told what was measured and answers questions; it never runs, waits
or times anything itself, so it is tested without processes. The measurements behind its constants are in
``docs/measurements.md``, *The adaptive placement*.
"""
from __future__ import annotations

import math

from plan_parallel.batch.feeder import QUEUED_PER_WORKER
from plan_parallel.batch.policy import HERE_BELOW_SECONDS, MAX_CHUNKS_PER_WORKER
from plan_parallel.workers.cores import available_cpus

__all__ = ["CALLER_SHARE", "CHUNK_CALLER_SECONDS", "CHUNK_SECONDS", "EXPLORE_EVERY", "FIRST_SAMPLES",
           "HEAVY_ITEM_SECONDS", "MAX_EXPLORE_FACTOR", "MAX_RISE", "MIN_CHUNK_SECONDS", "PLACES",
           "SETTLED_TIMED_EVERY", "WORKER_SHARE_SECONDS", "Tuner"]

EXPLORE_EVERY = 32  # a place as fast as the fastest is re-measured after this many batches of its size class
MAX_EXPLORE_FACTOR = 8  # and one r times slower after r**2 times as many (r at most this)
FIRST_SAMPLES = 3  # each place is measured this many times before the fastest is chosen (the best one counts)
# A batch's figure enters a place's EMA as at most this many times the current one (one slow batch must not
# move the place in use behind the others: replayed traces, 1.063x the best place's time against 1.084x).
MAX_RISE = 1.1
# A worker's share is split into chunks of at least this much env time, unless its backend says
# otherwise (Worker.chunk_seconds): a process worker's chunk costs the calling process ~0.6-0.9 ms of CPU.
CHUNK_SECONDS = 10e-3
# Env time worth a message of its own (a chunk costs the caller ~0.1-0.4 ms of CPU).
MIN_CHUNK_SECONDS = 1e-3
# What writing a chunk and absorbing its reply costs the calling process (~0.2-0.3 ms on a 2-core VM: bench --suite
# scale), and the share of a worker's part of a batch the writing of all chunks may take: more chunks than the
# workers only while W x chunks x this cost stays under that share.
CHUNK_CALLER_SECONDS = 0.3e-3
CALLER_SHARE = 0.05
# While a place is settled on, one batch in this many is timed for its figure, which counts as this many
# batches' (the same EMA, the same rise a batch): learning a batch costs ~2-3 us.
SETTLED_TIMED_EVERY = 4
# Items of at least this much env time each go to the workers without a figure being asked, where the workers
# fill the cores (see Tuner.for_the_workers): a message costs the caller 10-25 us an item (Pong RGB), under
# 2.5 % of such an item.
HEAVY_ITEM_SECONDS = 1e-3
# And so do batches that give each worker at least this much env time (not a vector env's resident steps, which
# run their own way here): a call's fixed costs (a round trip of 0.3-0.5 ms, the caller's ~1 ms of CPU) are then
# small against a second core.
WORKER_SHARE_SECONDS = 2e-3
PLACES = ("workers", "here", "share")  # share: the workers take chunks from the front, this process from the back
MODES = ("rule", "auto", *PLACES)


PLACE_INDEX = {p: j for j, p in enumerate(PLACES)}


class Figures:
    """What the tuner measured of one (op, size class): per place (in the order of :data:`PLACES`), its
    seconds per env step, how many batches were measured, how many batches ran elsewhere since it
    was last tried, and how many of its next figures to leave out (the first batch of a trial); and the
    place whose trial has its second batch to run (-1: none).

    And the current choice, while no trial is due (see :meth:`Tuner.place`): ``settled`` is the
    place (-1: none) for the next ``quiet`` batches of ``places`` places (2 or 3), of which ``skipped``
    ran since ``waited`` was last counted, while its figure stays under ``bar`` (the others' lowest, or
    lower).
    """

    __slots__ = ("bar", "cold", "places", "quiet", "repeat", "samples", "settled", "skipped", "speed", "waited")

    def __init__(self) -> None:
        self.speed = [0.0] * len(PLACES)
        self.samples = [0] * len(PLACES)
        self.waited = [0] * len(PLACES)
        self.cold = [0] * len(PLACES)
        self.repeat = -1
        self.settled = -1
        self.places = 0
        self.quiet = 0
        self.skipped = 0
        self.bar = 0.0

    def unsettle(self) -> None:
        """Forget the current choice (the figures changed order): the next batch is placed in full."""
        self.settled = -1
        self.quiet = 0


class Tuner:
    """Decides where each batch runs and how it is chunked.

    Args:
        n_workers: the pool's worker count.
        cores: the CPUs this process may use (default: :func:`~plan_parallel.workers.cores.available_cpus`).
        chunk_seconds: the env time a chunk holds at least when a worker's share of a batch
            is split in several (default: :data:`CHUNK_SECONDS`).
        workers_here: the workers run on this process's machine and use its ``cores`` (False: they may
            run elsewhere, a Ray cluster's nodes, and leave this process's core free).
        mode: ``"rule"`` (here when what the workers would save a batch, by their measured step time, is under
            ``here_below`` seconds; else on the workers: :meth:`by_rule`), ``"auto"`` (measure each place per op
            and size class, take the fastest), or one of :data:`PLACES` for every batch: ``"workers"``,
            ``"here"`` (in the calling process; for tests and debugging) or
            ``"share"`` (the workers and the calling process run chunks of the
            same batch).
        here_below: the ``"rule"`` mode's threshold (seconds the workers would save a batch).
        chunk_caller_seconds: what a chunk costs the calling process (see :meth:`n_chunks`; 0: no limit).
        max_chunks: chunks a worker at most (see :meth:`n_chunks`).

    Raises:
        ValueError: unknown mode, or n_workers < 1.
    """

    def __init__(self, n_workers: int, mode: str = "auto", cores: int | None = None,
                 chunk_seconds: float | None = None, workers_here: bool = True,
                 here_below: float = HERE_BELOW_SECONDS, chunk_caller_seconds: float = CHUNK_CALLER_SECONDS,
                 max_chunks: int = MAX_CHUNKS_PER_WORKER) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers!r}")
        self.n_workers = n_workers
        self.mode = mode
        self.here_below = here_below
        self.workers_here = workers_here
        self.chunk_seconds = CHUNK_SECONDS if chunk_seconds is None else chunk_seconds
        self.chunk_caller_seconds = chunk_caller_seconds
        self.max_chunks = max_chunks
        self.cores = cores or available_cpus()
        # A shared batch runs on the calling process and at most this many workers: one
        # process per core (a third busy process on 2 cores only takes turns on them).
        self.share_workers = max(1, min(n_workers, self.cores - 1))
        # This process adds no core to a batch: its workers are here and as many as the cores, or more.
        self.workers_fill_the_cores = workers_here and self.cores <= n_workers
        self._figures: dict[tuple[str, int], Figures] = {}  # per (op, size class): see Figures
        self.step_seconds: float | None = None  # a worker's seconds per env step (EMA)
        self.step_batches = 0  # batches whose env time per step was learned

    @staticmethod
    def size_class(op: str, steps: int) -> tuple[str, int]:
        """Batches are compared per op and per power of two of their env-step count: 2^(k-1) < steps <= 2^k.

        A batch of a power-of-two size and the same batch short of a few items (a
        vector env's step while some sub-envs reset) share a class, and its measurements.
        """
        return op, max(0, steps - 1).bit_length()

    def by_rule(self, steps: int) -> str:
        """Where the ``"rule"`` mode runs a batch of ``steps`` env steps that its caller waits for: ``"here"`` when
        the workers have reported their time per env step and what they would save the batch, its env time
        (``steps`` times that) less a worker's share of it, is under :attr:`here_below` (a call's cost), and the
        workers run on this machine; else ``"workers"``. Only the workers' reports move the step time, so a batch
        placed here stays here until they report again."""
        step = self.step_seconds
        if step is None or not self.workers_here or steps * step * (1 - 1 / self.n_workers) >= self.here_below:
            return "workers"
        return "here"

    def for_the_workers(self, steps: int, n: int, resident: bool = False) -> bool:
        """A batch of ``n`` items and ``steps`` env steps that runs on the workers with no figure asked or learned:
        in ``"auto"`` mode, when the workers fill this machine's cores (this process adds none to a shared
        batch), there are items for each worker, and each item holds :data:`HEAVY_ITEM_SECONDS` of a worker's
        env time at least, or (unless ``resident``: see :meth:`may_share`) each worker's share of the batch
        :data:`WORKER_SHARE_SECONDS`, by the step time learned from two batches at least (the first pays
        one-off costs: see :meth:`learn_step`).

        Such a batch gains nothing from running here or shared, and the figures that would say so are
        measured at different times: on a machine whose speed moves, a place measured in a fast spell
        looks faster than it is, and trials of the slower places cost whole batches.
        """
        step = self.step_seconds
        if not (self.mode == "auto" and step is not None and self.step_batches >= 2 and self.workers_fill_the_cores
                and n >= self.n_workers):
            return False
        work = steps * step
        return work >= n * HEAVY_ITEM_SECONDS or (not resident and work >= self.n_workers * WORKER_SHARE_SECONDS)

    def may_share(self, resident: bool) -> bool:
        """Whether a batch its caller waits for in full may be shared: always in a forced mode; in ``"auto"``
        mode where this process adds a core to the workers' (more cores than workers, or workers elsewhere),
        or runs the batch's items its own way (``resident``: a vector env's sub-envs, kept at their states
        here, need no restore).

        Elsewhere a shared batch runs on as many processes as the workers alone, one of them this process
        with a piece at a time and the replies handled between pieces: Pong B=64 on 2 workers on 2 cores ran
        1.509x inline on the workers against 1.172x shared, while a vector env's 8 Pongs stepped shared ran
        1.142x as fast as on the workers.
        """
        return self.mode != "auto" or resident or not self.workers_fill_the_cores

    def place(self, size_class: tuple[str, int], can_share: bool = True) -> str:
        """Where a batch of this size class runs: one of :data:`PLACES` (see :meth:`choose`)."""
        return self.choose(size_class, can_share)[0]

    def choose(self, size_class: tuple[str, int], can_share: bool = True) -> tuple[str, int]:
        """Where a batch of this size class runs: one of :data:`PLACES` (not ``"share"`` unless ``can_share``),
        and how many batches its time counts for when learned (0: it need not be timed).

        In ``"auto"`` mode each place is measured :data:`FIRST_SAMPLES` times,
        in turns in the order of :data:`PLACES`; then the fastest wins, and
        every other place is tried again after ``EXPLORE_EVERY * r**2`` batches, r
        being its time ÷ the fastest's (at most ``MAX_EXPLORE_FACTOR``). A close
        second stays current; a trial (two batches, below) costs the 2 (r - 1) batches'
        worth of time the place loses, so trials cost 2 (r - 1) / r**2 of a batch per
        EXPLORE_EVERY batches: at most a half (r = 2), less the slower the place.
        A forced ``"share"`` mode gives ``"workers"``
        where it cannot share.

        Between trials the fastest place is settled on: the batches until the next
        trial falls due are counted when it is decided, and placed without comparing
        the figures again (a place's figure that changes their order, :meth:`learn`,
        unsettles it): a batch placed costs ~0.3 us instead of ~4. One settled batch in
        :data:`SETTLED_TIMED_EVERY` is timed, and counts as that many batches.

        A trial is two batches, and only the second is learned: the first pays for
        the place having been idle (its workers asleep and their caches cold, or a
        vector env's resident envs restoring every sub-env).
        """
        if self.mode != "auto":  # (the "rule" mode's batches are placed by by_rule, not here)
            return self.mode if can_share or self.mode != "share" else "workers", 1
        figures = self._figures.get(size_class) or self._figures.setdefault(size_class, Figures())
        m = len(PLACES) if can_share else 2
        quiet, settled = figures.quiet, figures.settled
        if quiet > 0 and settled >= 0 and figures.places == m:
            figures.quiet = quiet - 1  # (two threads may both take the last one: a trial one batch later)
            figures.skipped += 1
            return PLACES[settled], 0 if quiet % SETTLED_TIMED_EVERY else SETTLED_TIMED_EVERY
        # Copies (a list slice is one step for other threads): another thread's learn() may change a
        # figure while this one compares them. "share" is the last of PLACES.
        samples = figures.samples[:m]
        fewest = min(samples)
        if fewest < FIRST_SAMPLES:  # the first place, in the order of PLACES, with the fewest samples
            return PLACES[samples.index(fewest)], 1
        again = figures.repeat
        if 0 <= again < m:
            figures.repeat = -1
            return PLACES[again], 1  # a trial's second batch
        return self._decide(figures, m), 1

    @staticmethod
    def _decide(figures: Figures, m: int) -> str:
        """The fastest of the first ``m`` places, or a place whose trial is due; when none is due, the
        fastest is settled on for the batches before the first trial falls due (counted then)."""
        speed = figures.speed[:m]
        fastest = min(speed)
        best = speed.index(fastest)
        waited = figures.waited
        skipped, figures.skipped = figures.skipped, 0
        chosen, most = best, (1.0, "")
        first_due = None
        for j, seconds in enumerate(speed):
            if j != best:
                waited[j] += skipped + 1
                every = EXPLORE_EVERY * min(MAX_EXPLORE_FACTOR, seconds / max(fastest, 1e-12)) ** 2
                due = (waited[j] / every, PLACES[j])
                if due >= most:
                    chosen, most = j, due
                left = math.ceil(every - waited[j])  # batches until this place's trial is due
                first_due = left if first_due is None else min(first_due, left)
        if chosen != best:
            waited[chosen] = 0
            figures.cold[chosen] += 1
            figures.repeat = chosen
            figures.unsettle()
        else:
            figures.settled, figures.places = best, m
            figures.bar = min((x for j, x in enumerate(speed) if j != best), default=math.inf)
            figures.quiet = max(0, (first_due or 1) - 1)
        return PLACES[chosen]

    def learn(self, size_class: tuple[str, int], place: str, seconds_per_step: float, batches: int = 1) -> None:
        """Record a batch's wall time per env step at ``place`` (one of :data:`PLACES`), as that of
        ``batches`` batches (:meth:`choose`).

        The first three figures keep their best (first calls pay one-off costs:
        attaching slabs, warming caches); later ones enter an EMA, except a
        figure under half the current one, which replaces it: a place measured
        while the machine was swamped is re-measured rarely, and must not need
        dozens of visits to recover. A later figure enters at most :data:`MAX_RISE`
        times the current one: one slow batch (the first after the caller paused,
        +20-60 % on this VM) must not make the place in use look slower than the
        others, whose figures are not being measured meanwhile; a lasting slowdown
        still shows, ~3 % a batch.
        """
        figures = self._figures.get(size_class) or self._figures.setdefault(size_class, Figures())
        j = PLACE_INDEX[place]
        if figures.cold[j] > 0:  # a trial's first batch
            figures.cold[j] -= 1
            return
        old = figures.speed[j]
        seen = figures.samples[j] = figures.samples[j] + 1
        if seen == 1:
            figures.speed[j] = seconds_per_step
        elif seen <= 3:
            figures.speed[j] = min(old, seconds_per_step)
        elif seconds_per_step < 0.5 * old:
            figures.speed[j] = seconds_per_step
        else:
            for _ in range(batches):
                old = 0.7 * old + 0.3 * min(seconds_per_step, MAX_RISE * old)
            figures.speed[j] = old
        settled = figures.settled
        if settled >= 0 and j < figures.places:  # does the settled place stay the fastest?
            new = figures.speed[j]
            if j == settled:
                if new > figures.bar:
                    figures.unsettle()
            elif new < figures.speed[settled]:
                figures.unsettle()
            else:
                figures.bar = min(figures.bar, new)

    def seconds_per_step(self, size_class: tuple[str, int], place: str) -> float | None:
        """The measured wall time per env step of batches of ``size_class`` at ``place`` (None: not measured)."""
        figures, j = self._figures.get(size_class), PLACE_INDEX[place]
        return None if figures is None or not figures.samples[j] else figures.speed[j]

    def learn_step(self, seconds_per_step: float) -> None:
        """Record the env time per step the workers reported for a batch (an EMA; a figure under half the current
        one replaces it, as in :meth:`learn`: a first step that builds the envs the workers keep must not linger)."""
        old = self.step_seconds
        self.step_batches += 1
        if old is None or seconds_per_step < 0.5 * old:
            self.step_seconds = seconds_per_step
        else:
            self.step_seconds = 0.8 * old + 0.2 * seconds_per_step

    def n_chunks(self, n: int, steps: int, share: bool = False) -> int:
        """Chunks for a batch: one per worker, or up to :attr:`max_chunks` per worker when each still takes
        >= :attr:`chunk_seconds` and writing them all costs the calling process under :data:`CALLER_SHARE` of a worker's part
        (:attr:`chunk_caller_seconds` a chunk); fewer than the workers when a chunk would hold under
        MIN_CHUNK_SECONDS of env time.

        More chunks than workers, handed out as workers finish, keep a worker
        slowed by a noisy neighbour from holding the whole batch back; a chunk
        with less work than a message costs is better not split off.

        With ``share`` the batch runs on :attr:`share_workers` workers and the
        calling process, and there is at least one chunk more than those workers
        hold queued at once (the calling process takes chunks they have not taken).
        """
        if not share:
            return self._n_chunks(n, steps, self.n_workers)
        w = self.share_workers
        return max(self._n_chunks(n, steps, w + 1), min(n, QUEUED_PER_WORKER * w + 1))

    def _n_chunks(self, n: int, steps: int, w: int) -> int:
        if self.step_seconds is None:
            return min(n, w)
        work = steps * self.step_seconds
        if work < w * MIN_CHUNK_SECONDS or n < 4 * w:
            return max(1, min(n, w, int(work // MIN_CHUNK_SECONDS)))
        per_worker = work / w
        each = min(self.max_chunks, per_worker // self.chunk_seconds)  # chunks a worker
        # ... while the calling process writes them all in a small part of a worker's share of the batch: it writes
        # one chunk after another, so the last worker waits for the others' chunks to be written first.
        if self.chunk_caller_seconds > 0:
            each = min(each, CALLER_SHARE * per_worker / (w * self.chunk_caller_seconds))
        return min(n, w * int(max(1, each)))
