"""The runner behind ``plan-parallel bench``: the suites by name (``--suite``, or all of them in turn), each
a module of this package with a ``bench_<name>`` function, imported when it runs (the Ray suite needs Ray).
What each measures is in the command's help (:mod:`plan_parallel.cli.main`).

The machine is small and noisy: every figure is the median of ``--repeats``
alternating runs, and ratios compare runs made side by side.
"""
from __future__ import annotations

import argparse
import importlib

__all__ = ["SUITES", "add_bench_arguments", "run_bench"]

SUITES = ("inline", "process", "latency", "rollout", "vector", "mcts", "scale", "ray")  # "all" runs them in this order


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=[*SUITES, "all"], default="all", help="which suite to run (see above)")
    p.add_argument("--repeats", type=int, default=7, help="alternating runs per figure (median)")
    p.add_argument("--workers", type=int, default=2, help="worker processes or Ray actors")
    p.add_argument("--quick", action="store_true", help="small batches and few repeats (a smoke run)")


def _run_suite(name: str, repeats: int, quick: bool, workers: int) -> list[str]:
    """The lines of suite ``name``: ``plan_parallel.cli.bench.<name>.bench_<name>`` (the inline suite has no workers)."""
    bench = getattr(importlib.import_module(f"plan_parallel.cli.bench.{name}"), f"bench_{name}")
    return bench(repeats, quick) if name == "inline" else bench(repeats, quick, workers)


def run_bench(args: argparse.Namespace) -> int:
    repeats = 3 if args.quick else args.repeats
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    for suite in suites:
        print("\n".join(_run_suite(suite, repeats, args.quick, args.workers)), flush=True)
        print()
    return 0
