"""PlanEnv: one gymnasium env with the planning API. The inline backend.

``PlanEnv`` runs everything in the calling process. It is the reference every
other backend must match bit for bit, and the object a worker process hosts.
It checks the arguments of each public call; its :class:`~plan_parallel.env.engine.EnvEngine`
(:func:`engine_of`) holds the env and runs the work, also the checked work the other backends send it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from plan_parallel.action_inputs import check_action, check_actions
from plan_parallel.env.engine import EnvEngine
from plan_parallel.env.loops import Policy, UniformPolicy, to_rollout_batch
from plan_parallel.inputs import check_dt, check_rollout, check_seed, check_seeds, check_states
from plan_parallel.results import RolloutBatch, StepBatch, writable_observation
from plan_parallel.state import Adapter, State
from plan_parallel.state.state_value import freeze

__all__ = ["PlanEnv", "engine_of"]


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
        self._engine = EnvEngine(factory, adapter)

    # -------------------------------------------------------------------- properties
    @property
    def observation_space(self) -> Any:
        """The env's observation space (a ``gymnasium.spaces.Space``): what ``reset`` and ``step`` observe."""
        return self._engine.observation_space

    @property
    def action_space(self) -> Any:
        """The env's action space (a ``gymnasium.spaces.Space``): every action given is checked against it."""
        return self._engine.action_space

    @property
    def stats(self) -> dict[str, Any]:
        """Counters since the env was made, a live dict: ``items`` and ``batches`` run (a ``step`` is one of
        each) and ``env_seconds``, the time spent running them."""
        return self._engine.stats

    @property
    def n_workers(self) -> int:
        """Always 1: the inline backend runs in the calling process."""
        return 1

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._engine.closed

    @property
    def kind(self) -> str:
        """The kind of state this env produces and accepts (see :attr:`State.kind`)."""
        return self._engine.adapter.kind

    @property
    def spec(self) -> Any:
        """The env's ``EnvSpec`` (None for an env not made by ``gymnasium.make``)."""
        return self._engine.env.spec

    @property
    def gym_env(self) -> Any:
        """The underlying gymnasium env, at the current state (for rendering; stepping it bypasses the state tracking)."""
        return self._engine.live_env()

    def validate(self, state: State) -> None:
        """Check that ``state`` can restore this env (its kind and simulator part).

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._engine.adapter.validate(state)

    # -------------------------------------------------------------------- API
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """Reset the env. Returns ``(state, obs, info)``; the state becomes current.

        Without a seed, the reset goes on from the current state (its RNG, and whatever
        else outlives a reset), as a gymnasium env goes on from where it is.

        Raises:
            TypeError: ``seed`` is not None or an int >= 0.
            ClosedError: the env was closed.
        """
        self._engine.check_open()
        seed = check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        state, obs, info = self._engine.reset(seed, options)
        return state, writable_observation(obs), info

    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """Advance the current state (or ``state``, when given) by ``action`` repeated ``dt`` times.

        Returns:
            ``(state, obs, reward, terminated, truncated, info)``; the new state
            becomes current. ``info["n_steps"]`` is the number of env steps taken.

        Raises:
            ValueError/TypeError: bad action or dt.
            StateError: bad state or no current state.
        """
        engine = self._engine
        engine.check_open()
        checked = check_dt(dt, 1)
        if not isinstance(checked, int):
            raise TypeError(f"step takes one integer dt >= 1, got {dt!r}")
        dt = checked
        action = check_action(self.action_space, action)
        if state is not None:
            engine.adapter.validate(state)
        batch = engine.run([state if state is not None else engine.current()], [action], dt)
        s = batch[0][0]
        freeze(s.obs)
        engine.state = s
        engine.live_is_current = True
        return s, writable_observation(batch[1][0]), batch[2][0], batch[3][0], batch[4][0], batch[5][0]

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
        engine = self._engine
        engine.check_open()
        adapter = engine.adapter
        if states is None:
            actions = check_actions(self.action_space, actions)
            n = len(actions)
            cur = engine.current()
            states = [cur] * n
        else:
            n = len(states) if hasattr(states, "__len__") else -1
            actions = check_actions(self.action_space, actions, n if n >= 0 else None)
            states = check_states(states, adapter.kind, len(actions), adapter.validate, adapter.checker)
        dt = check_dt(dt, n)
        seeds = check_seeds(seeds, n, adapter.reseedable)
        return engine.batch(actions, states, dt, seeds)

    @property
    def reseedable(self) -> bool:
        """Whether per-item ``seeds`` can reseed this env's RNG (False for action-replay envs)."""
        return self._engine.adapter.reseedable

    def uniform_policy(self) -> UniformPolicy:
        """The policy of ``rollout_batch(actions=None, policy=None)``: uniform random actions.

        Raises:
            TypeError/ValueError: the action space has no uniform sampler (see
                :class:`~plan_parallel.env.loops.UniformPolicy`).
        """
        return self._engine.uniform_policy()

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
        engine = self._engine
        engine.check_open()
        adapter = engine.adapter
        current = engine.current() if states is None else None
        req = check_rollout(
            self.action_space, adapter.kind, adapter.validate, states, actions, dt,
            horizon=horizon, policy=policy, seeds=seeds, return_all=return_all, current=current,
            reseedable=adapter.reseedable,
        )
        if req.actions is None and req.policy is None:
            self.uniform_policy()  # the space has a sampler, or this raises
        states = req.states if req.states is not None else [engine.current()] * req.n
        parts = engine.rollout_raw(states, req.actions, req.dt, req.horizon, policy=req.policy, seeds=req.seeds,
                                   return_all=req.return_all)
        return to_rollout_batch(self.observation_space, parts)

    def get_state(self) -> State:
        """The current state.

        Raises:
            StateError: no current state yet (never reset nor set).
        """
        self._engine.check_open()
        return self._engine.current()

    def set_state(self, state: State) -> None:
        """Make ``state`` the current state.

        Raises:
            StateError: ``state`` belongs to another env or is malformed.
        """
        self._engine.check_open()
        self._engine.set_state(state)

    def sync_states(self, state: State) -> None:
        """Make ``state`` current everywhere (inline: the same as :meth:`set_state`)."""
        self.set_state(state)

    def close(self) -> None:
        """Close the env. Idempotent; every later call raises :class:`ClosedError`."""
        self._engine.close()

    def __enter__(self) -> PlanEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PlanEnv({self._factory!r}, kind={self.kind!r}{', closed' if self._engine.closed else ''})"


def engine_of(env: PlanEnv) -> EnvEngine:
    """The :class:`~plan_parallel.env.engine.EnvEngine` of ``env``: its live env and the checked work the other
    backends run on it (a worker's items, a batch run in the calling process, a vector env's resident step).

    Not part of the public API: the way the other layers of the package reach that work.
    """
    return env._engine
