"""PlanEnv: one gymnasium env with the planning API. The inline backend.

``PlanEnv`` runs everything in the calling process. It is the reference every
other backend must match bit for bit, and the object a worker process hosts.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plan_parallel.action_inputs import check_action, check_actions
from plan_parallel.env.loops import Policy, RolloutParts, UniformPolicy, act_into, run_items, run_rollouts, to_rollout_batch
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.inputs import check_dt, check_rollout, check_seed, check_seeds, check_states
from plan_parallel.results import RolloutBatch, StepBatch, step_batch_of, writable_observation
from plan_parallel.state import Adapter, State, bind
from plan_parallel.state.state_value import freeze, validate_each

__all__ = ["PlanEnv"]


class PlanEnv:
    """One env with the planning API, run in this process (the ``"inline"`` backend).

    The env keeps a *current state*: ``reset``, ``set_state``, ``sync_states`` and
    ``step`` change it; ``step_batch`` never does. Every method checks its
    arguments before touching the env.

    Args:
        factory: builds the gymnasium env (an :class:`EnvFactory` or any callable).
        adapter: an :class:`~plan_parallel.state.Adapter` class to use instead of
            the registered one for this env.

    Raises:
        StateError: no adapter can capture this env exactly.
    """

    backend = "inline"

    def __init__(self, factory: Callable[[], Any], adapter: type[Adapter] | None = None) -> None:
        self._factory = factory
        self._env = getattr(factory, "build_to_bind", factory)()  # EnvFactory's: an ALE env loads its ROM once
        self._closed = False
        try:
            self._adapter = bind(self._env, adapter)
        except BaseException:
            self._env.close()
            raise
        self._adapter.use_factory(factory)
        self._step = self._adapter.make_step()
        self._state: State | None = None
        self._live_is_current = False  # does the live env hold self._state?
        self._held: State | None = None  # the state object the live env equals (None: unknown); not restored again
        self._uniform: UniformPolicy | None = None
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space
        self.stats = {"items": 0, "batches": 0, "env_seconds": 0.0}

    # -------------------------------------------------------------------- properties
    @property
    def n_workers(self) -> int:
        """Always 1: the inline backend runs in the calling process."""
        return 1

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def kind(self) -> str:
        """The kind of state this env produces and accepts (see :attr:`State.kind`)."""
        return self._adapter.kind

    @property
    def spec(self) -> Any:
        return self._env.spec

    @property
    def gym_env(self) -> Any:
        """The underlying gymnasium env, at the current state (for rendering; stepping it bypasses the state tracking)."""
        self._check_open()
        if not self._live_is_current and self._state is not None:
            self._adapter.restore(self._state)
            self._live_is_current = True
        self._held = None  # whoever has the env may step it
        return self._adapter.env  # the env holding the current state (action replay may keep several)

    # -------------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")

    def _current(self) -> State:
        if self._state is None:
            raise StateError("the env has no current state yet: call reset(seed) or set_state(state) first")
        return self._state

    def validate(self, state: State) -> None:
        """Check that ``state`` can restore this env (its kind and simulator part).

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._adapter.validate(state)

    def validate_all(self, states: Sequence[State], first_index: int = 0, index_errors: bool = True) -> None:
        """:meth:`validate` each of ``states``, items ``first_index ...`` of a batch (see
        :func:`~plan_parallel.state.state_value.validate_each`, which words the errors as :func:`check_states` does).

        Raises:
            StateError: ``states[k]: ...`` (unless ``index_errors`` is False), the item marked on it
                (:func:`~plan_parallel.errors.failed_item`).
        """
        validate_each(states, self._adapter.validate, first_index, index_errors, self._adapter.checker)

    # -------------------------------------------------------------------- API
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """Reset the env. Returns ``(state, obs, info)``; the state becomes current.

        Without a seed, the reset goes on from the current state (its RNG, and whatever
        else outlives a reset), as a gymnasium env goes on from where it is.

        Raises:
            TypeError: ``seed`` is not None or an int >= 0.
            ClosedError: the env was closed.
        """
        self._check_open()
        seed = check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        if seed is None and self._state is not None and not self._live_is_current and self._held is not self._state:
            self._adapter.restore(self._state)  # a reset without a seed goes on from the current state's RNG
        self._held = None
        obs, info = self._adapter.reset(seed, options)
        self._state = self._held = self._adapter.capture(None, freeze(obs))
        self._live_is_current = True
        return self._state, writable_observation(obs), info

    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """Advance the current state (or ``state``, when given) by ``action`` repeated ``dt`` times.

        Returns:
            ``(state, obs, reward, terminated, truncated, info)``; the new state
            becomes current. ``info["n_steps"]`` is the number of env steps taken.

        Raises:
            ValueError/TypeError: bad action or dt. StateError: bad state or no current state.
        """
        self._check_open()
        checked = check_dt(dt, 1)
        if not isinstance(checked, int):
            raise TypeError(f"step takes one integer dt >= 1, got {dt!r}")
        dt = checked
        action = check_action(self.action_space, action)
        if state is not None:
            self._adapter.validate(state)
        batch = self._run([state if state is not None else self._current()], [action], dt)
        s = batch[0][0]
        freeze(s.obs)
        self._state = s
        self._live_is_current = True
        return s, writable_observation(batch[1][0]), batch[2][0], batch[3][0], batch[4][0], batch[5][0]

    def _timed(self, n: int, loop: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``loop(adapter, step, *args, **kwargs)`` over ``n`` items, counting it in :attr:`stats`.

        The loop is told the state the env holds (an item from it is not restored); then the last item's end state.
        """
        t0 = time.perf_counter()
        self._live_is_current = False
        held, self._held = self._held, None  # unknown until the loop returns (it may raise)
        out = loop(self._adapter, self._step, *args, held=held, **kwargs)
        self._held = out[0][-1] if n else held
        self.stats["env_seconds"] += time.perf_counter() - t0
        self.stats["items"] += n
        self.stats["batches"] += 1
        return out

    def _run(self, states: Sequence[State], actions: Any, dt: Any, seeds: Any = None, rows: Any = None) -> tuple:
        return self._timed(len(states), run_items, states, actions, dt, seeds, rows=rows)

    def observation_form(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """The dtype and shape of the observations made in place in rows given to :meth:`run_raw` (ALE's
        screens, :meth:`Adapter.observation_rows`: the observation space's), or None: this env makes none."""
        return self._adapter.observation_rows()

    def run_raw(self, states: Sequence[State] | None, actions: Any, dt: int | np.ndarray, seeds: np.ndarray | None = None,
                obs_rows: np.ndarray | None = None) -> tuple:
        """Run already-checked items (``states=None``: from the current state); plain lists back.

        The work of a worker: inputs were checked by the caller before sending. See
        :func:`~plan_parallel.env.loops.run_items`. ``obs_rows``: rows of a slab the caller
        lent (:meth:`observation_form`), where the observations are made and stay: the
        env then forgets which state it holds (the next item is restored).
        """
        self._check_open()
        if states is None:
            states = [self._current()] * len(actions)
        out = self._run(states, actions, dt, seeds, obs_rows)
        if obs_rows is not None:
            self._held = None
        return out

    def step_batch(
        self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *, seeds: Any = None
    ) -> StepBatch:
        """Run N (state, action, dt) items; the current state is left as it was.

        Item i restores ``states[i]`` (the current state when ``states`` is None),
        applies ``actions[i]`` ``dt[i]`` times, sums the rewards, and stops early
        at terminated or truncated.

        Args:
            actions: N actions.
            states: N states, or None (every item starts from the current state).
            dt: an int >= 1, or N ints >= 1.
            seeds: None (each item keeps its state's own RNG: fully deterministic),
                or N ints >= 0: item i's env RNG is reseeded from ``seeds[i]`` after
                its state is restored, so the same (state, action, seed) gives the
                same outcome and different seeds sample different outcomes of a
                stochastic env. The returned states hold the reseeded RNG.

        Raises:
            ValueError/TypeError: mismatched lengths, bad dt or seeds, actions outside the space.
            StateError: a state of another env, no current state when ``states`` is
                None, or seeds for an env whose RNG cannot be reseeded (action replay).
        """
        self._check_open()
        if states is None:
            actions = check_actions(self.action_space, actions)
            n = len(actions)
            cur = self._current()
            states = [cur] * n
        else:
            n = len(states) if hasattr(states, "__len__") else -1
            actions = check_actions(self.action_space, actions, n if n >= 0 else None)
            states = check_states(states, self._adapter.kind, len(actions), self._adapter.validate, self._adapter.checker)
        dt = check_dt(dt, n)
        seeds = check_seeds(seeds, n, self._adapter.reseedable)
        return self._batch(actions, states, dt, seeds)

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
        """:meth:`step_batch` for inputs already in canonical form (see :mod:`plan_parallel.inputs`).

        For a caller that has run the same checks (the parallel backends, when they
        run a batch in this process): only the states' simulator parts are checked again.
        A malformed state's error names its index unless ``index_errors`` is False
        (for :meth:`step`'s one state). ``validated``: the states were validated
        against this env's kind when they entered the caller's hands, or made by it
        (a vector env's sub-env states), and are not checked again.
        """
        self._check_open()
        if not validated:
            self.validate_all(states, 0, index_errors)
        return self._batch(actions, states, dt, seeds)

    def _batch(self, actions: Any, states: Sequence[State], dt: int | np.ndarray, seeds: np.ndarray | None) -> StepBatch:
        form = self.observation_form()
        rows = None if form is None or not states else np.empty((len(states), *form[1]), dtype=form[0])
        return step_batch_of(self.observation_space, self._run(states, actions, dt, seeds, rows), rows)

    def step_from(self, state: State, action: Any, row: np.ndarray | None = None) -> tuple[State, Any, float, bool, bool, dict]:
        """One step of a checked ``action`` from a checked ``state`` of this env's kind, the current state left as
        it was: ``(end state, observation, reward, terminated, truncated, info)``, the info as the env returned it.
        ``row``: an array of :meth:`observation_form` the observation is made in (then it is the observation).

        For an env kept at a vector env's sub-env state: one holding ``state`` (it captured it and has not
        moved since) steps on without a restore.
        """
        if self._closed:
            self._check_open()
        held, self._held = self._held, None  # unknown until the step returns (it may raise)
        self._live_is_current = False
        adapter = self._adapter
        if state is not held:
            adapter.restore(state)
        if row is None:
            obs, r, term, trunc, info = self._step(action)
        else:
            obs, r, term, trunc, info, _ = act_into(adapter, action, 1, row)
        end = self._held = adapter.capture(None, freeze(obs))
        return end, obs, float(r), term is True or bool(term), trunc is True or bool(trunc), info

    @property
    def reseedable(self) -> bool:
        """Whether per-item ``seeds`` can reseed this env's RNG (False for action-replay envs)."""
        return self._adapter.reseedable

    def uniform_policy(self) -> UniformPolicy:
        """The policy of ``rollout_batch(actions=None, policy=None)``: uniform random actions.

        Raises:
            TypeError/ValueError: the action space has no uniform sampler (see
                :class:`~plan_parallel.env.loops.UniformPolicy`).
        """
        if self._uniform is None:
            self._uniform = UniformPolicy(self.action_space)
        return self._uniform

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
        self._check_open()
        if states is None:
            if n is None:
                n = len(actions) if actions is not None else len(seeds)  # type: ignore[arg-type]
            states = [self._current()] * n
        if actions is None and policy is None:
            policy = self.uniform_policy()
        return self._timed(len(states), run_rollouts, states, actions, dt, horizon, policy=policy, seeds=seeds,
                           first_index=first_index, return_all=return_all)

    def rollout_batch(
        self,
        states: Sequence[State] | None,
        actions: Any = None,
        dt: Any = 1,
        *,
        horizon: int | None = None,
        policy: Policy | None = None,
        seeds: Any = None,
        return_all: bool = False,
    ) -> RolloutBatch:
        """Roll out N action sequences of T steps each; the current state is left as it was.

        Item i restores ``states[i]`` (the current state when ``states`` is None)
        and runs T steps; step t applies its action ``dt[i]`` times, exactly as a
        ``step_batch`` item does, so a rollout equals T chained ``step_batch``
        calls. An item stops after the first step that terminates or truncates
        (its later rewards are 0.0).

        Args:
            states: N start states, or None: every item starts from the current
                state, and N is ``len(actions)``, else ``len(seeds)``.
            actions: shape ``(N, T, *action_shape)``; or None: ``policy`` acts for
                ``horizon`` steps (uniform random actions when ``policy`` is None too).
            dt: an int >= 1, or N ints >= 1.
            horizon: T; required when ``actions`` is None, else it must match T.
            policy: a picklable callable ``(obs, rng) -> action``, called with the
                latest observation (the start state's at t = 0) and the item's RNG.
                It must be a pure function of its arguments: a policy that keeps
                state between calls gives results that depend on the backend.
            seeds: None, or N ints >= 0. With a seed, item i's env RNG is reseeded
                from ``seeds[i]`` once, before its first step (see :meth:`step_batch`),
                and its policy RNG is an independent stream of the same seed. Without
                seeds, the env keeps the state's own RNG and the policy RNG is derived
                from the start state and the item's index in this batch (see
                :func:`~plan_parallel.env.item_rng.item_rng`): reproducible, identical on
                every backend, and different for copies of one state.
            return_all: also return every intermediate state and observation.

        Returns:
            A :class:`~plan_parallel.results.RolloutBatch`.

        Raises:
            ValueError/TypeError: bad shapes, horizon missing or not matching T,
                actions and policy both given, bad dt or seeds, a policy that is not
                callable or not picklable, an action space without a uniform sampler.
            StateError: a state of another env, no current state, a start state
                without the observation a policy needs, seeds for an env whose RNG
                cannot be reseeded.
            Exception: whatever the env or the policy raised (the current state is kept).
        """
        self._check_open()
        current = self._current() if states is None else None
        req = check_rollout(
            self.action_space, self._adapter.kind, self._adapter.validate, states, actions, dt,
            horizon=horizon, policy=policy, seeds=seeds, return_all=return_all, current=current,
            reseedable=self._adapter.reseedable,
        )
        if req.actions is None and req.policy is None:
            self.uniform_policy()  # the space has a sampler, or this raises
        states = req.states if req.states is not None else [self._current()] * req.n
        parts = self.rollout_raw(states, req.actions, req.dt, req.horizon, policy=req.policy, seeds=req.seeds,
                                 return_all=req.return_all)
        return to_rollout_batch(self.observation_space, parts)

    def get_state(self) -> State:
        """The current state.

        Raises:
            StateError: no current state yet (never reset nor set).
        """
        self._check_open()
        return self._current()

    def set_state(self, state: State) -> None:
        """Make ``state`` the current state.

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._check_open()
        if state is not self._held:  # the env holds this very state already: nothing to restore
            self._adapter.validate(state)
            self._held = None
            self._adapter.restore(state)
        self._state = self._held = state
        self._live_is_current = True

    def sync_states(self, state: State) -> None:
        """Make ``state`` current everywhere (inline: the same as :meth:`set_state`)."""
        self.set_state(state)

    def close(self) -> None:
        """Close the env. Idempotent; every later call raises :class:`ClosedError`."""
        if not self._closed:
            self._closed = True
            try:
                self._adapter.close()
            finally:
                self._env.close()

    def __enter__(self) -> PlanEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PlanEnv({self._factory!r}, kind={self.kind!r}{', closed' if self._closed else ''})"
