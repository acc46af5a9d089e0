"""The Tuner is pure: where batches run and how they are chunked, from the figures it is told."""
from __future__ import annotations

import pytest

from plan_parallel.batch import Tuner
from plan_parallel.batch.tuner import EXPLORE_EVERY

SIZE = Tuner.size_class("step_batch", 8)


def test_workers_are_measured_first_then_here_then_the_faster_wins() -> None:
    t = Tuner(2)
    assert t.run_here(SIZE) is False
    t.learn(SIZE, False, 2e-6)
    assert t.run_here(SIZE) is True
    t.learn(SIZE, True, 1e-6)
    ways = [t.run_here(SIZE) for _ in range(4 * EXPLORE_EVERY)]
    assert ways.count(True) > ways.count(False) >= 1, "here is faster, the workers are re-measured now and then"


def test_a_noisy_first_figure_does_not_keep_batches_here_for_good() -> None:
    """After the workers were measured absurdly slow once, they are tried again and their figure recovers."""
    t = Tuner(2)
    t.learn(SIZE, False, 2e-6)
    t.learn(SIZE, True, 1e-6)
    for _ in range(3):  # past the first figures, which keep their best
        t.learn(SIZE, False, 2e-6)
    t.learn(SIZE, False, 1.0)  # the machine was swamped during that call
    tried = 0
    for _ in range(200 * EXPLORE_EVERY):
        if not t.run_here(SIZE):
            tried += 1
            t.learn(SIZE, False, 0.5e-6)
    assert tried >= 1 and t.speed[(*SIZE, False)] < 1e-5


@pytest.mark.parametrize("mode, here", [("workers", False), ("here", True)])
def test_a_forced_mode_ignores_the_figures(mode: str, here: bool) -> None:
    t = Tuner(2, mode)
    t.learn(SIZE, not here, 1e-9)
    assert all(t.run_here(SIZE) is here for _ in range(100))


def test_chunks_one_per_worker_until_step_times_are_known_then_up_to_three() -> None:
    t = Tuner(2)
    assert t.n_chunks(1, 1) == 1 and t.n_chunks(64, 64) == 2
    t.learn_step(1e-4)  # 64 steps of 0.1 ms on 2 workers: 3.2 ms each
    assert t.n_chunks(64, 64) == 6
    assert t.n_chunks(5, 5) == 2  # too few items to split further


def test_work_smaller_than_a_message_is_not_split() -> None:
    t = Tuner(2)
    t.learn_step(6e-6)  # CartPole: 6 us a step
    assert t.n_chunks(2, 2) == 1 and t.n_chunks(8, 8) == 1  # 12 us, 48 us: one message
    assert t.n_chunks(24, 24) == 1 and t.n_chunks(40, 40) == 2  # 144 us: one; 240 us: two of 120 us
    t.learn_step(1e-3)
    assert t.n_chunks(2, 2) == 2  # 1 ms items: worth a worker each


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        Tuner(2, "fast")
    with pytest.raises(ValueError, match="n_workers must be >= 1"):
        Tuner(0)
