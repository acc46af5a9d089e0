"""What every planner shares: the :class:`Planner` interface, metered env calls, and batched rollouts.

Planners use only the public API of an env made by :func:`plan_parallel.make`
(``step_batch`` and, when the env has it, ``rollout_batch``), so they run
unchanged on every backend. Every random number a planner draws comes from its
own seeded ``numpy`` Generator and every env result is bit-identical across
backends and worker counts, so a planner makes the same decisions on all of them.
"""
from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from plan_parallel.results import PlanningEnv
from plan_parallel.state import State

__all__ = [
    "ManyPlanner",
    "Meter",
    "Planner",
    "Rollouts",
    "check_float",
    "check_int",
    "discounted_returns",
    "rollout",
]


@runtime_checkable
class Planner(Protocol):
    """A planner picks an action for a state, using an env only through its public API.

    Attributes:
        dt: env steps each chosen action is applied for (action repeat).
        meter: wall time and env transitions spent in env calls (cumulative).
        last_stats: search statistics of the latest decision (planner-specific keys).
    """

    dt: int
    meter: Meter
    last_stats: dict[str, Any]

    def reset(self, seed: int | None = None) -> None:
        """Forget everything (search tree, warm starts) and reseed the planner's RNG."""

    def plan(self, env: PlanningEnv, state: State) -> Any:
        """The action to apply ``dt`` times from ``state``; never changes ``env``'s current state."""


@runtime_checkable
class ManyPlanner(Planner, Protocol):
    """A planner that also decides for many roots at once, their env items batched together.

    After ``reset(seed)``, root k of ``plan_many`` decides exactly as the same planner
    reset with ``seed + k`` and asked ``plan(env, states[k])``, over consecutive calls.

    Attributes:
        root_stats: one ``last_stats``-like dict per root of the latest call.
    """

    root_stats: list[dict[str, Any]]

    def plan_many(self, env: PlanningEnv, states: Sequence[State], roots: Sequence[int] | None = None) -> list[Any]:
        """One action per state; ``roots[i]`` is the root (seeded ``seed + roots[i]``) deciding for ``states[i]``."""


class Rollouts(NamedTuple):
    """N action sequences of horizon T rolled out from N states (the part of ``RolloutBatch`` planners use).

    Attributes:
        states: the state after each item's last step.
        rewards: float64 ``(N, T)``: reward of step t (summed over its ``dt`` env steps), 0 after a stop.
        terminations: bool ``(N,)``.
        truncations: bool ``(N,)``.
        n_steps: int64 ``(N,)``: env steps each item ran.
    """

    states: Sequence[State]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    n_steps: np.ndarray


def rollout(env: PlanningEnv, states: Sequence[State], actions: np.ndarray, dt: int = 1) -> Rollouts:
    """Roll out ``actions[i]`` (shape ``(N, T, *action_shape)``) from ``states[i]``, ``dt`` env steps per action.

    Uses ``env.rollout_batch`` when the env has one (the whole sequence runs in
    the worker); otherwise T ``step_batch`` calls over the items still running,
    which give the same results: per-step rewards, a stop at terminated or
    truncated, and the stopped item's state kept.
    """
    native = getattr(env, "rollout_batch", None)
    if native is not None:
        return _rollouts(native(states, actions, dt))
    return _rollout_by_steps(env, states, actions, dt)


def _rollouts(rb: Any) -> Rollouts:
    """The part of a ``RolloutBatch`` planners use (its states as they came: a ``StateBatch`` makes a state when
    read, and a search that scores rollouts by their rewards reads none)."""
    return Rollouts(
        rb.states,
        np.asarray(rb.rewards, dtype=np.float64),
        np.asarray(rb.terminations, dtype=bool),
        np.asarray(rb.truncations, dtype=bool),
        np.asarray(rb.n_steps, dtype=np.int64),
    )


def _rollout_by_steps(env: PlanningEnv, states: Sequence[State], actions: np.ndarray, dt: int) -> Rollouts:
    n, horizon = actions.shape[:2]
    out_states = list(states)
    rewards = np.zeros((n, horizon), dtype=np.float64)
    terms = np.zeros(n, dtype=bool)
    truncs = np.zeros(n, dtype=bool)
    n_steps = np.zeros(n, dtype=np.int64)
    alive = np.arange(n)
    for t in range(horizon):
        if alive.size == 0:
            break
        b = env.step_batch(actions[alive, t], states=[out_states[i] for i in alive], dt=dt)
        rewards[alive, t] = b.rewards
        terms[alive] = b.terminations
        truncs[alive] = b.truncations
        for j, i in enumerate(alive):
            out_states[i] = b.states[j]
            n_steps[i] += b.infos[j]["n_steps"]
        alive = alive[~(b.terminations | b.truncations)]
    return Rollouts(out_states, rewards, terms, truncs, n_steps)


def discounted_returns(rewards: np.ndarray, discount: float) -> np.ndarray:
    """``sum_t discount**t * rewards[:, t]`` for a ``(N, T)`` array, as float64 ``(N,)``."""
    weights = discount ** np.arange(rewards.shape[1], dtype=np.float64)
    return rewards @ weights


class Meter:
    """Counts what a planner asks of the env: calls, transitions (env steps) and wall seconds in them.

    Planners call the env through :meth:`step_batch` and :meth:`rollout`, so the
    figures are measured the same way on every backend.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.transitions = 0
        self.env_seconds = 0.0

    def step_batch(self, env: PlanningEnv, actions: Any, states: Sequence[State], dt: int) -> Any:
        t0 = time.perf_counter()
        batch = env.step_batch(actions, states=states, dt=dt)
        self.env_seconds += time.perf_counter() - t0
        self.calls += 1
        self.transitions += sum(info["n_steps"] for info in batch.infos)
        return batch

    def rollout(self, env: PlanningEnv, states: Sequence[State], actions: np.ndarray, dt: int) -> Rollouts:
        t0 = time.perf_counter()
        out = rollout(env, states, actions, dt)
        self.env_seconds += time.perf_counter() - t0
        self.calls += 1
        self.transitions += int(out.n_steps.sum())
        return out

    def submit_rollout(self, env: Any, states: Sequence[State], actions: np.ndarray, dt: int) -> Any:
        """Send a rollout call without waiting (the env's ``rollout_batch_async``, which a
        :class:`~plan_parallel.batch.batch_env.BatchEnv` has and :class:`PlanningEnv` does not promise); its future.

        The seconds spent sending count as env seconds; :meth:`gather_rollout` counts the wait.
        """
        t0 = time.perf_counter()
        future = env.rollout_batch_async(states, actions, dt)
        self.env_seconds += time.perf_counter() - t0
        self.calls += 1
        return future

    def gather_rollout(self, future: Any) -> Rollouts:
        """Wait for a call of :meth:`submit_rollout`: its :class:`Rollouts`."""
        t0 = time.perf_counter()
        out = _rollouts(future.result())
        self.env_seconds += time.perf_counter() - t0
        self.transitions += int(out.n_steps.sum())
        return out

    def snapshot(self) -> tuple[int, int, float]:
        """``(calls, transitions, env_seconds)`` so far."""
        return self.calls, self.transitions, self.env_seconds

    def mark(self) -> tuple[int, int, float, float]:
        """A point to measure from with :meth:`since`: the counters and the clock."""
        return (*self.snapshot(), time.perf_counter())

    def since(self, mark: tuple[int, int, float, float]) -> dict[str, Any]:
        """``env_calls``, ``transitions``, ``env_seconds`` and wall ``seconds`` since ``mark``."""
        calls, transitions, env_seconds, t0 = mark
        return {
            "env_calls": self.calls - calls,
            "transitions": self.transitions - transitions,
            "env_seconds": self.env_seconds - env_seconds,
            "seconds": time.perf_counter() - t0,
        }

    def __repr__(self) -> str:
        return f"Meter(calls={self.calls}, transitions={self.transitions}, env_seconds={self.env_seconds:.3f})"


def check_int(name: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low``.

    Raises:
        TypeError: not an integer.
        ValueError: below ``low``.
    """
    if not isinstance(value, (numbers.Integral, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__}: {value!r:.100}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def check_float(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` when ``low_open``).

    Raises:
        TypeError: not a real number.
        ValueError: outside the interval.
    """
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}: {value!r:.100}")
    v = float(value)
    bad_low = v <= low if low_open else v < low
    if not math.isfinite(v) or bad_low or v > high:
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return v
