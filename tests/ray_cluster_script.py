"""Two Ray nodes on this machine: placement, results identical to inline, and a node lost mid-batch.

Run by ``tests/test_ray_cluster.py`` in a subprocess of its own (a process holds
one Ray connection, and the test session's is its private local instance):

    python tests/ray_cluster_script.py

Starts a ``ray.cluster_utils.Cluster``: a head (2 CPUs, resource ``head``) and a
second node (1 CPU, resource ``node2``), with fast health checks so a lost node
is noticed in about a second. ``pp.make(..., backend="ray", address=cluster.address)``
places one worker per node (``scheduling_strategy="SPREAD"``, one CPU each); the
env records which node built it (``tests.envs_ray.NodeEnv``), so placement is
checked through ``env.pids`` only. Then node 2 is removed (``allow_graceful=False``,
a machine lost) while a batch runs on both: the batch must complete, identical
to inline, on a replacement actor on the head.

Prints one JSON line (checks and timings) and exits 0 when every check passed;
an AssertionError exits 1 with its traceback on stderr.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # the cluster and the driver agree: no token
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import psutil
import ray
from ray.cluster_utils import Cluster

import plan_parallel as pp
from plan_parallel.workers.ray_connect import is_private
from tests.envs_ray import NodeEnv
from tests.helpers import assert_batches_equal

FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                      "health_check_initial_delay_ms": 0}
DELAY = 0.02  # seconds per env step in the actors: keeps the batch in flight while node 2 goes


def nodes_of(env: pp.PlanEnv, record_dir: str) -> list[str]:
    """The node id of each worker, from the files its env wrote at construction."""
    return [Path(record_dir, str(pid)).read_text() for pid in env.pids]


def main() -> dict:
    timings: dict[str, float] = {}
    out: dict = {"timings": timings}
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, resources={"head": 1}, include_dashboard=False, object_store_memory=100 * 2**20,
        _system_config=FAST_HEALTH_CHECKS))
    env = None
    record_dir = tempfile.mkdtemp(prefix="pp-nodes-")
    try:
        node2 = cluster.add_node(num_cpus=1, resources={"node2": 1}, object_store_memory=100 * 2**20)
        cluster.wait_for_nodes()
        head_id, node2_id = cluster.head_node.node_id, node2.node_id
        timings["cluster_start"] = time.monotonic() - t0

        t0 = time.monotonic()
        env = pp.make(NodeEnv, backend="ray", n_workers=2, address=cluster.address, small_batch_inline=False,
                      worker_options={"num_cpus": 1, "scheduling_strategy": "SPREAD"},
                      record_dir=record_dir, delay=DELAY)
        timings["make"] = time.monotonic() - t0
        out["private"] = is_private()  # a cluster's actors may run elsewhere: no workers_here for its tuner
        placed = nodes_of(env, record_dir)
        out["placement"] = ["head" if n == head_id else "node2" if n == node2_id else n for n in placed]
        assert sorted(out["placement"]) == ["head", "node2"], out["placement"]

        with pp.make(NodeEnv, backend="inline", record_dir=record_dir) as ref:
            s0 = env.reset(seed=0)[0]
            assert s0 == ref.reset(seed=0)[0]
            states = [ref.step(int(a), state=s0, dt=k + 1)[0] for k, a in enumerate([0, 1, 2, 1, 0, 2] * 4)]
            acts = np.array([2, 1, 0, 2, 1, 1, 0, 2] * 3)
            dt = np.array([1, 2, 3, 4] * 6)
            t0 = time.monotonic()
            assert_batches_equal(env.step_batch(acts, states=states, dt=dt), ref.step_batch(acts, states=states, dt=dt))
            timings["batch_on_two_nodes"] = time.monotonic() - t0

            pids = list(env.pids)
            lost = out["placement"].index("node2")
            fut = env.step_batch_async(acts, states=states, dt=10)  # 24 items x 10 steps x 20 ms: ~2.4 s per node
            time.sleep(0.3)
            t0 = time.monotonic()
            remover = threading.Thread(target=cluster.remove_node, args=(node2,), kwargs={"allow_graceful": False})
            remover.start()
            got = fut.result(timeout=60)
            timings["batch_done_after_node_loss"] = time.monotonic() - t0
            remover.join(30)
            timings["remove_node"] = time.monotonic() - t0
            assert_batches_equal(got, ref.step_batch(acts, states=states, dt=10))
            out["restarts"] = env.stats["restarts"]
            assert env.stats["restarts"] == 1, env.stats
            assert env.pids[1 - lost] == pids[1 - lost] and env.pids[lost] != pids[lost], (pids, env.pids)
            after = nodes_of(env, record_dir)
            out["placement_after"] = ["head" if n == head_id else "node2" if n == node2_id else n for n in after]
            assert out["placement_after"] == ["head", "head"], out["placement_after"]
            # Still exact afterwards, from the current state too.
            env.set_state(states[5])
            ref.set_state(states[5])
            assert_batches_equal(env.step_batch(acts[:6], dt=2), ref.step_batch(acts[:6], dt=2))

            # Issue 51: with the default options, a cluster's env is never built in the driver (which may lack
            # its dependencies): small batches, which the default rule runs here on a local machine, and
            # set_state, whose check needs no env, all run on the actors.
            alone = tempfile.mkdtemp(prefix="pp-driver-", dir=record_dir)
            env.close()  # its actors hold the head's two CPUs
            with pp.make(NodeEnv, backend="ray", n_workers=2, address=cluster.address,
                         worker_options={"num_cpus": 1}, record_dir=alone) as plain:
                plain.reset(seed=0)
                plain.set_state(states[3])
                for _ in range(20):
                    assert_batches_equal(plain.step_batch(acts[:2], states=states[:2]),
                                         ref.step_batch(acts[:2], states=states[:2]))
                out["driver_builds"] = Path(alone, "outside-actors").read_text().split() \
                    if Path(alone, "outside-actors").exists() else []
            assert out["driver_builds"] == [], out["driver_builds"]
        out["ok"] = True
    finally:
        t0 = time.monotonic()
        if env is not None:
            env.close()
        ray.shutdown()
        cluster.shutdown()
        timings["shutdown"] = time.monotonic() - t0
        shutil.rmtree(record_dir, ignore_errors=True)
        deadline = time.monotonic() + 10
        while True:  # the cluster's processes are this process's children: all gone?
            left = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        out["leftover_processes"] = [f"{p.pid} {p.name()}" for p in left]
    return out


if __name__ == "__main__":
    result = main()
    print(json.dumps(result), flush=True)
    sys.exit(0 if result.get("ok") and not result["leftover_processes"] else 1)
