"""Benchmarks behind ``plan-parallel bench``: medians and ratios measured in one run.

Suites:
    inline: the inline backend against a hand-written loop of plain gymnasium
        calls with the family's native state calls (the overhead of the state
        protocol and of PlanEnv).
    process: inline against the process backend (and gymnasium's
        AsyncVectorEnv as a reference line).

The machine is small and noisy: every figure is the median of ``--repeats``
alternating runs, and ratios compare runs made side by side.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["NATIVE", "add_bench_arguments", "alternate", "hand_loop", "make_plain_env", "make_workload", "raw_loop", "run_bench",
           "to_native"]


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=[*SUITES, "all"], default="all", help="which suite to run (see above)")
    p.add_argument("--repeats", type=int, default=7, help="alternating runs per figure (median)")
    p.add_argument("--workers", type=int, default=2, help="worker processes or Ray actors")
    p.add_argument("--quick", action="store_true", help="small batches and few repeats (a smoke run)")


# ------------------------------------------------------------------ workloads
def make_plain_env(env_id: str, **kw: Any) -> Any:
    from plan_parallel.factory import EnvFactory

    return EnvFactory(env_id, kw)()


def make_workload(env: Any, n: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """``n`` distinct start states from random play on a PlanEnv-like ``env`` and n random actions."""
    rng = np.random.default_rng(seed)
    space = env.action_space
    state, _, _ = env.reset(seed=seed)
    states: list = []
    while len(states) < n:
        state, _, _, term, trunc, _ = env.step(space.sample())
        if term or trunc:  # ended states are not start points
            state, _, _ = env.reset(seed=int(rng.integers(1 << 30)))
        else:
            states.append(state)
    space.seed(seed)
    actions = np.array([space.sample() for _ in range(n)])
    env.set_state(states[0])
    return states, actions


def _cartpole_native(env: Any) -> tuple[Callable, Callable]:
    u = env.unwrapped
    tl = env  # gym.make: TimeLimit is the outermost wrapper

    def get() -> tuple:
        return u.state.copy(), u.steps_beyond_terminated, tl._elapsed_steps

    def put(s: tuple) -> None:
        u.state = s[0].copy()
        u.steps_beyond_terminated = s[1]
        tl._elapsed_steps = s[2]

    return get, put


def _ale_native(env: Any) -> tuple[Callable, Callable]:
    ale = env.unwrapped.ale
    return (lambda: ale.cloneState(include_rng=True)), ale.restoreState


def _mujoco_native(env: Any) -> tuple[Callable, Callable]:
    import mujoco

    u = env.unwrapped
    m, d = u.model, u.data
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    size = mujoco.mj_stateSize(m, spec)

    def get() -> np.ndarray:
        out = np.empty(size)
        mujoco.mj_getState(m, d, out, spec)
        return out

    return get, lambda s: mujoco.mj_setState(m, d, s, spec)


NATIVE = {"CartPole-v1": _cartpole_native, "ALE/Pong-v5": _ale_native, "HalfCheetah-v5": _mujoco_native}


def hand_loop(env: Any, step: Callable, get: Callable, put: Callable, states: list, actions: Any, dt: int) -> int:
    """What a user would write by hand: restore, step dt times, read the state back."""
    n = 0
    out = []
    for s, a in zip(states, actions):
        put(s)
        total = 0.0
        for _ in range(dt):
            obs, r, term, trunc, _info = step(a)
            total += r
            n += 1
            if term or trunc:
                break
        out.append((get(), obs, total, term, trunc))
    return n


def alternate(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each function over ``repeats`` alternating samples (see :func:`measure`)."""
    from plan_parallel.bench_timing import measure

    return {k: t.wall for k, t in measure(fns, repeats).items()}


def raw_loop(env_id: str, kw: dict, ref: Any, states: list, actions: Any,
             step_of: Callable[[Any], Callable]) -> tuple[Any, Callable[[int, int], int]]:
    """A plain env of its own with the family's native state calls, and ``run(b, dt)``: the hand loop
    over the first ``b`` of ``states`` (made native through ``ref``, a PlanEnv) with ``step_of(env)``."""
    raw = make_plain_env(env_id, **kw)
    raw.reset(seed=0)
    get, put = NATIVE[env_id](raw)
    native = [to_native(env_id, ref, st) for st in states]
    step = step_of(raw)

    def run(b: int, dt: int) -> int:
        return hand_loop(raw, step, get, put, native[:b], actions[:b], dt)

    return raw, run


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


def to_native(env_id: str, pe: Any, state: Any) -> Any:
    """The value the family's native getter would return for ``state``."""
    if env_id.startswith("ALE/"):
        return state.sim  # an ale_py.ALEState, valid in any env of the same game
    pe.set_state(state)
    return NATIVE[env_id](pe.gym_env)[0]()


def _suite_process(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.bench_process import bench_process

    return bench_process(repeats, quick, workers)


def _suite_rollout(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.bench_rollout import bench_rollout

    return bench_rollout(repeats, quick, workers)


def _suite_vector(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.bench_vector import bench_vector

    return bench_vector(repeats, quick, workers)


def _suite_mcts(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.bench_mcts import bench_mcts

    return bench_mcts(repeats, quick, workers)


def _suite_ray(repeats: int, quick: bool, workers: int) -> list[str]:
    from plan_parallel.bench_ray import bench_ray

    return bench_ray(repeats, quick, workers)


# name -> fn(repeats, quick, workers) -> lines; "all" runs them in this order.
SUITES: dict[str, Callable[[int, bool, int], list[str]]] = {
    "inline": lambda repeats, quick, workers: bench_inline(repeats, quick),
    "process": _suite_process,
    "rollout": _suite_rollout,
    "vector": _suite_vector,
    "mcts": _suite_mcts,
    "ray": _suite_ray,
}


def run_bench(args: argparse.Namespace) -> int:
    repeats = 3 if args.quick else args.repeats
    suites = list(SUITES) if args.suite == "all" else [args.suite]
    for suite in suites:
        print("\n".join(SUITES[suite](repeats, args.quick, args.workers)), flush=True)
        print()
    return 0
