"""Two Ray nodes on one machine: workers on both, results identical to inline, a node lost mid-batch.

The cluster runs in a subprocess (``tests/ray_cluster_script.py``, which
documents the steps): a process holds one Ray connection, and this session's is
the private local instance the other Ray tests share.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "ray_cluster_script.py"


@pytest.mark.timeout(150)
def test_two_nodes_placement_identical_results_and_a_node_lost_mid_batch() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, f"exit code {r.returncode}; stdout:\n{r.stdout}\nstderr tail:\n{r.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert out["ok"] is True
    assert out["private"] is False  # an address given: the actors count as elsewhere (Backend.workers_here)
    assert sorted(out["placement"]) == ["head", "node2"]  # one worker per node
    assert out["restarts"] == 1 and out["placement_after"] == ["head", "head"]  # replaced on the surviving node
    assert out["leftover_processes"] == []
