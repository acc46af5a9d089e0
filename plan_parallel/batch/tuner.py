"""Tuner: where a batch runs (on the workers, here, or shared) and in how many chunks, from measured times.

A pure object: it is told what was measured and answers questions; it never
runs, waits or times anything itself, so it is tested without processes.
"""
from __future__ import annotations

import math
import os

from plan_parallel.batch.feeder import QUEUED_PER_WORKER

__all__ = ["CHUNK_SECONDS", "EXPLORE_EVERY", "FIRST_SAMPLES", "HEAVY_ITEM_SECONDS", "MAX_EXPLORE_FACTOR", "MAX_RISE",
           "MIN_CHUNK_SECONDS", "PLACES", "SETTLED_TIMED_EVERY", "WORKER_SHARE_SECONDS", "Tuner", "usable_cores"]

EXPLORE_EVERY = 32  # a place as fast as the fastest is re-measured after this many batches of its size class
MAX_EXPLORE_FACTOR = 8  # and one r times slower after r**2 times as many (r at most this)
FIRST_SAMPLES = 3  # each place is measured this many times before the fastest is chosen (the best one counts)
# A batch's figure enters a place's EMA as at most this many times the current one. Replaying 7 traces of
# per-batch times recorded at each place (Pong B=8 and 64, HalfCheetah B=8 and 64 (twice), CartPole B=512
# (twice), two in the bench's own alternation): the batches' time ÷ the best single place's, mean 1.063 and
# at most 1.107, against 1.084 and 1.118 without the limit (1.090 and 1.158 before places were settled on).
MAX_RISE = 1.1
# A worker's share is split into chunks of at least this much env time, unless its backend says
# otherwise (Worker.chunk_seconds). A process worker's chunk costs ~0.6-0.9 ms of the calling
# process's CPU on a 2-core VM (Pong B=64 on W=2: 3 chunks a worker took 63-83 us of caller CPU per
# item, 1 chunk 38-50 us, at the same or better wall time).
CHUNK_SECONDS = 10e-3
# Env time worth a message of its own. On this 2-core VM a chunk costs the caller ~0.1-0.4 ms of CPU
# (A/B, W=2 workers only, 100 us vs 1 ms: 2 CartPole items 1,006 vs 746 us a call, caller 805 vs 700;
# CartPole B=64 2,743 vs 2,581 us; HalfCheetah B=8 2,169 vs 2,133 us, caller 1,047 vs 794).
MIN_CHUNK_SECONDS = 1e-3
# While a place is settled on, one batch in this many is timed for its figure, which counts as this many
# batches' (the same EMA, the same rise a batch). CartPole B=8 placed here (~150 us a call), two process envs
# in one process, alternating 300-call samples, 60 rounds, 4 runs: every batch timed 0.886-0.905 of
# inline's speed, one in four 0.914-0.924 (learning a batch costs ~2-3 us in place).
SETTLED_TIMED_EVERY = 4
# Items of at least this much env time each go to the workers without a figure being asked, where the workers
# fill the cores (see Tuner.for_the_workers): a message costs the caller 10-25 us an item (Pong RGB), under
# 2.5 % of such an item, and the caller's core is one a worker would use. MCTS on Pong (rollouts of 16 items,
# ~5 ms each), paired in one process (20 episodes, two runs): rollouts 1.663 -> 1.710 and 1.571 -> 1.599x inline,
# the episodes 1.607 -> 1.657 and 1.523 -> 1.548x: the figures, measured minutes apart on a machine whose second
# core came and went, had put 26 of 124 rollouts in the share and 5 here.
HEAVY_ITEM_SECONDS = 1e-3
# And so do batches that give each worker at least this much env time (not a vector env's resident steps, which
# run their own way here): a call's fixed costs (a round trip of 0.3-0.5 ms, the caller's ~1 ms of CPU, much of
# it while the workers run) are then small against a second core, and the figures, three samples a place taken
# in turns (each place cold after the other's batch), had settled on "here" in 1-6 of 8 rows of the bench (a
# trial of the workers ~40 batches later; a row is ~50-200). One bench row (fresh envs, 7 alternating samples)
# 8 times each, the default ÷ every batch on the workers, without / with the rule: CartPole B=512
# 0.947 -> 1.044 (6 of 8 rows ~95 % here before), HalfCheetah B=64 0.921 -> 0.966, Pong B=64 1.005 -> 0.998
# (another 8: 0.973 -> 0.990, 2 rows 94 % here before, at 1.00 and 1.02x inline against the workers' 1.52 and
# 1.63); rows the rule leaves to the figures as before: CartPole B=64 dt=4 1.125 / 1.209, HalfCheetah B=8 dt=4
# 1.413 / 1.385 (both run here). At 1.2 ms it took HalfCheetah B=8 dt=4 to the workers in 3 rows of 8 (a
# worker's step time, learned from small chunks, holds their fixed costs): 1.05-1.17 against ~1.4 here.
WORKER_SHARE_SECONDS = 2e-3
PLACES = ("workers", "here", "share")  # share: the workers take chunks from the front, this process from the back
MODES = ("auto", *PLACES)


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


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Tuner:
    """Decides where each batch runs and how it is chunked.

    Args:
        n_workers: the pool's worker count.
        cores: the cores this process may run on (default: its CPU affinity, or the CPU count).
        chunk_seconds: the env time a chunk holds at least when a worker's share of a batch
            is split in several (default: :data:`CHUNK_SECONDS`).
        workers_here: the workers run on this process's machine and use its ``cores`` (False: they may
            run elsewhere, a Ray cluster's nodes, and leave this process's core free).
        mode: ``"auto"`` (measure each place per op and size class, take the
            fastest), or one of :data:`PLACES` for every batch: ``"workers"``,
            ``"here"`` (in the calling process; for tests and debugging) or
            ``"share"`` (the workers and the calling process run chunks of the
            same batch).

    Raises:
        ValueError: unknown mode, or n_workers < 1.
    """

    def __init__(self, n_workers: int, mode: str = "auto", cores: int | None = None,
                 chunk_seconds: float | None = None, workers_here: bool = True) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers!r}")
        self.n_workers = n_workers
        self.mode = mode
        self.chunk_seconds = CHUNK_SECONDS if chunk_seconds is None else chunk_seconds
        self.cores = cores or usable_cores()
        # A shared batch runs on the calling process and at most this many workers: one
        # process per core (on 2 cores, the caller and 1 worker ran Pong 1.41x inline, the
        # caller and 2 workers 1.20x: a third busy process only takes turns on the cores).
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
        with a piece at a time and the replies handled between pieces. Forced places in alternating samples,
        2 workers on 2 cores at 2461864 (31 samples each): Pong B=64 1.509x inline on the workers against
        1.172x shared, CartPole B=512 1.232 against 1.116, HalfCheetah B=64 1.085 against 0.926 (15 samples:
        HalfCheetah B=512 dt=4 1.717 against 1.500); the figures had put CartPole B=512 in the share in 211
        of 308 batches (1.044x). A vector env's 8 Pongs stepped shared ran 1.142x as fast as on the workers.
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
        EXPLORE_EVERY batches: at most a half (r = 2), less the slower the place. (With r in
        place of r**2 the cost was (r - 1) / r, near a whole batch per
        EXPLORE_EVERY for each slow place: ~3 % of make_vec's 16-CartPole steps,
        where the workers and shared places are 3.7-4.4 times slower than here.)
        A forced ``"share"`` mode gives ``"workers"``
        where it cannot share.

        Between trials the fastest place is settled on: the batches until the next
        trial falls due are counted when it is decided, and placed without comparing
        the figures again (a place's figure that changes their order, :meth:`learn`,
        unsettles it). Each batch placed costs ~0.3 us instead of ~4 (CartPole B=8,
        where a batch runs here in ~90 us). One settled batch in :data:`SETTLED_TIMED_EVERY`
        is timed, and counts as that many batches.

        A trial is two batches, and only the second is learned: the first pays for
        the place having been idle (its workers asleep and their caches cold, or a
        vector env's resident envs restoring every sub-env), which measured alone
        kept a faster place looking slower (make_vec, 8 Pongs: the workers ran
        370-390 us a step in a streak and 580-830 in single trials, against 450-490
        here).
        """
        if self.mode != "auto":
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
        one replaces it, as in :meth:`learn`: a vector env's first step, which builds the envs the workers keep,
        took 97-159 ms an env step of 4 Pongs against 0.4-0.8 ms after, and the EMA took ~20 batches to forget it)."""
        old = self.step_seconds
        self.step_batches += 1
        if old is None or seconds_per_step < 0.5 * old:
            self.step_seconds = seconds_per_step
        else:
            self.step_seconds = 0.8 * old + 0.2 * seconds_per_step

    def n_chunks(self, n: int, steps: int, share: bool = False) -> int:
        """Chunks for a batch: one per worker, or up to 3 per worker when each still takes >= :attr:`chunk_seconds`;
        fewer than the workers when a chunk would hold under MIN_CHUNK_SECONDS of env time.

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
        return min(n, w * int(max(1, min(3, per_worker // self.chunk_seconds))))
