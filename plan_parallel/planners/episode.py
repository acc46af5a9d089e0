"""Play episodes with a planner: plan from the played state, apply the action on a live state chain, repeat."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from plan_parallel.planners.base import Planner, check_int
from plan_parallel.state import State

__all__ = ["Episode", "run_episode"]


@dataclass
class Episode:
    """What one planned episode did and what it cost.

    Attributes:
        seed: the reset seed (also the planner's seed).
        episode_return: sum of the rewards played.
        steps: env steps played.
        decisions: planner calls (each action is played ``dt`` env steps, fewer at the end).
        terminated / truncated: how the episode ended (both False: stopped at ``max_steps``).
        actions: the played actions, one per decision.
        rewards: the reward of each decision (summed over its env steps).
        search: the planner's ``last_stats`` after each decision.
        final_state: the state after the last played step.
        wall_seconds: the whole episode, without the time spent in ``callback``.
        plan_seconds: inside ``planner.plan`` (its env calls included).
        env_seconds: in env calls: the planner's and the played steps.
        transitions: env steps simulated by the planner, plus the ones played.
    """

    seed: int | None
    episode_return: float = 0.0
    steps: int = 0
    decisions: int = 0
    terminated: bool = False
    truncated: bool = False
    actions: list = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    search: list[dict[str, Any]] = field(default_factory=list)
    final_state: State | None = None
    wall_seconds: float = 0.0
    plan_seconds: float = 0.0
    env_seconds: float = 0.0
    transitions: int = 0

    @property
    def decisions_per_second(self) -> float:
        return self.decisions / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def transitions_per_second(self) -> float:
        return self.transitions / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def env_share(self) -> float:
        """Share of the wall time spent in env calls (the rest: planner bookkeeping)."""
        return self.env_seconds / self.wall_seconds if self.wall_seconds else 0.0


def run_episode(
    planner: Planner,
    env: Any,
    *,
    seed: int | None = 0,
    max_steps: int | None = None,
    live_env: Any = None,
    callback: Callable[[Episode], None] | None = None,
) -> Episode:
    """Play one episode: reset, then ``planner.plan`` and ``live_env.step(action, state, dt)`` until it ends.

    The planner searches on ``env``; the chosen action is played on ``live_env``
    (default: ``env``) from the exact state the planner saw, so the episode is a
    chain of exact transitions whatever the planner did to the env meanwhile.
    Both the env and the planner are reset with ``seed``: the same seed plays the
    same episode on every backend and worker count.

    Args:
        planner: any :class:`~plan_parallel.planners.Planner`.
        env: the env the planner searches on (made by :func:`plan_parallel.make`).
        seed: reset seed for the env and the planner.
        max_steps: stop after this many env steps (None: when the env ends the episode).
        live_env: the env that plays the episode, e.g. an inline env that renders;
            it must build the same env as ``env`` (its states restore ``env``).
        callback: called with the episode so far, once after the reset and after every decision.

    Raises:
        TypeError: ``planner`` does not have the Planner interface.
        ValueError: ``max_steps`` is not None or an int >= 1.
        Whatever the env raises; the episode so far is lost, the envs stay usable.
    """
    if not isinstance(planner, Planner):
        raise TypeError(f"planner must have plan(env, state), reset(seed), dt, meter and last_stats, got {planner!r:.100}")
    if max_steps is not None:
        max_steps = check_int("max_steps", max_steps, 1)
    live = env if live_env is None else live_env
    ep = Episode(seed=seed)
    t_start = time.perf_counter()
    _, trans0, env_s0 = planner.meter.snapshot()
    played_env_s = callback_s = 0.0

    def report() -> None:
        nonlocal callback_s
        if callback is not None:
            t = time.perf_counter()
            callback(ep)
            callback_s += time.perf_counter() - t

    planner.reset(seed)
    state, _, _ = live.reset(seed=seed)
    report()
    while max_steps is None or ep.steps < max_steps:
        t0 = time.perf_counter()
        action = planner.plan(env, state)
        t1 = time.perf_counter()
        dt = planner.dt if max_steps is None else min(planner.dt, max_steps - ep.steps)
        state, _, reward, terminated, truncated, info = live.step(action, state, dt=dt)
        played_env_s += time.perf_counter() - t1
        ep.plan_seconds += t1 - t0
        ep.decisions += 1
        ep.steps += int(info["n_steps"])
        ep.episode_return += float(reward)
        ep.actions.append(action)
        ep.rewards.append(float(reward))
        ep.search.append(dict(planner.last_stats))
        ep.terminated, ep.truncated = bool(terminated), bool(truncated)
        ep.final_state = state
        _, trans, env_s = planner.meter.snapshot()
        ep.transitions = trans - trans0 + ep.steps
        ep.env_seconds = env_s - env_s0 + played_env_s
        ep.wall_seconds = time.perf_counter() - t_start - callback_s
        report()
        if terminated or truncated:
            break
    ep.wall_seconds = time.perf_counter() - t_start - callback_s
    return ep
