"""Resident envs of :class:`~plan_parallel.vector.PlanVectorEnv`: one env in this process per sub-env.

A vector step that runs in this process (the inline backend; the process and
Ray backends when they judge a step too small for the workers) steps each
sub-env on an env of its own, left at the sub-env's state after the step. At
the next step that env holds the very state object the vector env kept, so it
steps on without a restore (:meth:`EnvEngine.step_from`); as SyncVectorEnv does,
but with every state still captured, so ``get_states``, the workers and a
replay after a worker's death see the same states as before.

A sub-env whose state came from elsewhere (a step on the workers, a reset,
``set_states``) is restored first: the results never depend on which env ran
it. The envs are built on first use, from the sub-env's recipe (its group's
overrides included), and rebuilt when ``set_attr`` moves it to another recipe.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plan_parallel.env.loops import step_each
from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.errors import mark_failed_item
from plan_parallel.state import State
from plan_parallel.vector.groups import Group, RecipeGroups, close_each

__all__ = ["Residents"]


class Residents:
    """Sub-env i's own env in this process (built on first use), for the steps that run here."""

    def __init__(self, recipes: RecipeGroups, n: int) -> None:
        self.recipes = recipes
        self.envs: list[PlanEnv | None] = [None] * n
        self.built_for: list[Group | None] = [None] * n  # the group whose recipe built envs[i]

    def built(self, i: int) -> PlanEnv | None:
        """Sub-env ``i``'s env when it was built for the sub-env's recipe; None when not (yet)."""
        env = self.envs[i]
        return env if env is not None and self.built_for[i] is self.recipes.of(i) else None

    def env(self, i: int) -> PlanEnv:
        """Sub-env ``i``'s env, built (or rebuilt, after its recipe changed) as needed."""
        env = self.built(i)
        if env is None:
            old, self.envs[i] = self.envs[i], None
            if old is not None:
                old.close()
            env = self.envs[i] = self.recipes.new_sub(i)
            self.built_for[i] = self.recipes.of(i)
        return env

    def of(self, ids: Sequence[int]) -> list[PlanEnv]:
        """The envs of sub-envs ``ids`` (:meth:`env` of each, without its calls for those built already)."""
        envs, built, members = self.envs, self.built_for, self.recipes.members
        return [env if (env := envs[i]) is not None and built[i] is members[i] else self.env(i) for i in ids]

    def run(self, ids: np.ndarray, actions: Any, states: Sequence[State | None], rows: np.ndarray | None = None) -> tuple:
        """One step of sub-envs ``ids`` from ``states`` with their checked ``actions``, each on its own env
        (:meth:`EnvEngine.step_from`; ``rows``: where their observations are made); lists as
        :meth:`EnvEngine.run_raw`. On an env error the exception carries the failing item's index
        (:func:`~plan_parallel.errors.failed_item`)."""
        try:
            engines = [engine_of(env) for env in self.of(ids.tolist())]
        except Exception as e:  # building a sub-env's env failed: the first item's error, as the loop's
            mark_failed_item(e, 0)
            raise
        return step_each(len(states), lambda j: engines[j].step_from(
            states[j], actions[j], None if rows is None else rows[j]))  # type: ignore[arg-type]  # started

    def close(self) -> None:
        """Close every env built (each is tried; the first error raises after all were)."""
        envs, self.envs = self.envs, [None] * len(self.envs)
        close_each(envs)
