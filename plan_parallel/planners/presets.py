"""Planner defaults per env, each value with the reason it was chosen, and building a planner by name.

Any parameter passed to :func:`make_planner` overrides the preset. A preset
value is written with its reason (:data:`REASONS`), measured where a figure is
quoted; a parameter a preset leaves out takes the planner's default.
Budgets in env frames a decision: MCTS ``budget * (1 + rollout_depth) * dt``
env steps (times the frameskip, 4 on ALE v5), shooting ``budget * horizon * dt``.
"""
from __future__ import annotations

from typing import Any

from plan_parallel.planners.base import Planner
from plan_parallel.planners.beam import BeamSearch
from plan_parallel.planners.mcts import MCTS
from plan_parallel.planners.shooting import RandomShooting

__all__ = ["PLANNERS", "PRESETS", "REASONS", "make_planner"]

PLANNERS: dict[str, type] = {"mcts": MCTS, "shooting": RandomShooting, "beam": BeamSearch}

# env id -> planner name -> parameter -> (value, why)
_WHY: dict[str, dict[str, dict[str, tuple[Any, str]]]] = {
    "CartPole-v1": {
        "mcts": {
            "budget": (64, "the README's target is 500 with a budget <= 100; 64 balanced 500 steps on seeds 0-4"),
            "leaves_per_batch": (8, "two actions, cheap steps: 8 leaves a batch; the 500 on seeds 0-4 was measured with it"),
            "rollout_depth": (20, "random play falls in ~20 steps, so 20 random actions see a coming fall"),
        },
        "shooting": {
            "budget": (64, "the MCTS preset's simulations as sequences (its 500 not measured for shooting)"),
            "horizon": (20, "as MCTS: random play falls in ~20 steps"),
        },
        "beam": {
            "width": (16, "balanced 500 steps on seeds 0-2 (README, Planners)"),
            "depth": (20, "random play falls in ~20 steps"),
        },
    },
    "Acrobot-v1": {
        "mcts": {
            "budget": (100, "the goal within 100 steps on seeds 0-4 (README table)"),
            "leaves_per_batch": (16, "three actions, long rollouts: 16 leaves make each batch worth a trip to the workers"),
            "rollout_depth": (30, "30 actions of dt 6 see 180 steps ahead, about one swing up"),
            "dt": (6, "the reward is -1 a step until the swing up: only a long look ahead tells actions apart"),
        },
        "shooting": {
            "budget": (100, "the MCTS preset's simulations as sequences (not measured for shooting on its own)"),
            "horizon": (30, "30 actions of dt 6: 180 steps, one swing up"),
            "dt": (6, "as for MCTS: the reward is -1 a step until the goal, so look far"),
        },
    },
    "MountainCar-v0": {
        "mcts": {
            "budget": (100, "the goal within 200 steps on seeds 0-4 (README table)"),
            "leaves_per_batch": (16, "three actions, long rollouts: 16 leaves a batch"),
            "rollout_depth": (25, "25 actions of dt 8 see 200 steps ahead: from the valley, only that reaches the flag"),
            "dt": (8, "the reward is -1 a step until the flag: rollouts must be long enough to reach it"),
        },
        "shooting": {
            "budget": (100, "the MCTS preset's simulations as sequences (not measured for shooting on its own)"),
            "horizon": (25, "25 actions of dt 8: 200 steps, to the flag"),
            "dt": (8, "as for MCTS: rollouts must be long enough to reach the flag"),
        },
    },
    "Pendulum-v1": {
        "shooting": {
            "budget": (120, "three CEM rounds of 40 sequences"),
            "horizon": (20, "20 steps (1 s) cover a swing"),
            "iterations": (3, "the torque is continuous: two refits of the Gaussian narrow it onto the good torques"),
        },
    },
    "HalfCheetah-v5": {
        "shooting": {
            "budget": (200, "4 CEM rounds of 50 sequences; 3,000 env steps (15,000 MuJoCo frames) a decision: "
                            "8,202 over 1,000 steps on seed 0 (process W=2, 9.7 decisions/s), then 8,202, 2,086 and "
                            "7,965 on seeds 0-2 (random play -301; docs/planning.md); budget 64, horizon 20, 2 rounds "
                            "scored 107 in the first 60 steps, this preset 230"),
            "horizon": (15, "15 steps of 0.05 s: 0.75 s, a stride or two; the 8,202 above was measured with it"),
            "iterations": (4, "the torques are continuous (6 joints): three refits of the Gaussian narrow it onto "
                              "a gait; the 8,202 above was measured with it"),
        },
    },
    "ALE/Pong-v5": {
        "mcts": {
            "budget": (32, "2,688 frames a decision: full episodes won 21-1 and 21-2 on seeds 0-1 (2,660 and "
                           "2,859 decisions; docs/planning.md); earlier +17 to +21 in 2,000 decisions on seeds 0-4"),
            "leaves_per_batch": (16, "two batches a decision: big enough to feed two workers (bench --suite mcts)"),
            "rollout_depth": (20, "20 actions of 4 frames; measured with it: the games above"),
        },
        "shooting": {
            "budget": (32, "the MCTS preset's simulations as sequences (not measured for shooting on its own)"),
            "horizon": (20, "20 actions of 4 frames, the MCTS preset's rollout depth"),
        },
    },
    "ALE/Breakout-v5": {
        "mcts": {
            "budget": (32, "as Pong; with dt 2 and depth 25: 6,656 frames a decision"),
            "leaves_per_batch": (16, "as for Pong: two batches a decision, big enough to feed two workers"),
            "rollout_depth": (25, "with dt 2, 200 frames: long enough for the ball to reach the bricks after a "
                                  "launch or a return; at depth 20 and dt 1 (80 frames) most rollouts saw no reward "
                                  "(zero_return_share 0.55-0.67, 5 and 8 points in 300 decisions, seeds 0-1)"),
            "dt": (2, "a decision covers 8 frames for the same search cost: 21 and 25 points in the first 300 "
                      "decisions on seeds 0-1 (zero_return_share 0.24); dt 1 with depth 50 (the same 200-frame "
                      "look-ahead and cost) scored 9 and 12 in 300 decisions"),
        },
    },
    "ALE/Freeway-v5": {
        "mcts": {
            "budget": (60, "the most simulations under 20,000 frames a decision at depth 4 and dt 16: 60 x (1 + 4) "
                           "x 16 = 4,800 env steps, 19,200 frames; full episodes, seeds 0-3: 31, 30, 30, 29 "
                           "(DQN-paper human: 29.6), where the earlier preset (budget 80, depth 6, dt 8; 17,920 "
                           "frames) scored 29, 30, 28, 26 and budget 88 at dt 8 30, 27, 28, 27"),
            "leaves_per_batch": (16, "as for Pong: big enough batches to feed two workers (not measured for Freeway)"),
            "rollout_depth": (4, "4 actions of 16 env steps (64 after the tree's edges of 16): a crossing takes about "
                                 "68 env steps (2,048 steps, 30 crossings), so a rollout from a node two edges up "
                                 "can reach the other side"),
            "dt": (16, "64 frames an edge: after a crossing the chicken starts at the bottom, and at dt 8 (depth 6) "
                       "21-24% of decisions saw no crossing in any rollout and drew their action at random; at "
                       "dt 16, 1% did (seeds 0-3). At dt 4 and depth 25 (budget 32, 13,312 frames) 56% and 8 "
                       "points in 800 steps; at dt 2, 87% and 1 point in 300 steps (docs/planning.md)"),
        },
    },
}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    env_id: {name: {k: v for k, (v, _) in params.items()} for name, params in planners.items()}
    for env_id, planners in _WHY.items()
}
"""env id -> planner name -> keyword arguments."""

REASONS: dict[str, dict[str, dict[str, str]]] = {
    env_id: {name: {k: why for k, (_, why) in params.items()} for name, params in planners.items()}
    for env_id, planners in _WHY.items()
}
"""env id -> planner name -> parameter -> why the preset has that value."""


def make_planner(name: str, env_id: str | None = None, **params: Any) -> Planner:
    """A planner by name (``"mcts"``, ``"shooting"`` or ``"beam"``), with the env's preset under ``params``.

    Args:
        name: a key of :data:`PLANNERS`.
        env_id: a gymnasium env id; its :data:`PRESETS` entry fills the parameters not given.
        **params: planner parameters (``None`` values are ignored).

    Raises:
        ValueError: an unknown planner name, or a bad parameter value.
        TypeError: an unknown parameter, or one of the wrong type.
    """
    if name not in PLANNERS:
        raise ValueError(f"planner must be one of {sorted(PLANNERS)}, got {name!r}")
    kwargs = dict(PRESETS.get(env_id or "", {}).get(name, {}))
    kwargs.update({k: v for k, v in params.items() if v is not None})
    return PLANNERS[name](**kwargs)
