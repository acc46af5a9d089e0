"""Reference planners built only on the public API: batched UCT/MCTS, random shooting / CEM-lite, beam search.

>>> import plan_parallel as pp
>>> from plan_parallel.planners import MCTS, run_episode
>>> with pp.make("CartPole-v1", backend="inline") as env:
...     episode = run_episode(MCTS(budget=32, seed=0), env, seed=0, max_steps=20)
>>> episode.steps
20

Every planner has the :class:`Planner` interface: ``plan(env, state) -> action``
(never changing the env's current state), ``reset(seed)``, ``dt``, ``meter`` and
``last_stats``; the reference planners also have ``plan_many(env, states)``
(:class:`ManyPlanner`): one search per root, every round of all of them in one
env call. Given a seed, a planner makes the same decisions on every backend
and worker count, and root k of ``plan_many`` decides as ``plan`` after ``reset(seed + k)``.
"""
from __future__ import annotations

from plan_parallel.planners.base import ManyPlanner, Meter, Planner, Rollouts, rollout
from plan_parallel.planners.beam import BeamSearch
from plan_parallel.planners.episode import Episode, run_episode, run_episodes
from plan_parallel.planners.mcts import MCTS
from plan_parallel.planners.shooting import RandomShooting

__all__ = [
    "MCTS",
    "BeamSearch",
    "Episode",
    "ManyPlanner",
    "Meter",
    "Planner",
    "RandomShooting",
    "Rollouts",
    "rollout",
    "run_episode",
    "run_episodes",
]
