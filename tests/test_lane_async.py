"""Lane calls sent without waiting (``step_batch_async``, ``rollout_batch_async``: plan_parallel.batch.lane_future).

The lane's invariants hold for a call the caller does not wait for: its result equals the inline backend's,
whoever settles it (its own ``result``, the next call, another thread); ``done`` never blocks and
``result(timeout)`` leaves it in flight; an interruption at any line, a worker killed, a timeout, a cancel or a
close leaves the env usable and exact (an interrupted call is sent again the general way, so its own
``result`` still returns its own data); results that do not fit the columns are sent again the general way.
Every call that could wait has a deadline.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.errors import ClosedError, WorkerTimeoutError, failed_item
from tests.conftest_leaks import live_children
from tests.deadline import call_with_deadline
from tests.envs import ArrayStateEnv, OffDtypeEnv
from tests.envs_faults import SlowEnv, SlowOrRaisingEnv
from tests.helpers import assert_batches_equal
from tests.test_interrupts import Interrupt, InterruptAtLine
from tests.test_lane import LENT_ENVS, assert_rollouts_equal, env_name, make_env, on_workers

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")  # (no worker, segment or lent slab left behind)

SPECS: list[Any] = ["CartPole-v1", ArrayStateEnv, *LENT_ENVS]  # states as rows, pickled; ALE rows, screens lent


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here (a CI job may start the run with it ignored)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def settled_by(env: Any, ref: pp.PlanEnv, s: Any, n: int, rng: np.random.Generator) -> tuple[Any, Any, Any, Any]:
    """A call sent without waiting (a step's or a rollout's, ``n`` items from ``s``), the oracle's, how to compare
    them, and a sync call of the other kind (which settles the first)."""
    states = [s] * n
    seqs = rng.integers(0, 2, (n, 3))
    if rng.random() < 0.5:
        return (lambda: env.rollout_batch_async(states, seqs, dt=2)), (lambda: ref.rollout_batch(states, seqs, dt=2)), \
            assert_rollouts_equal, (lambda: env.step_batch(seqs[:, 0], states))
    return (lambda: env.step_batch_async(seqs[:, 0], states, dt=2)), (lambda: ref.step_batch(seqs[:, 0], states, dt=2)), \
        assert_batches_equal, (lambda: env.rollout_batch(states, seqs))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n_workers", [1, 2, 3])
@pytest.mark.parametrize("spec", SPECS, ids=env_name)
def test_calls_sent_without_waiting_take_the_lane_and_each_result_equals_inline(spec: Any, n_workers: int) -> None:
    """Calls sent one after another (each settles the one before), results read in any order, a sync call
    between: every result is inline's, and every call ran in the lane."""
    rng = np.random.default_rng(n_workers)
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=on_workers(n_workers)) as env:
        s = ref.reset(seed=5)[0]
        env.step_batch(np.zeros(4, dtype=np.int64), [s] * 4)  # (the workers checked it: the lane takes it)
        lanes = env.stats["lane_batches"]
        sent = [settled_by(env, ref, s, int(rng.integers(1, 9)), rng) for _ in range(4)]
        futures = [call() for call, *_ in sent[:3]]
        _, _, same, sync = sent[3]
        sync()  # settles the third
        assert all(f.done() for f in futures)
        for f, (_, want, same, _) in reversed(list(zip(futures, sent))):
            same(call_with_deadline(f.result, 30.0, "a call sent without waiting"), want())
        assert env.stats["lane_batches"] == lanes + 4, "the three calls and the sync one took the lane"


@pytest.mark.timeout(120)
def test_done_never_blocks_and_result_with_a_timeout_leaves_the_call_in_flight() -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.2) as ref, pp.make(SlowEnv, delay=0.2, execution=on_workers(2)) as env:
        s = ref.reset(seed=1)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        acts = np.array([0, 1, 1, 0])
        lanes = env.stats["lane_batches"]
        fut = env.step_batch_async(acts, [s] * 4)  # 2 items a worker: 0.4 s
        t0 = time.monotonic()
        assert not fut.done()
        with pytest.raises(TimeoutError, match=r"not done after 0\.01 s"):
            fut.result(timeout=0.01)
        assert time.monotonic() - t0 < 0.3, "done() and result(timeout) returned before the call ended"
        assert_batches_equal(call_with_deadline(fut.result, 30.0, "a call after a timed-out wait"), ref.step_batch(acts, [s] * 4))
        assert env.stats["lane_batches"] == lanes + 1


@pytest.mark.timeout(120)
def test_another_threads_call_settles_the_call_in_flight() -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.05) as ref, pp.make(SlowEnv, delay=0.05, execution=on_workers(2)) as env:
        s = ref.reset(seed=2)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        acts = np.arange(8) % 2
        fut = env.step_batch_async(acts, [s] * 8)
        other: list[Any] = []
        thread = threading.Thread(target=lambda: other.append(env.step_batch(acts[:2], [s] * 2)))
        thread.start()
        thread.join(30.0)
        assert not thread.is_alive() and other
        assert fut.done(), "the other thread's call waited for it first"
        assert_batches_equal(other[0], ref.step_batch(acts[:2], [s] * 2))
        assert_batches_equal(fut.result(timeout=1.0), ref.step_batch(acts, [s] * 8))


@pytest.mark.timeout(120)
def test_a_call_the_lane_does_not_take_waits_for_the_call_in_flight() -> None:
    """A call with seeds takes the general path: it is sent once the call in flight is settled; both exact."""
    with pp.make("CartPole-v1", backend="inline") as ref, pp.make("CartPole-v1", execution=on_workers(2)) as env:
        s = ref.reset(seed=3)[0]
        env.step_batch(np.zeros(4, dtype=np.int64), [s] * 4)
        acts = np.arange(6) % 2
        fut = env.rollout_batch_async([s] * 6, np.stack([acts] * 4, axis=1))
        lanes = env.stats["lane_batches"]
        seeded = env.step_batch(acts[:3], [s] * 3, seeds=[1, 2, 3])
        assert env.stats["lane_batches"] == lanes + 1, "the call in flight ran in the lane, the seeded one did not"
        assert_batches_equal(seeded, ref.step_batch(acts[:3], [s] * 3, seeds=[1, 2, 3]))
        assert_rollouts_equal(fut.result(timeout=30.0), ref.rollout_batch([s] * 6, np.stack([acts] * 4, axis=1)))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("spec", SPECS, ids=env_name)
def test_an_interrupt_at_every_line_of_a_call_sent_without_waiting_leaves_it_and_the_env_exact(spec: Any) -> None:
    """KeyboardInterrupt at the first event of every line of plan_parallel that sending a call, settling it by its
    ``result`` or by the next call reach: the interrupted future's ``result`` then returns its own data (sent
    again the general way if it was cut short), and two more calls equal the oracle's."""
    rng = np.random.default_rng(7)
    with make_env(spec, backend="inline") as ref, make_env(spec, execution=on_workers(2), max_restarts=1000) as env:
        s = ref.reset(seed=4)[0]
        env.step_batch(np.zeros(4, dtype=np.int64), [s] * 4)
        sent: list[Any] = []

        def case() -> tuple[Any, Any, Any]:
            send, want, same, sync = settled_by(env, ref, s, int(rng.integers(2, 9)), rng)
            by_sync = rng.random() < 0.5

            def call() -> Any:
                fut = send()
                sent.append(fut)
                if by_sync:
                    sync()
                return fut.result()
            return call, want, same

        counter = Interrupt()
        for _ in range(4):
            counter.run(case()[0])
        lines = sorted(counter.open_lines)
        ours = [f for f, _ in lines if f.endswith(os.path.join("batch", "lane_future.py"))]
        assert ours, "settling reached the future's lines"
        seen = []
        for line in lines:
            call, want, same = case()
            sent.clear()
            interrupted, got = InterruptAtLine(line).run(call)
            if interrupted:
                seen.append(line)
            else:
                same(got, want())
            if sent:  # (sent before the interrupt: its own result, whatever was cut short)
                same(call_with_deadline(sent[0].result, 40.0, f"a future after an interrupt at {line}"), want())
            for _ in range(2):
                call, want, same = case()
                same(call_with_deadline(call, 40.0, f"a call after an interrupt at {line}"), want())
        modules = tuple(os.path.join("batch", m) for m in ("lane.py", "lane_call.py", "lane_future.py"))
        lanes = [n for f, n in seen if f.endswith(modules)]
        assert len(lanes) >= 30, f"{len(lanes)} lines of the lane interrupted a call"
        assert env.stats["restarts"] == 0, "interrupts are not deaths"


@pytest.mark.timeout(120)
def test_a_worker_killed_during_a_call_in_flight_is_replaced_and_its_result_is_exact() -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.1) as ref, pp.make(SlowEnv, delay=0.1, execution=on_workers(2)) as env:
        s = ref.reset(seed=5)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        acts = np.arange(8) % 2
        lanes = env.stats["lane_batches"]
        fut = env.step_batch_async(acts, [s] * 8)  # 4 items a worker: 0.4 s
        victim = env.pids[0]
        os.kill(victim, signal.SIGKILL)
        assert_batches_equal(call_with_deadline(fut.result, 30.0, "a call a worker died in"), ref.step_batch(acts, [s] * 8))
        assert env.stats["restarts"] == 1 and env.pids[0] != victim
        assert env.stats["lane_batches"] == lanes + 1


@pytest.mark.timeout(120)
def test_a_call_in_flight_past_its_timeout_fails_and_the_next_call_is_exact() -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.02) as ref, \
            pp.make(SlowEnv, delay=0.02, timeout=0.5, execution=on_workers(2)) as env:
        s = ref.reset(seed=6)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        fut = env.step_batch_async(np.zeros(200, dtype=np.int64), [s] * 200, dt=1)  # 100 items of 20 ms a worker
        with pytest.raises(WorkerTimeoutError, match=r"did not finish step_batch \(100 items\) within 0.5 s"):
            call_with_deadline(fut.result, 30.0, "a call past its timeout")
        with pytest.raises(WorkerTimeoutError):  # kept: asked again, the same error
            fut.result()
        acts = np.array([1, 0, 1])
        assert_batches_equal(env.step_batch(acts, [s] * 3), ref.step_batch(acts, [s] * 3))


@pytest.mark.timeout(120)
def test_an_env_error_in_a_call_in_flight_is_raised_by_its_result_as_inline() -> None:
    with pp.make(SlowOrRaisingEnv, backend="inline", delay=0.01) as ref, \
            pp.make(SlowOrRaisingEnv, delay=0.01, execution=on_workers(2)) as env:
        s = ref.reset(seed=7)[0]
        env.step_batch(np.zeros(4, dtype=np.int64), [s] * 4)
        acts = np.array([0, 1, 2, 0, 2, 1])
        fut = env.step_batch_async(acts, [s] * 6)
        with pytest.raises(ValueError, match="action 2 is not allowed here") as got:
            fut.result(timeout=30.0)
        with pytest.raises(ValueError) as want:
            ref.step_batch(acts, [s] * 6)
        assert failed_item(got.value) == failed_item(want.value) == 2
        assert_batches_equal(env.step_batch(acts[:2], [s] * 2), ref.step_batch(acts[:2], [s] * 2))


@pytest.mark.timeout(120)
def test_a_cancelled_call_in_flight_replaces_its_workers_and_the_env_stays_exact() -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.1) as ref, pp.make(SlowEnv, delay=0.1, execution=on_workers(2)) as env:
        s = ref.reset(seed=8)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        fut = env.step_batch_async(np.zeros(40, dtype=np.int64), [s] * 40)  # 2 s a worker
        t0 = time.monotonic()
        fut.cancel()
        with pytest.raises(RuntimeError, match="cancelled"):
            fut.result()
        acts = np.array([1, 0])
        assert_batches_equal(call_with_deadline(lambda: env.step_batch(acts, [s] * 2), 30.0, "a call after a cancel"),
                             ref.step_batch(acts, [s] * 2))
        assert time.monotonic() - t0 < 1.5, "the next call did not wait for the cancelled one"
        assert env.stats["interrupted"] == 2 and env.stats["restarts"] == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("closer", ["another thread, during result", "this thread, before result"])
def test_a_close_with_a_call_in_flight_fails_it_with_closed_error(closer: str) -> None:
    with pp.make(SlowEnv, backend="inline", delay=0.1) as ref:
        env = pp.make(SlowEnv, delay=0.1, execution=on_workers(2))
        s = ref.reset(seed=9)[0]
        env.step_batch(np.zeros(2, dtype=np.int64), [s] * 2)
        pids = set(env.pids)
        fut = env.step_batch_async(np.zeros(40, dtype=np.int64), [s] * 40)  # 2 s a worker
        if closer.startswith("another"):
            threading.Timer(0.05, env.close).start()  # (the close wakes the wait in result)
        else:
            env.close()
        with pytest.raises(ClosedError):
            call_with_deadline(fut.result, 30.0, "a call its env was closed under")
        env.close()
        assert not pids & {pid for pid, _ in live_children()}


@pytest.mark.timeout(120)
def test_results_that_do_not_fit_the_columns_are_sent_again_the_general_way() -> None:
    """OffDtypeEnv returns float64 observations for its float32 box: they do not fit the lane's column, so the
    call in flight is sent again the general way (as a call waited for is), and its result is inline's."""
    with pp.make(OffDtypeEnv, backend="inline") as ref, pp.make(OffDtypeEnv, execution=on_workers(2)) as env:
        s = ref.reset(seed=1)[0]
        env.step_batch(np.zeros(4, dtype=np.int64), [s] * 4)
        acts = np.array([0, 1, 0, 1])
        fut = env.step_batch_async(acts, [s] * 4)
        assert_batches_equal(call_with_deadline(fut.result, 30.0, "a call sent again"), ref.step_batch(acts, [s] * 4))
        assert env.stats["lane_batches"] == 0 and env.stats["batches"] == 2, "the first call and the one sent again"


@pytest.mark.timeout(120)
def test_overlapped_planner_groups_send_their_rollouts_in_the_lane() -> None:
    """``planner.overlap = 2`` (the rollouts of one group of roots run while this process advances the other's):
    the calls take the lane, and the decisions are those of ``overlap = 1``."""
    from plan_parallel.planners.presets import make_planner

    with pp.make("CartPole-v1", backend="inline") as ref, pp.make("CartPole-v1", execution=on_workers(2)) as env:
        states = [ref.reset(seed=k)[0] for k in range(4)]
        decided = []
        for overlap in (1, 2):
            planner = make_planner("mcts", "CartPole-v1", seed=0, budget=16, leaves_per_batch=4)
            planner.overlap = overlap
            lanes = env.stats["lane_batches"]
            decided.append(planner.plan_many(env, states))
            assert env.stats["lane_batches"] > lanes
        assert decided[0] == decided[1]
