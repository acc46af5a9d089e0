"""What the planning calls return: :class:`StepBatch` and :class:`RolloutBatch`, and how observations stack."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch
from plan_parallel.state.state_value import freeze

__all__ = ["RolloutBatch", "StepBatch", "share_observations", "stack_observations", "step_batch_of",
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
