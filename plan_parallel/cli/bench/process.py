"""``plan-parallel bench --suite process``: inline vs the process backend, and a peer reference line."""
from __future__ import annotations

import statistics
import time
from typing import Any, NamedTuple

import numpy as np

from plan_parallel.cli.bench.ceiling import RawCrew, parallel_ceiling, pipe_round_trip
from plan_parallel.cli.bench.common import make_workload, raw_loop
from plan_parallel.cli.bench.timing import Timing, calls_lasting, measure, process_cpu_seconds

__all__ = ["CASES", "RoundTrip", "bench_process", "cpu_bound", "fixed_cost"]

# (label, env id, kwargs): Pong with RGB observations and frameskip 1, as the issue asks.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("CartPole-v1", "CartPole-v1", {}),
    ("Pong RGB fs1", "ALE/Pong-v5", {"frameskip": 1}),
    ("HalfCheetah-v5", "HalfCheetah-v5", {}),
]


def cpu_bound(inline: Timing, parallel: Timing, cores: int) -> float:
    """The most ``parallel`` can gain over ``inline`` with the CPU it spent: in the wall time of one inline
    item, ``cores`` cores supply ``cores`` times that much CPU, and each ``parallel`` item takes the caller's
    and the workers' CPU.

    Both CPU figures are measured while the processes ran, so a worker slowed by its neighbour on the
    other core counts at its slowed cost. A ratio under the bound is time the cores were idle (waiting
    for a message, a worker with nothing queued); one near it can only rise if an item costs less CPU.
    """
    spent = parallel.caller_cpu + parallel.worker_cpu
    return cores * inline.wall / spent if spent > 0 else float("nan")


class RoundTrip(NamedTuple):
    """What a ``step_batch`` call with 2 items that cannot run inline costs (:func:`fixed_cost`)."""

    wall: float  # median seconds of a call
    caller_cpu: float  # this process's CPU seconds per call (it polls while a reply is due)
    worker_cpu: float  # the workers' CPU seconds per call (0 where they are not local processes)


def fixed_cost(env: Any, state: Any, repeats: int) -> RoundTrip:
    """The cost of a step_batch call with 2 items (dt=1) that cannot run inline."""
    acts = np.array([env.action_space.sample() for _ in range(2)])
    pids = getattr(env, "pids", [])
    times = []
    w0, c0 = process_cpu_seconds(pids), time.process_time()
    for _ in range(max(50, repeats * 10)):
        t0 = time.perf_counter()
        env.step_batch(acts, [state, state], 1)
        times.append(time.perf_counter() - t0)
    n = len(times)
    return RoundTrip(statistics.median(times), (time.process_time() - c0) / n, (process_cpu_seconds(pids) - w0) / n)


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


def _placed(before: dict, after: dict) -> str:
    """Where the process env ran its batches between two snapshots of its stats: ``here/shared`` in %."""
    n = max(1, after["batches"] - before["batches"])
    here = 100 * (after["inline_batches"] - before["inline_batches"]) / n
    shared = 100 * (after["shared_batches"] - before["shared_batches"]) / n
    return f"{here:.0f}/{shared:.0f}"


def bench_process(repeats: int, quick: bool, workers: int,
                  cases: list[tuple[str, str, dict[str, Any]]] | None = None) -> list[str]:
    """Per workload: the raw loop, the raw loop in ``workers`` processes at once, inline, the process
    backend (default options), the process backend with every batch on the workers and with the tuned
    execution profile (``ExecutionPolicy.tuned()``); items/s, ratios, the row's own ceiling, and the CPU per
    item of the caller and of the workers (``cases``: :data:`CASES`)."""
    import plan_parallel as pp
    from plan_parallel.workers.cores import available_cpus

    cores = available_cpus()
    sizes = (8, 64) if quick else (8, 64, 512)
    dts = (1,) if quick else (1, 4)
    lines = [
        f"process backend (W={workers}), default options ('process') and every batch on the workers ('workers'), "
        f"against inline and the raw loop (unwrapped.step with the family's native state calls, no State objects)",
        f"items/s: medians of {repeats} alternating samples; ratios: medians of the ratios of the samples taken in "
        "the same turn; cpu: microseconds per item, caller (c) and workers (w)",
        "tun/proc: the tuned profile (ExecutionPolicy.tuned(): adaptive placement, pinned workers under SCHED_BATCH, "
        "the caller moved off busy cores) ÷ the default options, in the same turns",
        f"ceiling: the raw loop in {workers} processes at once ÷ the raw loop, in the same samples (what {workers} "
        "processes can gain here, now); eff: proc/inl ÷ ceiling; raw cpu xW: the CPU a raw item costs with every "
        f"process busy ÷ alone; wrk bound: what the CPU spent allows workers only, {cores} cores ÷ "
        "(caller + workers CPU per item) x inline's seconds per item (see cpu_bound); raw swing: the raw loop's "
        "slowest sample ÷ its fastest (the same loop alone: how far this machine's speed moved during the row)",
        f"parallel ceiling now: {workers} busy processes run {parallel_ceiling(workers):.2f}x one",
        f"{'workload':<15} {'B':>4} {'dt':>2} {'raw/s':>8} {'inline/s':>8} {'process/s':>9} {'workers/s':>9} "
        f"{'inl/raw':>7} {'proc/raw':>8} {'proc/inl':>8} {'wrk/inl':>7} {'tun/proc':>8} {'ceiling':>7} {'eff':>5} "
        f"{'raw cpu xW':>10}"
        f" {'wrk bound':>9} {'raw swing':>9}  {'proc c/w us':>12}  {'wrk c/w us':>12}"
        "  process batches here/shared % (warm-up included)",
    ]
    fixed = []
    for label, env_id, kw in cases or CASES:
        ref = pp.make(env_id, backend="inline", **kw)
        proc = pp.make(env_id, backend="process", n_workers=workers, **kw)
        strict = pp.make(env_id, backend="process", n_workers=workers, small_batch_inline=False, **kw)
        tuned = pp.make(env_id, backend="process", n_workers=workers, execution=pp.ExecutionPolicy.tuned(), **kw)
        raw = crew = None
        try:
            states, actions = make_workload(ref, max(sizes))
            raw, raw_run = raw_loop(env_id, kw, ref, states, actions, lambda e: e.unwrapped.step)
            crew = RawCrew(env_id, kw, workers, max(sizes))
            for b in sizes:
                for dt in dts:
                    st, ac = states[:b], actions[:b]
                    calls = calls_lasting(lambda: raw_run(b, dt))  # a crew call lasts a sample
                    before = dict(proc.stats)
                    t = measure(
                        {"raw": lambda: raw_run(b, dt), "crew": lambda: crew.run(b, dt, calls),
                         "inline": lambda: ref.step_batch(ac, st, dt),
                         "process": lambda: proc.step_batch(ac, st, dt),
                         "workers": lambda: strict.step_batch(ac, st, dt),
                         "tuned": lambda: tuned.step_batch(ac, st, dt)},
                        repeats, pids={"process": lambda: proc.pids, "workers": lambda: strict.pids,
                                       "tuned": lambda: tuned.pids, "crew": lambda: crew.pids},
                    )
                    items = {"crew": workers * b * calls}
                    rate = {k: items.get(k, b) / v.wall for k, v in t.items()}
                    cpu = {k: f"{v.caller_cpu / b * 1e6:.1f}/{v.worker_cpu / b * 1e6:.0f}" for k, v in t.items()}
                    ceiling = t["crew"].speedup(t["raw"]) * workers * calls  # a crew call runs W * calls raw loops
                    inflation = (t["crew"].worker_cpu / items["crew"]) / (t["raw"].caller_cpu / b)
                    proc_inl = t["process"].speedup(t["inline"])
                    bound = cpu_bound(t["inline"], t["workers"], cores)
                    lines.append(
                        f"{label:<15} {b:>4} {dt:>2} {rate['raw']:>8,.0f} {rate['inline']:>8,.0f} "
                        f"{rate['process']:>9,.0f} {rate['workers']:>9,.0f} {t['inline'].speedup(t['raw']):>7.2f} "
                        f"{t['process'].speedup(t['raw']):>8.2f} {proc_inl:>8.2f} "
                        f"{t['workers'].speedup(t['inline']):>7.2f} {t['tuned'].speedup(t['process']):>8.2f} {ceiling:>7.2f} "
                        f"{proc_inl / ceiling:>5.2f} {inflation:>10.2f} {bound:>9.2f} "
                        f"{max(t['raw'].walls) / min(t['raw'].walls):>9.2f}"
                        f"  {cpu['process']:>12}  {cpu['workers']:>12}  {_placed(before, proc.stats)}"
                    )
            trip = fixed_cost(strict, states[0], repeats)
            fixed.append(f"{label}: {trip.wall * 1e6:.0f} us ({trip.caller_cpu * 1e6:.0f}/{trip.worker_cpu * 1e6:.0f} us)")
            ref_tps = _async_vector_reference(env_id, kw, workers, 200 if quick else 1000)
            lines.append(f"{label:<15} gymnasium AsyncVectorEnv ({workers} envs, dt=1): {ref_tps:,.0f} items/s")
        finally:
            for e in (ref, proc, strict, tuned, raw, crew):
                if e is not None:
                    e.close()
    lines.append("round trip of a call with 2 tiny items, always on workers (median; CPU per call, caller/workers): "
                 + "; ".join(fixed) + f"; a bare pipe round trip between two Python processes: {pipe_round_trip() * 1e6:.0f} us")
    lines.append(f"parallel ceiling at the end: {parallel_ceiling(workers):.2f}x")
    return lines
