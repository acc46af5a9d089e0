"""The loops that step one env: ``step_batch`` items and whole rollouts.

Plain functions over a bound :class:`~plan_parallel.state.Adapter` that return
plain lists and arrays, so :class:`~plan_parallel.env.PlanEnv` (the inline
backend) and every worker run the very same code: that is what makes the
backends bit-identical.

Randomness. With per-item ``seeds``, item i's env RNG is reseeded from
``seeds[i]`` after its state is restored (:meth:`Adapter.reseed`: the stream
``env.reset(seed=seeds[i])`` would give), and a policy draws from an independent
stream of the same seed (:func:`item_rng`). Without seeds the env keeps the
state's own RNG, and a policy's RNG is derived from a digest of the item's
state and its index in the caller's batch: never from its place in a chunk, so
every worker split gives the same result.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from plan_parallel.env.item_rng import item_rng
from plan_parallel.errors import mark_failed_item
from plan_parallel.results import RolloutBatch, stack_observations
from plan_parallel.state import Adapter, State, StateBatch
from plan_parallel.state.state_value import freeze

__all__ = ["RolloutParts", "UniformPolicy", "act_into", "run_items", "run_rollouts", "step_each", "to_rollout_batch"]

Policy = Callable[[Any, np.random.Generator], Any]


def _act(adapter: Adapter, step: Callable[[Any], tuple], action: Any, k: int) -> tuple[Any, float, bool, bool, dict, int]:
    """Apply ``action`` up to ``k`` times, stopping at terminated or truncated.

    Returns ``(obs, reward, terminated, truncated, info, steps)``: the last step's
    obs, flags and info, the rewards summed as Python floats in step order, and
    the number of env steps taken. Every step but the k-th is the adapter's quiet
    step when it has one (the observations and infos in between are never made);
    an episode that ends on a quiet step is observed then.
    """
    quiet = adapter.quiet_step
    between = step if quiet is None else quiet
    obs, r, term, trunc, info = (step if k == 1 else between)(action)
    total = float(r)
    taken = 1
    while taken < k and not (term or trunc):
        obs, r, term, trunc, info = (step if taken == k - 1 else between)(action)
        total += float(r)
        taken += 1
    if taken < k and quiet is not None:
        obs, info = adapter.observe()
    return obs, total, term, trunc, info, taken


def _act_quiet(adapter: Adapter, action: Any, k: int) -> tuple[float, bool, bool, int]:
    """:func:`_act` with every step quiet (no observation nor info made): ``(reward, terminated,
    truncated, steps)``, the same as :func:`_act`'s."""
    quiet = adapter.quiet_step
    assert quiet is not None, "only for an adapter with a quiet step"
    _, r, term, trunc, _ = quiet(action)
    total = float(r)
    taken = 1
    while taken < k and not (term or trunc):
        _, r, term, trunc, _ = quiet(action)
        total += float(r)
        taken += 1
    return total, term, trunc, taken


def act_into(adapter: Adapter, action: Any, k: int, row: np.ndarray) -> tuple[Any, float, bool, bool, dict, int]:
    """:func:`_act` with every step quiet and the observation then written into ``row`` (see
    :meth:`Adapter.observation_rows`): the same rewards, flags, info and observation, made in place."""
    total, term, trunc, taken = _act_quiet(adapter, action, k)
    return row, total, term, trunc, adapter.observe_into(row), taken


def _item_lists(n: int) -> tuple[list, list, list, list, list, list]:
    """The six per-item lists a step loop fills: states, observations, rewards, terminations, truncations, infos."""
    return [None] * n, [None] * n, [0.0] * n, [False] * n, [False] * n, [None] * n


def run_items(
    adapter: Adapter,
    step: Callable[[Any], tuple],
    states: Sequence[State],
    actions: Any,
    dt: int | np.ndarray,
    seeds: np.ndarray | None = None,
    held: State | None = None,
    rows: np.ndarray | None = None,
) -> tuple[list, list, list, list, list, list]:
    """Run N (state, action, dt) items on one env: the work of ``step_batch``.

    Item i restores ``states[i]`` (and, with ``seeds``, reseeds the env's RNG from
    ``seeds[i]``), applies ``actions[i]`` ``dt[i]`` times, sums the rewards (as
    Python floats, in step order) and stops early at terminated or truncated.
    Returns plain lists ``(states, observations, rewards, terminations,
    truncations, infos)``; the caller stacks them. On an env error, the
    exception carries the failing item's index (:func:`~plan_parallel.errors.failed_item`).

    ``held`` is the state the env holds now (one it captured and has not moved
    from since, or None): an item starting from the very object the env holds is
    not restored (capture is complete, so restoring it would set the values the
    env already has). After each item the env holds that item's end state, so a
    later item starting from the first held state is restored.

    ``rows``: N rows of the adapter's :meth:`~Adapter.observation_rows`, into which each item's
    observation is made (its state's ``obs`` is its row).
    """
    if seeds is None and rows is None and type(dt) is int and dt == 1:
        return _run_plain(adapter, step, states, actions, held)
    restore, capture = adapter.restore, adapter.capture
    n = len(states)
    out_states, out_obs, rewards, terms, truncs, infos = _item_lists(n)
    i = 0
    try:
        for i in range(n):
            if states[i] is not held:
                restore(states[i])
            if seeds is not None:
                if i == 0:
                    adapter.check_reseed()
                adapter.reseed(int(seeds[i]))
            k = dt if isinstance(dt, int) else int(dt[i])
            if rows is not None:
                obs, rewards[i], term, trunc, info, taken = act_into(adapter, actions[i], k, rows[i])
            elif k == 1:  # without _act's call and loop
                obs, r, term, trunc, info = step(actions[i])
                rewards[i] = float(r)
                taken = 1
            else:
                obs, rewards[i], term, trunc, info, taken = _act(adapter, step, actions[i], k)
            out_obs[i] = obs
            terms[i] = term is True or bool(term)
            truncs[i] = trunc is True or bool(trunc)
            # A copy: the env may reuse its info dict.
            infos[i] = {**info, "n_steps": taken} if info else {"n_steps": taken}
            out_states[i] = held = capture(None, obs)  # the env moved on: the old held state is not held now
    except Exception as e:
        # Which item failed, for the note the caller adds (worker and item).
        mark_failed_item(e, i)
        raise
    return out_states, out_obs, rewards, terms, truncs, infos


def _run_plain(adapter: Adapter, step: Callable[[Any], tuple], states: Sequence[State], actions: Any,
               held: State | None) -> tuple[list, list, list, list, list, list]:
    """:func:`run_items` with dt 1, no seeds and no rows: the common case, in a loop without their branches
    (and a flag that is False left as the list has it). CartPole B=512 inline against the raw loop, paired in
    one process: 0.809 -> 0.833 (1.6 points of it the branches); HalfCheetah B=64 0.942 -> 0.952."""
    restore, capture = adapter.restore, adapter.capture
    n = len(states)
    out_states, out_obs, rewards, terms, truncs, infos = _item_lists(n)
    i = 0
    try:
        for i in range(n):
            start = states[i]
            if start is not held:
                restore(start)
            out_obs[i], r, term, trunc, info = step(actions[i])
            rewards[i] = float(r)
            if term is not False:
                terms[i] = term is True or bool(term)
            if trunc is not False:
                truncs[i] = trunc is True or bool(trunc)
            infos[i] = {**info, "n_steps": 1} if info else {"n_steps": 1}  # a copy: the env may reuse its dict
            out_states[i] = held = capture(None, out_obs[i])
    except Exception as e:
        mark_failed_item(e, i)
        raise
    return out_states, out_obs, rewards, terms, truncs, infos


def step_each(n: int, step: Callable[[int], tuple]) -> tuple[list, list, list, list, list, list]:
    """``step(j)`` for each item j of ``n``, one env step each, returning ``(end state, observation, reward,
    terminated, truncated, info)`` as :meth:`EnvEngine.step_from` does; lists as :func:`run_items` (each info a
    copy, with ``"n_steps": 1``). On an error the exception carries the failing item's index
    (:func:`~plan_parallel.errors.failed_item`)."""
    ends, obs, rewards, terms, truncs, infos = _item_lists(n)
    j = 0
    try:
        for j in range(n):
            ends[j], obs[j], rewards[j], terms[j], truncs[j], info = step(j)
            infos[j] = {**info, "n_steps": 1} if info else {"n_steps": 1}  # a copy: the env may reuse its dict
    except Exception as e:
        mark_failed_item(e, j)
        raise
    return ends, obs, rewards, terms, truncs, infos


class RolloutParts(NamedTuple):
    """What :func:`run_rollouts` returns: plain lists and arrays, ready to ship or stack.

    Fields as in :class:`~plan_parallel.results.RolloutBatch`, unstacked:
    ``observations`` is a list of N observations, ``rewards`` a float64 ``(N, T)``
    array, ``terminations``/``truncations``/``n_steps`` lists of N bools/ints,
    ``all_states``/``all_observations`` N lists of T entries (or None).
    """

    states: list
    observations: list
    rewards: np.ndarray
    terminations: list
    truncations: list
    n_steps: list
    infos: list
    all_states: list | None
    all_observations: list | None


def run_rollouts(
    adapter: Adapter,
    step: Callable[[Any], tuple],
    states: Sequence[State],
    actions: Any,
    dt: int | np.ndarray,
    horizon: int,
    *,
    policy: Policy | None = None,
    seeds: np.ndarray | None = None,
    first_index: int = 0,
    return_all: bool = False,
    held: State | None = None,
) -> RolloutParts:
    """Roll out N action sequences of ``horizon`` steps on one env: the work of ``rollout_batch``.

    Item i restores ``states[i]`` and, with ``seeds``, reseeds the env's RNG from
    ``seeds[i]`` (once, before its first step). Step t applies ``actions[i][t]``
    -- or, when ``actions`` is None, ``policy(obs, rng)`` with the latest
    observation (``states[i].obs`` at t = 0) and the item's RNG from
    :func:`item_rng` -- ``dt[i]`` times, as a ``step_batch`` item does. The item
    stops after the first step that terminates or truncates.

    Args:
        adapter: the env's bound adapter.
        step: the adapter's step function (``adapter.make_step()``).
        states: N start states.
        actions: ``(N, T, ...)`` actions indexable as ``actions[i][t]``, or None.
        dt: an int, or N ints.
        horizon: T.
        policy: ``(obs, rng) -> action``, used when ``actions`` is None.
        seeds: N ints, or None.
        first_index: the index of ``states[0]`` in the caller's batch (for the
            policy RNG without seeds).
        return_all: also return the state and observation after every step.
        held: the state the env holds now, or None (see :func:`run_items`).

    Raises:
        Exception: whatever the env or the policy raised, carrying the failing
            item's index (within ``states``; :func:`~plan_parallel.errors.failed_item`).
    """
    restore, capture = adapter.restore, adapter.capture
    n = len(states)
    out_states: list = [None] * n
    out_obs: list = [None] * n
    rewards = np.zeros((n, horizon), dtype=np.float64)
    terms: list = [False] * n
    truncs: list = [False] * n
    n_steps: list = [0] * n
    infos: list = [None] * n
    all_states: list | None = [None] * n if return_all else None
    all_obs: list | None = [None] * n if return_all else None
    # Nothing reads an observation before the item's last step when its actions are given or uniformly
    # random and no step's state is returned: every step is then quiet, and the end observed once (ALE:
    # a screen less a step, ~7 % of a Pong v5 step).
    blind = not return_all and adapter.quiet_step is not None and (
        actions is not None or isinstance(policy, UniformPolicy))
    i = 0
    try:
        for i in range(n):
            start = states[i]
            if start is not held:
                restore(start)
            seed = None if seeds is None else int(seeds[i])
            if seed is not None:
                if i == 0:
                    adapter.check_reseed()
                adapter.reseed(seed)
            k = dt if isinstance(dt, int) else int(dt[i])
            seq = actions[i] if actions is not None else None
            rng = item_rng(seed, start, first_index + i) if seq is None else None
            obs, row, taken_total = start.obs, rewards[i], 0
            s_row: list = []
            o_row: list = []
            term = trunc = False
            info: dict = {}
            for t in range(horizon):
                a = seq[t] if seq is not None else policy(obs, rng)  # type: ignore[misc,arg-type]
                if blind:
                    row[t], term, trunc, taken = _act_quiet(adapter, a, k)
                else:
                    obs, row[t], term, trunc, info, taken = _act(adapter, step, a, k)
                taken_total += taken
                if return_all:
                    s_row.append(capture(None, obs))
                    o_row.append(obs)
                if term or trunc:
                    break
            if blind:
                obs, info = adapter.observe()
            if return_all:
                pad = horizon - len(s_row)
                s_row.extend([s_row[-1]] * pad)
                o_row.extend([o_row[-1]] * pad)
                all_states[i], all_obs[i] = s_row, o_row  # type: ignore[index]
                out_states[i] = held = s_row[-1]
            else:
                out_states[i] = held = capture(None, obs)
            out_obs[i] = obs
            terms[i] = bool(term)
            truncs[i] = bool(trunc)
            n_steps[i] = taken_total
            infos[i] = dict(info)  # the env may reuse its info dict
    except Exception as e:
        mark_failed_item(e, i)
        raise
    return RolloutParts(out_states, out_obs, rewards, terms, truncs, n_steps, infos, all_states, all_obs)


def to_rollout_batch(observation_space: spaces.Space, parts: RolloutParts, observations: Any = None) -> RolloutBatch:
    """Stack :class:`RolloutParts` (of every chunk, concatenated in input order) into a :class:`RolloutBatch`.

    ``observations``: the final observations already stacked (their rows are the states' own), or None.
    The observations are read-only, as a :class:`StepBatch`'s.
    """
    n, horizon = parts.rewards.shape
    for s in parts.states:
        freeze(s.obs)
    for row in parts.all_states or ():
        for s in row:
            freeze(s.obs)
    all_obs = None
    if parts.all_observations is not None:
        flat = [o for row in parts.all_observations for o in row]
        all_obs = freeze(_split_leading(stack_observations(observation_space, flat), n, horizon))
    return RolloutBatch(
        StateBatch.of(parts.states),
        freeze(stack_observations(observation_space, parts.observations) if observations is None else observations),
        parts.rewards,
        np.array(parts.terminations, dtype=bool),
        np.array(parts.truncations, dtype=bool),
        np.array(parts.n_steps, dtype=np.int64),
        parts.infos,
        parts.all_states,
        all_obs,
    )


def _split_leading(x: Any, n: int, t: int) -> Any:
    """Reshape stacked observations of N*T items to (N, T, ...), through Dict/Tuple structure."""
    if isinstance(x, dict):
        return type(x)((k, _split_leading(v, n, t)) for k, v in x.items())
    if isinstance(x, tuple):
        if x and isinstance(x[0], np.ndarray):  # a Tuple space: a tuple of batched arrays
            return tuple(_split_leading(v, n, t) for v in x)
        return tuple(tuple(x[i * t : (i + 1) * t]) for i in range(n))  # e.g. Text: N*T plain values
    if not isinstance(x, np.ndarray):  # a custom space's empty batch (gymnasium makes None for MiniGrid's mission)
        return x
    return x.reshape((n, t) + x.shape[1:])


# ---------------------------------------------------------------------- randomness
class UniformPolicy:
    """Uniform random actions from an action space, drawn with the item's RNG: ``(obs, rng) -> action``.

    The policy of ``rollout_batch(actions=None, policy=None)``. It never uses the
    space's own ``sample()`` (whose RNG belongs to the space, not to the item).
    Discrete and MultiDiscrete actions are drawn with ``rng.integers``, a bounded
    Box with ``rng.uniform`` (``rng.integers`` for an integer dtype), MultiBinary
    as integers in {0, 1}.

    Raises:
        TypeError: any other space (Dict, Tuple, Text, Graph, ...).
        ValueError: a Box that is not bounded on both sides.
    """

    def __init__(self, space: spaces.Space) -> None:
        self.space: Any = space  # one of the spaces below: its sampler is picked by type
        if isinstance(space, spaces.Discrete):
            self._draw = self._discrete
        elif isinstance(space, spaces.MultiDiscrete):
            self._draw = self._multi_discrete
        elif isinstance(space, spaces.MultiBinary):
            self._draw = self._multi_binary
        elif isinstance(space, spaces.Box):
            if not space.is_bounded("both"):
                raise ValueError(f"uniform random actions need a bounded action space, got {space} "
                                 f"(low={space.low.tolist()}, high={space.high.tolist()}): pass policy= or actions=")
            self._draw = self._box_int if np.issubdtype(space.dtype, np.integer) else self._box
        else:
            raise TypeError(f"uniform random actions are drawn only for Discrete, Box (bounded), MultiDiscrete and "
                            f"MultiBinary action spaces, got {space}: pass policy= or actions=")

    def __call__(self, obs: Any, rng: np.random.Generator) -> Any:
        return self._draw(rng)

    def _discrete(self, rng: np.random.Generator) -> Any:
        return self.space.start + rng.integers(self.space.n)

    def _multi_discrete(self, rng: np.random.Generator) -> np.ndarray:
        s = self.space
        return (s.start + rng.integers(s.nvec)).astype(s.dtype)

    def _multi_binary(self, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, 2, size=self.space.shape).astype(self.space.dtype)

    def _box(self, rng: np.random.Generator) -> np.ndarray:
        s = self.space
        return rng.uniform(s.low, s.high).astype(s.dtype)

    def _box_int(self, rng: np.random.Generator) -> np.ndarray:
        s = self.space
        return rng.integers(s.low, s.high, endpoint=True).astype(s.dtype)

    def __repr__(self) -> str:
        return f"UniformPolicy({self.space})"
