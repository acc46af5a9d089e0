"""PlanEnv: one gymnasium env with the planning API. The inline backend.

``PlanEnv`` runs everything in the calling process. It is the reference every
other backend must match bit for bit, and the object a worker process hosts.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from plan_parallel.errors import ClosedError, StateError
from plan_parallel.factory import EnvFactory
from plan_parallel.inputs import (
    StepBatch,
    check_action,
    check_actions,
    check_dt,
    check_seed,
    check_states,
    stack_observations,
)
from plan_parallel.state import Adapter, State, bind

__all__ = ["EnvFactory", "PlanEnv", "run_items"]  # EnvFactory re-exported


def run_items(
    adapter: Adapter,
    step: Callable[[Any], tuple],
    states: Sequence[State],
    actions: Any,
    dt: int | np.ndarray,
) -> tuple[list, list, list, list, list, list]:
    """Run N (state, action, dt) items on one env: the work of ``step_batch``.

    Item i restores ``states[i]``, applies ``actions[i]`` ``dt[i]`` times, sums
    the rewards (as Python floats, in step order) and stops early at terminated
    or truncated. Returns plain lists ``(states, observations, rewards,
    terminations, truncations, infos)``; the caller stacks them.
    """
    restore, capture = adapter.restore, adapter.capture
    n = len(states)
    out_states: list = [None] * n
    out_obs: list = [None] * n
    rewards: list = [0.0] * n
    terms: list = [False] * n
    truncs: list = [False] * n
    infos: list = [None] * n
    scalar_dt = isinstance(dt, int)
    i = 0
    try:
        for i in range(n):
            restore(states[i])
            a = actions[i]
            k = dt if scalar_dt else int(dt[i])
            if k == 1:
                obs, r, term, trunc, info = step(a)
                total = float(r)
                taken = 1
            else:
                total = 0.0
                taken = 0
                while True:
                    obs, r, term, trunc, info = step(a)
                    total += float(r)
                    taken += 1
                    if term or trunc or taken == k:
                        break
            out_obs[i] = obs
            rewards[i] = total
            terms[i] = bool(term)
            truncs[i] = bool(trunc)
            infos[i] = {**info, "n_steps": taken}  # the env may reuse its info dict
            out_states[i] = capture(None, obs)
    except Exception as e:
        # Which item failed, for the note the caller adds (worker and item).
        e._pp_item = i  # type: ignore[attr-defined]
        raise
    return out_states, out_obs, rewards, terms, truncs, infos


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
        self._env = factory()
        self._closed = False
        try:
            self._adapter = bind(self._env, adapter)
        except BaseException:
            self._env.close()
            raise
        self._step = self._adapter.make_step()
        self._state: State | None = None
        self._live_is_current = False  # does the live env hold self._state?
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space
        self.stats = {"items": 0, "batches": 0, "env_seconds": 0.0}

    # -------------------------------------------------------------------- properties
    @property
    def n_workers(self) -> int:
        """Always 1: the inline backend runs in the calling process."""
        return 1

    @property
    def kind(self) -> str:
        """The kind of state this env produces and accepts (see :attr:`State.kind`)."""
        return self._adapter.kind

    @property
    def spec(self) -> Any:
        return self._env.spec

    @property
    def gym_env(self) -> Any:
        """The underlying gymnasium env (for rendering; stepping it bypasses the state tracking)."""
        self._check_open()
        return self._env

    # -------------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this env was closed; create a new one with plan_parallel.make")

    def _current(self) -> State:
        if self._state is None:
            raise StateError("the env has no current state yet: call reset(seed) or set_state(state) first")
        return self._state

    def _sync_live(self) -> None:
        if not self._live_is_current:
            self._adapter.restore(self._current())
            self._live_is_current = True

    # -------------------------------------------------------------------- API
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """Reset the env. Returns ``(state, obs, info)``; the state becomes current.

        Raises:
            TypeError: ``seed`` is not None or an int >= 0.
            ClosedError: the env was closed.
        """
        self._check_open()
        seed = check_seed(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
        obs, info = self._adapter.reset(seed, options)
        self._state = self._adapter.capture(None, obs)
        self._live_is_current = True
        return self._state, obs, info

    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """Advance the current state (or ``state``, when given) by ``action`` repeated ``dt`` times.

        Returns:
            ``(state, obs, reward, terminated, truncated, info)``; the new state
            becomes current. ``info["n_steps"]`` is the number of env steps taken.

        Raises:
            ValueError/TypeError: bad action or dt. StateError: bad state or no current state.
        """
        self._check_open()
        dt = check_dt(dt, 1)
        if not isinstance(dt, int):
            raise TypeError(f"step takes one integer dt >= 1, got {dt!r}")
        action = check_action(self.action_space, action)
        if state is not None:
            self._adapter.validate(state)
        batch = self._run([state if state is not None else self._current()], [action], dt)
        s = batch[0][0]
        self._state = s
        self._live_is_current = True
        return s, batch[1][0], batch[2][0], batch[3][0], batch[4][0], batch[5][0]

    def _run(self, states: Sequence[State], actions: Any, dt: int | np.ndarray) -> tuple:
        t0 = time.perf_counter()
        self._live_is_current = False
        out = run_items(self._adapter, self._step, states, actions, dt)
        self.stats["env_seconds"] += time.perf_counter() - t0
        self.stats["items"] += len(states)
        self.stats["batches"] += 1
        return out

    def run_raw(self, states: Sequence[State] | None, actions: Any, dt: int | np.ndarray) -> tuple:
        """Run already-checked items (``states=None``: from the current state); plain lists back.

        The work of a worker: inputs were checked by the caller before sending.
        """
        self._check_open()
        if states is None:
            states = [self._current()] * len(actions)
        return self._run(states, actions, dt)

    def step_batch(self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1) -> StepBatch:
        """Run N (state, action, dt) items; the current state is left as it was.

        Item i restores ``states[i]`` (the current state when ``states`` is None),
        applies ``actions[i]`` ``dt[i]`` times, sums the rewards, and stops early
        at terminated or truncated.

        Raises:
            ValueError/TypeError: mismatched lengths, bad dt, actions outside the space.
            StateError: a state of another env, or no current state when ``states`` is None.
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
            states = check_states(states, self._adapter.kind, len(actions), self._adapter.validate)
        dt = check_dt(dt, n)
        out_states, obs, rewards, terms, truncs, infos = self._run(states, actions, dt)
        return StepBatch(
            out_states,
            stack_observations(self.observation_space, obs),
            np.array(rewards, dtype=np.float64),
            np.array(terms, dtype=bool),
            np.array(truncs, dtype=bool),
            infos,
        )

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
        self._adapter.validate(state)
        self._adapter.restore(state)
        self._state = state
        self._live_is_current = True

    def sync_states(self, state: State) -> None:
        """Make ``state`` current everywhere (inline: the same as :meth:`set_state`)."""
        self.set_state(state)

    def close(self) -> None:
        """Close the env. Idempotent; every later call raises :class:`ClosedError`."""
        if not self._closed:
            self._closed = True
            self._env.close()

    def __enter__(self) -> "PlanEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PlanEnv({self._factory!r}, kind={self.kind!r}{', closed' if self._closed else ''})"
