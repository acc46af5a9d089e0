"""What the planning calls return: :class:`StepBatch` and :class:`RolloutBatch`, and how observations stack."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
from gymnasium import spaces

from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch
from plan_parallel.state.state_value import freeze

__all__ = ["PlanningEnv", "RolloutBatch", "StepBatch", "share_observations", "stack_observations", "step_batch_of",
           "writable_observation"]


class StepBatch(NamedTuple):
    """The result of ``step_batch``, in input order.

    Attributes:
        states: the state after each item: a :class:`~plan_parallel.state.state_batch.StateBatch`, a
            sequence of N :class:`State` made when first read.
        observations: stacked observations, shape ``(N, *obs_shape)`` (a dict or
            tuple of such arrays for Dict/Tuple observation spaces). For array
            spaces it is read-only and its rows are the states' own observations
            (one copy for both); ``observations.copy()`` gives an array to change.
        rewards: float64 ``(N,)``, each the sum over the item's env steps.
        terminations: bool ``(N,)``.
        truncations: bool ``(N,)``.
        infos: N dicts: the last step's info, plus ``"n_steps"``, the env steps taken.
    """

    states: Sequence[State]
    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: list


class RolloutBatch(NamedTuple):
    """The result of ``rollout_batch``: N action sequences of horizon T, in input order.

    Step t of item i applies its action ``dt[i]`` times (as one ``step_batch``
    item does); an item stops at the first step that terminates or truncates.

    Attributes:
        states: the state after each item's last step (a
            :class:`~plan_parallel.state.state_batch.StateBatch` of N :class:`State`, made already).
        observations: the observation after each item's last step, stacked as in
            :class:`StepBatch`, shape ``(N, *obs_shape)``.
        rewards: float64 ``(N, T)``: ``rewards[i, t]`` is the sum over step t's
            env steps; 0.0 for the steps after item i stopped.
        terminations: bool ``(N,)``: the item's last step terminated.
        truncations: bool ``(N,)``: the item's last step truncated.
        n_steps: int64 ``(N,)``: env steps each item ran (dt repeats counted).
        infos: N dicts: each item's last step's info (as the env returned it,
            without ``"n_steps"``: that is the ``n_steps`` field).
        all_states: with ``return_all=True``, N lists of T states: the state after
            every step; entries after an item stopped repeat its final state
            (so ``all_states[i][-1]`` is ``states[i]``). None otherwise.
        all_observations: with ``return_all=True``, the observation after every
            step, stacked to ``(N, T, *obs_shape)`` (a dict or tuple of such
            arrays for Dict/Tuple spaces), entries after an item stopped repeating
            its final observation. None otherwise.
    """

    states: Sequence[State]
    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    n_steps: np.ndarray
    infos: list
    all_states: list | None = None
    all_observations: Any = None


def writable_observation(obs: Any) -> Any:
    """A copy of ``obs`` the caller may change, as gymnasium's ``reset`` and ``step`` return (a state's own
    observation is read-only): its arrays copied, inside dicts and tuples too."""
    if isinstance(obs, np.ndarray):
        return obs.copy()
    if isinstance(obs, dict):
        return {k: writable_observation(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(writable_observation(v) for v in obs)
    return obs


def share_observations(space: spaces.Space, states: Sequence[State], obs: Any) -> Any:
    """The batch's observations, read-only (every array in them), made the states' own: rows of one array.

    When ``obs`` stacks the states' observations without a change of dtype
    (the env returns what its space says), each state's ``obs`` becomes its row,
    so neither can change under the other. Otherwise (Dict/Tuple spaces, an env
    whose dtype differs from its space's) the states keep the observations they have.
    """
    freeze(obs)
    first = states[0].obs if states else None
    if (not isinstance(obs, np.ndarray) or len(obs) != len(states) or not isinstance(first, np.ndarray)
            or first.dtype != obs.dtype or first.shape != obs.shape[1:]):
        for s in states:
            freeze(s.obs)
        return obs
    State.share_rows(states, obs)
    return obs


def stack_observations(space: spaces.Space, obs: list) -> Any:
    """Stack N observations into the batched form of ``space``."""
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        if not obs:
            return np.empty((0, *(space.shape or ())), dtype=space.dtype)
        return np.array(obs, dtype=space.dtype)
    from gymnasium.vector.utils import concatenate, create_empty_array

    out: Any = create_empty_array(space, n=len(obs))
    if not obs:
        return out  # concatenate cannot stack zero items
    return concatenate(space, obs, out)


def step_batch_of(space: spaces.Space, lists: tuple, rows: np.ndarray | None = None) -> StepBatch:
    """The StepBatch of a loop's plain lists ``(states, observations, rewards, terminations, truncations,
    infos)`` (see :func:`plan_parallel.env.loops.run_items`), its observations the states' own rows: ``rows``
    when the loop made them there, else stacked."""
    out_states, obs, rewards, terms, truncs, infos = lists
    if rows is not None:  # the states' rows, views made before the array was read-only: made again from it
        State.share_rows(out_states, rows)
    return StepBatch(
        StateBatch.of(out_states),
        share_observations(space, out_states, stack_observations(space, obs)) if rows is None else rows,
        np.array(rewards, dtype=np.float64),
        np.array(terms, dtype=bool),
        np.array(truncs, dtype=bool),
        infos,
    )


@runtime_checkable
class PlanningEnv(Protocol):
    """What :func:`plan_parallel.make` returns on every backend, and what the planners need of an env.

    :class:`~plan_parallel.env.plan_env.PlanEnv` (inline) and :class:`~plan_parallel.batch.batch_env.BatchEnv`
    (worker processes, Ray actors) both provide it, with the same results for the same inputs; code written
    against it runs on any backend. The methods' full documentation is on those two classes.
    """

    @property
    def action_space(self) -> spaces.Space:
        """The env's action space."""

    @property
    def observation_space(self) -> spaces.Space:
        """The env's observation space."""

    @property
    def kind(self) -> str:
        """The kind of state this env produces and accepts (:attr:`State.kind`)."""

    @property
    def n_workers(self) -> int:
        """Worker processes or actors (1 for the inline backend)."""

    @property
    def stats(self) -> dict[str, Any]:
        """Telemetry: batches, items, env seconds, ..."""

    @property
    def spec(self) -> Any:
        """The env's ``EnvSpec`` (None for an env not made by ``gymnasium.make``)."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[State, Any, dict]:
        """``(state, obs, info)``; the state becomes current."""

    def step(self, action: Any, state: State | None = None, dt: int = 1) -> tuple:
        """``(state, obs, reward, terminated, truncated, info)`` from ``state`` (the current one when None)."""

    def step_batch(self, actions: Any, states: Sequence[State] | None = None, dt: Any = 1, *,
                   seeds: Any = None) -> StepBatch:
        """N (state, action, dt) items; the current state is left as it was."""

    def rollout_batch(self, states: Sequence[State] | None, actions: Any = None, dt: Any = 1, *,
                      horizon: int | None = None, policy: Callable[[Any, np.random.Generator], Any] | None = None,
                      seeds: Any = None, return_all: bool = False) -> RolloutBatch:
        """N rollouts of T steps each; the current state is left as it was."""

    def get_state(self) -> State:
        """The current state."""

    def set_state(self, state: State) -> None:
        """Make ``state`` current."""

    def sync_states(self, state: State) -> None:
        """Make ``state`` current everywhere it is held."""

    def validate(self, state: State) -> None:
        """Raise :class:`~plan_parallel.errors.StateError` unless ``state`` can restore this env."""

    def close(self) -> None:
        """Free the env and its workers; idempotent."""
