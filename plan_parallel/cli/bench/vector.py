"""``plan-parallel bench --suite vector``: make_vec against gymnasium's SyncVectorEnv and AsyncVectorEnv.

Each case runs its number of sub-envs (16 CartPoles, 8 Pongs: the issue's
targets) with the same pre-drawn random actions;
make_vec uses ``workers`` process workers: by default (a step the workers would save under
1 ms runs in this process: the execution policy's rule), with every batch on the workers
(``no-inline``), with the tuned profile (``ExecutionPolicy.tuned()``: adaptive placement, steps
shared with this process among its places, pinned workers), and the inline backend (the cost of the
state protocol and of the vector layer alone).

The vector envs take turns of :data:`TURN_STEPS` vector steps each, through
``repeats`` passes over the pre-drawn actions: a change of the machine's speed
(this VM's neighbours) lands on every contestant alike. Their order is shuffled
at each turn (seeded): a turn after AsyncVectorEnv's, whose 16 processes have
just run, starts with cold caches, and in a fixed order the same contestant
always paid for it (``docs/measurements.md``). Figures are env
steps per second (vector steps x sub-envs) over all turns; each ratio is the
median of the per-turn ratios to SyncVectorEnv (and to AsyncVectorEnv), and *run x Async* the ratio
of all of AsyncVectorEnv's turns' time to all of the contestant's: a contestant that stalls now and
then loses little in the medians and all of it there. The CPU column is
the CPU time of this process and of the vector env's worker processes over all
its turns, per env step: what an env step costs the machine, wherever it ran.
"""
from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["CASES", "TURN_STEPS", "bench_vector"]

TURN_STEPS = 5  # vector steps a contestant runs in one turn

# (label, env id, kwargs, sub-envs, vector steps per run, quick vector steps): Pong with its defaults
# (RGB observations, frameskip 4, sticky actions).
CASES: list[tuple[str, str, dict[str, Any], int, int, int]] = [
    ("CartPole-v1", "CartPole-v1", {}, 16, 400, 100),
    ("Pong RGB", "ALE/Pong-v5", {}, 8, 60, 15),
]


def _runner(venv: Any, cpu: list[float]) -> Callable[[np.ndarray], float]:
    """A function that steps ``venv`` through some actions and returns the seconds it took; the CPU
    seconds of this process and of ``venv``'s workers are added to ``cpu[0]``."""
    from plan_parallel.cli.bench.timing import process_cpu_seconds

    processes = getattr(venv, "processes", None)  # AsyncVectorEnv's workers
    pids = [p.pid for p in processes] if processes is not None else getattr(getattr(venv, "plan_env", None), "pids", [])

    def run(actions: np.ndarray) -> float:
        w0, c0, t0 = process_cpu_seconds(pids), time.process_time(), time.perf_counter()
        for a in actions:
            venv.step(a)
        seconds = time.perf_counter() - t0
        cpu[0] += time.process_time() - c0 + process_cpu_seconds(pids) - w0
        return seconds

    return run


def bench_vector(repeats: int, quick: bool, workers: int,
                 cases: list[tuple[str, str, dict[str, Any], int, int, int]] | None = None) -> list[str]:
    """The suite's lines; ``cases`` replaces :data:`CASES` (the tests run a small one)."""
    import gymnasium as gym

    import plan_parallel as pp
    from plan_parallel.cli.bench.ceiling import parallel_ceiling
    from plan_parallel.factory import EnvFactory

    lines = [
        f"make_vec (process, W={workers}) vs gymnasium vector envs, env steps/s over {repeats} passes in turns of "
        f"{TURN_STEPS} vector steps each, in an order shuffled each turn (ratios: medians of the per-turn ratios to "
        "SyncVectorEnv and AsyncVectorEnv; run x Async: AsyncVectorEnv's time over all turns / the contestant's)",
        "the machine has 2 cores shared with other work: ratios move with its load (see the ceiling)",
        f"parallel ceiling now: {workers} busy processes run {parallel_ceiling(workers):.2f}x one",
        f"{'env':<16} {'vector env':<28} {'steps/s':>10} {'x Sync':>7} {'x Async':>8} {'run x Async':>11} "
        f"{'CPU us/env step':>15}",
    ]
    for label, env_id, kw, n_envs, steps, quick_steps in CASES if cases is None else cases:
        n_steps = quick_steps if quick else steps
        fns = [EnvFactory(env_id, kw) for _ in range(n_envs)]
        venvs: dict[str, Any] = {}
        try:
            venvs["SyncVectorEnv"] = gym.vector.SyncVectorEnv(fns)
            venvs["AsyncVectorEnv (shm)"] = gym.vector.AsyncVectorEnv(fns, shared_memory=True)
            venvs[f"make_vec W={workers}"] = pp.make_vec(env_id, n_envs, n_workers=workers, **kw)
            venvs[f"make_vec W={workers} no-inline"] = pp.make_vec(
                env_id, n_envs, n_workers=workers, small_batch_inline=False, **kw)
            venvs[f"make_vec W={workers} tuned"] = pp.make_vec(
                env_id, n_envs, n_workers=workers, execution=pp.ExecutionPolicy.tuned(), **kw)
            venvs["make_vec inline"] = pp.make_vec(env_id, n_envs, backend="inline", **kw)
            space = venvs["SyncVectorEnv"].action_space
            space.seed(0)
            actions = np.array([space.sample() for _ in range(n_steps)])
            runs = {}
            cpu = {name: [0.0] for name in venvs}
            for name, v in venvs.items():
                v.reset(seed=0)
                runs[name] = _runner(v, cpu[name])
                runs[name](actions)  # warm-up: first steps, and make_vec's cost estimates
                cpu[name][0] = 0.0
            times: dict[str, list[float]] = {k: [] for k in runs}
            order = random.Random(0)
            for _ in range(repeats):
                for lo in range(0, n_steps, TURN_STEPS):
                    for k in order.sample(list(runs), len(runs)):
                        times[k].append(runs[k](actions[lo:lo + TURN_STEPS]))
            sync, asyn = times["SyncVectorEnv"], times["AsyncVectorEnv (shm)"]
            for k, ts in times.items():
                env_steps = n_steps * repeats * n_envs
                to_sync = statistics.median(s / t for s, t in zip(sync, ts))
                to_async = statistics.median(a / t for a, t in zip(asyn, ts))
                lines.append(f"{f'{label} x{n_envs}':<16} {k:<28} {env_steps / sum(ts):>10,.0f} {to_sync:>7.2f} "
                             f"{to_async:>8.2f} {sum(asyn) / sum(ts):>11.2f} {cpu[k][0] / env_steps * 1e6:>15.1f}")
        finally:
            for v in venvs.values():
                v.close()
    lines.append(f"parallel ceiling at the end: {parallel_ceiling(workers):.2f}x")
    return lines
