"""Planner defaults per env, and building a planner by name.

The presets are the settings the targets in the README were measured with;
any parameter passed to :func:`make_planner` overrides them.
"""
from __future__ import annotations

from typing import Any

from plan_parallel.planners.base import Planner
from plan_parallel.planners.beam import BeamSearch
from plan_parallel.planners.mcts import MCTS
from plan_parallel.planners.shooting import RandomShooting

__all__ = ["PLANNERS", "PRESETS", "make_planner"]

PLANNERS: dict[str, type] = {"mcts": MCTS, "shooting": RandomShooting, "beam": BeamSearch}

# env id -> planner name -> keyword arguments
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "CartPole-v1": {
        "mcts": {"budget": 64, "leaves_per_batch": 8, "rollout_depth": 20},
        "shooting": {"budget": 64, "horizon": 20},
        "beam": {"width": 16, "depth": 20},
    },
    "Acrobot-v1": {
        "mcts": {"budget": 100, "leaves_per_batch": 16, "rollout_depth": 30, "dt": 6},
        "shooting": {"budget": 100, "horizon": 30, "dt": 6},
    },
    "MountainCar-v0": {
        "mcts": {"budget": 100, "leaves_per_batch": 16, "rollout_depth": 25, "dt": 8},
        "shooting": {"budget": 100, "horizon": 25, "dt": 8},
    },
    "Pendulum-v1": {"shooting": {"budget": 120, "horizon": 20, "iterations": 3}},
    "ALE/Pong-v5": {
        "mcts": {"budget": 32, "leaves_per_batch": 16, "rollout_depth": 20},
        "shooting": {"budget": 32, "horizon": 20},
    },
}


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
