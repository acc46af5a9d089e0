"""The benchmark suites that print the data-plane figures still run and print them (no speed asserted).

Quick mode, one sample each: this checks that the suites work end to end on
real envs and say what they measured, not how fast anything is.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from plan_parallel.cli.bench.mcts import bench_mcts
from plan_parallel.cli.bench.vector import bench_vector

RATE = r"[\d,]+(\.\d+)?"
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_the_vector_suite_prints_every_vector_env_against_sync_and_async() -> None:
    cases = [("CartPole-v1", "CartPole-v1", {}, 2, 5, 5)]  # the suite's code on a small case
    lines = bench_vector(1, True, 2, cases)
    for label, _, _, n_envs, _, _ in cases:
        for name in ("SyncVectorEnv", "AsyncVectorEnv (shm)", "make_vec W=2", "make_vec W=2 no-inline", "make_vec W=2 tuned",
                     "make_vec inline"):
            row = [ln for ln in lines if ln.startswith(f"{label} x{n_envs}") and ln[17:45].strip() == name]
            assert len(row) == 1, (label, name, lines)
            assert re.search(rf"{RATE}\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d$", row[0]), row[0]
            assert float(row[0].split()[-1]) > 0, row[0]  # the CPU an env step cost
            if name == "AsyncVectorEnv (shm)":
                assert row[0].split()[-2] == "1.00", row[0]  # its whole run against itself
    assert lines[-1].startswith("parallel ceiling at the end")


@pytest.mark.timeout(300)
def test_the_mcts_suite_prints_decisions_per_second_on_both_backends() -> None:
    lines = bench_mcts(1, True, 2, decisions=1, warmup=1)
    rows = {ln.split()[0]: ln for ln in lines if "decisions/s  x inline" in ln}
    assert set(rows) == {"inline", "process"}, lines
    assert re.search(r"x inline 1\.00$", rows["inline"])
    assert float(rows["process"].split()[2]) > 0
    ceiling, eff = re.search(r"ceiling (\d+\.\d\d)  eff (\d+\.\d\d)$", rows["process"]).groups()  # type: ignore[union-attr]
    assert float(ceiling) > 0 and float(eff) > 0


@pytest.mark.timeout(120)
def test_the_mcts_suites_multi_root_rows_run_and_make_the_same_decisions() -> None:
    from plan_parallel.cli.bench.roots import QUICK_CASES, bench_roots

    lines = bench_roots(1, True, 2, QUICK_CASES)
    assert lines[1].split()[:3] == ["env", "roots", "W"], lines
    assert lines[1].split()[-5:] == ["eff", "x", "G=2", "same", "decisions"], lines
    rows = [ln.split() for ln in lines[2:]]
    assert [(" ".join(r[:-10]), int(r[-10]), int(r[-9])) for r in rows] == [
        ("CartPole-v1", 2, 2), ("SleepyWalk 1 ms", 2, 1), ("SleepyWalk 1 ms", 2, 2)], lines
    for r in rows:
        assert all(float(v) > 0 for v in r[-8:-2]), r  # decisions/s, ratios and efficiency
        assert r[-1] == "yes", r  # single-root searches, plan_many inline and on the workers (G=1, G=2) alike
    assert float(rows[0][-2]) > 0 and [r[-2] for r in rows[1:]] == ["-", "-"], rows  # G=2 at --workers only


@pytest.mark.timeout(300)
def test_the_process_suite_prints_each_rows_own_ceiling_beside_its_ratios() -> None:
    from plan_parallel.cli.bench.process import bench_process

    lines = bench_process(1, True, 2, [("CartPole-v1", "CartPole-v1", {})])
    header = next(ln for ln in lines if ln.startswith("workload"))
    assert header.split()[9:14] == ["proc/inl", "wrk/inl", "tun/proc", "ceiling", "eff"], header
    rows = [ln.split() for ln in lines if ln.startswith("CartPole-v1 ") and "AsyncVectorEnv" not in ln]
    assert [(r[1], r[2]) for r in rows] == [("8", "1"), ("64", "1")], lines
    for r in rows:
        proc_inl, tuned, ceiling, eff = float(r[9]), float(r[11]), float(r[12]), float(r[13])
        assert tuned > 0, r  # the tuned profile ran beside the default
        assert 0.2 < ceiling < 4.0, r  # the crew ran: W processes, each as fast as one or a few times slower
        # each figure is printed to 0.005: the quotient of the printed ones differs from the printed eff by at most
        rounding = 0.005 / ceiling + proc_inl * 0.005 / ceiling**2 + 0.005
        assert eff == pytest.approx(proc_inl / ceiling, abs=rounding + 1e-9), r
    assert header.split()[17:21] == ["wrk", "bound", "raw", "swing"], header
    for r in rows:
        assert 0.0 < float(r[15]) < 8.0, r  # 2 cores' worth of the workers' and the caller's CPU, per inline item
        assert float(r[16]) >= 1.0, r  # the raw loop's slowest sample ÷ its fastest
    trip = next(ln for ln in lines if ln.startswith("round trip of a call"))
    wall, caller, workers = re.search(r"CartPole-v1: (\d+) us \((\d+)/(\d+) us\)", trip).groups()  # type: ignore[union-attr]
    assert int(wall) > 0 and int(caller) > 0 and int(workers) > 0, trip  # the workers ran each call
    assert re.search(r"a bare pipe round trip between two Python processes: \d+ us$", trip), trip
    assert not [ln for ln in lines if "after a pause" in ln], lines  # a developers' measurement: benchmarks/cold_caches.py


@pytest.mark.timeout(60)
def test_the_bare_pipe_round_trip_is_timed_against_a_process_it_stops_after() -> None:
    import multiprocessing as mp

    from plan_parallel.cli.bench.ceiling import pipe_round_trip

    before = set(mp.active_children())
    assert pipe_round_trip(200) > 0
    assert set(mp.active_children()) == before  # the echoing process is gone


@pytest.mark.timeout(60)
def test_the_cold_caches_benchmark_times_the_same_call_after_each_gap() -> None:
    """``benchmarks/cold_caches.py``, outside the wheel: a script of the repository, run as a developer runs it."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cold_caches.py"), "--calls", "20", "--gaps", "0", "2"],
                       capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.fullmatch(r"the same work after a pause \(the caches forget it\): an inline step_batch of 2 CartPole items "
                        r"takes \d+ us back to back, \d+ us after 2 ms of other work\n", r.stdout), r.stdout


def test_the_cpu_bound_is_the_cores_time_over_the_cpu_an_item_spends_in_every_process() -> None:
    """Inline takes 100 us an item; on the workers an item costs 20 us of the caller's CPU and 130 us of
    the workers': 2 cores supply 200 us of CPU per 100 us, enough for 200 / 150 of an item."""
    from plan_parallel.cli.bench.process import cpu_bound
    from plan_parallel.cli.bench.timing import Timing

    inline = Timing(100e-6, 100e-6, 0.0)
    assert cpu_bound(inline, Timing(60e-6, 20e-6, 130e-6), 2) == pytest.approx(200 / 150)
    assert cpu_bound(inline, Timing(60e-6, 20e-6, 130e-6), 4) == pytest.approx(400 / 150)


@pytest.mark.timeout(120)
def test_the_raw_crew_runs_the_raw_loop_in_each_of_its_processes_at_once() -> None:
    import os

    from plan_parallel.cli.bench.ceiling import RawCrew
    from plan_parallel.cli.bench.timing import process_cpu_seconds

    with RawCrew("CartPole-v1", {}, 2, 8) as crew:
        assert len(crew.pids) == 2 and os.getpid() not in crew.pids, crew.pids
        before = [process_cpu_seconds([pid]) for pid in crew.pids]
        assert crew.run(8, 2, 300) == 2 * 8 * 300
        used = [process_cpu_seconds([pid]) - b for pid, b in zip(crew.pids, before)]
        assert min(used) > 0.005, used  # each process ran its share (4,800 CartPole steps take ~50 ms)


def test_a_speedup_is_the_median_of_the_ratios_of_samples_taken_in_the_same_turn() -> None:
    """A slower minute slows both samples of a turn: each turn's ratio stays. Here it began during the third
    turn, between its two samples: the turns' ratios give 2x, the two medians would give 8x."""
    from plan_parallel.cli.bench.timing import Timing

    fast = Timing(0.0, 0.0, 0.0, (1.0, 1.0, 1.0, 4.0, 4.0))
    slow = Timing(0.0, 0.0, 0.0, (2.0, 2.0, 8.0, 8.0, 8.0))
    assert fast.speedup(slow) == 2.0 and slow.speedup(fast) == 0.5


@pytest.mark.timeout(300)
def test_the_scale_suite_prints_efficiency_and_the_amdahl_bound() -> None:
    from plan_parallel.cli.bench.scale import bench_scale
    from plan_parallel.workers.cores import available_cpus

    lines = bench_scale(1, True, 2)
    rows = [ln.split() for ln in lines if re.match(r"^\s+\d+\s+\d+\s+\d+\s", ln)]
    assert [(r[0], r[1]) for r in rows] == [(w, k) for k in ("32", "4") for w in ("1", "2", "4")], lines
    for r in rows:
        assert int(r[2]) == int(r[0]) * int(r[1]), r  # B = W k
        speedup, eff = float(r[4]), float(r[5])
        assert 0 < speedup and eff == pytest.approx(speedup / int(r[0]), abs=0.01), r
        assert float(r[6]) > 0 and float(r[7]) > 0, r  # the caller's CPU an item and a call
        caller, workers, wall = float(r[7]) * 1e-6, float(r[8]) * 1e-6, float(r[3]) * 1e-3
        assert workers > 0, r  # (the workers step the items: their CPU a call is never nothing)
        assert float(r[9]) == pytest.approx((caller + workers) / (wall * available_cpus()), rel=0.05, abs=0.01), r
    amdahl = next(ln for ln in lines if ln.startswith("CartPole-v1"))
    callers, workers, bound = amdahl.split()[2:5]
    elsewhere, own_list, own_batch = (float(v) for v in callers.split("/"))  # by where the states came from
    assert min(elsewhere, own_list, own_batch) > 0 and float(workers) > 0, amdahl
    assert float(bound) == pytest.approx(float(workers) / own_list, rel=0.05), amdahl


@pytest.mark.timeout(300)
def test_the_latency_suite_compares_small_calls_with_async_vector_env() -> None:
    from plan_parallel.cli.bench.latency import bench_latency

    lines = bench_latency(1, True, 2)
    rows = {ln[:28].strip(): ln[28:].split() for ln in lines[2:-1]}
    assert list(rows) == ["step_batch 2 (workers)", "make_vec x2 step (workers)", "step_batch 2 (no lane)",
                          "make_vec x2 step (no lane)", "AsyncVectorEnv x2 step", "SyncVectorEnv x2 step",
                          "step_batch 2 (inline)"], lines
    assert float(rows["AsyncVectorEnv x2 step"][3]) == 1.0, lines  # the reference's ratio to itself
    for name, (wall, caller, workers, ratio) in rows.items():
        assert float(wall) > 0 and float(caller) > 0 and float(ratio) > 0, (name, lines)
        on_workers = "workers" in name or "lane" in name or "Async" in name
        assert (float(workers) > 0) == on_workers, (name, lines)  # only those have workers
    assert lines[-1].startswith("a bare pipe round trip"), lines
