"""The Tuner is pure: where batches run and how they are chunked, from the figures it is told."""
from __future__ import annotations

import itertools
import math

import pytest

from plan_parallel.batch import Tuner
from plan_parallel.batch.tuner import (
    EXPLORE_EVERY,
    FIRST_SAMPLES,
    HEAVY_ITEM_SECONDS,
    PLACES,
    SETTLED_TIMED_EVERY,
    WORKER_SHARE_SECONDS,
)

SIZE = Tuner.size_class("step_batch", 8)


def test_each_place_is_measured_first_samples_times_in_turns_then_the_fastest_wins() -> None:
    t = Tuner(2)
    for place in PLACES * FIRST_SAMPLES:
        assert t.place(SIZE) == place
        t.learn(SIZE, place, {"workers": 3e-6, "here": 1e-6, "share": 1.5e-6}[place])
    ways = [t.place(SIZE) for _ in range(10 * EXPLORE_EVERY)]
    assert ways.count("here") > len(ways) - 16, "here is the fastest (a trial of another place is two batches)"
    assert ways.count("share") >= 1 and ways.count("workers") >= 1, "the others are re-measured in turns"


def test_a_noisy_first_figure_does_not_keep_batches_away_for_good() -> None:
    """After the workers were measured absurdly slow once, they are tried again and their figure recovers."""
    t = Tuner(2)
    for _ in range(FIRST_SAMPLES):
        t.learn(SIZE, "here", 1e-6)
        t.learn(SIZE, "share", 1.5e-6)
    for _ in range(3):  # past the first figures, which keep their best
        t.learn(SIZE, "workers", 2e-6)
    t.learn(SIZE, "workers", 1.0)  # the machine was swamped during that call
    tried = 0
    for _ in range(400 * EXPLORE_EVERY):
        if t.place(SIZE) == "workers":
            tried += 1
            t.learn(SIZE, "workers", 0.5e-6)
    assert tried >= 1 and t.seconds_per_step(SIZE, "workers") < 1e-5


def test_a_slower_place_is_re_measured_less_often_in_proportion_to_its_slowdown_squared() -> None:
    """A place r times slower is tried once per EXPLORE_EVERY * r**2 batches (r up to MAX_EXPLORE_FACTOR),
    each trial two batches."""
    t = Tuner(2)
    for place, seconds in (("workers", 6e-6), ("here", 1e-6), ("share", 2e-6)) * FIRST_SAMPLES:
        assert t.place(SIZE) == place
        t.learn(SIZE, place, seconds)
    n = 288 * EXPLORE_EVERY
    ways = [t.place(SIZE) for _ in range(n)]
    assert ways.count("share") == pytest.approx(2 * n / (2**2 * EXPLORE_EVERY), abs=4)
    assert ways.count("workers") == pytest.approx(2 * n / (6**2 * EXPLORE_EVERY), abs=4)


def test_a_trial_is_two_batches_and_only_the_second_is_learned() -> None:
    """The first batch of a trial pays for the place having been idle: left out, the warm second batch
    shows the place faster than the current one, which it then replaces."""
    t = Tuner(2)
    for place, seconds in (("workers", 2e-6), ("here", 1e-6), ("share", 2e-6)) * FIRST_SAMPLES:
        assert t.place(SIZE) == place
        t.learn(SIZE, place, seconds)
    ways = []
    while len(ways) < 2 or ways[-2] == "here":
        ways.append(t.place(SIZE))
    trial = ways[-2]
    assert trial != "here" and ways[-1] == trial, "the trial's second batch goes to the same place"
    t.learn(SIZE, trial, 3e-6)  # cold: the place had been idle
    t.learn(SIZE, trial, 0.6e-6)  # warm
    assert t.seconds_per_step(SIZE, trial) < 1e-6
    assert [t.place(SIZE) for _ in range(4)] == [trial] * 4, "the warm figure made it the fastest"


def _settled_on_here() -> Tuner:
    """A tuner past its first figures, placing batches here between trials."""
    t = Tuner(2)
    for place, seconds in (("workers", 6e-6), ("here", 1e-6), ("share", 2e-6)) * FIRST_SAMPLES:
        assert t.place(SIZE) == place
        t.learn(SIZE, place, seconds)
    assert [t.place(SIZE) for _ in range(3)] == ["here"] * 3
    return t


def test_between_trials_a_figure_that_beats_the_settled_place_takes_the_next_batch() -> None:
    """Batches between trials are placed without comparing the figures again; a figure learned that
    changes their order ends that at once, whichever place it is of."""
    t = _settled_on_here()
    for _ in range(4):  # share measured faster (a batch of another thread, or a trial): now the fastest
        t.learn(SIZE, "share", 0.1e-6)
    assert t.place(SIZE) == "share"
    t = _settled_on_here()
    batches = 0
    while t.place(SIZE) == "here" and batches < 100:  # the settled place itself turns 5x slower, and stays so
        t.learn(SIZE, "here", 5e-6)
        batches += 1
    # It rises 3 % a batch at most (MAX_RISE): past share's 2x after ~24, not after 3 as one slow batch would.
    assert 20 <= batches <= 30 and t.place(SIZE) == "share", batches


def test_between_trials_one_batch_in_settled_timed_every_is_timed_and_counts_for_that_many() -> None:
    """While settled, a batch's time is wanted once in SETTLED_TIMED_EVERY batches; learned as that many
    batches, a lasting slowdown of the settled place moves it on after as many batches as when each was
    learned (the test above: 20-30)."""
    t = _settled_on_here()
    weights = []
    while (way := t.choose(SIZE))[0] == "here" and len(weights) < 100:
        weights.append(way[1])
        if way[1]:
            t.learn(SIZE, "here", 5e-6, way[1])
    assert set(weights) == {0, SETTLED_TIMED_EVERY}
    assert weights.count(SETTLED_TIMED_EVERY) == pytest.approx(len(weights) / SETTLED_TIMED_EVERY, abs=1)
    assert 20 <= len(weights) <= 30 + SETTLED_TIMED_EVERY and way[0] == "share", weights
    trial = Tuner(2)
    assert all(trial.choose(SIZE)[1] == 1 for _ in range(len(PLACES) * FIRST_SAMPLES)), "first figures: every batch"


def test_a_figure_learned_as_k_batches_equals_k_batches_learned() -> None:
    once, each = _settled_on_here(), _settled_on_here()
    once.learn(SIZE, "here", 3e-6, 4)
    for _ in range(4):
        each.learn(SIZE, "here", 3e-6)
    assert once.seconds_per_step(SIZE, "here") == pytest.approx(each.seconds_per_step(SIZE, "here"), rel=1e-12)
    assert once.seconds_per_step(SIZE, "here") > 1.12e-6, "four rises of 3 %, not one"


def test_between_trials_the_batches_placed_count_toward_the_next_trial() -> None:
    """Trials fall due after as many batches as when every batch compared the figures: the batches
    placed without comparing them count, also across the other places' trials."""
    t = _settled_on_here()
    ways = []
    for _ in range(40 * EXPLORE_EVERY):
        ways.append(t.place(SIZE))
        t.learn(SIZE, ways[-1], {"workers": 6e-6, "here": 1e-6, "share": 2e-6}[ways[-1]])
    share = [k for k, w in enumerate(ways) if w == "share"][::2]
    assert share[0] == pytest.approx(2**2 * EXPLORE_EVERY - 3, abs=1), "share (2x slower) is tried first"
    assert all(b - a == pytest.approx(2**2 * EXPLORE_EVERY, abs=4) for a, b in itertools.pairwise(share))
    workers = ways.index("workers")
    assert workers == pytest.approx(6**2 * EXPLORE_EVERY, abs=12), "workers (6x slower): every batch counted"


def test_a_batch_that_cannot_be_shared_is_measured_and_placed_among_the_others() -> None:
    t = Tuner(2)
    assert [t.place(SIZE, can_share=False) for _ in range(4)] == ["workers"] * 4, "nothing measured yet"
    t.learn(SIZE, "workers", 2e-6)
    assert t.place(SIZE, can_share=False) == "here"
    t.learn(SIZE, "here", 1e-6)
    for _ in range(FIRST_SAMPLES - 1):
        t.learn(SIZE, "workers", 2e-6)
        t.learn(SIZE, "here", 1e-6)
    assert t.place(SIZE, can_share=False) == "here" and t.place(SIZE) == "share", "share is still unmeasured"
    assert Tuner(2, "share").place(SIZE, can_share=False) == "workers"


@pytest.mark.parametrize("mode", PLACES)
def test_a_forced_mode_ignores_the_figures(mode: str) -> None:
    t = Tuner(2, mode)
    for place in PLACES:
        t.learn(SIZE, place, 1e-9 if place != mode else 1.0)
    assert all(t.place(SIZE) == mode for _ in range(100))


def test_items_of_a_millisecond_go_to_workers_that_fill_the_cores_without_asking_the_figures() -> None:
    """Each item >= HEAVY_ITEM_SECONDS of a worker's env time, an item for each worker, and no core for the
    caller to add: the workers, whatever the figures say (they are neither asked nor changed)."""
    t = Tuner(2, cores=2)
    assert not t.for_the_workers(320, 16), "no step time is known yet: the figures decide"
    t.learn_step(HEAVY_ITEM_SECONDS / 20)  # rollouts of 20 steps: an item is HEAVY_ITEM_SECONDS
    assert not t.for_the_workers(320, 16), "one batch's step time: it may hold one-off costs"
    t.learn_step(HEAVY_ITEM_SECONDS / 20)
    assert t.for_the_workers(320, 16) and t.for_the_workers(40, 2)
    assert not t.for_the_workers(60, 4), "an item short of HEAVY_ITEM_SECONDS, a worker's share of WORKER_SHARE_SECONDS"
    assert not t.for_the_workers(20, 1), "fewer items than workers: the figures decide"
    over = Tuner(4, cores=2)
    over.learn_step(1.0)
    over.learn_step(1.0)
    assert over.for_the_workers(4, 4), "more workers than cores fill them too"
    for more_cores in (Tuner(2, cores=3), Tuner(2, cores=2, workers_here=False)):  # the caller's core adds to a share
        more_cores.learn_step(1.0)
        more_cores.learn_step(1.0)
        assert not more_cores.for_the_workers(320, 16)
    for mode in PLACES:
        forced = Tuner(2, mode, cores=2)
        forced.learn_step(1.0)
        forced.learn_step(1.0)
        assert not forced.for_the_workers(320, 16), "a forced mode places every batch itself"


def test_batches_that_give_each_worker_enough_work_go_to_workers_that_fill_the_cores() -> None:
    """Items of any size, each worker's share >= WORKER_SHARE_SECONDS of env time: the workers, unless the items
    are resident here (a vector env's sub-envs), where the figures decide as before."""
    t = Tuner(2, cores=2)
    step = 1e-5  # items of one step, far below HEAVY_ITEM_SECONDS
    t.learn_step(step)
    assert not t.for_the_workers(400, 400), "one batch's step time: it may hold one-off costs"
    t.learn_step(step)
    enough = math.ceil(2 * WORKER_SHARE_SECONDS / step) + 1  # (+1, -2: clear of the float rounding at the line)
    assert t.for_the_workers(enough, enough) and t.for_the_workers(enough, 2)
    assert not t.for_the_workers(enough - 2, enough - 2), "a share short of WORKER_SHARE_SECONDS"
    assert not t.for_the_workers(enough, enough, resident=True), "resident items: the figures decide"
    assert not t.for_the_workers(enough, 1), "fewer items than workers"
    more_cores = Tuner(2, cores=3)
    more_cores.learn_step(step)
    more_cores.learn_step(step)
    assert not more_cores.for_the_workers(enough, enough), "this process adds a core: the figures decide"


def test_auto_mode_shares_where_this_process_adds_a_core_or_the_items_are_resident_here() -> None:
    assert not Tuner(2, cores=2).may_share(resident=False) and not Tuner(4, cores=2).may_share(resident=False)
    assert Tuner(2, cores=2).may_share(resident=True), "a vector env's sub-envs need no restore here"
    assert Tuner(2, cores=3).may_share(resident=False)
    assert all(Tuner(2, mode, cores=2).may_share(resident=False) for mode in PLACES), "a forced mode decides"
    assert Tuner(2, cores=2, workers_here=False).may_share(resident=False), "workers elsewhere leave this core free"


def test_chunks_one_per_worker_until_step_times_are_known_then_up_to_three() -> None:
    t = Tuner(2)
    assert t.n_chunks(1, 1) == 1 and t.n_chunks(64, 64) == 2
    t.learn_step(1e-4)  # 64 steps of 0.1 ms on 2 workers: 3.2 ms each, under CHUNK_SECONDS
    assert t.n_chunks(64, 64) == 2
    t = Tuner(2)
    t.learn_step(1e-3)  # 64 steps of 1 ms on 2 workers: 32 ms each
    assert t.n_chunks(64, 64) == 4  # 3 chunks of >= 10 ms each would cost the caller over 5 % of 32 ms: 2 each
    assert t.n_chunks(512, 512) == 6  # 256 ms each: 3 chunks each
    assert t.n_chunks(5, 5) == 2  # too few items to split further


def test_many_workers_get_one_chunk_each_when_more_would_hold_the_last_one_back() -> None:
    """The calling process writes chunks one after another (~0.3 ms each): on 32 workers with 64 ms each, 3
    chunks a worker are 96 chunks, ~29 ms of writing before the last worker starts; 1 each: ~10 ms. Measured
    (bench --suite scale, SleepyWalk, k=32): the caller's CPU an item 20-28 -> 6-8 us at W >= 8, efficiency at
    W=64 0.49 -> 0.62-0.74 (docs/measurements.md)."""
    t = Tuner(32)
    t.learn_step(2e-3)
    assert t.n_chunks(32 * 32, 32 * 32) == 32
    assert t.n_chunks(32 * 1024, 32 * 1024) == 96  # 2 s each: writing 96 chunks is 1.4 % of it


def test_a_backend_with_costlier_chunks_splits_a_share_only_into_chunks_of_its_chunk_seconds() -> None:
    t = Tuner(2, chunk_seconds=0.25)  # Ray's
    t.learn_step(1e-3)
    assert t.n_chunks(64, 64) == 2, "32 ms a worker: one chunk each"
    assert t.n_chunks(512, 512) == 2, "256 ms a worker: one chunk each"
    assert (t.n_chunks(1024, 1024), t.n_chunks(2048, 2048)) == (4, 6), "512 ms a worker: 2 chunks; 1 s: 3"
    default = Tuner(2)
    default.learn_step(1e-3)
    assert default.n_chunks(512, 512) == 6, "the process backend's 10 ms chunks: 3 a worker"


def test_a_shared_batch_counts_the_calling_process_as_one_more_worker_and_leaves_it_chunks() -> None:
    t = Tuner(2, cores=3)
    assert t.n_chunks(64, 64, share=True) == 5, "one more chunk than the 2 x 2 the workers hold queued"
    assert t.n_chunks(3, 3, share=True) == 3
    t = Tuner(2, cores=3)
    t.learn_step(1e-3)  # 64 steps of 1 ms on 3: 21 ms each, 1 chunk each (more would cost the caller > 5 %)
    assert t.n_chunks(64, 64, share=True) == 5  # and one more than the 2 x 2 the workers hold queued
    t.learn_step(1e-2)  # the EMA: 2.8 ms a step
    assert t.n_chunks(64, 64, share=True) == 9  # 60 ms each: 3 each


def test_a_shared_batch_leaves_the_calling_process_a_core() -> None:
    assert Tuner(2, cores=2).share_workers == 1 and Tuner(4, cores=2).share_workers == 1
    assert Tuner(2, cores=8).share_workers == 2 and Tuner(1, cores=1).share_workers == 1
    assert Tuner(2, cores=2).n_chunks(64, 64, share=True) == 3, "one more than the one worker's 2 queued"


def test_a_step_time_under_half_the_current_one_replaces_it() -> None:
    """A first batch that built envs on the workers is forgotten at the next one; later figures enter the EMA."""
    t = Tuner(2)
    t.learn_step(0.1)
    t.learn_step(1e-3)
    assert t.step_seconds == 1e-3
    t.learn_step(1.5e-3)
    assert t.step_seconds == pytest.approx(1.1e-3)
    t.learn_step(0.6e-3)
    assert t.step_seconds == pytest.approx(0.8 * 1.1e-3 + 0.2 * 0.6e-3), "not under half: into the EMA"


def test_work_smaller_than_a_message_is_not_split() -> None:
    t = Tuner(2)
    t.learn_step(6e-5)  # 60 us a step (a worker's env time per CartPole step, serving included)
    assert t.n_chunks(2, 2) == 1 and t.n_chunks(8, 8) == 1  # 120 us, 480 us: one message
    assert t.n_chunks(24, 24) == 1 and t.n_chunks(40, 40) == 2  # 1.44 ms: one; 2.4 ms: two of 1.2 ms
    t = Tuner(2)
    t.learn_step(1e-3)
    assert t.n_chunks(2, 2) == 2  # 1 ms items: worth a worker each


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        Tuner(2, "fast")
    with pytest.raises(ValueError, match="n_workers must be >= 1"):
        Tuner(0)


def test_a_power_of_two_batch_and_the_same_batch_short_of_a_few_items_share_a_size_class() -> None:
    """make_vec's 16 sub-envs step 16 items, or fewer while some reset: one class, one set of measurements."""
    assert Tuner.size_class("step_batch", 16) == Tuner.size_class("step_batch", 9) == ("step_batch", 4)
    assert Tuner.size_class("step_batch", 17) == ("step_batch", 5)
    assert Tuner.size_class("step_batch", 1) == ("step_batch", 0)
    assert Tuner.size_class("rollout_batch", 16) != Tuner.size_class("step_batch", 16)


@pytest.mark.timeout(60)
def test_threads_may_place_and_learn_at_once() -> None:
    """Batches of several threads are placed and measured concurrently (a place's figure may change while
    another thread compares the figures): place() never fails for it."""
    import random
    import sys
    import threading
    import time

    t = Tuner(2)
    for place in PLACES * FIRST_SAMPLES:
        t.learn(SIZE, place, 1e-6)
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.0

    def learner(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            for place in PLACES:
                t.learn(SIZE, place, 1e-6 * (1 + rng.random()))  # every figure a new value

    def placer() -> None:
        try:
            while time.monotonic() < stop:
                assert t.place(SIZE) in PLACES
        except BaseException as e:  # any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=learner, args=(0,)), threading.Thread(target=placer)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between almost any two bytecodes
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
