"""The suites behind ``plan-parallel bench``: medians and ratios measured in one run.

Suites:
    inline: the inline backend against a hand-written loop of plain gymnasium
        calls with the family's native state calls (the overhead of the state
        protocol and of PlanEnv).
    process: inline against the process backend (and gymnasium's
        AsyncVectorEnv as a reference line).

The machine is small and noisy: every figure is the median of ``--repeats``
alternating runs, and ratios compare runs made side by side.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

from plan_parallel.cli.bench.inline import bench_inline

__all__ = ["SUITES", "add_bench_arguments", "run_bench"]


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=[*SUITES, "all"], default="all", help="which suite to run (see above)")
    p.add_argument("--repeats", type=int, default=7, help="alternating runs per figure (median)")
    p.add_argument("--workers", type=int, default=2, help="worker processes or Ray actors")
    p.add_argument("--quick", action="store_true", help="small batches and few repeats (a smoke run)")


def _suite_process(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.cli.bench.process import bench_process

    return bench_process(repeats, quick, workers)


def _suite_rollout(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.cli.bench.rollout import bench_rollout

    return bench_rollout(repeats, quick, workers)


def _suite_vector(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.cli.bench.vector import bench_vector

    return bench_vector(repeats, quick, workers)


def _suite_mcts(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.cli.bench.mcts import bench_mcts

    return bench_mcts(repeats, quick, workers)


def _suite_ray(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.cli.bench.ray import bench_ray

    return bench_ray(repeats, quick, workers)


# name -> fn(repeats, quick, workers) -> lines; "all" runs them in this order.
SUITES: dict[str, Callable[[int, bool, int], list[str]]] = {
    "inline": lambda repeats, quick, workers: bench_inline(repeats, quick),
    "process": _suite_process,
    "rollout": _suite_rollout,
    "vector": _suite_vector,
    "mcts": _suite_mcts,
    "ray": _suite_ray,
}


def run_bench(args: argparse.Namespace) -> int:
    repeats = 3 if args.quick else args.repeats
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    for suite in suites:
        print("\n".join(SUITES[suite](repeats, args.quick, args.workers)), flush=True)
        print()
    return 0
