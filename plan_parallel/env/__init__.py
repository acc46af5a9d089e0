"""The inline backend: :class:`PlanEnv` (``plan_env``), the loops that step one env (``loops``) and the RNG
of a rollout item's policy (``item_rng``)."""
from plan_parallel.env.plan_env import PlanEnv

__all__ = ["PlanEnv"]
