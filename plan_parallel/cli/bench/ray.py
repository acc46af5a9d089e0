"""``plan-parallel bench --suite ray``: the Ray backend against inline (and the process backend), in one run.

Transitions/s of ``step_batch`` at B=512 (and B=8, where the fixed cost of a
call dominates) with dt=4, for Pong (RGB observations, frameskip 1, as the
process suite) and HalfCheetah: ``backend="ray"`` with W actors on a private
local Ray instance and inline (plus the process backend with W workers at
B=8), every batch on the workers (``small_batch_inline=False``: the backend
itself, not the shortcut that runs small batches in this process), timed
alternately; every figure is a median and the ratios are to
inline measured side by side. Also Ray's start-up (``ray.init`` of the private instance, then
the first env's actors) and the fixed cost of a call with 2 tiny items.
"""
from __future__ import annotations

import time
from typing import Any

from plan_parallel.cli.bench.common import alternate, make_workload

__all__ = ["CASES", "bench_ray"]

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("Pong RGB fs1", "ALE/Pong-v5", {"frameskip": 1}),
    ("HalfCheetah-v5", "HalfCheetah-v5", {}),
]
DT = 4
# The process column only for small batches, where the fixed cost of a call decides (large ones: --suite process).
SMALL = 64


def bench_ray(repeats: int, quick: bool, workers: int, address: str | None = None) -> list[str]:
    """The ray suite's report lines (starts or joins Ray: see :func:`plan_parallel.workers.ray_connect.connect`)."""
    try:
        import ray  # noqa: F401 - only to say it is missing
    except ImportError:
        return ['ray suite skipped: Ray is not installed (pip install -e ".[ray]")']
    import plan_parallel as pp
    from plan_parallel.cli.bench.ceiling import parallel_ceiling
    from plan_parallel.cli.bench.process import fixed_cost
    from plan_parallel.workers.ray_connect import connect

    sizes = (8, 64) if quick else (8, 512)
    ceiling = parallel_ceiling(workers)  # before Ray: its pool forks this process
    t0 = time.perf_counter()
    started = connect(address)
    init_s = time.perf_counter() - t0
    lines = [
        f"ray backend (W={workers} actors) vs inline, and process backend (W={workers}) at B<={SMALL}, transitions/s, "
        f"dt={DT} (median of {repeats} alternating runs; ratios to inline in the same run; every batch on the "
        "workers: small_batch_inline=False)",
        "Ray start-up: " + (f"ray.init of a private local instance {init_s:.2f} s" if started
                            else f"already connected ({init_s * 1e3:.0f} ms)"),
        f"parallel ceiling before the run: {workers} busy processes ran {ceiling:.2f}x one",
        f"{'workload':<16} {'B':>5} {'inline':>10} {'ray':>10} {'ratio':>6} {'process':>10} {'ratio':>6}",
    ]
    fixed, first = [], []
    for label, env_id, kw in CASES:
        ref = pp.make(env_id, backend="inline", **kw)
        t0 = time.perf_counter()
        on_ray = pp.make(env_id, backend="ray", n_workers=workers, address=address, small_batch_inline=False, **kw)
        first.append(f"{label}: {time.perf_counter() - t0:.2f} s")
        proc = pp.make(env_id, backend="process", n_workers=workers, small_batch_inline=False, **kw)
        try:
            states, actions = make_workload(ref, max(sizes))
            for b in sizes:
                st, ac = states[:b], actions[:b]
                steps = sum(i["n_steps"] for i in ref.step_batch(ac, st, DT).infos)
                fns = {"inline": lambda: ref.step_batch(ac, st, DT), "ray": lambda: on_ray.step_batch(ac, st, DT)}
                if b <= SMALL:
                    fns["process"] = lambda: proc.step_batch(ac, st, DT)
                t = alternate(fns, repeats)
                row = (f"{label:<16} {b:>5} {steps / t['inline']:>10,.0f} {steps / t['ray']:>10,.0f} "
                       f"{t['inline'] / t['ray']:>6.2f}")
                if "process" in t:
                    row += f" {steps / t['process']:>10,.0f} {t['inline'] / t['process']:>6.2f}"
                lines.append(row)
            fixed.append(f"{label}: ray {fixed_cost(on_ray, states[0], repeats).wall * 1e6:,.0f} us, "
                         f"process {fixed_cost(proc, states[0], repeats).wall * 1e6:,.0f} us")
        finally:
            for e in (ref, on_ray, proc):
                e.close()
    lines.append(f"first ray env (create {workers} actors, build the envs, measure): " + "; ".join(first))
    lines.append("fixed cost of a call with 2 tiny items, always on workers (median): " + "; ".join(fixed))
    return lines
