"""The multi-root rows of ``plan-parallel bench --suite mcts``: B roots searched together on W workers against
B single-root searches one after the other inline.

Each row plays ``calls`` consecutive decisions of B roots (root k starts from
the env's reset with seed k; after each decision every root plays its action).
*single inline*: B planners, planner k seeded k, each asked ``plan`` in turn on
the inline backend. *many*: one planner reset with seed 0 asked ``plan_many``
over the B roots, on the inline backend and on the process backend with W
workers. By the planners' contract root k of ``plan_many`` decides as planner
k, so all three make the same decisions (the row says so) and differ only in
how the items travel. Each turn times single inline and many on W side by
side; ``x`` is the median of the turns' ratios, ``eff`` is ``x ÷ W``.

:class:`SleepyWalk`'s steps sleep instead of computing: they cost wall time and
no CPU, so W workers could give W times the decisions even on this 2-core
machine. Its rows stand in for a machine with W cores.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

__all__ = ["CASES", "QUICK_CASES", "Case", "SleepyWalk", "bench_roots"]


class SleepyWalk(gym.Env):
    """A walk on a line whose every step sleeps ``pause`` seconds and uses no CPU to speak of.

    Action ``a`` moves by ``a - (n_actions - 1) / 2``; the reward is 1 on reaching a
    position never reached before to the right, else 0. Never ends.
    """

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)

    def __init__(self, n_actions: int = 4, pause: float = 1e-3) -> None:
        self.action_space = gym.spaces.Discrete(n_actions)
        self.mid = (n_actions - 1) / 2
        self.pause = pause
        self.x = self.best = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.x, self.best])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x = self.best = float(seed or 0) % 3  # roots of different seeds start apart
        return self._obs(), {}

    def step(self, action: Any) -> tuple:
        time.sleep(self.pause)
        self.x += int(action) - self.mid
        reward = float(self.x > self.best)
        self.best = max(self.best, self.x)
        return self._obs(), reward, False, False, {}

    def get_state(self) -> tuple[float, float]:
        return self.x, self.best

    def set_state(self, state: tuple[float, float]) -> None:
        self.x, self.best = state


class Case(NamedTuple):
    """One env's rows: ``roots`` searched ``calls`` decisions in a row, on each of ``workers`` (None: --workers)."""

    label: str
    env: Any  # a gymnasium id or an env class
    env_kwargs: dict[str, Any]
    planner: dict[str, Any] | None  # MCTS options; None: the env's preset
    roots: int
    calls: int
    workers: Sequence[int] | None


_SLEEPY_MCTS = {"budget": 16, "leaves_per_batch": 16, "rollout_depth": 8}  # 8 roots: 128 items a batch
CASES = (
    Case("ALE/Pong-v5", "ALE/Pong-v5", {}, None, 8, 2, None),
    Case("CartPole-v1", "CartPole-v1", {}, None, 8, 10, None),
    Case("SleepyWalk 1 ms", SleepyWalk, {"pause": 1e-3}, _SLEEPY_MCTS, 8, 2, (1, 2, 4, 8, 16, 32)),
    # 64 roots: 1,024 items a round at W=32 (32 a worker) where 8 roots give 4; one decision keeps a turn ~11 s
    Case("SleepyWalk 1 ms", SleepyWalk, {"pause": 1e-3}, _SLEEPY_MCTS, 64, 1, (32,)),
)
QUICK_CASES = (
    Case("CartPole-v1", "CartPole-v1", {}, {"budget": 8, "leaves_per_batch": 4, "rollout_depth": 4}, 2, 1, None),
    Case("SleepyWalk 1 ms", SleepyWalk, {"pause": 1e-3}, {"budget": 8, "leaves_per_batch": 4, "rollout_depth": 2},
         2, 1, (1, 2)),
)


def _planner(case: Case, seed: int) -> Any:
    from plan_parallel.planners.presets import make_planner

    env_id = case.env if isinstance(case.env, str) else None
    return make_planner("mcts", env_id, seed=seed, **(case.planner or {}))


def _decide(case: Case, env: Any, stepper: Any, starts: list, together: bool,
            overlap: int = 1) -> tuple[float, list[list[int]]]:
    """Seconds spent planning ``case.calls`` decisions of every root, and the actions chosen at each (``overlap``:
    the planner's groups of roots whose rollouts are in flight together, ``together`` only)."""
    planners = [_planner(case, 0)] if together else [_planner(case, k) for k in range(case.roots)]
    if together:
        planners[0].overlap = overlap
    states, seconds, chosen = list(starts), 0.0, []
    for _ in range(case.calls):
        t0 = time.perf_counter()
        if together:
            actions = planners[0].plan_many(env, states)
        else:
            actions = [p.plan(env, s) for p, s in zip(planners, states)]
        seconds += time.perf_counter() - t0
        chosen.append([int(a) for a in actions])
        dt = planners[0].dt
        for k, (a, s) in enumerate(zip(actions, states)):
            nxt, _, _, term, trunc, _ = stepper.step(a, s, dt)
            states[k] = s if term or trunc else nxt  # an ended root plans again from where it was
    return seconds, chosen


def _rows(case: Case, repeats: int, default_workers: int) -> list[str]:
    import plan_parallel as pp

    decisions = case.roots * case.calls
    lines = []
    with pp.make(case.env, backend="inline", **case.env_kwargs) as inline:
        starts = [inline.reset(seed=k)[0] for k in range(case.roots)]
        _decide(case, inline, inline, starts, together=False)  # warm up (imports, the first tree)
        many_inline: list[float] = []
        overlapped = case.workers is None  # (the rows at --workers: what planner.overlap = 2 gives there)
        for w in case.workers or (default_workers,):
            with pp.make(case.env, backend="process", n_workers=w, **case.env_kwargs) as env:
                _decide(case, env, inline, starts, together=True)  # the tuner measures its places first
                single, many, ratios, same, ratios_g2 = [], [], [], True, []
                for _ in range(repeats):
                    s_sec, s_act = _decide(case, inline, inline, starts, together=False)
                    m_sec, m_act = _decide(case, env, inline, starts, together=True)
                    if overlapped:
                        g_sec, g_act = _decide(case, env, inline, starts, together=True, overlap=2)
                        ratios_g2.append(s_sec / g_sec)
                        same = same and g_act == s_act
                    if len(many_inline) < repeats:  # plan_many inline: in the first W's turns
                        i_sec, i_act = _decide(case, inline, inline, starts, together=True)
                        many_inline.append(decisions / i_sec)
                        same = same and i_act == s_act
                    single.append(decisions / s_sec)
                    many.append(decisions / m_sec)
                    ratios.append(s_sec / m_sec)
                    same = same and m_act == s_act
            x = statistics.median(ratios)
            x_inl = statistics.median(many_inline) / statistics.median(single)
            x_g2 = f"{statistics.median(ratios_g2):.2f}" if ratios_g2 else "-"
            lines.append(f"{case.label:<16} {case.roots:>5} {w:>3} {statistics.median(single):>13.2f} "
                         f"{statistics.median(many_inline):>11.2f} {statistics.median(many):>8.2f} "
                         f"{x_inl:>13.2f} {x:>6.2f} {x / w:>5.2f} {x_g2:>7}  {'yes' if same else 'NO'}")
    return lines


def bench_roots(repeats: int, quick: bool, workers: int, cases: Sequence[Case] | None = None) -> list[str]:
    """The multi-root lines: a header and one row per case and worker count (``cases`` default per ``quick``)."""
    cases = (QUICK_CASES if quick else CASES) if cases is None else cases
    lines = [
        f"multi-root MCTS: decisions/s of B roots in one plan_many against B single-root searches one after the "
        f"other inline, over each case's first decisions (median of {repeats} alternating runs); x W: many on W "
        f"process workers ÷ single inline, per turn; eff: x W ÷ W; x G=2: the same with planner.overlap = 2 (two "
        f"groups of roots, one's rollouts in flight while this process advances the other's trees; rows at "
        f"--workers only); SleepyWalk's steps sleep (no CPU): W workers could give W x",
        f"{'env':<16} {'roots':>5} {'W':>3} {'single inline':>13} {'many inline':>11} {'many W':>8} "
        f"{'x many-inline':>13} {'x W':>6} {'eff':>5} {'x G=2':>7}  same decisions",
    ]
    for case in cases:
        lines.extend(_rows(case, repeats, workers))
    return lines
