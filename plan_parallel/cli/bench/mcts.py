"""``plan-parallel bench --suite mcts``: MCTS on Pong, decisions per second, inline against the process backend;
then many roots searched together (:mod:`plan_parallel.cli.bench.roots`).

The planner figure of the data-plane issue: the preset MCTS planner
(``plan_parallel.planners.presets``) plays the first decisions of a Pong
episode on the inline backend and on ``workers`` worker processes. Given the
seed, both make the same decisions, so the runs differ only in where the items
ran; they are timed in alternation, and the ratio is the median of the
per-pair ratios.

Each turn also times the raw loop over a rollout batch's work (16 items of 20
env steps, the preset's) alone and in ``workers`` processes at once
(:class:`~plan_parallel.cli.bench.ceiling.RawCrew`): that turn's ceiling, what
``workers`` processes could gain on this machine then. ``eff`` is the
process backend's ratio ÷ the ceiling of the same turn (median over turns).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from plan_parallel.cli.bench.ceiling import RawCrew, parallel_ceiling
from plan_parallel.cli.bench.common import make_workload, raw_loop
from plan_parallel.cli.bench.roots import bench_roots
from plan_parallel.cli.bench.timing import calls_lasting

__all__ = ["ENV_ID", "bench_mcts"]

ENV_ID = "ALE/Pong-v5"
CEILING_ITEMS, CEILING_DT = 16, 20  # the raw loop of the ceiling: a rollout batch's items and steps (the preset's)


def _rate(env: Any, decisions: int) -> float:
    """Decisions per second of a fresh preset MCTS over the first ``decisions`` of the episode with seed 0."""
    from plan_parallel.planners import run_episode
    from plan_parallel.planners.presets import make_planner

    episode = run_episode(make_planner("mcts", ENV_ID), env, seed=0, max_steps=decisions)
    return float(episode.decisions_per_second)


def bench_mcts(repeats: int, quick: bool, workers: int, decisions: int | None = None, warmup: int = 6) -> list[str]:
    """The suite's lines: ``decisions`` per run (default 16, 3 with ``quick``) after ``warmup`` untimed ones."""
    import plan_parallel as pp

    if decisions is None:
        decisions = 3 if quick else 16
    envs: dict[str, Any] = {}
    lines = [
        f"MCTS on {ENV_ID} (its preset: 32 simulations, 16 leaves per batch, rollouts of depth 20), "
        f"decisions/s over the first {decisions} decisions (median of {repeats} alternating runs); ceiling: the raw "
        f"loop of a rollout batch's work in {workers} processes at once ÷ alone, in the same turns; eff: x inline ÷ ceiling",
        f"parallel ceiling now: {workers} busy processes run {parallel_ceiling(workers):.2f}x one",
    ]
    crew = raw = None
    try:
        envs["inline"] = pp.make(ENV_ID, backend="inline")
        envs[f"process W={workers}"] = pp.make(ENV_ID, backend="process", n_workers=workers)
        for env in envs.values():
            _rate(env, warmup)  # the process backend measures each place 3 times per batch size first
        states, actions = make_workload(envs["inline"], CEILING_ITEMS)
        raw, raw_run = raw_loop(ENV_ID, {}, envs["inline"], states, actions, lambda e: e.unwrapped.step)
        crew = RawCrew(ENV_ID, {}, workers, CEILING_ITEMS)
        calls = calls_lasting(lambda: raw_run(CEILING_ITEMS, CEILING_DT), 0.5)
        rates: dict[str, list[float]] = {k: [] for k in envs}
        ceilings: list[float] = []
        for _ in range(repeats):
            for k, env in envs.items():
                rates[k].append(_rate(env, decisions))
            alone = _seconds(lambda: [raw_run(CEILING_ITEMS, CEILING_DT) for _ in range(calls)])
            ceilings.append(workers * alone / _seconds(lambda: crew.run(CEILING_ITEMS, CEILING_DT, calls)))
    finally:
        for e in (*envs.values(), raw, crew):
            if e is not None:
                e.close()
    base = rates["inline"]
    for k, rs in rates.items():
        ratios = [r / b for r, b in zip(rs, base)]
        tail = "" if k == "inline" else (f"  ceiling {statistics.median(ceilings):.2f}  "
                                         f"eff {statistics.median(x / c for x, c in zip(ratios, ceilings)):.2f}")
        lines.append(f"{k:<14} {statistics.median(rs):>7.2f} decisions/s  x inline {statistics.median(ratios):.2f}{tail}")
    lines.append(f"parallel ceiling at the end: {parallel_ceiling(workers):.2f}x")
    return [*lines, "", *bench_roots(repeats, quick, workers)]


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
