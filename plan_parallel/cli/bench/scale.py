"""``plan-parallel bench --suite scale``: how far the calling process lets W workers scale.

Two tables, both with every batch on the workers (``placement="workers"``):

* **An env whose steps sleep** (:class:`~plan_parallel.cli.bench.roots.SleepyWalk`, 2 ms a step, a user env
  with ``get_state`` / ``set_state``): its steps cost wall time and almost no CPU, so W workers could step
  W times as many items even on a machine with fewer cores; what they lose is the calling process's serial
  work. For W up to 64 and k items a worker (B = W k a call): the speedup over stepping the B items one
  after the other here (B times an item's time inline, measured), the efficiency (speedup ÷ W), the
  calling process's CPU an item and a call, the workers' CPU a call, and the machine's load: all that CPU ÷
  (wall x the cores this process may use). A load near 1 means this machine's cores, not the calling process,
  bound the row: a sleep and a worker's wake-up cost CPU too (~20 us a sleep and ~200 us a chunk on a 2-core VM).
* **The Amdahl bound of real envs**: CartPole B=512, Pong (RGB, frameskip 1, its screens lent to the result; and
  RAM observations) B=64 and HalfCheetah B=64 on
  ``--workers`` workers: the workers' CPU an item ÷ the caller's CPU an item is how many workers the
  calling process can keep busy before its own work is the bottleneck. The caller's CPU is measured for
  states of three origins: made elsewhere (an inline env's, checked and written field by field), a list of
  the env's own result's states (what a planner passes back), and that result's whole ``states`` batch.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

from plan_parallel.cli.bench.common import make_workload
from plan_parallel.cli.bench.roots import SleepyWalk
from plan_parallel.cli.bench.timing import measure, process_cpu_seconds
from plan_parallel.workers.cores import available_cpus

__all__ = ["AMDAHL_CASES", "PAUSE", "bench_scale", "sleep_row"]

PAUSE = 2e-3  # seconds a SleepyWalk step sleeps
# (label, env id, kwargs, items a call): the real envs of the Amdahl table.
AMDAHL_CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("CartPole-v1", "CartPole-v1", {}, 512),
    ("Pong RGB fs1", "ALE/Pong-v5", {"frameskip": 1}, 64),
    ("Pong RAM fs1", "ALE/Pong-v5", {"frameskip": 1, "obs_type": "ram"}, 64),
    ("HalfCheetah-v5", "HalfCheetah-v5", {}, 64),
]


def sleep_row(workers: int, per_worker: int, repeats: int, item_seconds: float, states: list,
              actions: Any) -> dict[str, float]:
    """One row of the sleeping env's table: W = ``workers``, ``per_worker`` items each (the first of ``states``
    and ``actions``), ``repeats`` timed calls after one untimed; ``item_seconds``: an item's time stepped here."""
    import plan_parallel as pp

    n = workers * per_worker
    states, actions = states[:n], actions[:n]
    policy = pp.ExecutionPolicy(n_workers=workers, placement="workers")
    with pp.make(SleepyWalk, pause=PAUSE, execution=policy) as env:
        env.step_batch(actions, states)  # the workers' first chunks
        pids = env.pids
        walls, cpus, worker_cpus = [], [], []
        for _ in range(repeats):
            w0 = process_cpu_seconds(pids)
            c0, t0 = time.process_time(), time.perf_counter()
            env.step_batch(actions, states)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            worker_cpus.append(process_cpu_seconds(pids) - w0)
    wall, cpu, worker_cpu = statistics.median(walls), statistics.median(cpus), statistics.median(worker_cpus)
    speedup = n * item_seconds / wall
    return {"items": n, "wall": wall, "speedup": speedup, "eff": speedup / workers, "cpu_item": cpu / n,
            "cpu_call": cpu, "workers_call": worker_cpu, "load": (cpu + worker_cpu) / (wall * available_cpus())}


def _amdahl_row(label: str, env_id: str, kw: dict, n: int, repeats: int, workers: int) -> str:
    import plan_parallel as pp

    policy = pp.ExecutionPolicy(n_workers=workers, placement="workers")
    with pp.make(env_id, backend="inline", **kw) as ref, pp.make(env_id, execution=policy, **kw) as env:
        states, actions = make_workload(ref, n)
        env.step_batch(actions, states)
        batch = env.step_batch(actions, states).states
        own = list(batch)
        t = measure({"elsewhere": lambda: env.step_batch(actions, states),
                     "own list": lambda: env.step_batch(actions, own),
                     "own batch": lambda: env.step_batch(actions, batch)}, repeats,
                    pids={k: lambda: env.pids for k in ("elsewhere", "own list", "own batch")})
    callers = [t[k].caller_cpu / n for k in ("elsewhere", "own list", "own batch")]
    worker = t["own list"].worker_cpu / n
    return (f"{label:<16} {n:>5} {'/'.join(f'{c * 1e6:.1f}' for c in callers):>18} {worker * 1e6:>10.1f} "
            f"{worker / callers[1]:>10.1f} {t['own list'].wall / n * 1e6:>10.1f}")


def bench_scale(repeats: int, quick: bool, workers: int) -> list[str]:
    """The sleeping env's scaling table (W 1-64; 1-4 with ``quick``) and the Amdahl bound of the real envs."""
    import plan_parallel as pp

    ws = (1, 2, 4) if quick else (1, 2, 4, 8, 16, 32, 64)
    ks = (32, 4)
    with pp.make(SleepyWalk, pause=PAUSE, backend="inline") as inline:  # the start states of every row, once
        states, actions = make_workload(inline, max(ws) * max(ks))
        t0 = time.perf_counter()
        inline.step_batch(actions[:32], states[:32])
        item_seconds = (time.perf_counter() - t0) / 32
    lines = [
        f"scaling with W workers, every batch on the workers: SleepyWalk (each step sleeps {PAUSE * 1e3:g} ms, "
        f"{item_seconds * 1e3:.3f} ms an item inline), k items a worker, B = W k items a call; "
        f"medians of {repeats} calls",
        "speedup: B x an item's inline time ÷ a call's wall time; eff: speedup ÷ W; caller CPU: this process's, "
        f"per item and per call; workers: their CPU a call; load: all that CPU ÷ (wall x {available_cpus()} cores)",
        f"{'W':>3} {'k':>3} {'B':>5} {'call ms':>8} {'speedup':>8} {'eff':>5} {'caller us/item':>14} "
        f"{'caller us/call':>14} {'workers us/call':>15} {'load':>5}",
    ]
    for k in ks:
        for w in ws:
            r = sleep_row(w, k, repeats, item_seconds, states, actions)
            lines.append(f"{w:>3} {k:>3} {int(r['items']):>5} {r['wall'] * 1e3:>8.1f} {r['speedup']:>8.2f} "
                         f"{r['eff']:>5.2f} {r['cpu_item'] * 1e6:>14.1f} {r['cpu_call'] * 1e6:>14.0f} "
                         f"{r['workers_call'] * 1e6:>15.0f} {r['load']:>5.2f}")
    lines += [
        "",
        f"the Amdahl bound of real envs (W={workers}, every batch on the workers): CPU microseconds an item, the "
        "caller's (states made elsewhere / a list of the env's own result's states / that result's batch) and the "
        "workers'; bound: workers' ÷ caller's (own list), the workers the calling process can keep busy",
        f"{'workload':<16} {'B':>5} {'caller us e/l/b':>18} {'workers us':>10} {'bound W':>10} {'wall us':>10}",
    ]
    for label, env_id, kw, n in AMDAHL_CASES[:1] if quick else AMDAHL_CASES:
        lines.append(_amdahl_row(label, env_id, kw, n, repeats, workers))
    return lines
