"""What the bench suites share: the workloads (start states from random play), the raw loop (a plain env
stepped with its family's native state calls, the same-run reference) and timing in alternation."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["NATIVE", "alternate", "hand_loop", "make_plain_env", "make_workload", "raw_loop", "to_native"]


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
    from plan_parallel.cli.bench.timing import measure

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


def to_native(env_id: str, pe: Any, state: Any) -> Any:
    """The value the family's native getter would return for ``state``."""
    if env_id.startswith("ALE/"):
        return state.sim  # an ale_py.ALEState, valid in any env of the same game
    pe.set_state(state)
    return NATIVE[env_id](pe.gym_env)[0]()


