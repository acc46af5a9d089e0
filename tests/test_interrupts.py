"""Never the wrong data, never hang, never leak: interruptions, threads, kills and a dead parent.

The invariant (DESIGN.md, 2 and 3): a ``KeyboardInterrupt`` at any point of a
call leaves each worker finished or killed and replaced, the shared memory
accounted for and the env usable; every later call returns its own exact
result (equal to the inline oracle) or a clear error, never another call's.

* **The interruption table** raises ``KeyboardInterrupt`` from a ``sys.settrace``
  hook at sampled lines of plan_parallel's own code during each public call
  (and with a dead worker to replace), then checks the next calls against the
  oracle. The same table runs under ``python -O`` in a subprocess (assertions off).
  ``PP_INTERRUPT_POINTS=N`` samples N line events per call (24 by default);
  ``PP_INTERRUPT_EVERY_LINE=1`` hits the first event of every distinct line instead (~25 min here).
* **close()** interrupted at sampled lines, then called again, frees every worker and slab.
* **Threads**: several threads calling one env; ``close()`` from another thread.
* **Parent death**: a parent SIGKILLed while its workers are idle, busy or inside a hung env call leaves nothing.
* **Soak**: batches under random worker kills; **memory**: thousands of small calls, flat RSS, fds, slabs.
"""
from __future__ import annotations

import inspect
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

import plan_parallel as pp
from plan_parallel.batch import BatchEnv, BatchFuture, Tuner
from plan_parallel.errors import ClosedError, WorkerTimeoutError
from plan_parallel.factory import EnvFactory
from tests.conftest_leaks import live_children, shm_segments
from tests.deadline import call_with_deadline
from tests.envs import CounterEnv, FaultyEnv
from tests.envs_faults import SlowEnv
from tests.helpers import assert_batches_equal

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks", "ctrl_c_raises")


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt during the test, as in Python started from a terminal.

    A test run started with SIGINT ignored (a background job of a shell without
    job control, as some CI runners start it) would otherwise keep it ignored.
    """
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "plan_parallel")
POINTS = int(os.environ.get("PP_INTERRUPT_POINTS", "24"))  # sampled lines per call
# PP_INTERRUPT_EVERY_LINE=1: instead, interrupt at the first event of every distinct source line the call reaches
EVERY_LINE = os.environ.get("PP_INTERRUPT_EVERY_LINE") == "1"
SEED = int(os.environ.get("PP_INTERRUPT_SEED", "0"))  # another seed, another sample of inputs and kills


# =========================================================================== the injector
class Interrupt:
    """Raise ``KeyboardInterrupt`` at the ``at``-th line event inside plan_parallel's code (0: only count),
    or the first one after it where SIGINT is not held back."""

    def __init__(self, at: int = 0) -> None:
        self.at = at
        self.lines = 0
        self.first_events: dict[tuple[str, int], int] = {}  # (file, line) -> its first line event
        self.open_lines: set[tuple[str, int]] = set()  # the lines reached where SIGINT was not held back
        self.fired = False

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not self.fired:
            self.lines += 1
            line = (frame.f_code.co_filename, frame.f_lineno)
            self.first_events.setdefault(line, self.lines)
            # Only where a real Ctrl-C can land: not while plan_parallel holds SIGINT back.
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self.open_lines.add(line)
                if self.lines >= self.at > 0:
                    self.fired = True
                    raise KeyboardInterrupt(f"injected at line event {self.lines} ({frame.f_code.co_name})")
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        return self._local if frame.f_code.co_filename.startswith(PACKAGE) else None

    def run(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """``(interrupted, value)`` of ``fn()`` under the hook."""
        sys.settrace(self._global)
        try:
            return False, fn()
        except KeyboardInterrupt:
            if not self.fired:
                raise
            return True, None
        finally:
            sys.settrace(None)


class InterruptAtLine(Interrupt):
    """Raise ``KeyboardInterrupt`` at the first event of one source line, ``(file, line number)``, where
    SIGINT is not held back: the same line whatever the timing (a line event's index moves with it)."""

    def __init__(self, line: tuple[str, int]) -> None:
        super().__init__()
        self.line = line

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if (event == "line" and not self.fired and (frame.f_code.co_filename, frame.f_lineno) == self.line
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self.fired = True
            raise KeyboardInterrupt(f"injected at {self.line}")
        return self._local


def cores_now() -> set[int]:
    """The cores this thread may run on (empty where the OS sets no affinity)."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()


def points_of(counter: Interrupt, k: int) -> list[int]:
    """Where to interrupt a call that ``counter`` counted: ``k`` sampled line events, or (EVERY_LINE)
    the first event of each distinct source line it reached."""
    return sorted(counter.first_events.values()) if EVERY_LINE else sample(counter.lines, k)


def sample(n: int, k: int) -> list[int]:
    """Up to ``k`` line indices spread over ``1..n`` (the first and the last included)."""
    if n <= k:
        return list(range(1, n + 1))
    return sorted({1 + round(i * (n - 1) / (k - 1)) for i in range(k)})


def kill(pid: int | None) -> int:
    """SIGKILL a worker and wait until it is gone; 1 if it was alive (a slot not yet refilled shows a dead pid)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return 0
        proc.kill()
        proc.wait(5)
    except (psutil.NoSuchProcess, ValueError, TypeError):
        return 0
    return 1


# =========================================================================== the calls
def acts(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 3, size=n)


class Case:
    """One public call on ``env`` with inputs drawn from ``rng``, and what the oracle says it returns."""

    def __init__(self, kind: str, env: Any, oracle: pp.PlanEnv, starts: list, rng: np.random.Generator) -> None:
        self.kind, self.env, self.oracle = kind, env, oracle
        n = int(rng.integers(3, 9))
        self.states = [starts[int(i)] for i in rng.integers(0, len(starts), size=n)]
        self.actions = acts(rng, n)
        self.dt = rng.integers(1, 4, size=n)
        self.seq = rng.integers(0, 3, size=(n, 3))
        self.sync = starts[int(rng.integers(0, len(starts)))]
        self.future: Any = None

    def __call__(self) -> Any:
        e = self.env
        if self.kind == "step_batch":
            return e.step_batch(self.actions, states=self.states, dt=self.dt)
        if self.kind == "rollout_batch":
            return e.rollout_batch(self.states, self.seq)
        if self.kind == "future.result":
            self.future = e.step_batch_async(self.actions, states=self.states, dt=self.dt)
            return self.future.result(timeout=30)
        if self.kind == "sync_states":
            e.sync_states(self.sync)
            return e.step_batch(self.actions, dt=self.dt)
        if self.kind == "step":
            return e.step(int(self.actions[0]), state=self.states[0], dt=int(self.dt[0]))
        if self.kind == "reset":
            return e.reset(seed=int(self.actions.sum()))
        raise AssertionError(self.kind)

    def expected(self) -> Any:
        o = self.oracle
        if self.kind in ("step_batch", "future.result"):
            return o.step_batch(self.actions, states=self.states, dt=self.dt)
        if self.kind == "rollout_batch":
            return o.rollout_batch(self.states, self.seq)
        if self.kind == "sync_states":
            o.set_state(self.sync)
            return o.step_batch(self.actions, dt=self.dt)
        if self.kind == "step":
            return o.step(int(self.actions[0]), state=self.states[0], dt=int(self.dt[0]))
        return o.reset(seed=int(self.actions.sum()))


def assert_same(kind: str, got: Any, want: Any) -> None:
    if kind in ("step", "reset"):
        assert got[0] == want[0], f"{kind}: another state"
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2:] == want[2:], f"{kind}: other values"
    elif kind == "rollout_batch":
        np.testing.assert_array_equal(got.rewards, want.rewards)
        assert list(got.states) == list(want.states)
        np.testing.assert_array_equal(got.observations, want.observations)
    else:
        assert_batches_equal(got, want)


@pytest.fixture(scope="module")
def oracle() -> Any:
    with pp.make(CounterEnv, backend="inline", horizon=1000) as env:
        yield env


@pytest.fixture(scope="module")
def starts(oracle: pp.PlanEnv) -> list:
    s0 = oracle.reset(seed=3)[0]
    return [s0] + list(oracle.step_batch(np.array([0, 1, 2, 1]), states=[s0] * 4, dt=np.array([1, 2, 3, 4])).states)


def interruption_table(kind: str, kill_first: bool, oracle: pp.PlanEnv, starts: list, points: int,
                       where: str = "workers", obs_size: int = 2) -> list[str]:
    """Run the table for one call kind, its batches run where ``where`` says (a Tuner mode), on the
    oracle's CounterEnv (``obs_size`` as its); returns what happened at each point (for the report)."""
    rng = np.random.default_rng([KINDS.index(kind), kill_first, SEED])
    seen = []
    kills = 0
    cores = cores_now()
    with BatchEnv(EnvFactory(CounterEnv, {"horizon": 1000, "obs_size": obs_size}), n_workers=2, max_restarts=1000,
                  tuner=Tuner(2, where, cores=3)) as env:  # a shared batch on both workers too
        env.reset(seed=0)
        counter = Interrupt()
        counter.run(Case(kind, env, oracle, starts, rng))
        for at in points_of(counter, points):
            if kill_first:  # the call must first replace a dead worker
                kills += kill(env.pids[int(rng.integers(0, 2))])
            case = Case(kind, env, oracle, starts, rng)
            interrupted, got = Interrupt(at).run(case)
            assert cores_now() == cores, f"the thread's cores left narrowed at {at}"
            if not interrupted:
                assert_same(kind, got, case.expected())
            elif case.future is not None and at % 2:
                # A future interrupted while awaited stays valid: retried, it returns its own result.
                assert_same(kind, call_with_deadline(lambda c=case: c.future.result(timeout=30), 40.0, "retry"),
                            case.expected())
            # The env is usable and exact: two fresh calls equal the oracle.
            for follow in ("step_batch", kind):
                nxt = Case(follow, env, oracle, starts, rng)
                assert_same(follow, call_with_deadline(nxt, 40.0, f"{follow} after an interrupt at {at}"),
                            nxt.expected())
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, f"SIGINT handler left swapped at {at}"
            seen.append("interrupted" if interrupted else "finished")
        assert env.stats["restarts"] <= kills, "interrupts are not deaths: only the kills are charged"
    return seen


KINDS = ["step_batch", "rollout_batch", "future.result", "sync_states", "step", "reset"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_first", [False, True], ids=["workers-alive", "a-worker-to-replace"])
@pytest.mark.parametrize("kind", KINDS)
def test_interrupt_at_sampled_lines_leaves_the_env_exact(kind: str, kill_first: bool, oracle: pp.PlanEnv,
                                                         starts: list) -> None:
    seen = interruption_table(kind, kill_first, oracle, starts, POINTS)
    assert "interrupted" in seen, "no point interrupted the call: the injector did not reach plan_parallel"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_first", [False, True], ids=["workers-alive", "a-worker-to-replace"])
@pytest.mark.parametrize("kind", ["step_batch", "rollout_batch", "sync_states"])
def test_interrupt_in_a_shared_batch_leaves_the_env_exact(kind: str, kill_first: bool, oracle: pp.PlanEnv,
                                                          starts: list) -> None:
    """The table again, with batches of 5 or more items shared: some points fall in the chunk run here."""
    seen = interruption_table(kind, kill_first, oracle, starts, POINTS, where="share")
    assert "interrupted" in seen, "no point interrupted the call: the injector did not reach plan_parallel"


@pytest.mark.timeout(300)
def test_a_future_interrupted_at_any_line_of_its_wait_returns_its_own_result(oracle: pp.PlanEnv,
                                                                            starts: list) -> None:
    """Every line that awaiting a future reaches, interrupted at its first event: ``result()`` again
    returns the batch's own result. (A CI run under ``-O`` hit the one line between a future dropping its
    answered parts and settling: the retry then waited for nothing until its timeout.)"""
    rng = np.random.default_rng([7, SEED])
    with BatchEnv(EnvFactory(CounterEnv, {"horizon": 1000, "obs_size": 2}), n_workers=2,
                  tuner=Tuner(2, "workers", cores=3)) as env:
        env.reset(seed=0)
        first = Case("future.result", env, oracle, starts, rng)
        fut = env.step_batch_async(first.actions, states=first.states, dt=first.dt)
        counter = Interrupt()
        counter.run(lambda: fut.result(timeout=30))
        fired = []
        for line in sorted(counter.first_events, key=counter.first_events.__getitem__):
            case = Case("future.result", env, oracle, starts, rng)
            case.future = env.step_batch_async(case.actions, states=case.states, dt=case.dt)
            injector = InterruptAtLine(line)
            interrupted, got = injector.run(lambda c=case: c.future.result(timeout=30))
            if interrupted:
                fired.append(line)
                got = call_with_deadline(lambda c=case: c.future.result(timeout=30), 40.0, f"retry after {line}")
            assert_same("future.result", got, case.expected())
    complete = inspect.getsourcelines(BatchFuture.complete)
    lines_of_complete = {(inspect.getsourcefile(BatchFuture), n)
                         for n in range(complete[1], complete[1] + len(complete[0]))}
    reached = lines_of_complete & counter.open_lines
    assert reached and reached <= set(fired), f"lines of complete() not interrupted: {sorted(reached - set(fired))}"


@pytest.mark.timeout(300)
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
                    reason="a waiting thread moves off its core only with two cores and the OS's affinity calls")
def test_an_interrupt_at_any_line_of_a_wait_leaves_the_threads_cores_as_they_were() -> None:
    """Every line a blocking wait reaches (moving off the core of a worker in flight, waiting, moving back),
    interrupted at its first event: the thread has all its cores when the ``KeyboardInterrupt`` reaches the
    caller, and the next call is exact. (A full test run once left the main thread on one core after a
    sampled interrupt between the narrowing and the wait's ``finally``: every later env saw one core, and
    pinned no worker.)"""
    before = cores_now()
    with pp.make(SlowEnv, backend="inline", delay=0.0) as oracle, \
            BatchEnv(EnvFactory(SlowEnv, {"delay": 0.03}), n_workers=2, pin_workers=True,
                     tuner=Tuner(2, "workers", cores=2)) as env:
        state = env.reset(seed=0)[0]
        actions = np.array([0, 1, 2, 1])
        want = oracle.step_batch(actions, states=[state] * 4)
        env.step_batch(actions, states=[state] * 4)  # the step time is known: the waits block, past the spin
        counter = Interrupt()
        counter.run(lambda: env.step_batch(actions, states=[state] * 4))
        waits = [line for line in sorted(counter.open_lines) if line[0].endswith(("cores.py", "process.py"))]
        assert any(line[0].endswith("cores.py") for line in waits), "no wait moved off a worker's core"
        for line in waits:
            interrupted, _ = InterruptAtLine(line).run(lambda: env.step_batch(actions, states=[state] * 4))
            assert cores_now() == before, f"the thread's cores left narrowed by an interrupt at {line}"
            if interrupted:
                assert_batches_equal(call_with_deadline(lambda: env.step_batch(actions, states=[state] * 4), 40.0,
                                                        f"after an interrupt at {line}"), want)


LENT_OBS_SIZE = 16384  # 64 KB float32 observations: a batch of 3 or more is lent (wire.leases)


@pytest.fixture(scope="module")
def lent_oracle() -> Any:
    with pp.make(CounterEnv, backend="inline", horizon=1000, obs_size=LENT_OBS_SIZE) as env:
        yield env


@pytest.fixture(scope="module")
def lent_starts(lent_oracle: pp.PlanEnv) -> list:
    s0 = lent_oracle.reset(seed=3)[0]
    return [s0] + list(lent_oracle.step_batch(np.array([0, 1, 2, 1]), states=[s0] * 4, dt=np.array([1, 2, 3, 4])).states)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kill_first", [False, True], ids=["workers-alive", "a-worker-to-replace"])
@pytest.mark.parametrize("kind", ["step_batch", "future.result", "rollout_batch"])
def test_interrupt_with_lent_observations_leaves_the_env_exact(kind: str, kill_first: bool, lent_oracle: pp.PlanEnv,
                                                               lent_starts: list) -> None:
    """The table again with observations large enough that workers write them into a slab lent to the
    batch: an interruption never leaves that slab to another batch while a worker may still write it."""
    seen = interruption_table(kind, kill_first, lent_oracle, lent_starts, POINTS, obs_size=LENT_OBS_SIZE)
    assert "interrupted" in seen, "no point interrupted the call: the injector did not reach plan_parallel"


@pytest.mark.timeout(400)
def test_interruption_table_under_python_O(tmp_path: Path) -> None:
    """With assertions off, nothing in the pool may rest on an ``assert``: the table again under ``-O``."""
    code = (
        "import sys, numpy as np, plan_parallel as pp\n"
        "from tests.envs import CounterEnv\n"
        "from tests import test_interrupts as t\n"
        "assert False, 'assertions are on'\n"
    )
    r = subprocess.run([sys.executable, "-O", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"not running with -O: {r.stderr[-500:]}"
    code = (
        "import numpy as np, plan_parallel as pp\n"
        "from tests.envs import CounterEnv\n"
        "from tests import test_interrupts as t\n"
        "import signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as the ctrl_c_raises fixture\n"
        "with pp.make(CounterEnv, backend='inline', horizon=1000) as oracle:\n"
        "    s0 = oracle.reset(seed=3)[0]\n"
        "    starts = [s0] + list(oracle.step_batch(np.array([0, 1, 2]), states=[s0] * 3).states)\n"
        "    for kind in ('step_batch', 'future.result', 'sync_states'):\n"
        "        seen = t.interruption_table(kind, False, oracle, starts, 10)\n"
        "        print(kind, seen.count('interrupted'), 'interrupted of', len(seen))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-O", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=360)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(r.stdout.splitlines()) == 3 and " 0 interrupted" not in r.stdout, r.stdout


# =========================================================================== close()
@pytest.mark.timeout(300)
def test_interrupted_close_then_close_again_frees_everything() -> None:
    counter = Interrupt()
    env = pp.make(CounterEnv, n_workers=2, small_batch_inline=False)
    env.reset(seed=0)
    env.step_batch(np.array([0, 1, 2, 1]))
    counter.run(env.close)
    shm0 = shm_segments()
    for at in points_of(counter, POINTS):
        before = set(live_children())
        env = pp.make(CounterEnv, n_workers=2, small_batch_inline=False)
        env.reset(seed=0)
        fut = env.step_batch_async(np.array([0, 1, 2, 1] * 4))  # something in flight, too
        Interrupt(at).run(env.close)
        env.close()  # the second close frees what the first did not
        with pytest.raises(ClosedError):
            fut.result(timeout=5)
        with pytest.raises(ClosedError):
            env.step_batch(np.array([0]))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (set(live_children()) - before or shm_segments() - shm0):
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, f"SIGINT handler left swapped at {at}"
        assert not set(live_children()) - before, f"workers left after an interrupt at line {at} of close()"
        assert not shm_segments() - shm0, f"slabs left after an interrupt at line {at} of close()"


# =========================================================================== threads
@pytest.fixture
def fast_thread_switches() -> Iterator[None]:
    """Threads take turns every 10 us instead of every 5 ms: races show in a short test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["auto", "here", "workers", "share"])
def test_threads_share_one_env_and_each_gets_its_own_results(where: str, oracle: pp.PlanEnv, starts: list,
                                                             fast_thread_switches: None) -> None:
    """3 threads on one env, their batches run where the tuner says (auto), all in the calling
    process (here: one local env the threads share), all on the workers, or shared (the
    waiting thread runs chunks here while another thread may wait on the workers)."""
    rng = np.random.default_rng(7)
    work = {t: [(acts(rng, 5), [starts[int(i)] for i in rng.integers(0, len(starts), 5)]) for _ in range(40)]
            for t in range(3)}
    want = {t: [oracle.step_batch(a, states=s) for a, s in items] for t, items in work.items()}
    errors: list[BaseException] = []
    with BatchEnv(EnvFactory(CounterEnv, {"horizon": 1000}), n_workers=2, tuner=Tuner(2, where)) as env:
        env.reset(seed=0)

        def run(t: int) -> None:
            try:
                for k, (a, s) in enumerate(work[t]):
                    if k % 3 == 0:  # futures awaited from this thread while others submit
                        got = env.step_batch_async(a, states=s).result(timeout=30)
                    else:
                        got = env.step_batch(a, states=s)
                    assert_batches_equal(got, want[t][k])
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=run, args=(t,)) for t in work]
        for th in threads:
            th.start()
        for th in threads:
            th.join(90)
        assert not any(th.is_alive() for th in threads), "a thread is stuck"
    assert not errors, errors[0]


@pytest.mark.timeout(60)
def test_close_from_another_thread_fails_the_waiting_call_with_closed_error() -> None:
    env = pp.make(SlowEnv, n_workers=2, small_batch_inline=False, delay=0.2)
    env.reset(seed=0)
    closer = threading.Timer(0.5, env.close)
    closer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ClosedError):
            call_with_deadline(lambda: env.step_batch(np.zeros(40, dtype=int)), 10.0, "step_batch")
        assert time.monotonic() - t0 < 5.0
        with pytest.raises(ClosedError):
            env.step_batch(np.zeros(2, dtype=int))
        with pytest.raises(ClosedError):
            env.reset(seed=0)
    finally:
        closer.join(5)
        env.close()


# =========================================================================== timeout, parent death
@pytest.mark.timeout(120)
def test_timeout_acts_on_small_batches_too() -> None:
    """With a timeout, no batch runs where the timeout cannot act (here): a hang in a tiny batch times out."""
    with pp.make(FaultyEnv, n_workers=2, timeout=1.0, fault="hang", phase="step", trigger_action=2,
                 horizon=1000) as env:
        env.reset(seed=0)
        for _ in range(60):  # enough for a tuner to have moved tiny batches into this process
            env.step_batch(np.array([0, 1]))
        assert env.stats["inline_batches"] == 0
        with pytest.raises(WorkerTimeoutError):
            call_with_deadline(lambda: env.step_batch(np.array([2])), 10.0, "a hung tiny batch")


PARENT = """
import os, signal, sys, time
import numpy as np, plan_parallel as pp
from tests.envs import FaultyEnv
from tests.envs_faults import SlowEnv
WHILE = sys.argv[1]
if WHILE == "hung":  # both workers end up inside a hung env call
    env = pp.make(FaultyEnv, n_workers=2, small_batch_inline=False, fault="hang", phase="step", trigger_action=2,
                  horizon=1000)
else:
    env = pp.make(SlowEnv, n_workers=2, small_batch_inline=False, delay=0.05)
env.reset(seed=0)
if WHILE == "hung":
    fut = env.step_batch_async(np.array([2, 2, 0, 0]))
elif WHILE == "busy":  # 40 s of work in flight on both workers, slabs in use
    fut = env.step_batch_async(np.zeros(800, dtype=int))
time.sleep(1.0)
print(os.getpid(), *env.pids, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("doing", ["idle", "busy", "hung"])
def test_workers_die_with_a_killed_parent(doing: str, tmp_path: Path) -> None:
    """The parent SIGKILLed while its workers are idle, busy, or inside a hung env call: nothing left after 5 s.

    (Its TMPDIR is the test's: multiprocessing's forkserver makes a socket directory there that only a
    parent that exits removes.)"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", PARENT, doing], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=40)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    parent, *workers = (int(x) for x in r.stdout.split())
    assert len(workers) == 2
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and (any(psutil.pid_exists(p) for p in workers) or shm_segments(parent)):
        time.sleep(0.05)
    alive = [p for p in workers if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"workers {alive} outlived their parent by 5 s"
    assert not shm_segments(parent), f"slabs left by the dead parent: {shm_segments(parent)}"


# =========================================================================== soak, memory
@pytest.mark.timeout(300)
def test_soak_batches_under_random_worker_kills(oracle: pp.PlanEnv, starts: list) -> None:
    rng = np.random.default_rng(11)
    kills = 0
    with pp.make(CounterEnv, n_workers=2, max_restarts=1000, small_batch_inline=False, horizon=1000) as env:
        env.reset(seed=0)
        killer = random.Random(5)
        for k in range(500):
            a = acts(rng, int(rng.integers(1, 12)))
            s = [starts[int(i)] for i in rng.integers(0, len(starts), len(a))]
            fut = env.step_batch_async(a, states=s, dt=2)
            if kills < 30 and killer.random() < 0.15:
                kills += kill(env.pids[killer.randrange(2)])
            assert_batches_equal(call_with_deadline(lambda f=fut: f.result(timeout=30), 40.0, f"batch {k}"),
                                 oracle.step_batch(a, states=s, dt=2))
        assert kills == 30
        assert env.stats["restarts"] == kills


@pytest.mark.timeout(300)
def test_thousands_of_small_calls_keep_memory_fds_and_slabs_flat(starts: list) -> None:
    me = psutil.Process()
    a = np.array([0, 1, 2, 1])
    with pp.make(CounterEnv, n_workers=2, small_batch_inline=False, horizon=10**9) as env:
        env.reset(seed=0)

        def calls(n: int) -> None:
            for _ in range(n):
                env.step_batch(a, states=[starts[0]] * 4)

        calls(1000)  # warm: slabs, caches, the allocator's arenas
        rss0, fds0, shm0 = me.memory_info().rss, me.num_fds(), len(shm_segments())
        calls(2000)
        rss1, fds1, shm1 = me.memory_info().rss, me.num_fds(), len(shm_segments())
        calls(2000)
        rss2, fds2, shm2 = me.memory_info().rss, me.num_fds(), len(shm_segments())
    assert fds2 == fds1 == fds0, (fds0, fds1, fds2)
    assert shm2 == shm1 == shm0, (shm0, shm1, shm2)
    grow = (rss2 - rss1) / 2**20
    assert grow < 2.0, f"RSS grew {grow:.1f} MB over the last 2000 calls ({(rss1 - rss0) / 2**20:.1f} MB before)"


# =========================================================================== real SIGINTs
@pytest.mark.timeout(120)
def test_real_sigints_at_random_times_never_mix_results(oracle: pp.PlanEnv, starts: list) -> None:
    """SIGINT delivered to this process at random moments of 150 calls: each call raises or is exact."""
    rng = np.random.default_rng(3)
    timing = random.Random(9)
    interrupted = 0
    in_call = False

    def on_sigint(signum: int, frame: Any) -> None:
        if in_call:  # a signal that lands after the call returned is dropped, not raised in the test's code
            raise KeyboardInterrupt

    def call(a: np.ndarray, s: list) -> Any:
        nonlocal in_call
        in_call = True
        try:
            return env.step_batch(a, states=s)
        finally:
            in_call = False

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pp.make(CounterEnv, n_workers=2, small_batch_inline=False, horizon=1000) as env:
            env.reset(seed=0)
            for _ in range(150):
                a = acts(rng, int(rng.integers(1, 9)))
                s = [starts[int(i)] for i in rng.integers(0, len(starts), len(a))]
                timer = threading.Timer(timing.uniform(0.0, 0.003), os.kill, (os.getpid(), signal.SIGINT))
                timer.start()
                try:
                    got = call(a, s)
                except KeyboardInterrupt:
                    got = None
                    interrupted += 1
                timer.join()
                if got is not None:
                    assert_batches_equal(got, oracle.step_batch(a, states=s))
            for _ in range(5):  # and after them all
                assert_batches_equal(env.step_batch(ACTS, states=starts[:4]), oracle.step_batch(ACTS, states=starts[:4]))
    finally:
        signal.signal(signal.SIGINT, old)
    assert interrupted > 0, "no SIGINT landed inside a call"


ACTS = np.array([0, 1, 2, 1])


@pytest.mark.timeout(60)
def test_an_abandoned_long_batch_does_not_delay_the_next_call() -> None:
    """Ctrl-C during a 4 s batch: its work is dropped, so a tiny call right after takes well under its rest."""
    with pp.make(SlowEnv, n_workers=2, small_batch_inline=False, delay=0.1) as env:
        env.reset(seed=0)
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            call_with_deadline(lambda: env.step_batch(np.zeros(80, dtype=int)), 20.0, "the long batch")
        timer.join()
        t0 = time.monotonic()
        env.step_batch(np.zeros(2, dtype=int))
        assert time.monotonic() - t0 < 2.0, "the next call waited for the abandoned batch"
