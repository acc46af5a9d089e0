"""Chunks of a batch: how a batch's checked inputs are split, encoded for a worker, and gathered back.

The codec between :class:`~plan_parallel.batch.BatchEnv` and the worker ops
(:meth:`~plan_parallel.workers.process._Server.op_step_batch` and
``op_rollout_batch``, whose docstrings give the request and reply formats):
arrays go into a shared-memory slab where one is given and they fit, the rest
is pickled. Nothing here talks to a worker.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
from gymnasium import spaces

from plan_parallel.results import RolloutBatch, StepBatch, stack_observations
from plan_parallel.loops import RolloutParts, to_rollout_batch
from plan_parallel.state import State
from plan_parallel.transport import ArrayWriter, Slab, pack_states, unpack_infos, unpack_states

__all__ = ["Job", "Gathered", "split_by_cost", "owned", "encode", "out_bytes_guess", "gather_rollout"]


def owned(x: Any) -> Any:
    """A private copy of an input array (the caller may reuse its own while chunks wait)."""
    return x.copy() if isinstance(x, np.ndarray) else x


def _rows(cols: dict, rep: dict, name: str) -> list:
    """Observations of a chunk: the slab column's rows (read-only copies), else the pickled list."""
    if name in cols:
        arr = cols[name].copy()  # may be a view of the slab
        arr.flags.writeable = False  # the states keep these rows; callers get stacked copies
        return list(arr)
    return rep[name]


def _with_obs(states: list[State], obs: list) -> list[State]:
    for s, o in zip(states, obs):
        s.obs = o
    return states


def split_by_cost(dt: int | np.ndarray, n: int, w: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` chunks of ``n`` items for ``w`` workers, balanced by sum of dt.

    Every chunk is non-empty; there are ``min(n, w)`` of them.
    """
    k = min(n, w)
    if k == 0:
        return []
    if isinstance(dt, int) or k == 1:
        bounds = [round(i * n / k) for i in range(k + 1)]
    else:
        cum = np.cumsum(dt)
        total = float(cum[-1])
        bounds = [0]
        for j in range(1, k):
            b = int(np.searchsorted(cum, total * j / k, side="left")) + 1
            b = min(max(b, bounds[-1] + 1), n - (k - j))  # non-empty chunks on both sides
            bounds.append(b)
        bounds.append(n)
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


@dataclass
class Job:
    """The checked inputs of one batch (owned copies), from which its chunks are encoded."""

    op: str  # "step_batch" or "rollout_batch"
    actions: Any  # (N, ...) or (N, T, ...); None when a policy acts
    states: list | None  # None: every item starts from ``needs``
    dt: int | np.ndarray
    seeds: np.ndarray | None
    needs: State | None  # the current state the items start from (states=None)
    extra: dict = field(default_factory=dict)  # rollout fields sent to workers: horizon, policy (pickled), return_all
    policy: Any = None  # the caller's policy itself, for a rollout run in this process
    steps_per_item: int = 1  # T for a rollout: the cost of an item is dt * T

    @property
    def act_arr(self) -> bool:
        return isinstance(self.actions, np.ndarray) and not self.actions.dtype.hasobject

    def cost(self, lo: int, hi: int) -> int:
        """Env steps of items lo..hi at most (for chunking and expected durations)."""
        dt = self.dt
        per = dt * (hi - lo) if isinstance(dt, int) else int(np.sum(dt[lo:hi]))
        return per * self.steps_per_item


class Gathered:
    """The results of a step_batch, filled chunk by chunk as replies arrive (in any order)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.states: list = [None] * n
        self.rewards = np.empty(n, dtype=np.float64)
        self.terms = np.empty(n, dtype=bool)
        self.truncs = np.empty(n, dtype=bool)
        self.infos: list = [None] * n
        self.obs_arr: np.ndarray | None = None  # while every chunk's observations stack alike
        self.obs_list: list | None = None  # otherwise, one per item
        self.ranges: list[tuple[int, int]] = []

    def put_obs(self, lo: int, hi: int, column: np.ndarray | None, rows: list | None) -> None:
        """Observations lo..hi: a slab column (a view, copied here) or the pickled rows."""
        if column is not None and self.obs_list is None:
            if self.obs_arr is None:
                self.obs_arr = np.empty((self.n,) + column.shape[1:], dtype=column.dtype)
            if self.obs_arr.shape[1:] == column.shape[1:] and self.obs_arr.dtype == column.dtype:
                self.obs_arr[lo:hi] = column
                return
        self._as_list()
        self.obs_list[lo:hi] = list(column.copy()) if column is not None else rows  # type: ignore[index]

    def _as_list(self) -> None:
        if self.obs_list is None:
            self.obs_list = [None] * self.n
            if self.obs_arr is not None:
                for lo, hi in self.ranges:
                    self.obs_list[lo:hi] = list(self.obs_arr[lo:hi])
            self.obs_arr = None

    def absorb(self, lo: int, hi: int, rep: dict, cols: dict[str, np.ndarray]) -> None:
        """Chunk lo..hi of a step_batch reply (its ``obs`` column may be a slab view: copied here)."""
        m = hi - lo
        self.rewards[lo:hi] = rep["rewards"]
        self.terms[lo:hi] = rep["terminations"]
        self.truncs[lo:hi] = rep["truncations"]
        self.put_obs(lo, hi, cols.get("obs"), rep.get("obs"))
        self.states[lo:hi] = unpack_states(rep["states"], cols, "", m)
        infos = unpack_infos(rep["infos"], m)
        for info, k in zip(infos, rep["n_steps"].tolist()):
            info["n_steps"] = k
        self.infos[lo:hi] = infos
        self.ranges.append((lo, hi))

    def result(self, observation_space: spaces.Space) -> StepBatch:
        """The :class:`StepBatch`, every chunk absorbed; each state keeps its own (read-only) observation."""
        states = self.states
        if self.obs_arr is not None:
            # The states keep their own rows: the caller may change the returned array in place.
            kept = self.obs_arr.copy()
            kept.flags.writeable = False
            for s, o in zip(states, kept):
                s.obs = o
            observations = self.obs_arr
            want = getattr(observation_space, "dtype", None)
            if want is not None and observations.dtype != want and observations.shape[1:] == observation_space.shape:
                # An env whose obs dtype differs from its space: stacked like inline does.
                observations = observations.astype(want)
        else:
            obs_list = self.obs_list or []
            for s, o in zip(states, obs_list):
                s.obs = o
            observations = stack_observations(observation_space, obs_list)
        return StepBatch(states, observations, self.rewards, self.terms, self.truncs, self.infos)

    @property
    def total_steps(self) -> int:
        return int(sum(i["n_steps"] for i in self.infos))


def out_bytes_guess(observation_space: spaces.Space, state: State | None) -> int:
    """Slab bytes an item's results may take before any was measured: its simulator array and observation."""
    sim = state.sim.nbytes if state is not None and isinstance(state.sim, np.ndarray) else 0
    shape = getattr(observation_space, "shape", None)
    dtype = getattr(observation_space, "dtype", None)
    obs_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize if shape and dtype is not None else 0
    return sim + obs_bytes + 64


def encode(job: Job, lo: int, hi: int, per_item_out: int, acquire: Callable[[int], Slab] | None) -> tuple[dict, Any]:
    """The request of chunk lo..hi, and its slab (None when ``acquire`` is None: everything pickled).

    ``per_item_out`` is the slab room reserved per item for the results (what
    does not fit is pickled into the reply and learned for the next time).
    """
    m = hi - lo
    actions, dt, seeds = job.actions, job.dt, job.seeds
    sub_states = None if job.states is None else job.states[lo:hi]
    with_obs = job.op == "rollout_batch" and actions is None  # a policy reads the start observation
    est_in = (actions[lo:hi].nbytes if job.act_arr else 0) + 16 * m + 128
    if sub_states is not None and isinstance(sub_states[0].sim, np.ndarray):
        est_in += sub_states[0].sim.nbytes * m
    slab = acquire(est_in + per_item_out * m + 256) if acquire is not None else None
    w = ArrayWriter(slab)
    req: dict[str, Any] = {"n": m, "slab": slab and slab.name, "slab_size": slab and slab.size,
                           "actions": None, "dt": None, "seeds": None, "first_index": lo, **job.extra}
    if actions is not None and not (job.act_arr and w.put_array("actions", actions[lo:hi])):
        req["actions"] = actions[lo:hi]
    if isinstance(dt, int):
        req["dt"] = dt
    elif not w.put_array("dt", dt[lo:hi]):
        req["dt"] = dt[lo:hi]
    if seeds is not None and not w.put_array("seeds", seeds[lo:hi]):
        req["seeds"] = seeds[lo:hi]
    req["states"] = None if sub_states is None else pack_states(sub_states, w, "in_", with_obs=with_obs)
    req["layout"] = w.layout
    req["out_offset"] = -(-w.pos // 64) * 64
    return req, slab


def gather_rollout(
    observation_space: spaces.Space, horizon: int, return_all: bool,
    chunks: Iterable[tuple[int, int, dict, dict[str, np.ndarray]]],
) -> tuple[RolloutBatch, int]:
    """The :class:`RolloutBatch` of ``(lo, hi, reply, columns)`` chunks in input order, and its env steps."""
    states: list[State] = []
    obs: list = []
    rewards, terms, truncs, n_steps, infos = [], [], [], [], []
    all_states: list | None = [] if return_all else None
    all_obs: list | None = [] if return_all else None
    for lo, hi, rep, cols in chunks:
        m = hi - lo
        chunk_states = _with_obs(unpack_states(rep["states"], cols, "", m), _rows(cols, rep, "obs"))
        states.extend(chunk_states)
        obs.extend(s.obs for s in chunk_states)
        rewards.append(rep["rewards"])
        terms.extend(rep["terminations"].tolist())
        truncs.extend(rep["truncations"].tolist())
        n_steps.extend(rep["n_steps"].tolist())
        infos.extend(unpack_infos(rep["infos"], m))
        if all_states is not None:
            flat = _with_obs(unpack_states(rep["all_states"], cols, "all_", m * horizon), _rows(cols, rep, "all_obs"))
            all_states.extend(flat[k * horizon:(k + 1) * horizon] for k in range(m))
            all_obs.extend([s.obs for s in row] for row in all_states[-m:])  # type: ignore[union-attr]
    rew = np.concatenate(rewards) if rewards else np.zeros((0, horizon), dtype=np.float64)
    parts = RolloutParts(states, obs, rew, terms, truncs, n_steps, infos, all_states, all_obs)
    return to_rollout_batch(observation_space, parts), int(sum(n_steps))
