"""EnvEngine: the live env behind a :class:`~plan_parallel.env.PlanEnv`, and the raw work the backends ask of it.

A :class:`PlanEnv` checks a user's arguments and documents the planning API; its
engine holds the gymnasium env, its state adapter and the state the env holds,
and runs items whose inputs were checked already: the work of a worker
(:meth:`EnvEngine.run_raw`, :meth:`EnvEngine.rollout_raw`), of a batch run in
the calling process (:meth:`EnvEngine.step_batch_checked`) and of a vector env's
resident envs (:meth:`EnvEngine.step_from`). Those are plumbing, not part of the
public face: the other layers reach a PlanEnv's engine with
:func:`plan_parallel.env.plan_env.engine_of`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plan_parallel.env.loops import Policy, RolloutParts, UniformPolicy, act_into, run_items, run_rollouts
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.results import StepBatch, step_batch_of
from plan_parallel.state import Adapter, State, bind
from plan_parallel.state.state_value import freeze, validate_each

__all__ = ["EnvEngine"]


class EnvEngine:
    """One gymnasium env, its state adapter, the current state and the state the live env holds.

    Args:
        factory: builds the gymnasium env (an :class:`EnvFactory` or any callable).
        adapter: an :class:`~plan_parallel.state.Adapter` class instead of the registered one.

    Raises:
        StateError: no adapter can capture this env exactly.
    """

    def __init__(self, factory: Callable[[], Any], adapter: type[Adapter] | None = None) -> None:
        self.env = getattr(factory, "build_to_bind", factory)()  # EnvFactory's: an ALE env loads its ROM once
        self.closed = False
        try:
            self.adapter = bind(self.env, adapter)
        except BaseException:
            self.env.close()
            raise
        self.adapter.use_factory(factory)
        self.step_once = self.adapter.make_step()
        self.state: State | None = None  # the current state
        self.live_is_current = False  # does the live env hold self.state?
        self.held: State | None = None  # the state object the live env equals (None: unknown); not restored again
        self.uniform: UniformPolicy | None = None
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.stats = {"items": 0, "batches": 0, "env_seconds": 0.0}

    # -------------------------------------------------------------------- the current state
    def check_open(self) -> None:
        if self.closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")

    def current(self) -> State:
        if self.state is None:
            raise StateError("the env has no current state yet: call reset(seed) or set_state(state) first")
        return self.state

    def live_env(self) -> Any:
        """The gymnasium env holding the current state (restored into it if it does not); whoever has it may step it."""
        self.check_open()
        if not self.live_is_current and self.state is not None:
            self.adapter.restore(self.state)
            self.live_is_current = True
        self.held = None  # whoever has the env may step it
        return self.adapter.env  # the env holding the current state (action replay may keep several)

    def reset(self, seed: int | None, options: dict | None) -> tuple[State, Any, dict]:
        """Reset with a checked seed and options: ``(state, obs, info)``; the state becomes current."""
        if seed is None and self.state is not None and not self.live_is_current and self.held is not self.state:
            self.adapter.restore(self.state)  # a reset without a seed goes on from the current state's RNG
        self.held = None
        obs, info = self.adapter.reset(seed, options)
        self.state = self.held = self.adapter.capture(None, freeze(obs))
        self.live_is_current = True
        return self.state, obs, info

    def set_state(self, state: State) -> None:
        """Make ``state`` current (validated unless the env holds this very state already)."""
        if state is not self.held:  # the env holds this very state already: nothing to restore
            self.adapter.validate(state)
            self.held = None
            self.adapter.restore(state)
        self.state = self.held = state
        self.live_is_current = True

    def validate_all(self, states: Sequence[State], first_index: int = 0, index_errors: bool = True) -> None:
        """Validate each of ``states``, items ``first_index ...`` of a batch (see
        :func:`~plan_parallel.state.state_value.validate_each`, which words the errors as :func:`check_states` does).

        Raises:
            StateError: ``states[k]: ...`` (unless ``index_errors`` is False), the item marked on it
                (:func:`~plan_parallel.errors.failed_item`).
        """
        validate_each(states, self.adapter.validate, first_index, index_errors, self.adapter.checker)

    # -------------------------------------------------------------------- running items
    def timed(self, n: int, loop: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``loop(adapter, step, *args, **kwargs)`` over ``n`` items, counting it in :attr:`stats`.

        The loop is told the state the env holds (an item from it is not restored); then the last item's end state.
        """
        t0 = time.perf_counter()
        self.live_is_current = False
        held, self.held = self.held, None  # unknown until the loop returns (it may raise)
        out = loop(self.adapter, self.step_once, *args, held=held, **kwargs)
        self.held = out[0][-1] if n else held
        self.stats["env_seconds"] += time.perf_counter() - t0
        self.stats["items"] += n
        self.stats["batches"] += 1
        return out

    def run(self, states: Sequence[State], actions: Any, dt: Any, seeds: Any = None, rows: Any = None) -> tuple:
        """:func:`~plan_parallel.env.loops.run_items` on this env, timed; plain lists back."""
        return self.timed(len(states), run_items, states, actions, dt, seeds, rows=rows)

    def observation_form(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and shape of the observations made in place in rows given to :meth:`run_raw` (ALE's
        screens, :meth:`Adapter.observation_rows`: the observation space's), or None: this env makes none."""
        return self.adapter.observation_rows()

    def run_raw(self, states: Sequence[State] | None, actions: Any, dt: int | np.ndarray, seeds: np.ndarray | None = None,
                obs_rows: np.ndarray | None = None) -> tuple:
        """Run already-checked items (``states=None``: from the current state); plain lists back.

        The work of a worker: inputs were checked by the caller before sending. See
        :func:`~plan_parallel.env.loops.run_items`. ``obs_rows``: rows of a slab the caller
        lent (:meth:`observation_form`), where the observations are made and stay: the
        env then forgets which state it holds (the next item is restored).
        """
        self.check_open()
        if states is None:
            states = [self.current()] * len(actions)
        out = self.run(states, actions, dt, seeds, obs_rows)
        if obs_rows is not None:
            self.held = None
        return out

    def step_batch_checked(
        self,
        actions: Any,
        states: Sequence[State],
        dt: int | np.ndarray,
        seeds: np.ndarray | None = None,
        index_errors: bool = True,
        *,
        validated: bool = False,
    ) -> StepBatch:
        """:meth:`PlanEnv.step_batch` for inputs already in canonical form (see :mod:`plan_parallel.inputs`).

        For a caller that has run the same checks (the parallel backends, when they
        run a batch in this process): only the states' simulator parts are checked again.
        A malformed state's error names its index unless ``index_errors`` is False
        (for :meth:`PlanEnv.step`'s one state). ``validated``: the states were validated
        against this env's kind when they entered the caller's hands, or made by it
        (a vector env's sub-env states), and are not checked again.
        """
        self.check_open()
        if not validated:
            self.validate_all(states, 0, index_errors)
        return self.batch(actions, states, dt, seeds)

    def batch(self, actions: Any, states: Sequence[State], dt: int | np.ndarray, seeds: np.ndarray | None) -> StepBatch:
        """Checked items run into a :class:`StepBatch` (the observations made in rows of one array when they can be)."""
        form = self.observation_form()
        rows = None if form is None or not states else np.empty((len(states), *form[1]), dtype=form[0])
        return step_batch_of(self.observation_space, self.run(states, actions, dt, seeds, rows), rows)

    def step_from(self, state: State, action: Any, row: np.ndarray | None = None) -> tuple[State, Any, float, bool, bool, dict]:
        """One step of a checked ``action`` from a checked ``state`` of this env's kind, the current state left as
        it was: ``(end state, observation, reward, terminated, truncated, info)``, the info as the env returned it.
        ``row``: an array of :meth:`observation_form` the observation is made in (then it is the observation).

        For an env kept at a vector env's sub-env state: one holding ``state`` (it captured it and has not
        moved since) steps on without a restore.
        """
        if self.closed:
            self.check_open()
        held, self.held = self.held, None  # unknown until the step returns (it may raise)
        self.live_is_current = False
        adapter = self.adapter
        if state is not held:
            adapter.restore(state)
        if row is None:
            obs, r, term, trunc, info = self.step_once(action)
        else:
            obs, r, term, trunc, info, _ = act_into(adapter, action, 1, row)
        end = self.held = adapter.capture(None, freeze(obs))
        return end, obs, float(r), term is True or bool(term), trunc is True or bool(trunc), info

    def uniform_policy(self) -> UniformPolicy:
        """The uniform random policy of this env's action space (made once; see :meth:`PlanEnv.uniform_policy`)."""
        if self.uniform is None:
            self.uniform = UniformPolicy(self.action_space)
        return self.uniform

    def rollout_raw(
        self,
        states: Sequence[State] | None,
        actions: Any,
        dt: int | np.ndarray,
        horizon: int,
        *,
        policy: Policy | None = None,
        seeds: np.ndarray | None = None,
        first_index: int = 0,
        return_all: bool = False,
        n: int | None = None,
    ) -> RolloutParts:
        """Roll out already-checked items (``states=None``: ``n`` copies of the current state).

        The work of a worker: inputs were checked by the caller before sending.
        With ``actions`` and ``policy`` both None, uniform random actions are
        drawn. See :func:`~plan_parallel.env.loops.run_rollouts` for the arguments.
        """
        self.check_open()
        if states is None:
            if n is None:
                n = len(actions) if actions is not None else len(seeds)  # type: ignore[arg-type]
            states = [self.current()] * n
        if actions is None and policy is None:
            policy = self.uniform_policy()
        return self.timed(len(states), run_rollouts, states, actions, dt, horizon, policy=policy, seeds=seeds,
                          first_index=first_index, return_all=return_all)

    def close(self) -> None:
        """Close the adapter and the env. Idempotent; every later call raises :class:`ClosedError`."""
        if not self.closed:
            self.closed = True
            try:
                self.adapter.close()
            finally:
                self.env.close()
