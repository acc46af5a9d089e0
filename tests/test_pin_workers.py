"""Process workers on cores of their own: ``pin_workers``.

Rows: by default (None) worker i runs on the i-th core this process may use when
the workers are as many as those cores, and wherever the OS puts it when they
are more or fewer; True and False force it; a worker that replaces a dead one takes its
core; results equal inline's either way; a bad value or a Ray backend is refused
before any worker starts; a batch's first chunk goes to a worker on another core than the calling
thread's, and the thread waits for the replies off the core of a worker in flight, its cores given back
when the wait ends or is cut short; a vector env's workers are pinned only when asked.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.workers.cores import feed_order, worker_cores
from tests.deadline import Hang, call_with_deadline
from tests.envs import PidEnv
from tests.envs_faults import SlowEnv
from tests.helpers import assert_batches_equal

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks_module"),
              pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="the OS sets no CPU affinity")]

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cores = pytest.mark.skipif(len(ALLOWED) < 2, reason="pinning two workers apart needs two usable cores")


def _cores(env: pp.BatchEnv) -> list[list[int]]:
    return [sorted(os.sched_getaffinity(pid)) for pid in env.pids]


@needs_two_cores
def test_by_default_each_worker_has_a_core_of_its_own() -> None:
    with pp.make("CartPole-v1", n_workers=2) as env:
        assert _cores(env) == [[ALLOWED[0]], [ALLOWED[1]]]


@needs_two_cores
@pytest.mark.parametrize(("pin", "pinned"), [(None, False), (True, True)], ids=["default", "asked"])
def test_a_vector_envs_workers_are_pinned_only_when_asked(pin: bool | None, pinned: bool) -> None:
    venv = pp.make_vec("CartPole-v1", 2, n_workers=2, pin_workers=pin)
    try:
        assert _cores(venv.plan_env) == ([[ALLOWED[0]], [ALLOWED[1]]] if pinned else [ALLOWED] * 2)
    finally:
        venv.close()


@pytest.mark.parametrize("extra", [1, -1], ids=["more", "fewer"])
def test_more_or_fewer_workers_than_cores_are_left_to_the_os(extra: int) -> None:
    n = len(ALLOWED) + extra
    if n < 1:
        pytest.skip("one usable core: no fewer workers than cores")
    with pp.make("CartPole-v1", n_workers=n) as env:
        assert _cores(env) == [ALLOWED] * n


@pytest.mark.parametrize(("pin", "n"), [(False, 2), (True, len(ALLOWED) + 1)], ids=["off", "forced-round-robin"])
def test_forced(pin: bool, n: int) -> None:
    with pp.make("CartPole-v1", n_workers=n, pin_workers=pin) as env:
        want = [[ALLOWED[i % len(ALLOWED)]] for i in range(n)] if pin else [ALLOWED] * n
        assert _cores(env) == want
    assert worker_cores(n, pin) == ([ALLOWED[i % len(ALLOWED)] for i in range(n)] if pin else [None] * n)


@needs_two_cores
def test_a_replacement_worker_takes_the_dead_ones_core() -> None:
    with pp.make("CartPole-v1", n_workers=2, small_batch_inline=False) as env:
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
    with pytest.raises(ValueError, match=r"pin_workers is an option of backend='process'"):
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
    with pp.make(PidEnv, n_workers=2, small_batch_inline=False) as env:
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


@needs_two_cores
def test_a_thread_waiting_for_replies_leaves_the_core_of_a_worker_in_flight() -> None:
    with pp.make(SlowEnv, n_workers=2, pin_workers=True, small_batch_inline=False, delay=0.2) as env:
        state, _, _ = env.reset(seed=0)
        with _masks_while_waiting() as seen:
            env.step_batch(np.zeros(2, dtype=np.int64), [state] * 2)
            after = os.sched_getaffinity(0)
    assert any(len(mask) == 1 for mask in seen)  # both workers ran: it waited on one core, the other worker's
    assert after == set(ALLOWED[:2])  # and it has its cores back


@needs_two_cores
def test_a_wait_cut_short_gives_the_thread_its_cores_back() -> None:
    with pp.make(SlowEnv, n_workers=2, pin_workers=True, small_batch_inline=False, delay=0.5) as env:
        state, _, _ = env.reset(seed=0)
        with _masks_while_waiting() as seen:
            with pytest.raises(Hang):
                call_with_deadline(lambda: env.step_batch(np.zeros(2, dtype=np.int64), [state] * 2), 0.2)
            after = os.sched_getaffinity(0)
    assert any(len(mask) == 1 for mask in seen)
    assert after == set(ALLOWED[:2])
