"""The benchmark suites that print the data-plane figures still run and print them (no speed asserted).

Quick mode, one sample each: this checks that the suites work end to end on
real envs and say what they measured, not how fast anything is.
"""
from __future__ import annotations

import re

import pytest

from plan_parallel.bench_mcts import bench_mcts
from plan_parallel.bench_vector import bench_vector

RATE = r"[\d,]+(\.\d+)?"


@pytest.mark.timeout(300)
def test_the_vector_suite_prints_every_vector_env_against_sync_and_async() -> None:
    cases = [("CartPole-v1", "CartPole-v1", {}, 2, 5, 5)]  # the suite's code on a small case
    lines = bench_vector(1, True, 2, cases)
    for label, _, _, n_envs, _, _ in cases:
        for name in ("SyncVectorEnv", "AsyncVectorEnv (shm)", "make_vec W=2", "make_vec W=2 no-inline", "make_vec inline"):
            row = [ln for ln in lines if ln.startswith(f"{label} x{n_envs}") and ln[17:45].strip() == name]
            assert len(row) == 1, (label, name, lines)
            assert re.search(rf"{RATE}\s+\d+\.\d\d\s+\d+\.\d\d$", row[0]), row[0]
    assert lines[-1].startswith("parallel ceiling at the end")


@pytest.mark.timeout(300)
def test_the_mcts_suite_prints_decisions_per_second_on_both_backends() -> None:
    lines = bench_mcts(1, True, 2, decisions=1, warmup=1)
    rows = {ln.split()[0]: ln for ln in lines if "decisions/s  x inline" in ln}
    assert set(rows) == {"inline", "process"}, lines
    assert re.search(r"x inline 1\.00$", rows["inline"])
    assert float(rows["process"].split()[2]) > 0


def test_the_simulator_ceiling_runs_the_raw_loop_alone_and_in_parallel() -> None:
    """The per-env ceiling the process suite prints (format and plausibility, not speed)."""
    from plan_parallel.bench_ceiling import simulator_ceiling

    ratio = simulator_ceiling("CartPole-v1", {}, 2, 8, seconds=0.05, repeats=1)
    assert 0.2 < ratio < 4.0, ratio
