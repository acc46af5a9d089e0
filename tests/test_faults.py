"""The fault table of the process backend: what every failure of env code or of a worker looks like.

Faults come from ``tests.envs.FaultyEnv`` (raise, exit, SIGKILL, segfault,
hang, unpicklable results), triggered in a phase (step, reset, get_state,
set_state) by the action 2 or the seed 7. With ``once_file`` a fault fires once
across all processes, so a replayed chunk succeeds. Envs run with
``small_batch_inline=False``: every call goes to a worker, never into pytest.

The oracle is an inline ``FaultyEnv(fault="none")``: a replayed batch must give
exactly what it gives.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

import plan_parallel as pp
from plan_parallel.errors import ClosedError, RemoteError, WorkerCrashedError, WorkerTimeoutError
from tests.deadline import call_with_deadline
from tests.envs import CounterEnv, FaultyEnv
from tests.envs_faults import HangsOnceMarkedEnv, SlowBuildEnv, SlowOrRaisingEnv
from tests.helpers import assert_batches_equal, assert_fails_as_inline, assert_tree_equal

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")

ROOT = Path(__file__).resolve().parents[1]
ACTS6 = np.array([0, 1, 0, 1, 2, 1])  # the trigger action 2 is item 4: chunk [3, 6), on either worker (feed_order)
ACTS4 = np.array([0, 1, 0, 1])  # no trigger
TIMEOUT = 1.0
DEADLINE_SLACK = 1.5  # a hung call fails within TIMEOUT + this (a behavioural deadline, not a speed test)


# =========================================================================== helpers
def faulty(fault: str, phase: str, tmp_path: Path | None = None, **options: Any) -> pp.PlanEnv:
    """A process env of FaultyEnv (once_file in tmp_path when given)."""
    kw: dict[str, Any] = dict(fault=fault, phase=phase, trigger_action=2, trigger_seed=7, horizon=100)
    if tmp_path is not None:
        kw["once_file"] = str(tmp_path / "fired")
    options.setdefault("n_workers", 2)
    return pp.make(FaultyEnv, backend="process", small_batch_inline=False, **options, **kw)


@pytest.fixture
def oracle() -> Iterator[pp.PlanEnv]:
    with pp.make(FaultyEnv, backend="inline", fault="none", horizon=100) as env:
        yield env


def start(env: Any, oracle: pp.PlanEnv) -> tuple[Any, Any]:
    """Reset both with seed 0; returns (s0, s_trig): a state whose restore or capture triggers the faults."""
    s0 = env.reset(seed=0)[0]
    assert s0 == oracle.reset(seed=0)[0]
    s_trig = oracle.step(2, state=s0)[0]  # last action 2
    oracle.set_state(s0)
    return s0, s_trig


def run_via(env: Any, via: str, s0: Any, s_trig: Any) -> Any:
    """Reach the fault's phase through one public call."""
    if via == "step_batch":
        return env.step_batch(ACTS6, states=[s0] * 6, dt=1)
    if via == "step":
        return env.step(2, state=s0)
    if via == "reset":
        return env.reset(seed=7)
    if via == "sync_states":  # eager: every worker restores s_trig now
        call_with_deadline(lambda: env.sync_states(s_trig), 3.0, "sync_states")
        return env.step_batch(ACTS4)
    if via == "set_state":  # lazy: restored when a batch starts from it
        env.set_state(s_trig)
        return env.step_batch(ACTS4)
    if via == "item-state":  # restored as item 2 of a batch
        return env.step_batch(ACTS4, states=[s0, s0, s_trig, s0])
    raise AssertionError(via)


def assert_same_result(got: Any, ref: Any) -> None:
    if isinstance(ref, pp.StepBatch):
        assert_batches_equal(got, ref)
        return
    assert isinstance(got, tuple) and len(got) == len(ref)
    assert got[0] == ref[0]
    assert_tree_equal(np.asarray(got[1]), np.asarray(ref[1]))
    for a, b in zip(got[2:], ref[2:]):
        assert_tree_equal(a, b, "result")


def assert_usable(env: Any, oracle: pp.PlanEnv, s0: Any) -> None:
    """The env still gives exactly the oracle's results, from explicit states and from the current state."""
    s1 = oracle.step(1, state=s0, dt=3)[0]
    oracle.set_state(s0)
    assert_batches_equal(env.step_batch(ACTS4, states=[s0, s1, s1, s0], dt=[1, 2, 3, 4]),
                         oracle.step_batch(ACTS4, states=[s0, s1, s1, s0], dt=[1, 2, 3, 4]))
    env.set_state(s1)
    oracle.set_state(s1)
    assert_batches_equal(env.step_batch(ACTS4, dt=2), oracle.step_batch(ACTS4, dt=2))
    assert env.get_state() == s1


def shm_segments(pid: int) -> set[str]:
    """The shared-memory slabs created by process ``pid`` (named ``pp_<pid>_*`` by plan_parallel.transport)."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"pp_{pid}_")}


def wait_dead(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` is gone or a zombie (never reaps it: that is multiprocessing's job)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} still alive after {timeout} s")


# =========================================================================== the table
@dataclass(frozen=True)
class Row:
    fault: str
    phase: str
    via: str  # the public call that reaches the phase (see run_via)
    outcome: str  # "raises" | "replayed" | "crashed" | "timeout"
    exc: type | None = None
    message: str = ""  # regex on str(exception)
    note: str = ""  # regex on the exception's notes; group 1 is the worker's pid
    tb: str = r"in _fire"  # regex on the remote traceback
    once: bool = True  # the fault fires once (a replay succeeds); "crashed" rows never use it

    @property
    def id(self) -> str:
        return f"{self.fault}-{self.phase}-via-{self.via}-{self.outcome}"


TABLE = [
    # ---- env code raises: same type in the caller, remote traceback as __cause__, a note naming worker (and item).
    # Which worker runs a chunk depends on the core the calling thread runs on (feed_order): rows name either.
    Row("raise", "step", "step_batch", "raises", ValueError, r"injected fault in step",
        r"raised in worker [01] \(pid (\d+)\) during step_batch, at item 4 of the batch"),
    Row("raise", "step", "step", "raises", ValueError, r"injected fault in step",
        r"raised in worker [01] \(pid (\d+)\) during step_batch, at item 0 of the batch"),
    Row("raise", "reset", "reset", "raises", ValueError, r"injected fault in reset",
        r"raised in worker 0 \(pid (\d+)\) during reset$"),
    Row("raise", "set_state", "sync_states", "raises", ValueError, r"injected fault in set_state",
        r"raised in worker [01] \(pid (\d+)\) during set_state$"),
    Row("raise", "set_state", "item-state", "raises", ValueError, r"injected fault in set_state",
        r"raised in worker [01] \(pid (\d+)\) during step_batch, at item 2 of the batch"),
    Row("raise", "get_state", "step_batch", "raises", ValueError, r"injected fault in get_state",
        r"raised in worker [01] \(pid (\d+)\) during step_batch, at item 4 of the batch"),
    Row("raise_unpicklable", "step", "step_batch", "raises", RemoteError,
        r"tests\.envs\.UnpicklableError: FaultyEnv: injected unpicklable fault in step",
        r"raised in worker [01] \(pid (\d+)\) during step_batch, at item 4 of the batch"),
    # ---- a result that cannot travel back (inline has no pickling: this row is process-only)
    Row("unpicklable", "step", "step_batch", "raises", TypeError, r"pickle",
        r"raised in worker [01] \(pid (\d+)\) during step_batch", tb=r"pickle"),
    # (every time: a state of another form than the lane's rows runs the call again on the general path, where it
    # fails to pickle; a fault fired once would not fire in that run)
    Row("unpicklable", "get_state", "step_batch", "raises", TypeError, r"pickle",
        r"raised in worker [01] \(pid (\d+)\) during step_batch", tb=r"pickle", once=False),
    # ---- the worker dies once: replaced, its chunk replayed, results bit-identical
    Row("exit", "step", "step_batch", "replayed"),
    Row("sigkill", "step", "step_batch", "replayed"),
    Row("segfault", "step", "step_batch", "replayed"),
    Row("sigkill", "step", "step", "replayed"),
    Row("sigkill", "reset", "reset", "replayed"),
    Row("segfault", "reset", "reset", "replayed"),
    Row("exit", "get_state", "step_batch", "replayed"),
    Row("sigkill", "set_state", "item-state", "replayed"),
    Row("segfault", "set_state", "set_state", "replayed"),
    Row("sigkill", "set_state", "sync_states", "replayed"),
    # ---- the worker dies every time: past max_restarts (1), WorkerCrashedError names worker, pid, exit
    Row("sigkill", "step", "step_batch", "crashed", WorkerCrashedError,
        r"worker [01] \(pid (\d+)\) died with signal SIGKILL.*; 1 restarts used of 1"),
    Row("exit", "step", "step_batch", "crashed", WorkerCrashedError,
        r"worker [01] \(pid (\d+)\) died with exit code 3.*; 1 restarts used of 1"),
    Row("segfault", "step", "step_batch", "crashed", WorkerCrashedError,
        r"worker [01] \(pid (\d+)\) died with signal SIGSEGV.*; 1 restarts used of 1"),
    Row("sigkill", "reset", "reset", "crashed", WorkerCrashedError,
        r"worker 0 \(pid (\d+)\) died with signal SIGKILL.*; 1 restarts used of 1"),
    # ---- the worker hangs: WorkerTimeoutError after `timeout`, the worker replaced, the env usable
    Row("hang", "step", "step_batch", "timeout", WorkerTimeoutError,
        rf"worker [01] \(pid (\d+)\) did not finish step_batch \([36] items\) within {TIMEOUT} s"),
    Row("hang", "reset", "reset", "timeout", WorkerTimeoutError,
        rf"worker 0 \(pid (\d+)\) did not finish reset within {TIMEOUT} s"),
    Row("hang", "get_state", "step_batch", "timeout", WorkerTimeoutError,
        rf"worker [01] \(pid (\d+)\) did not finish step_batch \([36] items\) within {TIMEOUT} s"),
    Row("hang", "set_state", "sync_states", "timeout", WorkerTimeoutError,
        rf"worker [01] \(pid (\d+)\) did not finish set_state within {TIMEOUT} s"),
    Row("hang", "set_state", "item-state", "timeout", WorkerTimeoutError,
        rf"worker [01] \(pid (\d+)\) did not finish step_batch \([12] items\) within {TIMEOUT} s"),
    # ---- set_state is lazy on the process backend: its failure must still reach the caller
    pytest.param(Row("raise", "set_state", "set_state", "raises", ValueError, r"injected fault in set_state",
                     r"raised in worker [01] \(pid (\d+)\) during set_state", once=False)),
    pytest.param(Row("hang", "set_state", "set_state", "timeout", WorkerTimeoutError,
                     rf"worker [01] \(pid (\d+)\) did not finish set_state within {TIMEOUT} s", once=False)),
]


def _row_id(row: Any) -> str:
    return row.id if isinstance(row, Row) else str(row)


# The two ways a call reaches the workers: the lane (a step or rollout call of states the workers made: a reset's,
# a result's) and the general path's chunks; the lane sends a chunk of >= 4 items (6 items: one chunk of 6), the
# general path one a worker (3 each).
PATHS = {"lane": {}, "general": {"execution": pp.ExecutionPolicy(lane=False)}}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("row", TABLE, ids=_row_id)
def test_fault_table(row: Row, path: str, tmp_path: Path, oracle: pp.PlanEnv) -> None:
    options: dict[str, Any] = dict(PATHS[path])
    if row.outcome == "crashed":
        options["max_restarts"] = 1
    if row.outcome == "timeout":
        options["timeout"] = TIMEOUT
    once = tmp_path if row.once and row.outcome != "crashed" else None
    with faulty(row.fault, row.phase, once, **options) as env:
        check_row(row, env, oracle, tmp_path, run_via, DEADLINE_SLACK)


def check_row(row: Row, env: Any, oracle: pp.PlanEnv, tmp_path: Path, run: Callable[..., Any],
              slack: float) -> None:
    """Run ``row`` on ``env`` (made by ``faulty``) via ``run`` and check its outcome; shared by the Ray table."""
    s0, s_trig = start(env, oracle)
    pids = list(env.pids)

    if row.outcome == "raises":
        with pytest.raises(row.exc, match=row.message) as info:
            run(env, row.via, s0, s_trig)
        exc = info.value
        assert type(exc) is row.exc
        assert isinstance(exc.__cause__, pp.RemoteTraceback)
        tb = exc.__cause__.tb
        assert "Traceback (most recent call last)" in tb and re.search(row.tb, tb), tb
        notes = "\n".join(getattr(exc, "__notes__", []))
        m = re.search(row.note, notes, re.MULTILINE)
        assert m, f"no note matching {row.note!r} in {notes!r}"
        assert int(m.group(1)) in pids
        named = re.search(r"worker (\d) \(pid (\d+)\)", notes)
        assert named and pids[int(named.group(1))] == int(named.group(2)), notes  # the named worker has that pid
        assert env.stats["restarts"] == 0 and env.pids == pids  # env errors kill nothing
        assert_usable(env, oracle, s0)

    elif row.outcome == "replayed":
        got = run(env, row.via, s0, s_trig)
        ref = run(oracle, row.via, s0, s_trig)
        assert_same_result(got, ref)
        assert env.stats["restarts"] == 1
        assert sum(a != b for a, b in zip(env.pids, pids)) == 1  # one worker was replaced
        assert (tmp_path / "fired").exists()  # the fault did fire
        assert_usable(env, oracle, s0)

    elif row.outcome == "crashed":
        with pytest.raises(WorkerCrashedError, match=row.message) as info:
            run(env, row.via, s0, s_trig)
        named = re.search(row.message, str(info.value)).group(1)
        if named is not None:  # a Ray actor that died before saying it was ready is named without a pid
            wait_dead(int(named), 5.0)  # the pid named is the dead one
        # Broken for good, and says so on every call, until closed.
        with pytest.raises(WorkerCrashedError, match=r"restarts used of 1"):
            env.step_batch(ACTS4, states=[s0] * 4)
        with pytest.raises(WorkerCrashedError):
            env.reset(seed=0)

    elif row.outcome == "timeout":
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match=row.message) as info:
            run(env, row.via, s0, s_trig)
        elapsed = time.monotonic() - t0
        assert isinstance(info.value, TimeoutError)
        assert elapsed < TIMEOUT + slack, f"WorkerTimeoutError after {elapsed:.2f} s"
        # Every worker still running past the deadline is hung and replaced: one, or
        # every worker the call went to when the fault fires each time (once=False).
        hung = env.stats["timeouts"]
        assert (hung == 1 if row.once else 1 <= hung <= env.n_workers) and env.stats["restarts"] == hung
        assert_usable(env, oracle, s0)
    else:
        raise AssertionError(row.outcome)


# =========================================================================== faults while building the env
def test_env_raises_while_building(oracle: pp.PlanEnv) -> None:
    with pytest.raises(ValueError, match=r"injected fault in init") as info:
        faulty("raise", "init")
    assert isinstance(info.value.__cause__, pp.RemoteTraceback)
    assert re.search(r"worker \d \(pid \d+\) building the env", "\n".join(info.value.__notes__))



@pytest.mark.timeout(60)
def test_worker_dies_while_building() -> None:
    t0 = time.monotonic()
    with pytest.raises(WorkerCrashedError, match=r"worker \d \(pid \d+\) died with exit code 3 while building"):
        call_with_deadline(lambda: faulty("exit", "init"), 5.0, "make() with a worker that exits at init")
    assert time.monotonic() - t0 < 5.0


# =========================================================================== held states after a respawn
def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_dead(pid)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("killed", [[0], [1], [0, 1]], ids=["worker0", "worker1", "both"])
def test_respawned_worker_gets_the_current_state_back(killed: list[int], oracle: pp.PlanEnv) -> None:
    """set_state + a batch leave every worker holding the state; after a SIGKILL from outside, the
    replacement must start from it too (step_batch with states=None)."""
    with faulty("none", "step") as env:
        s0, _ = start(env, oracle)
        target = oracle.step(1, state=s0, dt=5)[0]
        env.set_state(target)
        oracle.set_state(target)
        acts = np.array([0, 1, 2, 1, 0, 2])
        assert_batches_equal(env.step_batch(acts), oracle.step_batch(acts))  # now every worker holds target
        pids = list(env.pids)
        for i in killed:
            _kill(pids[i])
        for dt in (1, 3):
            assert_batches_equal(env.step_batch(acts, dt=dt), oracle.step_batch(acts, dt=dt))
        assert env.stats["restarts"] == len(killed)
        assert [p != q for p, q in zip(env.pids, pids)] == [i in killed for i in range(2)]
        assert env.get_state() == target


@pytest.mark.timeout(60)
def test_respawned_worker_gets_the_synced_state_back(oracle: pp.PlanEnv) -> None:
    with faulty("none", "step") as env:
        s0, _ = start(env, oracle)
        target = oracle.step(2, state=s0, dt=4)[0]
        call_with_deadline(lambda: env.sync_states(target), 3.0, "sync_states")
        oracle.sync_states(target)
        _kill(env.pids[1])
        acts = np.array([0, 1, 2, 1, 0, 2])
        assert_batches_equal(env.step_batch(acts), oracle.step_batch(acts))
        assert env.stats["restarts"] == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", list(PATHS))
def test_a_call_waiting_for_a_replacement_gets_its_whole_timeout(path: str) -> None:
    """A chunk written to a worker still building its env starts its timeout when the env is built:
    a replacement slower to build than ``timeout`` must not time out the call waiting for it."""
    with pp.make(SlowBuildEnv, backend="inline") as oracle, \
            pp.make(SlowBuildEnv, n_workers=2, timeout=1.0, small_batch_inline=False, build_delay=1.5,
                    first_step_delay=0.6, **PATHS[path]) as env:
        s0 = env.reset(seed=0)[0]
        assert oracle.reset(seed=0)[0] == s0
        _kill(env.pids[1])
        acts = np.array([0, 1, 2, 1, 0, 1, 2, 1])  # (two chunks on either path: one for each worker)
        got = call_with_deadline(lambda: env.step_batch(acts, states=[s0] * 8), 20.0, "step_batch")
        assert_batches_equal(got, oracle.step_batch(acts, states=[s0] * 8))
        assert env.stats["restarts"] == 1 and env.stats["timeouts"] == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", list(PATHS))
def test_a_replacement_that_cannot_start_fails_the_waiting_call_within_its_timeout(path: str, tmp_path: Path) -> None:
    """Issue 51: the call waiting for a replacement that never builds its env fails after the env's timeout
    (or twice the first build's time, if longer), not after the 120 s a first start may take (a lane call too:
    it waited the 120 s until session 59)."""
    marker = tmp_path / "hang"
    with pp.make(HangsOnceMarkedEnv, n_workers=2, timeout=1.0, small_batch_inline=False, marker=str(marker),
                 **PATHS[path]) as env:
        s0 = env.reset(seed=0)[0]
        marker.touch()
        _kill(env.pids[1])
        started = time.monotonic()
        with pytest.raises(pp.WorkerTimeoutError, match=r"worker 1 .*did not build its env within 1 s"):
            call_with_deadline(lambda: env.step_batch(np.zeros(8, dtype=np.int64), states=[s0] * 8), 30.0)
        assert time.monotonic() - started < 10


@pytest.mark.timeout(60)
def test_worker_dies_inside_a_batch_from_the_current_state(tmp_path: Path, oracle: pp.PlanEnv) -> None:
    """SIGKILL inside step while running from the current state: the replay restores that state first."""
    with faulty("sigkill", "step", tmp_path) as env:
        s0, _ = start(env, oracle)
        target = oracle.step(1, state=s0, dt=3)[0]
        env.set_state(target)
        oracle.set_state(target)
        assert_batches_equal(env.step_batch(ACTS4), oracle.step_batch(ACTS4))  # workers hold target
        assert_batches_equal(env.step_batch(ACTS6, dt=2), oracle.step_batch(ACTS6, dt=2))  # item 4 kills
        assert env.stats["restarts"] == 1



@pytest.mark.timeout(60)
def test_failed_set_state_is_never_silently_ignored(oracle: pp.PlanEnv) -> None:
    with faulty("raise", "set_state") as env:
        s0, s_trig = start(env, oracle)
        env.set_state(s0)
        env.step_batch(ACTS4)  # every worker now holds s0
        with pytest.raises(ValueError, match=r"injected fault in set_state"):  # inline raises here ...
            env.set_state(s_trig)
            got = env.step_batch(ACTS4)  # ... the process backend may raise here, but must not return
            wrong = oracle.step_batch(ACTS4, states=[s0] * 4)
            assert_batches_equal(got, wrong)  # it returns what s0 gives: no error, wrong results
            raise AssertionError("no error, and the results are those of the previous state s0")


# =========================================================================== past max_restarts, with batches in flight

@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", list(PATHS))
def test_crash_message_names_what_was_in_flight(path: str, oracle: pp.PlanEnv) -> None:
    with faulty("sigkill", "step", max_restarts=0, **PATHS[path]) as env:
        s0, _ = start(env, oracle)
        with pytest.raises(WorkerCrashedError, match=r"worker [01] \(pid \d+\) died with signal SIGKILL "
                                                     r"during step_batch \([36] items\); 0 restarts used of 0"):
            env.step_batch(ACTS6, states=[s0] * 6)


@pytest.mark.timeout(60)
def test_crash_fails_every_future_in_flight(oracle: pp.PlanEnv) -> None:
    with faulty("sigkill", "step", n_workers=1, max_restarts=0) as env:
        s0, _ = start(env, oracle)
        first = env.step_batch_async(ACTS6, states=[s0] * 6)
        second = env.step_batch_async(ACTS4, states=[s0] * 4)
        with pytest.raises(WorkerCrashedError):
            first.result(timeout=20)
        with pytest.raises(WorkerCrashedError):
            second.result(timeout=3)  # TimeoutError "still running" today


# =========================================================================== closing
@pytest.mark.timeout(60)
def test_close_with_a_hung_batch_in_flight(oracle: pp.PlanEnv) -> None:
    env = faulty("hang", "step")
    s0, _ = start(env, oracle)
    fut = env.step_batch_async(ACTS6, states=[s0] * 6)  # the worker of chunk [3, 6) gets stuck in step (item 4)
    queued = env.step_batch_async(ACTS4, states=[s0] * 4)  # half of it queued behind the hung chunk
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.3)
    t0 = time.monotonic()
    env.close()
    assert time.monotonic() - t0 < 3.0, "close() must not wait for a hung worker"
    env.close()  # idempotent
    for f in (fut, queued):
        with pytest.raises(ClosedError, match="closed while this batch was in flight"):
            f.result(timeout=5)
        assert f.done()
    for call in (
        lambda: env.reset(seed=0),
        lambda: env.step(0),
        lambda: env.step_batch(ACTS4, states=[s0] * 4),
        lambda: env.step_batch_async(ACTS4, states=[s0] * 4),
        lambda: env.step_batch(ACTS4),
        lambda: env.get_state(),
        lambda: env.set_state(s0),
        lambda: env.sync_states(s0),
    ):
        with pytest.raises(ClosedError, match="closed"):
            call()


@pytest.mark.timeout(60)
def test_close_a_broken_env() -> None:
    env = faulty("exit", "step", max_restarts=0)
    s0 = env.reset(seed=0)[0]
    with pytest.raises(WorkerCrashedError, match=r"died with exit code 3"):
        env.step_batch(ACTS6, states=[s0] * 6)
    t0 = time.monotonic()
    env.close()
    env.close()
    assert time.monotonic() - t0 < 3.0
    with pytest.raises(ClosedError):
        env.step_batch(ACTS4, states=[s0] * 4)


# =========================================================================== the parent dies
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import plan_parallel as pp
    from tests.envs import CounterEnv

    env = pp.make(CounterEnv, n_workers=2, small_batch_inline=False, context=sys.argv[1], horizon=100)
    env.reset(seed=0)
    env.step_batch(np.zeros(16, dtype=np.int64), dt=2)
    fut = env.step_batch_async(np.ones(16, dtype=np.int64), dt=3)
    print(" ".join(str(p) for p in env.pids), flush=True)
    time.sleep(600)
    """
)


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"the child printed {buf!r} and then nothing (exit code {proc.poll()})")
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                continue
            buf += chunk
    return buf.decode()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("context", ["forkserver", "fork", "spawn"])
def test_parent_killed_leaves_no_orphans_nor_slabs(context: str, tmp_path: Path) -> None:
    stderr = open(tmp_path / "stderr", "wb")
    # TMPDIR: multiprocessing's forkserver makes a socket directory there that only a parent that exits removes
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp_path)}
    family: list[int] = []
    proc = subprocess.Popen([sys.executable, "-c", CHILD, context], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=stderr)
    try:
        workers = [int(p) for p in _read_line(proc, 60).split()]
        family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert set(workers) <= set(family), (workers, family)  # forkserver / resource tracker included
        assert shm_segments(proc.pid), "the child should hold shared-memory slabs"
    finally:
        proc.kill()
        proc.wait(10)
        stderr.close()
    deadline = time.monotonic() + 10.0
    while True:
        alive = []
        for pid in family:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        slabs = shm_segments(proc.pid)
        if not alive and not slabs:
            break
        if time.monotonic() > deadline:
            for pid in alive:  # do not leave them to the next test
                try:
                    psutil.Process(pid).kill()
                except psutil.NoSuchProcess:
                    pass
            raise AssertionError(
                f"10 s after the parent was killed: processes {alive} (workers {workers}) still alive, "
                f"slabs {sorted(slabs)} still in /dev/shm; child stderr:\n{(tmp_path / 'stderr').read_text()[-2000:]}"
            )
        time.sleep(0.1)


@pytest.mark.timeout(120)
def test_of_two_workers_errors_the_earlier_items_is_raised_though_it_comes_later() -> None:
    """Items 1 and 3 of 4 raise, on two workers; item 0 first sleeps 0.3 s, so item 3's error comes first."""
    actions = np.array([1, 2, 0, 2])
    with pp.make(SlowOrRaisingEnv, backend="inline") as ref, \
            pp.make(SlowOrRaisingEnv, n_workers=2, small_batch_inline=False) as env:
        s = ref.reset(seed=0)[0]
        assert_fails_as_inline(lambda: ref.step_batch(actions, [s] * 4), lambda: env.step_batch(actions, [s] * 4), 1)


# =========================================================================== the parent exits, the env never freed
EXIT_CHILD = textwrap.dedent(
    """
    import sys, threading
    import numpy as np
    import plan_parallel as pp
    from tests.envs import CounterEnv

    env = pp.make(CounterEnv, n_workers=2, small_batch_inline=False, horizon=100)
    s0 = env.reset(seed=0)[0]
    env.step_batch(np.zeros(16, dtype=np.int64), [s0] * 16)
    if sys.argv[1] == "daemon thread":  # a thread still refers to the env when the interpreter exits
        threading.Thread(target=lambda kept=env: threading.Event().wait(60), daemon=True).start()
    else:  # what an uncaught exception leaves behind, its frames holding the env
        try:
            raise RuntimeError("kept")
        except RuntimeError as e:
            e.env = env
            sys.last_exc = e
    print(" ".join(str(p) for p in env.pids), flush=True)
    """
)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("holder", ["daemon thread", "sys.last_exc"])
def test_an_env_alive_at_exit_is_closed_then(holder: str, tmp_path: Path) -> None:
    """Not freed before the interpreter is torn down, the env is closed by the exit hook: its slabs are
    unlinked by it (multiprocessing's resource tracker would warn of them) and its workers stop."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", EXIT_CHILD, holder], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "leaked shared_memory" not in r.stderr, r.stderr[-2000:]
    workers = [int(p) for p in r.stdout.split()]
    deadline = time.monotonic() + 10.0
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in workers):
        assert time.monotonic() < deadline, f"workers {workers} outlived their parent by 10 s"
        time.sleep(0.1)


FORK_CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import plan_parallel as pp
    from tests.envs import CounterEnv

    env = pp.make(CounterEnv, n_workers=2, small_batch_inline=False, horizon=100)
    s0 = env.reset(seed=0)[0]
    env.step_batch(np.zeros(8, dtype=np.int64), [s0] * 8)
    for _ in range(2):  # children of os.fork that exit normally: atexit and garbage collection run in them
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
    got = env.step_batch(np.ones(8, dtype=np.int64), [s0] * 8, dt=3)
    print(env.stats["restarts"], " ".join(str(s.key().hex()) for s in got.states), flush=True)
    env.close()
    """
)


@pytest.mark.timeout(90)
def test_a_forked_child_that_exits_leaves_the_parents_workers_alone() -> None:
    """A child of ``os.fork`` inherits the env and multiprocessing's list of children: exiting, it must
    neither close the env's pool nor let multiprocessing terminate the workers (the parent would replace
    them, two forks using up two of its three restarts)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", FORK_CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "died" not in r.stderr and "can only join" not in r.stderr, r.stderr[-2000:]
    restarts, *keys = r.stdout.split()
    assert restarts == "0"
    with pp.make(CounterEnv, backend="inline", horizon=100) as inline:
        s0 = inline.reset(seed=0)[0]
        want = inline.step_batch(np.ones(8, dtype=np.int64), [s0] * 8, dt=3)
    assert keys == [s.key().hex() for s in want.states]
