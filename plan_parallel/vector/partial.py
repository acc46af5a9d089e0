"""The partial gather of :class:`~plan_parallel.vector.PlanVectorEnv`: ``send`` a step of some sub-envs,
``recv`` the first ones to finish.

A send splits its sub-envs by recipe group, and each group's into one ``step_batch`` per worker, so the
parts that finish first can be received while the others run. A part's sub-envs commit together when
it is collected (or, if it failed, are dropped unchanged and can be sent again).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector.utils import concatenate

from plan_parallel.errors import WaitTimeoutError
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.vector.calls import AsyncState, Received, Step
from plan_parallel.vector.core import empty_batch
from plan_parallel.vector.groups import RecipeGroups, wait_done
from plan_parallel.vector.infos import add_info
from plan_parallel.vector.inputs import check_indices, check_vector_actions, is_int

__all__ = ["PartialGather"]

_RECV_SLICE = 0.002  # seconds recv waits on one sent part before looking at the others again


class PartialGather:
    """Mixin of :class:`~plan_parallel.vector.PlanVectorEnv`: ``send`` / ``recv`` (see the module docstring)."""

    num_envs: int
    single_action_space: Any
    single_observation_space: Any
    _recipes: RecipeGroups
    _pending: Any
    async_state: AsyncState
    _sent: list[Step]
    _in_flight: np.ndarray
    _ready: OrderedDict
    _autoreset: np.ndarray
    _action_spaces: Any

    # Provided by the vector env.
    _check_open: Any
    _check_started: Any
    _check_not_disabled_done: Any
    _start: Any
    _results: Any
    _commit: Any

    def send(self, actions: Any, env_ids: Any) -> None:
        """Start a step of the sub-envs ``env_ids`` (k of them, with k actions); :meth:`recv` gathers them.

        The sub-envs are split by recipe group, and each group's into one
        ``step_batch`` per worker, so the parts that finish first can be
        received while the others run.
        Autoreset is applied per sub-env as in :meth:`step`.

        Raises:
            ValueError/TypeError: bad ids (out of range, repeated, already sent and
                not received), not k actions of the action space, a DISABLED-mode
                sub-env that ended (before anything is sent).
            AlreadyPendingCallError: a step_async is pending.
            StateError: not reset yet.
            ClosedError: the env was closed.
        """
        self._check_open()
        if self.async_state is AsyncState.WAITING_STEP:
            raise AlreadyPendingCallError("send: a step_async is pending; call step_wait() first", "step")
        ids = check_indices(env_ids, self.num_envs)
        busy = [int(i) for i in ids if self._in_flight[i] or int(i) in self._ready]
        if busy:
            raise ValueError(f"sub-envs {busy} were sent and not yet received: recv them first")
        actions = check_vector_actions(self.single_action_space, actions, len(ids), self._action_spaces)
        self._check_started(ids)
        self._check_not_disabled_done(ids)
        if not len(ids):
            return
        chunks = [chunk for group, pos in self._recipes.split(ids)
                  for chunk in np.array_split(pos, min(len(pos), group.plan.n_workers))]
        started: list[Step] = []
        for pos in chunks:  # on an error nothing of this send is kept: its sub-envs stay idle
            sub = actions[pos] if isinstance(actions, np.ndarray) else [actions[p] for p in pos]
            started.append(Step(*self._start(sub, ids[pos])))
        for step in started:
            self._sent.append(step)
            self._in_flight[step.ids] = True
            self._in_flight[list(step.resets)] = True
        self._collect()

    def _collect(self) -> None:
        """Move every finished part's results into the ready queue (committing its sub-envs)."""
        for step in list(self._sent):
            if not step.fut.done():
                continue
            ids = list(step.resets) + step.ids.tolist()
            try:
                batch = step.fut.result()
                results = self._results(step, batch)
            except BaseException:
                self._drop(step)
                raise
            rows = {i: j for j, i in enumerate(step.ids.tolist())}
            with ctrl_c_deferred():  # every sub-env of the part commits, or none does
                self._sent.remove(step)
                for i in ids:
                    state, add, was_reset = results[i]
                    j = rows.get(i)
                    reward, term, trunc = (0.0, False, False) if j is None else (
                        float(batch.rewards[j]), bool(batch.terminations[j]), bool(batch.truncations[j]))
                    self._commit(i, state, was_reset)
                    self._autoreset[i] = term or trunc
                    self._in_flight[i] = False
                    self._ready[i] = (state.obs, reward, term, trunc, add)

    def _drop(self, step: Step) -> None:
        """Forget a failed part: its sub-envs keep their states and can be sent again."""
        self._sent.remove(step)
        self._in_flight[list(step.resets) + step.ids.tolist()] = False

    def recv(self, wait_num: int | None = None, timeout: float | None = None) -> Received:
        """The first ``wait_num`` sub-envs to finish (default: every one sent), with their ids.

        Sub-envs that finished beyond ``wait_num`` stay queued for the next ``recv``.

        Raises:
            NoAsyncCallError: nothing was sent.
            ValueError: ``wait_num`` not in [1, outstanding].
            ClosedError: the env was closed.
            WaitTimeoutError: (a ``TimeoutError``) fewer than ``wait_num`` finished within ``timeout``
                (nothing is lost: the ready ones stay queued, the rest keep running).
            WorkerTimeoutError/WorkerCrashedError: a part's worker hung or died; the failed part's
                sub-envs are dropped unchanged (send them again).
            Exception: whatever a sub-env's own step raises, with its own type; the failed part's
                sub-envs are dropped unchanged (send them again).
        """
        self._check_open()
        outstanding = len(self._ready) + int(self._in_flight.sum())
        if outstanding == 0:
            raise NoAsyncCallError("recv: no sub-env was sent (call send first)", "send")
        k = outstanding if wait_num is None else wait_num
        if not is_int(k) or not 1 <= k <= outstanding:
            raise ValueError(f"wait_num must be an integer in [1, {outstanding}] (the sub-envs sent), got {wait_num!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        self._collect()
        while len(self._ready) < k:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeoutError(f"recv: {len(self._ready)} of {k} sub-envs finished within {timeout} s; "
                                   "the rest are still running")
            head = self._sent[0]
            try:
                wait_done(head.fut, _RECV_SLICE if left is None else min(left, _RECV_SLICE))
            except BaseException:
                self._drop(head)
                raise
            self._collect()
        ids = [self._ready.popitem(last=False) for _ in range(k)]
        env_ids = np.array([i for i, _ in ids], dtype=np.int64)
        obs = concatenate(self.single_observation_space, [r[0] for _, r in ids],
                          empty_batch(self.single_observation_space, k))
        infos: dict = {}
        for j, (_, r) in enumerate(ids):
            for info in r[4]:
                infos = add_info(infos, info, j, k)
        return Received(obs, np.array([r[1] for _, r in ids], dtype=np.float64),
                        np.array([r[2] for _, r in ids], dtype=np.bool_),
                        np.array([r[3] for _, r in ids], dtype=np.bool_), infos, env_ids)
