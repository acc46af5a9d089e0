"""The fault table over the Ray backend, and what only Ray has: actor deaths from outside, connecting, importing.

Every row of the process backend's table (``tests/test_faults.py``: fault,
phase, the public call that reaches it, outcome) runs here over Ray actors,
with the same expectations: env errors re-raise with their own type, the
remote traceback as ``__cause__`` and a note naming the worker; a dying actor
is replaced and its chunk replayed bit-identically; a hung call raises
``WorkerTimeoutError`` and its actor is replaced; past ``max_restarts``,
``WorkerCrashedError`` names the worker and what was in flight. Ray cannot
tell a signal from an exit code, so crash messages say how Ray saw the death
(``ActorDiedError (its worker process has died)``).

All tests share the process-wide private Ray instance plan_parallel starts on
the first ``backend="ray"`` env (``address=None``); none shuts it down (it
stops when the session ends). Tests that need a Ray connection of their own
(another address, no Ray at all) run in a subprocess. The two-node cluster
lives in ``tests/test_ray_cluster.py``.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import plan_parallel as pp  # noqa: E402
from plan_parallel.batch import BatchEnv, Tuner  # noqa: E402
from plan_parallel.errors import ClosedError, WorkerCrashedError  # noqa: E402
from plan_parallel.factory import EnvFactory  # noqa: E402
from tests import test_faults as faults  # noqa: E402 - the table and its helpers, shared with the process backend
from tests.deadline import call_with_deadline  # noqa: E402
from tests.envs import CounterEnv, FaultyEnv  # noqa: E402
from tests.envs_faults import SlowEnv  # noqa: E402
from tests.envs_ray import BigStateEnv, RayKillEnv  # noqa: E402
from tests.helpers import assert_batches_equal  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("no_leaks_module", "no_leaks")]

ROOT = Path(__file__).resolve().parents[1]
ACTS4, ACTS6, TIMEOUT = faults.ACTS4, faults.ACTS6, faults.TIMEOUT
# A hung call fails within TIMEOUT + this. Wider than the process backend's: the
# error is raised once the replacement actor is up (~0.6 s to start one on 2 cores).
DEADLINE_SLACK = 3.0
SYNC_DEADLINE = 10.0  # sync_states with a replacement actor to start (process backend: 3 s)
ACTOR_DIED = r"ActorDiedError \(its worker process has died\)"


# =========================================================================== helpers
def faulty(fault: str, phase: str, tmp_path: Path | None = None, env: Any = FaultyEnv, **options: Any) -> Any:
    """A ray env of FaultyEnv (or a subclass), every batch on the actors (once_file in tmp_path when given)."""
    kw: dict[str, Any] = dict(phase=phase, trigger_action=2, trigger_seed=7, horizon=100)
    if env is FaultyEnv:
        kw["fault"] = fault
    if tmp_path is not None:
        kw["once_file"] = str(tmp_path / "fired")
    options.setdefault("n_workers", 2)
    return pp.make(env, backend="ray", small_batch_inline=False, **options, **kw)


def run_via(env: Any, via: str, s0: Any, s_trig: Any) -> Any:
    """``test_faults.run_via``, with a deadline for sync_states that leaves room to start an actor."""
    if via == "sync_states":
        call_with_deadline(lambda: env.sync_states(s_trig), SYNC_DEADLINE, "sync_states")
        return env.step_batch(ACTS4)
    return faults.run_via(env, via, s0, s_trig)


def ray_row(row: Any) -> Any:
    """A row of the process table as it reads on Ray: crash messages name Ray's view of the death."""
    marks = ()
    if not isinstance(row, faults.Row):  # pytest.param(Row(...), marks=...)
        row, marks = row.values[0], row.marks
    if row.outcome == "crashed":
        msg = re.sub(r"died with (signal SIG[A-Z]+|exit code \d+)", lambda m: "died with " + ACTOR_DIED, row.message)
        # An actor that dies before its "ready" reply arrives has no pid known.
        msg = msg.replace(r"\(pid (\d+)\)", r"\((?:pid (\d+)|Ray actor)\)")
        row = faults.Row(row.fault, row.phase, row.via, row.outcome, row.exc, msg, row.note, row.tb, row.once)
    return pytest.param(row, marks=marks, id=row.id)


@pytest.fixture
def oracle() -> Iterator[pp.PlanEnv]:
    with pp.make(FaultyEnv, backend="inline", fault="none", horizon=100) as env:
        yield env


def assert_replaced(env: Any, pids: list, n: int = 1) -> None:
    assert env.stats["restarts"] == n, env.stats
    assert sum(a != b for a, b in zip(env.pids, pids)) == n, (env.pids, pids)


# =========================================================================== the table
@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", [ray_row(r) for r in faults.TABLE])
def test_fault_table(row: faults.Row, tmp_path: Path, oracle: pp.PlanEnv) -> None:
    options: dict[str, Any] = {}
    if row.outcome == "crashed":
        options["max_restarts"] = 1
    if row.outcome == "timeout":
        options["timeout"] = TIMEOUT
    once = tmp_path if row.once and row.outcome != "crashed" else None
    with faulty(row.fault, row.phase, once, **options) as env:
        faults.check_row(row, env, oracle, tmp_path, run_via, DEADLINE_SLACK)


# =========================================================================== actors killed from outside
@pytest.mark.timeout(60)
def test_actor_sigkilled_mid_batch_is_replaced_and_the_batch_is_identical() -> None:
    """SIGKILL of an actor's pid (``env.pids``) while its chunk runs: a replacement replays it exactly."""
    with pp.make(SlowEnv, backend="ray", n_workers=2, small_batch_inline=False, delay=0.05) as env, \
            pp.make(SlowEnv, backend="inline", delay=0.0) as ref:
        s0 = env.reset(seed=0)[0]
        assert s0 == ref.reset(seed=0)[0]
        states = [ref.step(a, state=s0, dt=3)[0] for a in (0, 1, 2, 1, 0, 2, 1, 0)]
        acts = np.array([2, 1, 0, 2, 1, 1, 0, 2])
        pids = list(env.pids)
        fut = env.step_batch_async(acts, states=states, dt=4)  # 4 items x 4 steps x 50 ms per actor
        time.sleep(0.3)
        os.kill(pids[1], signal.SIGKILL)
        assert_batches_equal(fut.result(timeout=30), ref.step_batch(acts, states=states, dt=4))
        assert_replaced(env, pids)
        assert env.pids[0] == pids[0]
        faults.wait_dead(pids[1])


@pytest.mark.timeout(60)
def test_actor_ray_killed_mid_batch_is_replaced_and_the_batch_is_identical(tmp_path: Path) -> None:
    """``ray.kill`` of the actor's handle while it runs the trigger step (item 4, worker 1)."""
    # The oracle never fires (no action 9); its states are of the same kind (RayKillEnv).
    with faulty("", "step", tmp_path, env=RayKillEnv) as env, \
            pp.make(RayKillEnv, backend="inline", phase="step", trigger_action=9, horizon=100) as oracle:
        s0, _ = faults.start(env, oracle)
        pids = list(env.pids)
        got = env.step_batch(ACTS6, states=[s0] * 6, dt=2)
        assert (tmp_path / "fired").exists()
        assert_batches_equal(got, oracle.step_batch(ACTS6, states=[s0] * 6, dt=2))
        assert_replaced(env, pids)
        assert env.pids[0] == pids[0]
        faults.assert_usable(env, oracle, s0)


@pytest.mark.timeout(60)
def test_respawned_actor_gets_the_synced_state_back(oracle: pp.PlanEnv) -> None:
    """sync_states, then an idle actor is SIGKILLed: its replacement starts from the synced state."""
    with faulty("none", "step") as env:
        s0, _ = faults.start(env, oracle)
        target = oracle.step(2, state=s0, dt=4)[0]
        call_with_deadline(lambda: env.sync_states(target), SYNC_DEADLINE, "sync_states")
        oracle.sync_states(target)
        pids = list(env.pids)
        os.kill(pids[1], signal.SIGKILL)
        faults.wait_dead(pids[1])
        acts = np.array([0, 1, 2, 1, 0, 2])
        assert_batches_equal(env.step_batch(acts), oracle.step_batch(acts))  # states=None: from the synced state
        assert_replaced(env, pids)
        assert_batches_equal(env.step_batch(acts, dt=3), oracle.step_batch(acts, dt=3))
        assert env.get_state() == target


@pytest.mark.timeout(60)
def test_respawned_actors_get_the_current_state_back(oracle: pp.PlanEnv) -> None:
    """set_state + a batch leave both actors holding the state; after both are SIGKILLed, the replacements too."""
    with faulty("none", "step") as env:
        s0, _ = faults.start(env, oracle)
        target = oracle.step(1, state=s0, dt=5)[0]
        env.set_state(target)
        oracle.set_state(target)
        acts = np.array([0, 1, 2, 1, 0, 2])
        assert_batches_equal(env.step_batch(acts), oracle.step_batch(acts))
        pids = list(env.pids)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            faults.wait_dead(pid)
        # Enough work for a chunk on each actor (a dead idle actor is seen when it is sent one).
        many = np.tile(acts, 43)
        assert_batches_equal(env.step_batch(many, dt=2), oracle.step_batch(many, dt=2))
        assert_replaced(env, pids, 2)
        assert env.get_state() == target


@pytest.mark.timeout(60)
def test_large_pickled_states_several_chunks_per_actor() -> None:
    """400 KB opaque states each way, 3 chunks per actor: the workload that deadlocks the process
    backend's pipes (tests/test_pipe_deadlock.py) goes through Ray's object store. (Ray splits a
    share in chunks of 250 ms: this tuner splits 24 steps of ~1 ms in 3 chunks an actor.)"""
    tuner = Tuner(2, "workers", chunk_seconds=2e-3, chunk_caller_seconds=0)  # (no cap on the chunks' count)
    with BatchEnv(EnvFactory(BigStateEnv, {}), backend="ray", n_workers=2, timeout=20.0, tuner=tuner) as env, \
            pp.make(BigStateEnv, backend="inline") as ref:
        s0 = env.reset(seed=0)[0]
        assert s0 == ref.reset(seed=0)[0]
        acts = np.array([0, 1, 2] * 8)
        for _ in range(2):  # the first batch learns the step time; the second is split 3 chunks per actor
            assert_batches_equal(call_with_deadline(lambda: env.step_batch(acts, states=[s0] * 24), 30.0, "batch"),
                                 ref.step_batch(acts, states=[s0] * 24))
        assert env.stats["restarts"] == 0
        assert tuner.n_chunks(24, 24) == 6, "the second batch was split in 3 chunks an actor"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
def test_step_observations_are_copied_out_of_the_object_store(workers: int) -> None:
    """A step chunk's observations reach the driver as a view of Ray's object store (not copied out
    on arrival): the batch's observations must still be its own array, the states' rows of it, from
    one chunk (the whole batch) and from several."""
    with pp.make("CartPole-v1", backend="ray", n_workers=workers, small_batch_inline=False) as env, \
            pp.make("CartPole-v1", backend="inline") as ref:
        s0 = env.reset(seed=0)[0]
        ref.reset(seed=0)
        for n in (2, 64):
            acts = np.arange(n) % 2
            got = call_with_deadline(lambda: env.step_batch(acts, states=[s0] * n), 30.0, "batch")
            assert_batches_equal(got, ref.step_batch(acts, states=[s0] * n))
            assert got.observations.flags.owndata, "the batch's observations are a view of another buffer"
            assert all(np.shares_memory(s.obs, got.observations) for s in got.states)


# =========================================================================== past max_restarts, building, closing
@pytest.mark.timeout(60)
def test_crash_message_names_worker_pid_and_what_was_in_flight(oracle: pp.PlanEnv) -> None:
    with faulty("sigkill", "step", max_restarts=0) as env:
        s0, _ = faults.start(env, oracle)
        pid = env.pids[1]
        with pytest.raises(WorkerCrashedError, match=rf"^worker 1 \(pid {pid}\) died with {ACTOR_DIED} "
                                                     r"during step_batch \(3 items\); 0 restarts used of 0$"):
            env.step_batch(ACTS6, states=[s0] * 6)


@pytest.mark.timeout(60)
def test_env_raises_while_building() -> None:
    with pytest.raises(ValueError, match=r"injected fault in init") as info:
        faulty("raise", "init")
    assert isinstance(info.value.__cause__, pp.RemoteTraceback)
    assert re.search(r"worker \d \(Ray actor\) building the env", "\n".join(info.value.__notes__))


@pytest.mark.timeout(60)
def test_actor_dies_while_building() -> None:
    with pytest.raises(WorkerCrashedError, match=rf"worker \d \(Ray actor\) died with {ACTOR_DIED} while building its env$"):
        call_with_deadline(lambda: faulty("exit", "init"), 30.0, "make() with an actor that exits at init")


@pytest.mark.timeout(60)
def test_close_with_a_hung_batch_in_flight(oracle: pp.PlanEnv) -> None:
    env = faulty("hang", "step")
    s0, _ = faults.start(env, oracle)
    fut = env.step_batch_async(ACTS6, states=[s0] * 6)  # worker 1 hangs in step (item 4)
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.3)
    t0 = time.monotonic()
    env.close()
    assert time.monotonic() - t0 < 3.0, "close() must not wait for a hung actor"
    env.close()  # idempotent
    with pytest.raises(ClosedError, match="closed while this batch was in flight"):
        fut.result(timeout=5)
    with pytest.raises(ClosedError):
        env.step_batch(ACTS4, states=[s0] * 4)


# =========================================================================== connecting and importing
def _run(code: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.timeout(60)
def test_importing_plan_parallel_does_not_import_ray() -> None:
    code = "import plan_parallel, plan_parallel.batch, sys; assert 'ray' not in sys.modules, 'ray imported'"
    r = _run(code, 50)
    assert r.returncode == 0, r.stderr


@pytest.mark.timeout(60)
def test_ray_backend_without_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ImportError, match=r'backend="ray" needs Ray: install it with pip install -e "\.\[ray\]"'):
        pp.make(CounterEnv, backend="ray", n_workers=1)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(60)
def test_bad_address_fails_fast_with_a_clear_error() -> None:
    """In a fresh process (one Ray connection per process): nothing listening, and a malformed address."""
    port = _closed_port()
    code = (
        "import time, plan_parallel as pp\n"
        "from tests.envs import CounterEnv\n"
        f"for address in ('127.0.0.1:{port}', 'no-port-here'):\n"
        "    t0 = time.monotonic()\n"
        "    try:\n"
        "        pp.make(CounterEnv, backend='ray', n_workers=1, address=address)\n"
        "    except (ConnectionError, ValueError) as e:\n"
        "        print(type(e).__name__, round(time.monotonic() - t0, 1), e)\n"
        "    else:\n"
        "        print('no error for', address)\n"
    )
    r = _run(code, 50)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2, r.stdout
    assert re.match(rf"ConnectionError \d+\.\d backend=\"ray\" could not join the Ray cluster at "
                    rf"address='127\.0\.0\.1:{port}': nothing answers there .*ray start --head", lines[0]), lines[0]
    assert float(lines[0].split()[1]) < 10.0  # not Ray's minutes of retries
    assert re.match(r"ValueError \S+ backend=\"ray\" could not join the Ray cluster at address='no-port-here': "
                    r".*no-port-here", lines[1]), lines[1]


@pytest.mark.timeout(90)
def test_private_ray_instance_listens_on_loopback_only() -> None:
    """In a fresh process: every socket the private instance's processes listen on is bound to 127.0.0.1.

    Ray binds to the machine's outward address by default, where another host
    could join the instance and run code in it.
    """
    code = (
        "import psutil, ray, plan_parallel as pp\n"
        "from tests.envs import CounterEnv\n"
        "with pp.make(CounterEnv, backend='ray', n_workers=2) as env:\n"
        "    env.reset(seed=0)\n"
        "    me = psutil.Process()\n"
        "    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}\n"
        "    for c in psutil.net_connections(kind='inet'):\n"
        "        if c.status == psutil.CONN_LISTEN and c.pid in pids:\n"
        "            print(psutil.Process(c.pid).name(), c.laddr.ip)\n"
        "    print('gcs', ray.get_runtime_context().gcs_address.rpartition(':')[0])\n"
    )
    r = _run(code, 80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    names = {line.split()[0] for line in lines}
    assert {"gcs", "gcs_server", "raylet"} <= names, r.stdout  # the listeners were seen at all
    outward = [line for line in lines if line.split()[1] not in ("127.0.0.1", "::ffff:127.0.0.1")]
    assert outward == [], f"listening beyond loopback: {outward}"


@pytest.mark.timeout(60)
def test_address_while_connected_to_the_private_instance_is_refused() -> None:
    with pp.make(CounterEnv, backend="ray", n_workers=1):  # the session's private instance is up
        pass
    with pytest.raises(ConnectionError, match=r"already connected to the private local Ray instance"):
        pp.make(CounterEnv, backend="ray", n_workers=1, address="127.0.0.1:6379")
    with pp.make(CounterEnv, backend="ray", n_workers=1, address="local") as env:  # "local" is the private one
        env.reset(seed=0)


@pytest.mark.timeout(60)
def test_worker_options_per_worker(oracle: pp.PlanEnv) -> None:
    """One dict of actor options per worker (placement on given nodes); a wrong count is refused up front."""
    with pytest.raises(ValueError, match=r"worker_options has 1 dicts for 2 workers"):
        pp.make(FaultyEnv, backend="ray", n_workers=2, worker_options=[{"num_cpus": 0}], fault="none")
    with pytest.raises(TypeError, match=r"worker_options must be a dict"):
        pp.make(FaultyEnv, backend="ray", n_workers=2, worker_options="SPREAD", fault="none")
    opts = [{"num_cpus": 0}, {"num_cpus": 0, "max_concurrency": 1}]
    with pp.make(FaultyEnv, backend="ray", n_workers=2, worker_options=opts, small_batch_inline=False,
                 fault="none", horizon=100) as env:
        s = env.reset(seed=0)[0]
        acts = np.array([0, 1, 2, 1])
        assert_batches_equal(env.step_batch(acts, states=[s] * 4), oracle.step_batch(acts, states=[s] * 4))


@pytest.mark.timeout(60)
def test_the_actors_of_the_private_local_instance_count_as_workers_on_this_machine() -> None:
    """Their tuner weighs them against this machine's cores (Tuner's ``workers_here``: no share where this
    process adds no core); a cluster's actors may run elsewhere (``is_private()`` is False there)."""
    import cloudpickle

    from plan_parallel.workers.backends import select_backend
    from plan_parallel.workers.ray_connect import is_private

    chosen = select_backend("ray", cloudpickle.dumps((EnvFactory(CounterEnv, {}), None)), 2, "forkserver", None, None)
    assert is_private() and chosen.workers_here is True
