"""Play episodes with a planner: plan from the played state, apply the action on a live state chain, repeat.

:func:`run_episode` plays one; :func:`run_episodes` plays several, by default
together: every round, one ``plan_many`` over the episodes still running (their
search items batched in the same env calls). Each episode is the one
:func:`run_episode` plays with its seed, whichever way they are played.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from plan_parallel.planners.base import ManyPlanner, Planner, check_int
from plan_parallel.state import State

__all__ = ["Episode", "run_episode", "run_episodes"]


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
        wall_seconds: the whole episode, without the time spent in ``callback``
            (episodes played together: from their common start to this one's end).
        plan_seconds: inside ``planner.plan`` (its env calls included); episodes played
            together: inside the ``plan_many`` calls this one took part in.
        env_seconds: in env calls: the planner's (episodes played together: those of the
            calls this one took part in) and the played steps.
        transitions: env steps simulated by the planner for this episode, plus the ones played.
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
        WorkerTimeoutError/WorkerCrashedError/ClosedError: from a :class:`~plan_parallel.BatchEnv`'s calls
            (see :meth:`~plan_parallel.BatchEnv.step_batch`); the episode so far is lost.
        Exception: whatever the env's own reset or step, or ``callback``, raises, with its own type; the
            episode so far is lost, the envs stay usable.
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
        state, ended = _play(ep, live, action, state, planner.dt, max_steps)
        played_env_s += time.perf_counter() - t1
        ep.plan_seconds += t1 - t0
        ep.search.append(dict(planner.last_stats))
        _, trans, env_s = planner.meter.snapshot()
        ep.transitions = trans - trans0 + ep.steps
        ep.env_seconds = env_s - env_s0 + played_env_s
        ep.wall_seconds = time.perf_counter() - t_start - callback_s
        report()
        if ended:
            break
    ep.wall_seconds = time.perf_counter() - t_start - callback_s
    return ep


def _play(ep: Episode, live: Any, action: Any, state: State, dt: int, max_steps: int | None) -> tuple[State, bool]:
    """Play ``action`` from ``state`` (``dt`` steps, fewer at ``max_steps``) and note it; the new state, and whether it ended."""
    if max_steps is not None:
        dt = min(dt, max_steps - ep.steps)
    state, _, reward, terminated, truncated, info = live.step(action, state, dt=dt)
    ep.decisions += 1
    ep.steps += int(info["n_steps"])
    ep.episode_return += float(reward)
    ep.actions.append(action)
    ep.rewards.append(float(reward))
    ep.terminated, ep.truncated = bool(terminated), bool(truncated)
    ep.final_state = state
    return state, ep.terminated or ep.truncated or (max_steps is not None and ep.steps >= max_steps)


def run_episodes(
    planner: Planner,
    env: Any,
    *,
    seeds: Sequence[int],
    max_steps: int | None = None,
    live_env: Any = None,
    callback: Callable[[Episode], None] | None = None,
    together: bool = True,
) -> list[Episode]:
    """Play one episode per seed; episode e is exactly ``run_episode(planner, env, seed=seeds[e], ...)``'s.

    Together (the default), every round is one ``planner.plan_many`` over the
    episodes still running, each its own root (seeded by its episode's seed, as
    :func:`run_episode` seeds the planner), so the searches of all episodes share
    their env calls; then each chosen action is played on ``live_env`` from its
    episode's state. ``together=False`` plays them one after the other with
    :func:`run_episode`.

    Args:
        planner: a planner with ``plan_many`` (:class:`~plan_parallel.planners.ManyPlanner`);
            with ``together=False`` any :class:`~plan_parallel.planners.Planner`.
        env: the env the planner searches on (made by :func:`plan_parallel.make`).
        seeds: distinct ints >= 0, one episode each (env reset and planner).
        max_steps: stop each episode after this many env steps (None: when the env ends it).
        live_env: the env that plays the episodes (default: ``env``), as in :func:`run_episode`.
        callback: called with an episode so far, once after its reset and after each of its
            decisions, right after the live env played it (so the live env's current state
            is that episode's, e.g. to render it).

    Raises:
        TypeError: ``planner`` lacks ``plan_many`` (together) or the Planner interface; ``seeds`` not ints.
        ValueError: ``seeds`` empty, negative or repeated; ``max_steps`` not None or an int >= 1.
        WorkerTimeoutError/WorkerCrashedError/ClosedError: from a :class:`~plan_parallel.BatchEnv`'s calls
            (see :meth:`~plan_parallel.BatchEnv.step_batch`); the episodes so far are lost.
        Exception: whatever the env's own reset or step, or ``callback``, raises, with its own type; the
            episodes so far are lost, the envs stay usable.
    """
    seeds = _check_seeds(seeds)
    if not together:
        return [run_episode(planner, env, seed=s, max_steps=max_steps, live_env=live_env, callback=callback)
                for s in seeds]
    if not isinstance(planner, ManyPlanner):
        raise TypeError(f"planner must have plan_many(env, states, roots) to play episodes together, got "
                        f"{planner!r:.100}; pass together=False to play them one after the other")
    if max_steps is not None:
        max_steps = check_int("max_steps", max_steps, 1)
    live = env if live_env is None else live_env
    episodes = [Episode(seed=s) for s in seeds]
    t_start = time.perf_counter()
    callback_s = 0.0

    def report(ep: Episode) -> None:
        nonlocal callback_s
        if callback is not None:
            t = time.perf_counter()
            callback(ep)
            callback_s += time.perf_counter() - t

    base = min(seeds)
    planner.reset(base)  # the root of the episode with seed s is root s - base: seeded s
    states: list[State] = []
    for ep in episodes:
        states.append(live.reset(seed=ep.seed)[0])
        report(ep)
    running = list(range(len(episodes)))
    while running:
        mark = planner.meter.mark()
        actions = planner.plan_many(env, [states[e] for e in running], roots=[seeds[e] - base for e in running])
        call = planner.meter.since(mark)
        still = []
        for e, action, stats in zip(running, actions, planner.root_stats):
            ep = episodes[e]
            t0, steps0 = time.perf_counter(), ep.steps
            states[e], ended = _play(ep, live, action, states[e], planner.dt, max_steps)
            played = time.perf_counter() - t0
            ep.plan_seconds += call["seconds"]
            ep.search.append(dict(stats))
            ep.transitions += stats["transitions"] + ep.steps - steps0
            ep.env_seconds += call["env_seconds"] + played
            ep.wall_seconds = time.perf_counter() - t_start - callback_s
            report(ep)
            if not ended:
                still.append(e)
        running = still
    return episodes


def _check_seeds(seeds: Any) -> list[int]:
    if not isinstance(seeds, Sequence) or isinstance(seeds, (str, bytes)):
        raise TypeError(f"seeds must be a sequence of distinct ints >= 0, got {type(seeds).__name__}: {seeds!r:.100}")
    if len(seeds) == 0:
        raise ValueError("seeds must be a non-empty sequence of distinct ints >= 0, got an empty one")
    out = [check_int(f"seeds[{i}]", s, 0) for i, s in enumerate(seeds)]
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct (one episode each), got {list(seeds)!r:.100}")
    return out
