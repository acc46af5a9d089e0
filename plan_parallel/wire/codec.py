"""The codec of a batch: its checked inputs split into chunks and encoded for a worker.

A :class:`Job` holds a batch's inputs; :func:`encode` turns items ``lo..hi`` into
a :class:`~plan_parallel.wire.messages.ChunkRequest` (arrays into a slab where
one is given and they fit); a worker answers with a
:class:`~plan_parallel.wire.messages.ChunkReply` (see
:mod:`plan_parallel.workers.server`), and the job's gatherer
(:mod:`plan_parallel.wire.gather`) absorbs each chunk as it arrives, in any
order, and builds the result in input order. Nothing here talks to a worker, so
all of it can be tested in one process.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
from gymnasium import spaces

from plan_parallel.state import State
from plan_parallel.state.state_value import checked_by
from plan_parallel.wire.columns import pack_states
from plan_parallel.wire.gather import Gather, RolloutGather, StepGather
from plan_parallel.wire.held import Table, pack_held
from plan_parallel.wire.messages import ChunkRequest, Op, RolloutSpec
from plan_parallel.wire.slabs import ALIGN, ArrayWriter, Slab

__all__ = ["Job", "encode", "out_bytes_guess", "split_by_cost"]


def split_by_cost(dt: int | np.ndarray, n: int, w: int, funnel: bool = False) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` chunks of ``n`` items for ``w`` workers, balanced by sum of dt.

    Every chunk is non-empty; there are ``min(n, w)`` of them. Items of one cost
    (an int ``dt``) make chunks of sizes differing by one at most, the larger ones
    first: the workers take chunks in turn as they finish, so the small ones come
    last and even the load out (MCTS on Pong, 16 rollouts in 6 chunks on 2 workers:
    sizes 3,2,3,3,2,3 left one worker 9 rollouts and the other 7; 3,3,3,3,2,2 gives
    each 8). With ``funnel`` the chunks halve in cost from both ends towards the middle
    (for a shared batch: the workers take chunks from the front, this process from
    the back, and the last chunks either side takes are the small ones, so neither is
    left waiting long for the other's last chunk).
    """
    k = min(n, w)
    if k == 0:
        return []
    if k == 1 or (isinstance(dt, int) and not funnel):
        size, larger = divmod(n, k)
        bounds = list(accumulate([size + 1] * larger + [size] * (k - larger), initial=0))
    else:
        cum = np.cumsum(dt) if not isinstance(dt, int) else np.arange(1, n + 1) * dt
        shares = list(accumulate(0.5 ** min(j, k - 1 - j) if funnel else 1.0 for j in range(k)))
        total = float(cum[-1]) / shares[-1]
        bounds = [0]
        for j in range(1, k):
            b = int(np.searchsorted(cum, total * shares[j - 1], side="left")) + 1
            b = min(max(b, bounds[-1] + 1), n - (k - j))  # non-empty chunks on both sides
            bounds.append(b)
        bounds.append(n)
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


@dataclass(frozen=True)
class Job:
    """The checked inputs of one batch (the batch's own copies), from which its chunks are encoded.

    Attributes:
        n: the number of items.
        actions: ``(n, ...)`` for step_batch, ``(n, T, ...)`` for a rollout; None when a policy acts.
        states: n states, or None: every item starts from ``start``.
        dt: an int, or n ints.
        seeds: None, or n ints.
        start: the current state the items start from when ``states`` is None.
        rollout: None for step_batch; the rollout's horizon, pickled policy and return_all.
        policy: the caller's policy object (for a rollout run in this process).
        index_errors: a malformed state's error names its index (False for ``step``'s one state).
        validated: the states were validated against the env already (a vector env's own): a chunk
            run in the calling process does not check them again (a worker still does, unless they carry
            its pool's token: see ``encode``).
        here: ``here(lo, hi)`` runs items lo..hi in the calling process instead of on its local env
            (lists as ``EnvEngine.run_raw``): a vector env's sub-envs, each kept at its state by an env
            of its own, for a batch placed here or the share of a batch this process runs.
        keys: n ints, or None: item i is a vector env's sub-env ``keys[i]``, which a worker steps on an env
            it keeps for that key (a step with dt=1 and no seeds; see :mod:`plan_parallel.workers.kept_envs`).
    """

    n: int
    actions: Any
    states: Sequence[State] | None  # a list, or a StateBatch (a value already)
    dt: int | np.ndarray
    seeds: np.ndarray | None
    start: State | None = None
    rollout: RolloutSpec | None = None
    policy: Any = None
    index_errors: bool = True
    validated: bool = False
    here: Callable[..., tuple] | None = None
    keys: np.ndarray | None = None

    @property
    def op(self) -> Op:
        return Op.STEP_BATCH if self.rollout is None else Op.ROLLOUT_BATCH

    @property
    def steps_per_item(self) -> int:
        return 1 if self.rollout is None else self.rollout.horizon

    def states_of(self, lo: int, hi: int) -> Sequence[State]:
        """The start states of items lo..hi (``start`` for each when the job has no states)."""
        if self.states is None:
            assert self.start is not None, "a job without states starts every item from its start"
            return [self.start] * (hi - lo)
        return self.states[lo:hi]

    def cost(self, lo: int, hi: int) -> int:
        """Env steps of items lo..hi at most (for chunking and expected durations)."""
        dt = self.dt
        per = dt * (hi - lo) if isinstance(dt, int) else int(np.sum(dt[lo:hi]))
        return per * self.steps_per_item

    def gatherer(self, observation_space: spaces.Space) -> Gather:
        """A fresh gatherer for this job's chunk replies."""
        if self.rollout is None:
            return StepGather(self.n, observation_space)
        return RolloutGather(self.n, observation_space, self.rollout)


def sim_bytes(state: State) -> int:
    """Slab bytes one state's simulator value takes: its array, or its family's bytes form (0 for values
    that are pickled instead).

    A decoded state of a family with a bytes form (an ALE state made in this process)
    travels as those bytes: they are made now, and kept by the state for the chunk.
    """
    sim = state.wire_sim
    if isinstance(sim, np.ndarray):
        return sim.nbytes
    try:
        blob = state.sim_blob()
    except Exception:  # a malformed state: pickled as given, for the worker's check to name it
        return 0
    return 0 if blob is None else len(blob) + 16


def out_bytes_guess(observation_space: spaces.Space, state: State | None, job: Job) -> int:
    """Slab bytes an item's results may take before any was measured: its simulator array and observations."""
    sim = 0 if state is None else sim_bytes(state)
    shape = getattr(observation_space, "shape", None)
    dtype = getattr(observation_space, "dtype", None)
    obs_bytes = int(np.prod(shape)) * np.dtype(dtype).itemsize if shape and dtype is not None else 0
    outputs = 1 + (job.steps_per_item if job.rollout is not None and job.rollout.return_all else 0)
    return (sim + obs_bytes + ALIGN) * outputs


def encode(job: Job, lo: int, hi: int, per_item_out: int, acquire: Callable[[int], Slab] | None,
           obs_to: tuple[Slab, np.ndarray] | None = None, timeout: float | None = None,
           trust: Any = None, table: Table | None = None) -> tuple[ChunkRequest, Slab | None, list[tuple]]:
    """The request of chunk lo..hi, its slab (None when ``acquire`` is None: everything in the message), and
    what it asks the worker to hold (:func:`~plan_parallel.wire.held.pack_held`).

    ``per_item_out`` is the slab room reserved per item for the results (what
    does not fit travels in the reply, and is learned for the next chunks).
    ``obs_to``: the batch's lent slab and its observations array (rows of the
    whole batch), into which the worker writes this chunk's rows. ``timeout``: the
    seconds a call may take on a worker (:attr:`ChunkRequest.timeout`). ``trust``: the token of states
    the workers checked or made (:attr:`~plan_parallel.batch.feeder.Feeder.trust`): a chunk of such
    states tells the worker not to check them again. ``table``: the worker's table of the states it holds
    (:mod:`plan_parallel.wire.held`); None, or a job whose states go with their observations or are a vector
    env's (stepped on envs the worker keeps), sends every state.
    """
    m = hi - lo
    actions, dt, seeds = job.actions, job.dt, job.seeds
    sub_states = None if job.states is None else job.states[lo:hi]
    act_arr = isinstance(actions, np.ndarray) and not actions.dtype.hasobject
    est_in = (actions[lo:hi].nbytes if act_arr else 0) + 16 * m + 128
    # A policy reads the start observation: it travels with the states (uniform random actions,
    # the default when neither actions nor a policy is given, read none).
    with_obs = job.rollout is not None and actions is None and job.policy is not None
    per_sim = 0
    if sub_states is not None:
        first = sub_states[0]
        per_sim = sim_bytes(first)
        est_in += (per_sim + (first.obs.nbytes if with_obs and isinstance(first.obs, np.ndarray) else 0)) * m
    slab = acquire(est_in + per_item_out * m + 4 * ALIGN) if acquire is not None else None
    w = ArrayWriter(slab)
    req_actions = None
    if actions is not None and not (act_arr and w.put_array("actions", actions[lo:hi])):
        req_actions = actions[lo:hi]
    req_dt: Any = dt if isinstance(dt, int) else (None if w.put_array("dt", dt[lo:hi]) else dt[lo:hi])
    req_seeds = None if seeds is None or w.put_array("seeds", seeds[lo:hi]) else seeds[lo:hi]
    packed: Any = None
    keeps: list[tuple] = []
    whole: Sequence[State] = ()  # the states sent whole
    if sub_states is not None:
        if with_obs or job.keys is not None:
            packed, whole = pack_states(sub_states, w, "in_", with_obs=with_obs), sub_states
        else:
            packed, whole, keeps = pack_held(sub_states, w, "in_", table, per_sim)
    req = ChunkRequest(
        n=m, first_index=lo, slab=None if slab is None else slab.name, slab_size=0 if slab is None else slab.size,
        layout=w.layout, out_offset=-(-w.pos // ALIGN) * ALIGN, actions=req_actions, dt=req_dt, seeds=req_seeds,
        has_seeds=seeds is not None, states=packed, rollout=job.rollout, index_errors=job.index_errors,
        obs_out=None if obs_to is None else _rows_at(obs_to, lo), kept=None if job.keys is None else job.keys[lo:hi].tolist(),
        timeout=timeout,
        # (states a worker holds passed its check, or the one this token stands for, before it kept them)
        validated=sub_states is not None and trust is not None and checked_by(whole, trust),
    )
    return req, slab, keeps


def _rows_at(obs_to: tuple[Slab, np.ndarray], lo: int) -> tuple[str, int, int, str, tuple[int, ...]]:
    """Where row ``lo`` of a batch's lent observations is: ChunkRequest.obs_out."""
    slab, rows = obs_to
    return slab.name, slab.size, lo * rows[0].nbytes, rows.dtype.str, rows.shape[1:]
