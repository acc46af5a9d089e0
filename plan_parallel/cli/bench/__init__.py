"""``plan-parallel bench``: one module per suite (``inline``, ``process``, ``rollout``, ``vector``, ``mcts``,
``ray``), what they share (``common``, ``timing``, ``ceiling``) and the runner (``suites``)."""
from plan_parallel.cli.bench.suites import SUITES, add_bench_arguments, run_bench

__all__ = ["SUITES", "add_bench_arguments", "run_bench"]
