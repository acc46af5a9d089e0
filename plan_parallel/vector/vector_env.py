"""PlanVectorEnv: a gymnasium ``VectorEnv`` whose sub-envs are states stepped by the planning workers.

``make_vec`` builds a planning env (:func:`plan_parallel.make`) and keeps the
current :class:`~plan_parallel.State` of each of its N sub-envs in this process.
A vector ``step`` is one ``step_batch`` of the N (state, action) items over the
workers, so any worker can step any sub-env, a dead worker's items are replayed
from the states they carry, and every sub-env can be snapshot and restored
(:meth:`PlanVectorEnv.get_states` / :meth:`PlanVectorEnv.set_states`).

Sub-envs that are different envs (``env_fns`` building other envs, or a setting
outside the state changed by ``set_attr``) are stepped by one planning env per
distinct recipe, each with its own workers (:mod:`plan_parallel.vector.groups`);
a step sends each group's items to its planning env and gathers them back.

A step that runs in this process (the inline backend, or a step the process
or Ray backend judges too small for the workers, or this process's share of
one) steps each sub-env on an env of its own kept at its state, which steps on
without a restore (:mod:`plan_parallel.vector.residents`); the states are
captured all the same, so where a step runs never changes its result.

Resets run on an inline env in this process, restored to the sub-env's state
first: a reset without a seed then continues the sub-env's own RNG, as each
sub-env of ``gymnasium.vector.SyncVectorEnv`` does. Observations, rewards, flags
and infos equal SyncVectorEnv's for the same seeds and actions, in every
autoreset mode, on every backend and worker count.

>>> import plan_parallel as pp
>>> envs = pp.make_vec("CartPole-v1", num_envs=4, backend="inline")
>>> obs, infos = envs.reset(seed=0)
>>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import AutoresetMode

from plan_parallel.env.plan_env import engine_of
from plan_parallel.errors import WaitTimeoutError
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.results import StepBatch
from plan_parallel.state import State
from plan_parallel.vector.calls import Received, Step
from plan_parallel.vector.core import VectorCore
from plan_parallel.vector.groups import Done, GatheredStep, wait_done
from plan_parallel.vector.infos import merge_rows
from plan_parallel.vector.inputs import (
    check_vector_actions,
    is_array_space,
)
from plan_parallel.vector.partial import PartialGather

__all__ = ["PlanVectorEnv", "Received", "make_vec"]


def make_vec(env: str | Callable[..., Any] | Sequence[Callable[[], Any]] | None = None, num_envs: int | None = None,
             *, env_fns: Sequence[Callable[[], Any]] | None = None, **kwargs: Any) -> PlanVectorEnv:
    """A gymnasium ``VectorEnv`` of ``num_envs`` sub-envs stepped by planning workers.

    ``pp.make_vec(env, num_envs=N, n_workers=W, backend="process", autoreset_mode=...,
    **env_kwargs)``, or ``pp.make_vec(env_fns=[f, ...])`` (or the list as ``env``):
    one sub-env per callable, as gymnasium's vector envs (see
    :mod:`plan_parallel.vector.fns`). The arguments are :class:`PlanVectorEnv`'s.
    """
    if env_fns is not None:
        if env is not None:
            raise TypeError("make_vec: give env or env_fns, not both")
        env = env_fns
    if env is None:
        raise TypeError("make_vec: an env id, an env callable or env_fns is required")
    return PlanVectorEnv(env, num_envs, **kwargs)


class PlanVectorEnv(PartialGather, VectorCore):  # type: ignore[misc]  # np_random(_seed): as VectorCore
    """N sub-envs kept as states in this process and stepped by planning workers (see :func:`make_vec`).

    Besides the ``VectorEnv`` API: ``step_async`` / ``step_wait(timeout)``,
    ``send`` / ``recv`` (partial gather, :mod:`plan_parallel.vector.partial`), ``get_states`` / ``set_states``, and
    ``call`` / ``get_attr`` / ``set_attr`` with ``indices=``.

    A call that raises leaves every sub-env as it was before the call (states,
    observations, autoreset flags): nothing is committed until a whole step (or
    reset, or part of a send) has succeeded, so the call can be made again.
    """

    # ------------------------------------------------------------------ stepping
    def _submit(self, actions: Any, ids: np.ndarray, wait: bool = False, decided: tuple | None = None) -> Any:
        """A future of the step of sub-envs ``ids`` (a ``StepBatch`` in their order); the inline backend runs it now.

        One ``step_batch`` per recipe group of the sub-envs (one in the common case).
        ``wait``: one group's step runs now, as a ``step_batch`` call (see :meth:`step`);
        ``decided``: where it is placed (see :meth:`Group.step_here`).
        """
        if not len(ids):  # every sub-env resets: nothing to step (and step_batch cannot stack 0 Dict obs)
            empty = np.zeros(0)
            return Done(StepBatch([], None, empty, empty.astype(np.bool_), empty.astype(np.bool_), []))
        states = self._states
        if len(self._recipes.groups) == 1:
            sub_states = list(states) if len(ids) == len(states) else [states[i] for i in ids]  # as they are now
            return self._recipes.groups[0].submit(actions, sub_states, wait, self._here(ids, actions, sub_states),
                                                  decided, ids)
        futures = []
        for group, pos in self._recipes.split(ids):  # on an error the parts submitted run on, and their results are dropped
            sub = actions[pos] if isinstance(actions, np.ndarray) else [actions[p] for p in pos]
            sub_states = [states[i] for i in ids[pos]]
            futures.append((pos, group.submit(sub, sub_states, False, self._here(ids[pos], sub, sub_states), None,
                                              ids[pos])))
        return GatheredStep(futures, len(ids), self.single_observation_space)

    def _here(self, ids: np.ndarray, actions: Any,
              states: Sequence[State | None]) -> Callable[..., tuple] | None:
        """How items lo..hi of the step of sub-envs ``ids`` run in this process: ``here(lo, hi, rows=None)``, on
        their resident envs, making their observations in ``rows`` when given (None: on the local env)."""
        residents = self._residents
        if residents is None:
            return None
        n = len(ids)
        return lambda lo, hi, rows=None: (residents.run(ids, actions, states, rows) if lo == 0 and hi == n
                                          else residents.run(ids[lo:hi], actions[lo:hi], states[lo:hi], rows))

    def _start(self, actions: Any, ids: np.ndarray, wait: bool = False,
               decided: tuple | None = None) -> tuple[Any, np.ndarray, dict]:
        """Submit the step of sub-envs ``ids`` with their checked ``actions``; NEXT_STEP resets run meanwhile
        (after it, with ``wait``). ``decided``: see :meth:`_submit`."""
        flags = self._autoreset if ids is self._all else self._autoreset[ids]
        if self.autoreset_mode != AutoresetMode.NEXT_STEP or not flags.any():
            run, resets, sub_actions = ids, ids[:0], actions
        else:
            run, resets = ids[~flags], ids[flags]
            if isinstance(actions, np.ndarray):
                sub_actions = actions[~flags]
            else:
                sub_actions = [a for a, f in zip(actions, flags) if not f]
        fut = self._submit(sub_actions, run, wait, decided)
        # Resets run here while the workers step (the batch above is in flight).
        done = {int(i): self._reset_one(int(i), self._states[i], None, None) for i in resets}
        return fut, run, done

    def _results(self, step: Step, batch: Any) -> dict[int, tuple[State, list[dict], bool]]:
        """Per sub-env ``(state, infos to add, was reset)`` of a finished step (rewards and flags are the batch's).

        Nothing is committed.
        """
        out: dict[int, tuple[State, list[dict], bool]] = {
            i: (state, [info], True) for i, (state, _, info) in step.resets.items()}
        ended = batch.terminations | batch.truncations
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        for j, (i, state, info) in enumerate(zip(step.ids.tolist(), batch.states, batch.infos)):
            info.pop("n_steps", None)  # plan_parallel's own key; gymnasium's infos do not have it
            if same_step and ended[j]:
                final = {"final_obs": deepcopy(state.obs), "final_info": info}
                state, _, reset_info = self._reset_one(i, state, None, None)
                out[i] = (state, [final, reset_info], True)
            else:
                out[i] = (state, [info], False)
        return out

    def step_async(self, actions: Any) -> None:
        """Send a step of every sub-env; :meth:`step_wait` returns it.

        Raises:
            ValueError/TypeError: not N actions of the action space; in DISABLED
                mode, a sub-env that ended and was not reset (before anything is sent).
            AlreadyPendingCallError: a step or a send is pending.
            StateError: not reset yet.
            ClosedError: the env was closed.
        """
        self._send_step(self._checked_step(actions, "step_async"), False)

    def _checked_step(self, actions: Any, what: str) -> Any:
        """The checked actions of a step of every sub-env (``what``: the call, for the errors); raises before
        anything runs."""
        self._check_open()
        self._check_idle(what)
        actions = check_vector_actions(self.single_action_space, actions, self.num_envs, self._action_spaces)
        self._check_started(self._all)
        self._check_not_disabled_done(self._all)
        return actions

    def _send_step(self, actions: Any, wait: bool, decided: tuple | None = None) -> None:
        fut, run, resets = self._start(actions, self._all, wait, decided)
        self._pending = Step(fut, run, resets)

    def _rows_fit(self) -> bool:
        """Whether a step of every sub-env may run here as :meth:`_step_rows`: one recipe, an array observation
        space, no SAME_STEP resets (and resident envs: frames are not rendered at every step)."""
        return (self._residents is not None and len(self._recipes.groups) == 1 and is_array_space(
            self.single_observation_space) and self.autoreset_mode != AutoresetMode.SAME_STEP)

    def _step_rows(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """:meth:`step`'s result, run here on the resident envs and committed: each sub-env steps
        (:meth:`EnvEngine.step_from`) or resets (NEXT_STEP) in turn, into the batch's rows. Without what a
        ``step_batch`` adds (per-item lists, a StepBatch taken apart again, the sub-envs to step picked out
        first): 16 CartPoles step 1.37x as fast. Nothing is committed if a sub-env raises."""
        n, space, residents = self.num_envs, self.single_observation_space, self._residents
        assert residents is not None, "only with resident envs (_rows_fit)"
        resets = self._autoreset if self.autoreset_mode == AutoresetMode.NEXT_STEP else None
        states = list(self._states)
        obs = np.empty((n, *(space.shape or ())), dtype=space.dtype)
        rewards, terms, truncs = np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
        infos_of: list[Any] = [None] * n
        reset: dict[int, tuple] = {}
        for i, env in enumerate(residents.of(range(n))):
            if resets is not None and resets[i]:
                reset[i] = self._reset_one(i, states[i], None, None)
            else:
                states[i], obs[i], rewards[i], terms[i], truncs[i], infos_of[i] = engine_of(env).step_from(
                    states[i], actions[i])  # type: ignore[arg-type]  # _checked_step: every sub-env started
        infos = self._commit_step(states, infos_of, reset, terms, truncs)
        for i in reset:
            obs[i] = self._env_obs[i]
        if not self.copy:
            self._observations[...] = obs
            return self._observations, rewards, terms, truncs, infos
        return obs, rewards, terms, truncs, infos

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The result of the pending :meth:`step_async`, waiting up to ``timeout`` seconds.

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` as SyncVectorEnv's ``step``.

        Raises:
            NoAsyncCallError: no step is pending.
            ClosedError: the env was closed.
            WaitTimeoutError: (a ``TimeoutError``) not done within ``timeout``; the step stays pending
                (call ``step_wait`` again, or ``reset`` to drop it).
            WorkerTimeoutError: a worker exceeded the env's ``timeout`` (it was replaced); the step
                is dropped and no sub-env changed: step again.
            WorkerCrashedError: a worker died and could not be replaced (or ``recover=False``); the
                step is dropped and no sub-env changed.
            Exception: whatever a sub-env's own step raises, with its own type; the step is dropped
                and no sub-env changed: step again.
        """
        self._check_open()
        step = self._pending
        if step is None:
            raise NoAsyncCallError("step_wait: no step_async is pending", "step")
        try:
            done = wait_done(step.fut, timeout)
        except BaseException:
            self._pending = None  # the step failed: dropped
            raise
        if not done:
            raise WaitTimeoutError(f"step_wait: the step is not done after {timeout} s; it stays pending "
                               "(call step_wait again, or reset to drop it)")
        batch = step.fut.result(0)
        self._pending = None
        return self._finish(step, batch)

    def _finish(self, step: Step, batch: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The result of a finished step (no longer pending), committed: :meth:`step_wait`'s return."""
        n = self.num_envs
        if self.autoreset_mode != AutoresetMode.SAME_STEP or not (
                batch.terminations.any() or batch.truncations.any()):
            return self._step_result(step, batch)
        # SAME_STEP, some sub-env ended: it resets now (every sub-env stepped: no reset came first)
        results = self._results(step, batch)
        rewards, terms, truncs = batch.rewards, batch.terminations, batch.truncations  # the batch is ours
        infos: dict = {}
        for i in range(n):
            for info in results[i][1]:
                if info:  # an empty info adds nothing (gymnasium's _add_info loops over its keys)
                    infos = self._add_info(infos, info, i)
        with ctrl_c_deferred():  # every sub-env commits, or none does
            self._commit_all([results[i][0] for i in range(n)], {i for i in range(n) if results[i][2]})
            self._autoreset = terms | truncs
        return self._batched_obs(step, batch), rewards, terms, truncs, infos

    def _step_result(self, step: Step, batch: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """:meth:`step_wait`'s result when no sub-env ended in SAME_STEP mode (none resets after its step),
        committed: the general path's result without its per-sub-env records."""
        n = self.num_envs
        reset = step.resets
        if not reset:
            states: list = list(batch.states)
            rewards, terms, truncs = batch.rewards, batch.terminations, batch.truncations  # the batch's own
            infos_of = batch.infos
        else:  # NEXT_STEP resets: reward 0, not ended
            ids = step.ids
            states = list(self._states)
            infos_of = [None] * n
            for i, state, info in zip(ids.tolist(), batch.states, batch.infos):
                states[i], infos_of[i] = state, info
            rewards = np.zeros(n, dtype=np.float64)
            terms = np.zeros(n, dtype=np.bool_)
            truncs = np.zeros(n, dtype=np.bool_)
            rewards[ids], terms[ids], truncs[ids] = batch.rewards, batch.terminations, batch.truncations
        infos = self._commit_step(states, infos_of, reset, terms, truncs)
        return self._batched_obs(step, batch), rewards, terms, truncs, infos

    def _commit_step(self, states: list, infos_of: list, reset: dict, terms: np.ndarray, truncs: np.ndarray) -> dict:
        """Commit a step's states (``states[i]``; a reset sub-env's from ``reset[i]``) and flags; its infos, added
        in sub-env order as gymnasium adds them (``infos_of`` is the step's own list: a reset sub-env's row is
        replaced by its reset's info)."""
        for i, info in enumerate(infos_of):
            if i in reset:
                states[i], _, infos_of[i] = reset[i]
            else:
                info.pop("n_steps", None)  # plan_parallel's own key; gymnasium's infos do not have it
        infos = merge_rows(infos_of, self._add_info)
        with ctrl_c_deferred():  # every sub-env commits, or none does
            self._commit_all(states, reset)
            self._autoreset = terms | truncs
        return infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Step every sub-env (one ``step_batch`` over the workers), with autoreset as SyncVectorEnv.

        Sub-envs of one recipe are stepped by one ``step_batch`` call, which this
        process may share with the workers (see :mod:`plan_parallel.batch.placement`).

        Raises:
            ValueError/TypeError: not N actions of the action space; in DISABLED mode, a sub-env
                that ended and was not reset (before anything runs).
            AlreadyPendingCallError: a step or a send is pending.
            StateError: not reset yet.
            ClosedError: the env was closed.
            WorkerTimeoutError/WorkerCrashedError: as :meth:`step_wait`; no sub-env changed.
            Exception: whatever a sub-env's own step raises, with its own type; no sub-env changed.
        """
        before = self._pending  # a step_async's: _checked_step refuses to start another
        try:
            actions = self._checked_step(actions, "step")
            decided = None
            if self._rows_fit():
                ran, value, decided = self._recipes.groups[0].step_here(self.num_envs, lambda: self._step_rows(actions))
                if ran:
                    return value
            self._send_step(actions, True, decided)
            step = self._pending
            if step is not None and type(step.fut) is Done:  # it ran in this process already
                self._pending = None
                return self._finish(step, step.fut.value)
            return self.step_wait()
        except BaseException:
            if self._pending is not before:  # this call's step, interrupted between sending and waiting
                self._pending = None
            raise
