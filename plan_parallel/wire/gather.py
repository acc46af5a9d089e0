"""A batch's results gathered back: chunk replies absorbed in any order, the result built in input order.

:class:`StepGather` and :class:`RolloutGather` take each chunk a worker answered
(:class:`~plan_parallel.wire.messages.ChunkReply`, its arrays in the chunk's
slab) or this process ran, and build the batch's ``StepBatch`` or
``RolloutBatch``; a :class:`~plan_parallel.wire.codec.Job` makes the one it needs.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from plan_parallel.env.loops import RolloutParts, to_rollout_batch
from plan_parallel.results import RolloutBatch, StepBatch, share_observations, stack_observations
from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch
from plan_parallel.wire.columns import OUTCOMES, listed_rows, state_maker, unpack_infos, unpack_outcomes, unpack_states
from plan_parallel.wire.messages import ChunkReply, RolloutSpec
from plan_parallel.wire.slabs import fill_rows, rows_fit

__all__ = ["Gather", "RolloutGather", "StepGather"]


def _obs_rows(cols: dict[str, np.ndarray], listed: np.ndarray | list | None, name: str) -> list:
    """A chunk's observations as read-only private rows: from the slab column ``name``, or the message's."""
    if name in cols:
        arr = cols[name].copy()  # a view of the slab: copied before the slab is reused
        arr.flags.writeable = False  # the states keep these rows; callers get stacked copies
        return list(arr)
    return listed_rows(listed)


def _same_arrays(rows: list) -> bool:
    """Are ``rows`` ndarrays of one shape and dtype (so that they stack into one array)?"""
    first = rows[0]
    if not isinstance(first, np.ndarray):
        return False
    return all(isinstance(r, np.ndarray) and r.shape == first.shape and r.dtype == first.dtype for r in rows)


class Gather(Protocol):
    """Absorbs chunk replies in any order; builds the batch's result in input order.

    ``views``: the slab columns its :meth:`absorb` copies where they belong before it returns, so they
    are read as views of the slab (:func:`~plan_parallel.wire.slabs.read_columns`), not copied twice.
    """

    views: tuple[str, ...]

    @property
    def total_steps(self) -> int:
        """Env steps of the chunks absorbed so far."""

    def absorb(self, lo: int, hi: int, reply: ChunkReply, cols: dict[str, np.ndarray], checker: Any = None) -> None:
        """Copy chunk lo..hi's results out of ``cols`` (slab views, reused after this returns); its states carry
        ``checker``, the token of the workers that made them (see :func:`~plan_parallel.state.state_value.validate_each`)."""

    def absorb_local(self, lo: int, hi: int, out: Any) -> int:
        """Take chunk lo..hi run in this process (``run_raw``'s lists, or ``rollout_raw``'s parts); its env steps."""

    def rows_here(self, lo: int, hi: int, form: tuple[np.dtype, tuple[int, ...]] | None) -> np.ndarray | None:
        """The rows in which this process may make chunk lo..hi's observations of ``form`` (see
        :meth:`EnvEngine.observation_form`), for :meth:`absorb_local` to take as they are; None: none."""

    def result(self) -> Any:
        """The batch's result, every chunk absorbed."""


class StepGather:
    """The results of a step_batch, filled chunk by chunk as replies arrive (in any order).

    Absorbing a chunk twice (a replayed chunk) writes the same rows again.
    """

    # The observations and per-item outcomes are copied into this batch's arrays at once (in situ
    # each small column copied out of the slab cost ~10 us of the caller's CPU: 2 CartPole items,
    # 4 outcome columns of 6 read per reply).
    views: tuple[str, ...] = ("obs", *OUTCOMES)

    def __init__(self, n: int, observation_space: spaces.Space) -> None:
        self.n = n
        self.space = observation_space
        self.state_parts: dict[int, tuple[int, Any]] = {}  # lo -> (hi, the chunk's states, or state_maker's make)
        self.rewards = np.empty(n, dtype=np.float64)
        self.terms = np.empty(n, dtype=bool)
        self.truncs = np.empty(n, dtype=bool)
        self.infos: list = [None] * n
        self._chunk_steps: dict[int, int] = {}  # lo -> env steps of chunk lo.. (a replayed chunk counts once)
        self.obs_arr: np.ndarray | None = None  # while every chunk's observations stack alike
        self.obs_list: list | None = None  # otherwise, one per item
        self.lent: np.ndarray | None = None  # the lent slab's array the workers write into (see lend)
        self.ranges: list[tuple[int, int]] = []

    @property
    def total_steps(self) -> int:
        return sum(self._chunk_steps.values())

    def _put_obs(self, lo: int, hi: int, column: np.ndarray | None, rows: list | None) -> None:
        if column is None and rows and self.obs_list is None and _same_arrays(rows):
            first = rows[0]
            if self.obs_arr is None:
                self.obs_arr = np.empty((self.n,) + first.shape, dtype=first.dtype)
            if self.obs_arr.shape[1:] == first.shape and self.obs_arr.dtype == first.dtype:
                fill_rows(self.obs_arr[lo:hi], rows)  # one copy each, into the batch's array
                return
        if column is not None and self.obs_list is None:
            if self.obs_arr is None:
                self.obs_arr = np.empty((self.n,) + column.shape[1:], dtype=column.dtype)
            if self.obs_arr.shape[1:] == column.shape[1:] and self.obs_arr.dtype == column.dtype:
                self.obs_arr[lo:hi] = column
                return
        if self.obs_list is None:
            self.obs_list = [None] * self.n
            if self.obs_arr is not None:
                for a, b in self.ranges:
                    self.obs_list[a:b] = list(self.obs_arr[a:b])
            self.obs_arr = None
        self.obs_list[lo:hi] = list(column.copy()) if column is not None else list(rows or [])

    def lend(self, rows: np.ndarray) -> None:
        """Gather the observations into ``rows`` (a lent slab's array, workers write into it); kept for life.

        Kept even when a chunk's observations do not fit it: a chunk may still be
        told to write there only while this gatherer lives.
        """
        self.lent = self.obs_arr = rows

    def absorb(self, lo: int, hi: int, reply: ChunkReply, cols: dict[str, np.ndarray], checker: Any = None) -> None:
        m = hi - lo
        rewards, terms, truncs, n_steps = unpack_outcomes(reply, cols)
        self.rewards[lo:hi] = rewards
        self.terms[lo:hi] = terms
        self.truncs[lo:hi] = truncs
        if not reply.obs_written:
            listed = reply.obs
            if isinstance(listed, np.ndarray):  # one array in the message (stack_rows): taken as the column
                self._put_obs(lo, hi, listed, None)
            else:
                self._put_obs(lo, hi, cols.get("obs"), listed)
        elif self.obs_list is not None:  # written into self.lent, but an earlier chunk's did not fit it
            self.obs_list[lo:hi] = list(self.lent[lo:hi])  # type: ignore[index]
        self.state_parts[lo] = (hi, state_maker(reply.states, cols, "", checker))
        infos = unpack_infos(reply.infos, m, cols)
        steps = n_steps.tolist()
        for info, k in zip(infos, steps):
            info["n_steps"] = k
        self._chunk_steps[lo] = sum(steps)
        self.infos[lo:hi] = infos
        self.ranges.append((lo, hi))

    def rows_here(self, lo: int, hi: int, form: tuple[np.dtype, tuple[int, ...]] | None) -> np.ndarray | None:
        lent = self.lent
        if lent is None or self.obs_list is not None or form is None or form != (lent.dtype, lent.shape[1:]):
            return None
        return lent[lo:hi]

    def absorb_local(self, lo: int, hi: int, out: Any) -> int:
        states, obs, rewards, terms, truncs, infos = out
        self.rewards[lo:hi] = rewards
        self.terms[lo:hi] = terms
        self.truncs[lo:hi] = truncs
        lent = self.lent
        if lent is not None and obs and isinstance(obs[0], np.ndarray) and obs[0].ctypes.data == lent[lo].ctypes.data:
            if self.obs_list is not None:  # made in the lent rows (rows_here), but another chunk's did not fit them
                self.obs_list[lo:hi] = list(lent[lo:hi])
        else:
            self._put_obs(lo, hi, None, obs)
        self.state_parts[lo] = (hi, states)
        self.infos[lo:hi] = infos
        self.ranges.append((lo, hi))
        taken = self._chunk_steps[lo] = sum(info["n_steps"] for info in infos)
        return taken

    def result(self) -> StepBatch:
        """The :class:`StepBatch`; the states' observations are read-only rows of its ``observations``.

        Its states are a :class:`StateBatch`: those of chunks that ran on the workers are made when first read.
        """
        parts = [(lo, hi, src) for lo, (hi, src) in sorted(self.state_parts.items())]
        assert [lo for lo, _, _ in parts] == [0] + [hi for _, hi, _ in parts[:-1]] and (not parts or parts[-1][1] == self.n)
        if self.obs_arr is not None:
            observations = self.obs_arr
            observations.flags.writeable = False
            for lo, hi, src in parts:
                if not callable(src):  # a chunk that ran here: its states are made
                    State.share_rows(src, observations[lo:hi])
            states = StateBatch(self.n, parts, observations)
            want = getattr(self.space, "dtype", None)
            if want is not None and observations.dtype != want and observations.shape[1:] == self.space.shape:
                # An env whose obs dtype differs from its space: the states keep the env's, the batch the space's.
                observations = observations.astype(want)
        else:
            made = list(StateBatch(self.n, parts))
            obs_list = self.obs_list or []
            for s, o in zip(made, obs_list):
                s.obs = o
            observations = share_observations(self.space, made, stack_observations(self.space, obs_list))
            states = StateBatch.of(made)
        return StepBatch(states, observations, self.rewards, self.terms, self.truncs, self.infos)


class RolloutGather:
    """The results of a rollout_batch, chunk by chunk as replies arrive (in any order)."""

    views: tuple[str, ...] = ("obs", "all_obs")  # copied out at once (the rewards are kept: read as copies)

    def __init__(self, n: int, observation_space: spaces.Space, spec: RolloutSpec) -> None:
        self.space = observation_space
        self.spec = spec
        self.chunks: dict[int, tuple[int, RolloutParts]] = {}  # lo -> (hi, parts)
        self._chunk_steps: dict[int, int] = {}  # lo -> env steps of chunk lo.. (a replayed chunk counts once)
        self.lent: np.ndarray | None = None  # the final observations' lent rows (see StepGather.lend)
        self.all_lent = True  # every chunk's final observations are rows of self.lent

    @property
    def total_steps(self) -> int:
        return sum(self._chunk_steps.values())

    def lend(self, rows: np.ndarray) -> None:
        """Gather the final observations into ``rows`` (a lent slab's array, workers write into it); kept for life."""
        self.lent = rows

    def _lent_rows(self, lo: int, hi: int, rows: list) -> list:
        """``rows`` (chunk lo..hi's final observations) as rows of the lent array, copied in where they fit."""
        lent = self.lent
        if lent is None or not rows or not rows_fit(rows, lent.dtype, lent.shape[1:]):
            self.all_lent = False
            return rows
        fill_rows(lent[lo:hi], rows)
        return list(lent[lo:hi])

    def absorb(self, lo: int, hi: int, reply: ChunkReply, cols: dict[str, np.ndarray], checker: Any = None) -> None:
        m, horizon = hi - lo, self.spec.horizon
        rewards, terms, truncs, n_steps = unpack_outcomes(reply, cols)
        states = unpack_states(reply.states, cols, "", m, checker)
        if reply.obs_written:
            final = list(self.lent[lo:hi])  # type: ignore[index]
        else:
            final = _obs_rows(cols, reply.obs, "obs")  # private copies: the slab is reused
            if self.lent is not None:  # rows the worker could not write there (a rare dtype): copied in
                final = self._lent_rows(lo, hi, final)
        for s, o in zip(states, final):
            s.obs = o
        all_states = all_obs = None
        if self.spec.return_all:
            flat = unpack_states(reply.all_states, cols, "all_", m * horizon, checker)  # type: ignore[arg-type]
            for s, o in zip(flat, _obs_rows(cols, reply.all_obs, "all_obs")):
                s.obs = o
            all_states = [flat[k * horizon:(k + 1) * horizon] for k in range(m)]
            all_obs = [[s.obs for s in row] for row in all_states]
        parts = RolloutParts(
            states, [s.obs for s in states], rewards, terms.tolist(), truncs.tolist(), n_steps.tolist(),
            unpack_infos(reply.infos, m, cols), all_states, all_obs,
        )
        self._keep(lo, hi, parts)

    def rows_here(self, lo: int, hi: int, form: tuple[np.dtype, tuple[int, ...]] | None) -> np.ndarray | None:
        return None  # a rollout's final observations are copied into the lent rows after (see absorb_local)

    def absorb_local(self, lo: int, hi: int, out: Any) -> int:
        if self.lent is not None:
            final = self._lent_rows(lo, hi, out.observations)
            for s, o in zip(out.states, final):
                s.obs = o
            out = out._replace(observations=final)
        self._keep(lo, hi, out)
        return self._chunk_steps[lo]

    def _keep(self, lo: int, hi: int, parts: RolloutParts) -> None:
        self.chunks[lo] = (hi, parts)
        self._chunk_steps[lo] = int(sum(parts.n_steps))

    def result(self) -> RolloutBatch:
        ordered = [self.chunks[lo][1] for lo in sorted(self.chunks)]
        if not ordered:
            empty = np.zeros((0, self.spec.horizon), dtype=np.float64)
            whole = RolloutParts([], [], empty, [], [], [], [], [] if self.spec.return_all else None,
                                 [] if self.spec.return_all else None)
        else:
            def joined(field: str) -> list:
                return [x for p in ordered for x in getattr(p, field)]

            whole = RolloutParts(
                joined("states"), joined("observations"), np.concatenate([p.rewards for p in ordered]),
                joined("terminations"), joined("truncations"), joined("n_steps"), joined("infos"),
                joined("all_states") if self.spec.return_all else None,
                joined("all_observations") if self.spec.return_all else None,
            )
            if self.lent is not None and self.all_lent:
                self.lent.flags.writeable = False
                return to_rollout_batch(self.space, whole, observations=self.lent)
        return to_rollout_batch(self.space, whole)
