"""``plan-parallel bench --suite rollout``: a depth-T random rollout from N leaves.

``rollout_batch`` (each item's whole sequence inside one worker) against T
``step_batch`` calls (one round trip per depth, every intermediate state
shipped), on the same backend and leaves, timed alternately in one run.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plan_parallel.cli.bench.common import alternate, make_workload

__all__ = ["bench_rollout", "chained_step_batch"]

CASES: list[tuple[str, str, dict[str, Any]]] = [("CartPole-v1", "CartPole-v1", {}), ("Pong RGB", "ALE/Pong-v5", {})]


def chained_step_batch(env: Any, states: list, actions: np.ndarray) -> float:
    """The rollout done as T step_batch calls; items that ended are dropped. Returns the total reward."""
    total = 0.0
    live = list(range(len(states)))
    cur = list(states)
    for t in range(actions.shape[1]):
        if not live:
            break
        b = env.step_batch(actions[live, t], [cur[i] for i in live])
        total += float(b.rewards.sum())
        nxt = []
        for k, i in enumerate(live):
            cur[i] = b.states[k]
            if not (b.terminations[k] or b.truncations[k]):
                nxt.append(i)
        live = nxt
    return total


def bench_rollout(repeats: int, quick: bool, workers: int, leaves: int = 64, depth: int = 50) -> list[str]:
    import plan_parallel as pp

    if quick:
        leaves, depth = 16, 10
    lines = [
        f"rollout_batch vs {depth} step_batch calls, {leaves} leaves, depth {depth}, random actions, "
        f"W={workers} (median of {repeats} alternating runs)",
        f"{'workload':<14} {'backend':<8} {'steps/s chained':>16} {'steps/s rollout':>16} {'ratio':>6}",
    ]
    for label, env_id, kw in CASES:
        ref = pp.make(env_id, backend="inline", **kw)
        envs = {"inline": ref, "process": pp.make(env_id, backend="process", n_workers=workers, **kw)}
        try:
            states, _ = make_workload(ref, leaves)
            rng = np.random.default_rng(0)
            n_act = int(ref.action_space.n)
            actions = rng.integers(0, n_act, size=(leaves, depth))
            steps = int(ref.rollout_batch(states, actions).n_steps.sum())
            for name, env in envs.items():
                t = alternate(
                    {"chained": lambda: chained_step_batch(env, states, actions),
                     "rollout": lambda: env.rollout_batch(states, actions)},
                    repeats,
                )
                lines.append(f"{label:<14} {name:<8} {steps / t['chained']:>16,.0f} {steps / t['rollout']:>16,.0f} "
                             f"{t['chained'] / t['rollout']:>6.2f}")
        finally:
            for e in envs.values():
                e.close()
    return lines
