"""What the workers change on the host (DESIGN, invariant 6: polite by default), and the worker count.

Rows: by default a worker's CPU affinity and scheduling policy are its parent's, for ``make`` and ``make_vec``
alike; the default worker count is the CPUs this process may use (its affinity; ``PLAN_PARALLEL_WORKERS``);
a thread watching the calling thread never sees its affinity change; the opt-in tuned profile pins the workers,
runs them under ``SCHED_BATCH`` and moves the calling thread off a busy worker's core while it waits.
``pin_workers=True`` alone: worker i runs on the i-th core this process may use; a worker that replaces a dead
one takes its core; results equal inline's either way; a bad value or host settings given to Ray are refused
before any worker starts; a batch's first chunk goes to a worker on another core than the calling thread's,
and with ``move_caller`` the thread waits for the replies off the core of a worker in flight, its cores given
back when the wait ends or is cut short.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.workers.cores import ENV_WORKERS, available_cpus, feed_order, worker_cores
from tests.deadline import Hang, call_with_deadline
from tests.envs import PidEnv
from tests.envs_faults import SlowEnv
from tests.helpers import assert_batches_equal

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks_module"),
              pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the OS sets no CPU affinity")]

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cores = pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning two workers apart needs two usable cores")
MOVING = pp.ExecutionPolicy(placement="workers", pin_workers=True, move_caller=True)


def _cores(env: Any) -> list[list[int]]:
    return [sorted(os.sched_getaffinity(pid)) for pid in env.pids]


def _policies(env: Any) -> list[int]:
    return [os.sched_getscheduler(pid) for pid in env.pids]


@contextlib.contextmanager
def _built(vector: bool, **options: Any) -> Iterator[pp.BatchEnv]:
    """A process env of CartPole, or the planning env under a make_vec of 2 CartPoles."""
    if vector:
        venv = pp.make_vec("CartPole-v1", 2, **options)
        try:
            yield venv.plan_env
        finally:
            venv.close()
    else:
        with pp.make("CartPole-v1", **options) as env:
            yield env


@pytest.mark.parametrize("vector", [False, True], ids=["make", "make_vec"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_by_default_a_worker_runs_where_and_as_its_parent_does(vector: bool, n: int) -> None:
    with _built(vector, n_workers=n) as env:
        assert _cores(env) == [ALLOWED] * n
        assert _policies(env) == [os.sched_getscheduler(0)] * n
        assert env.execution.pin_workers is False and env.execution.batch_scheduling is False


@pytest.mark.parametrize("vector", [False, True], ids=["make", "make_vec"])
def test_the_default_worker_count_is_the_cpus_this_process_may_use(vector: bool, monkeypatch: Any) -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {ALLOWED[0]})  # as under taskset -c 0
        assert available_cpus() == 1
        with _built(vector) as env:
            assert env.n_workers == 1 and env.execution.n_workers == 1
    finally:
        os.sched_setaffinity(0, before)
    monkeypatch.setenv(ENV_WORKERS, "3")
    with _built(vector) as env:
        assert env.n_workers == 3
    monkeypatch.setenv(ENV_WORKERS, "many")
    with pytest.raises(ValueError, match=f"{ENV_WORKERS} must be a positive integer, got 'many'"):
        available_cpus()


@needs_two_cores
@pytest.mark.parametrize("vector", [False, True], ids=["make", "make_vec"])
def test_the_tuned_profile_pins_the_workers_and_runs_them_under_sched_batch(vector: bool) -> None:
    with _built(vector, n_workers=2, execution=pp.ExecutionPolicy.tuned()) as env:
        assert _cores(env) == [[ALLOWED[0]], [ALLOWED[1]]]
        assert _policies(env) == [os.SCHED_BATCH] * 2


@needs_two_cores
@pytest.mark.parametrize("vector", [False, True], ids=["make", "make_vec"])
def test_pinned_only_when_asked(vector: bool) -> None:
    with _built(vector, n_workers=2, pin_workers=True) as env:
        assert _cores(env) == [[ALLOWED[0]], [ALLOWED[1]]]
        assert _policies(env) == [os.sched_getscheduler(0)] * 2


@pytest.mark.parametrize(("pin", "n"), [(False, 2), (True, len(ALLOWED) + 1)], ids=["off", "forced-round-robin"])
def test_forced(pin: bool, n: int) -> None:
    with pp.make("CartPole-v1", n_workers=n, pin_workers=pin) as env:
        want = [[ALLOWED[i % len(ALLOWED)]] for i in range(n)] if pin else [ALLOWED] * n
        assert _cores(env) == want
    assert worker_cores(n, pin) == ([ALLOWED[i % len(ALLOWED)] for i in range(n)] if pin else [None] * n)


@needs_two_cores
def test_a_replacement_worker_takes_the_dead_ones_core() -> None:
    with pp.make("CartPole-v1", n_workers=2, small_batch_inline=False, pin_workers=True) as env:
        state, _, _ = env.reset(seed=0)
        old = env.pids[1]
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while env.pids[1] == old and time.monotonic() < deadline:
            env.step_batch(np.zeros(4, dtype=np.int64), [state] * 4)
        assert env.pids[1] != old and env.stats["restarts"] == 1
        assert _cores(env) == [[ALLOWED[0]], [ALLOWED[1]]]


@pytest.mark.parametrize("pin", [True, False], ids=["pinned", "free"])
def test_results_equal_inline_either_way(pin: bool) -> None:
    inline = pp.make("CartPole-v1", backend="inline")
    with pp.make("CartPole-v1", n_workers=2, small_batch_inline=False, pin_workers=pin) as env:
        state, _, _ = inline.reset(seed=1)
        env.set_state(state)
        actions = np.arange(16) % 2
        assert_batches_equal(env.step_batch(actions, [state] * 16), inline.step_batch(actions, [state] * 16))
    inline.close()


@pytest.mark.parametrize("backend", ["process", "inline", "ray"])
def test_bad_values_are_refused_before_any_worker_starts(backend: str) -> None:
    with pytest.raises(TypeError, match=r"pin_workers must be True, False or None, got 'yes'"):
        pp.make("CartPole-v1", backend=backend, n_workers=2, pin_workers="yes")  # type: ignore[call-overload]


def test_ray_places_its_own_actors() -> None:
    with pytest.raises(ValueError, match=r"pin_workers, batch_scheduling and move_caller are settings of "
                                         r"backend='process'"):
        pp.make("CartPole-v1", backend="ray", n_workers=2, pin_workers=True)


@pytest.mark.parametrize(("cores", "here", "want"), [
    ([0, 1], 0, [1, 0]), ([0, 1], 1, [0, 1]), ([0, 1], None, [0, 1]), ([None, None], 0, [0, 1]),
    ([0, 1, 0, 1], 0, [1, 3, 0, 2]),
], ids=["on-0", "on-1", "unknown", "unpinned", "round-robin"])
def test_the_worker_on_this_threads_core_is_fed_last(cores: list, here: int | None, want: list[int]) -> None:
    assert feed_order(cores, here) == want


@needs_two_cores
def test_a_batch_starts_on_the_worker_of_the_other_core() -> None:
    before = os.sched_getaffinity(0)
    with pp.make(PidEnv, n_workers=2, small_batch_inline=False, pin_workers=True) as env:
        state, _, _ = env.reset(seed=0)
        try:
            for mine, first in ((0, 1), (1, 0)):
                os.sched_setaffinity(0, {ALLOWED[mine]})  # this thread on worker `mine`'s core
                batch = env.step_batch(np.zeros(8, dtype=np.int64), [state] * 8)
                assert batch.infos[0]["pid"] == env.pids[first]  # the first chunk (one, or one of two)
        finally:
            os.sched_setaffinity(0, before)


@contextlib.contextmanager
def _masks_while_waiting() -> Iterator[list[set[int]]]:
    """This thread allowed the first two cores; the masks it has meanwhile, read every 5 ms by another
    thread. Its own mask is put back afterwards."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(ALLOWED[:2]))
    seen: list[set[int]] = []
    tid = threading.get_native_id()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(os.sched_getaffinity(tid))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join(5)
        os.sched_setaffinity(0, before)


def test_by_default_a_watcher_never_sees_the_calling_threads_affinity_change() -> None:
    """The issue's case: five Pong batches; and a SlowEnv batch that keeps this thread waiting."""
    with pp.make("ALE/Pong-v5", n_workers=2) as env, pp.make(SlowEnv, n_workers=2, delay=0.2) as slow:
        state, _, _ = env.reset(seed=0)
        slow_state, _, _ = slow.reset(seed=0)
        with _masks_while_waiting() as seen:
            for _ in range(5):
                env.step_batch(np.zeros(16, dtype=np.int64), [state] * 16, dt=4)
            slow.step_batch(np.zeros(2, dtype=np.int64), [slow_state] * 2)
    assert len(seen) > 5 and all(mask == set(ALLOWED[:2]) for mask in seen)


@needs_two_cores
def test_a_thread_waiting_for_replies_leaves_the_core_of_a_worker_in_flight() -> None:
    with pp.make(SlowEnv, n_workers=2, execution=MOVING, delay=0.2) as env:
        state, _, _ = env.reset(seed=0)
        with _masks_while_waiting() as seen:  # (8 items: a chunk a worker on the lane too, whose chunks hold >= 4)
            env.step_batch(np.zeros(8, dtype=np.int64), [state] * 8)
            after = os.sched_getaffinity(0)
    assert any(len(mask) == 1 for mask in seen)  # both workers ran: it waited on one core, the other worker's
    assert after == set(ALLOWED[:2])  # and it has its cores back


@needs_two_cores
def test_a_wait_cut_short_gives_the_thread_its_cores_back() -> None:
    with pp.make(SlowEnv, n_workers=2, execution=MOVING, delay=0.5) as env:
        state, _, _ = env.reset(seed=0)
        with _masks_while_waiting() as seen:
            with pytest.raises(Hang):
                call_with_deadline(lambda: env.step_batch(np.zeros(8, dtype=np.int64), [state] * 8), 0.2)
            after = os.sched_getaffinity(0)
    assert any(len(mask) == 1 for mask in seen)
    assert after == set(ALLOWED[:2])
