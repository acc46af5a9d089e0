"""``plan-parallel bench --suite latency``: what a small call costs, against gymnasium's AsyncVectorEnv.

A planner that sends 8-16 leaves a batch lives at this size. Every row makes
the same few CartPole steps, one call after another, in alternating samples
(:func:`~plan_parallel.cli.bench.timing.measure`):

* ``step_batch 2`` — ``step_batch`` of 2 items from saved states, every batch on
  the workers (``placement="workers"``): the states travel to a worker, are
  restored and stepped, and the new states come back;
* ``make_vec x2 step`` — ``make_vec`` with 2 sub-envs, every step on the workers;
* the same two with the lane off (``ExecutionPolicy(lane=False)``): the general path, the
  figure before the lane (``plan_parallel.batch.lane``);
* ``AsyncVectorEnv x2 step`` — gymnasium's vector env with 2 processes and shared
  memory (the reference: no states travel);
* ``SyncVectorEnv x2 step`` and an inline ``step_batch 2`` — the same work with no
  process in between (the floor);

and a bare pipe round trip between two Python processes. Each row gives the wall
time per call, the CPU this process spent per call (it polls while a reply is due,
so its CPU includes the wait) and the workers' CPU per call, and its ratio to
AsyncVectorEnv (wall, median of the per-turn ratios).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plan_parallel.cli.bench.ceiling import pipe_round_trip
from plan_parallel.cli.bench.timing import measure

__all__ = ["ENV_ID", "bench_latency"]

ENV_ID = "CartPole-v1"
SUB_ENVS = 2  # sub-envs of the vector envs, items of a step_batch


def bench_latency(repeats: int, quick: bool, workers: int) -> list[str]:
    """The suite's lines (``workers``: the worker processes of plan_parallel's envs)."""
    import gymnasium as gym

    import plan_parallel as pp
    from plan_parallel.factory import EnvFactory

    on_workers = pp.ExecutionPolicy(n_workers=workers, placement="workers")
    general = on_workers.replace(lane=False)
    same_step = gym.vector.AutoresetMode.SAME_STEP  # no step of the peers' is a reset step
    fns = [EnvFactory(ENV_ID, {}) for _ in range(SUB_ENVS)]
    opened: list[Any] = []
    try:
        inline = pp.make(ENV_ID, backend="inline")
        opened.append(inline)
        env = pp.make(ENV_ID, execution=on_workers)
        opened.append(env)
        vec = pp.make_vec(ENV_ID, SUB_ENVS, execution=on_workers, autoreset_mode=same_step)
        opened.append(vec)
        env_general = pp.make(ENV_ID, execution=general)
        opened.append(env_general)
        vec_general = pp.make_vec(ENV_ID, SUB_ENVS, execution=general, autoreset_mode=same_step)
        opened.append(vec_general)
        asyn = gym.vector.AsyncVectorEnv(fns, shared_memory=True, autoreset_mode=same_step)
        opened.append(asyn)
        sync = gym.vector.SyncVectorEnv(fns, autoreset_mode=same_step)
        opened.append(sync)
        state = inline.reset(seed=0)[0]
        states = [state] * SUB_ENVS
        actions = np.zeros(SUB_ENVS, dtype=np.int64)
        for venv in (vec, vec_general, asyn, sync):
            venv.reset(seed=0)
        fns_timed = {
            "step_batch 2 (workers)": lambda: env.step_batch(actions, states),
            "make_vec x2 step (workers)": lambda: vec.step(actions),
            "step_batch 2 (no lane)": lambda: env_general.step_batch(actions, states),
            "make_vec x2 step (no lane)": lambda: vec_general.step(actions),
            "AsyncVectorEnv x2 step": lambda: asyn.step(actions),
            "SyncVectorEnv x2 step": lambda: sync.step(actions),
            "step_batch 2 (inline)": lambda: inline.step_batch(actions, states),
        }
        pids = {"step_batch 2 (workers)": lambda: env.pids, "make_vec x2 step (workers)": lambda: vec.plan_env.pids,
                "step_batch 2 (no lane)": lambda: env_general.pids,
                "make_vec x2 step (no lane)": lambda: vec_general.plan_env.pids,
                "AsyncVectorEnv x2 step": lambda: [p.pid for p in asyn.processes]}
        t = measure(fns_timed, 3 if quick else repeats, pids=pids)
    finally:
        for e in reversed(opened):
            e.close()
    ref = t["AsyncVectorEnv x2 step"]
    lines = [
        f"small calls on {ENV_ID}, {SUB_ENVS} items a call; plan_parallel's envs with W={workers} and every batch "
        "on the workers; medians of alternating samples; x Async: wall ÷ AsyncVectorEnv's, median of the "
        "per-turn ratios (lower is faster)",
        f"{'call':<28} {'wall us':>8} {'caller cpu us':>13} {'workers cpu us':>14} {'x Async':>8}",
    ]
    for name, timing in t.items():
        ratio = 1.0 / timing.speedup(ref)
        lines.append(f"{name:<28} {timing.wall * 1e6:>8.0f} {timing.caller_cpu * 1e6:>13.0f} "
                     f"{timing.worker_cpu * 1e6:>14.0f} {ratio:>8.2f}")
    lines.append(f"a bare pipe round trip between two Python processes: {pipe_round_trip() * 1e6:.0f} us")
    return lines
