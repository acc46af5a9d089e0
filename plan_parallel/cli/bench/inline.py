"""``plan-parallel bench --suite inline``: the inline backend against a hand-written loop of plain gymnasium calls
with the family's native state calls (the overhead of the state protocol and of PlanEnv)."""
from __future__ import annotations

from plan_parallel.cli.bench.common import alternate, make_workload, raw_loop

__all__ = ["bench_inline"]


def bench_inline(repeats: int, quick: bool) -> list[str]:
    """Inline PlanEnv vs a hand-written loop of native state calls (same items, same env)."""
    import plan_parallel as pp

    lines = [f"inline backend vs hand-written loop (median of {repeats} alternating runs)",
             f"{'env':<14} {'B':>5} {'dt':>3} {'loop tr/s':>11} {'inline tr/s':>12} {'ratio':>6}"]
    cases: list[tuple[str, dict, int]] = [
        ("CartPole-v1", {}, 512 if not quick else 64), ("ALE/Pong-v5", {}, 64 if not quick else 8)]
    for env_id, kw, b in cases:
        pe = pp.make(env_id, backend="inline", **kw)
        states, actions = make_workload(pe, b)
        # The hand loop: the same start states, as native values, in a plain env of its own.
        raw, loop = raw_loop(env_id, kw, pe, states, actions, lambda e: e.step)
        for dt in (1, 4):
            steps = sum(i["n_steps"] for i in pe.step_batch(actions, states, dt).infos)
            t = alternate(
                {
                    "loop": lambda: loop(b, dt),
                    "inline": lambda: pe.step_batch(actions, states, dt),
                },
                repeats,
            )
            lines.append(
                f"{env_id:<14} {b:>5} {dt:>3} {steps / t['loop']:>11,.0f} {steps / t['inline']:>12,.0f} "
                f"{t['loop'] / t['inline']:>6.2f}"
            )
        pe.close()
        raw.close()
    return lines
