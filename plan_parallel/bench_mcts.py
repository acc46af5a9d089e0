"""``plan-parallel bench --suite mcts``: MCTS on Pong, decisions per second, inline against the process backend.

The planner figure of the data-plane issue: the preset MCTS planner
(``plan_parallel.planners.presets``) plays the first decisions of a Pong
episode on the inline backend and on ``workers`` worker processes. Given the
seed, both make the same decisions, so the runs differ only in where the items
ran; they are timed in alternation, and the ratio is the median of the
per-pair ratios.
"""
from __future__ import annotations

import statistics
from typing import Any

__all__ = ["ENV_ID", "bench_mcts"]

ENV_ID = "ALE/Pong-v5"


def _rate(env: Any, decisions: int) -> float:
    """Decisions per second of a fresh preset MCTS over the first ``decisions`` of the episode with seed 0."""
    from plan_parallel.planners import run_episode
    from plan_parallel.planners.presets import make_planner

    episode = run_episode(make_planner("mcts", ENV_ID), env, seed=0, max_steps=decisions)
    return float(episode.decisions_per_second)


def bench_mcts(repeats: int, quick: bool, workers: int, decisions: int | None = None, warmup: int = 6) -> list[str]:
    """The suite's lines: ``decisions`` per run (default 16, 3 with ``quick``) after ``warmup`` untimed ones."""
    import plan_parallel as pp
    from plan_parallel.bench_ceiling import parallel_ceiling

    if decisions is None:
        decisions = 3 if quick else 16
    envs: dict[str, Any] = {}
    lines = [
        f"MCTS on {ENV_ID} (its preset: 32 simulations, 16 leaves per batch, rollouts of depth 20), "
        f"decisions/s over the first {decisions} decisions (median of {repeats} alternating runs)",
        f"parallel ceiling now: {workers} busy processes run {parallel_ceiling(workers):.2f}x one",
    ]
    try:
        envs["inline"] = pp.make(ENV_ID, backend="inline")
        envs[f"process W={workers}"] = pp.make(ENV_ID, backend="process", n_workers=workers)
        for env in envs.values():
            _rate(env, warmup)  # the process backend measures each place 3 times per batch size first
        rates: dict[str, list[float]] = {k: [] for k in envs}
        for _ in range(repeats):
            for k, env in envs.items():
                rates[k].append(_rate(env, decisions))
    finally:
        for env in envs.values():
            env.close()
    base = rates["inline"]
    for k, rs in rates.items():
        ratio = statistics.median(r / b for r, b in zip(rs, base))
        lines.append(f"{k:<14} {statistics.median(rs):>7.2f} decisions/s  x inline {ratio:.2f}")
    lines.append(f"parallel ceiling at the end: {parallel_ceiling(workers):.2f}x")
    return lines
