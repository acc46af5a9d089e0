"""``plan-parallel bench --suite process``: inline vs the process backend, and a peer reference line."""
from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from plan_parallel.bench import alternate, make_workload

__all__ = ["CASES", "bench_process", "fixed_cost", "parallel_ceiling"]

# (label, env id, kwargs): Pong with RGB observations and frameskip 1, as the issue asks.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("CartPole-v1", "CartPole-v1", {}),
    ("Pong RGB fs1", "ALE/Pong-v5", {"frameskip": 1}),
    ("HalfCheetah-v5", "HalfCheetah-v5", {}),
]


def _burn(n: int) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    return time.perf_counter() - t0


def parallel_ceiling(workers: int, n: int = 2_000_000, repeats: int = 3) -> float:
    """How much faster ``workers`` CPU-bound processes finish than one, right now (2.0 on a quiet 2-core box).

    Printed with the ratios: on a shared machine the ceiling moves, and a
    ratio means little without it.
    """
    import multiprocessing as mp

    ratios = []
    with mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn").Pool(workers) as pool:
        pool.map(_burn, [1000] * workers)
        for _ in range(repeats):
            alone = _burn(n)
            t0 = time.perf_counter()
            pool.map(_burn, [n] * workers)
            both = time.perf_counter() - t0
            ratios.append(workers * alone / both)
    return statistics.median(ratios)


def fixed_cost(env: Any, state: Any, repeats: int) -> float:
    """Median seconds of a step_batch call with 2 items (dt=1) that cannot run inline."""
    acts = np.array([env.action_space.sample() for _ in range(2)])
    times = []
    for _ in range(max(50, repeats * 10)):
        t0 = time.perf_counter()
        env.step_batch(acts, [state, state], 1)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _async_vector_reference(env_id: str, kw: dict, w: int, steps: int) -> float:
    """Transitions/s of gymnasium's AsyncVectorEnv (w envs, shared memory) stepping the same env."""
    import gymnasium as gym

    from plan_parallel.factory import EnvFactory

    fns = [EnvFactory(env_id, kw) for _ in range(w)]
    venv = gym.vector.AsyncVectorEnv(fns, shared_memory=True)
    try:
        venv.reset(seed=0)
        acts = venv.action_space.sample()
        venv.step(acts)
        t0 = time.perf_counter()
        for _ in range(steps):
            venv.step(venv.action_space.sample())
        return steps * w / (time.perf_counter() - t0)
    finally:
        venv.close()


def bench_process(repeats: int, quick: bool, workers: int) -> list[str]:
    import plan_parallel as pp

    sizes = (8, 64) if quick else (8, 64, 512)
    lines = [
        f"process backend (W={workers}) vs inline, transitions/s (median of {repeats} alternating runs)",
        f"{'workload':<16} {'B':>5} {'dt':>3} {'inline':>10} {'process':>10} {'ratio':>6}",
    ]
    fixed = []
    lines.append(f"parallel ceiling now: {workers} busy processes run {parallel_ceiling(workers):.2f}x one")
    for label, env_id, kw in CASES:
        ref = pp.make(env_id, backend="inline", **kw)
        proc = pp.make(env_id, backend="process", n_workers=workers, **kw)
        strict = pp.make(env_id, backend="process", n_workers=workers, small_batch_inline=False, **kw)
        try:
            states, actions = make_workload(ref, max(sizes))
            for b in sizes:
                for dt in (1, 4):
                    st, ac = states[:b], actions[:b]
                    steps = sum(i["n_steps"] for i in ref.step_batch(ac, st, dt).infos)
                    t = alternate(
                        {"inline": lambda: ref.step_batch(ac, st, dt), "process": lambda: proc.step_batch(ac, st, dt)},
                        repeats,
                    )
                    lines.append(
                        f"{label:<16} {b:>5} {dt:>3} {steps / t['inline']:>10,.0f} {steps / t['process']:>10,.0f} "
                        f"{t['inline'] / t['process']:>6.2f}"
                    )
            fixed.append(f"{label}: {fixed_cost(strict, states[0], repeats) * 1e6:.0f} us")
            ref_tps = _async_vector_reference(env_id, kw, workers, 200 if quick else 1000)
            lines.append(f"{label:<16} gymnasium AsyncVectorEnv ({workers} envs, dt=1): {ref_tps:,.0f} transitions/s")
        finally:
            ref.close()
            proc.close()
            strict.close()
    lines.append("fixed cost of a call with 2 tiny items, always on workers (median): " + "; ".join(fixed))
    lines.append(f"parallel ceiling at the end: {parallel_ceiling(workers):.2f}x")
    return lines
