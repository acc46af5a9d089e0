"""The base of :class:`~plan_parallel.vector.PlanVectorEnv`: construction, resets, states, closing.

The N sub-envs are states kept in this process (see :mod:`plan_parallel.vector.vector_env`);
this module holds what every vector call shares: building the recipe groups
(each a planning env and an env in this process, see :mod:`plan_parallel.vector.groups`),
the checks, resets (:meth:`VectorCore.reset`), committing a sub-env's new state,
batching the observations, ``get_states`` / ``set_states`` and closing. Stepping
(``step``, ``send`` / ``recv``) is in :mod:`plan_parallel.vector.vector_env`.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Container, Sequence
from typing import Any, Self

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space, concatenate, create_empty_array

from plan_parallel.batch.policy import ExecutionPolicy
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.state import State
from plan_parallel.vector.attrs import VectorAttrs
from plan_parallel.vector.calls import AsyncState, Step, refuse_unless_idle
from plan_parallel.vector.fns import check_env_fns, is_env_fns
from plan_parallel.vector.groups import RecipeGroups
from plan_parallel.vector.inputs import (
    check_autoreset_flags,
    check_indices,
    check_observation_mode,
    check_plan_options,
    check_reset_options,
    check_reset_seeds,
    is_array_space,
    is_int,
)
from plan_parallel.vector.residents import Residents

__all__ = ["VectorCore", "empty_batch"]


def empty_batch(space: Any, n: int, fn: Any = np.empty) -> Any:
    """gymnasium's ``create_empty_array`` for ``n`` rows (typed: its stubs allow None, which it never returns)."""
    return create_empty_array(space, n=n, fn=fn)


class VectorCore(VectorAttrs, VectorEnv):  # type: ignore[misc]  # np_random(_seed): tuples, as SyncVectorEnv
    """N sub-envs kept as states in this process: all of :class:`~plan_parallel.vector.PlanVectorEnv` but stepping."""

    def __init__(
        self,
        env: str | Callable[..., Any] | Sequence[Callable[[], Any]],
        num_envs: int | None = None,
        n_workers: int | None = None,
        backend: str = "process",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        *,
        observation_mode: str = "same",
        recover: bool = True,
        copy: bool = True,
        timeout: float | None = None,
        max_restarts: int | None = None,
        context: str | None = None,
        adapter: Any = None,
        small_batch_inline: bool | None = None,
        address: str | None = None,
        worker_options: dict | None = None,
        pin_workers: bool | None = None,
        execution: ExecutionPolicy | None = None,
        **env_kwargs: Any,
    ) -> None:
        """Build the recipe groups (planning envs and envs here); no sub-env is reset yet (call :meth:`reset`).

        Args:
            env: a gymnasium env id, a callable returning a ``gymnasium.Env``, or a
                list of such callables, one per sub-env (gymnasium's ``env_fns``;
                callables building different envs get a planning env each, see
                :mod:`plan_parallel.vector.fns`).
            num_envs: N, the number of sub-envs (any N >= 1, independent of ``n_workers``;
                default 1, or ``len(env_fns)``).
            n_workers: workers of the ``"process"`` and ``"ray"`` backends (default: the CPUs this process may use).
            backend: ``"inline"``, ``"process"`` (default) or ``"ray"``, as :func:`plan_parallel.make`.
            autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default), ``SAME_STEP`` or
                ``DISABLED`` (or their string values), with gymnasium's conventions.
            observation_mode: ``"same"`` (default: every sub-env's observation space
                equal) or ``"different"`` (equal shape and dtype; ``observation_space``
                is gymnasium's ``batch_differing_spaces`` of them), as SyncVectorEnv's.
            recover: replace a worker that dies and replay its items (the step gives
                the same result); False: a death raises :class:`~plan_parallel.WorkerCrashedError`.
            copy: return a fresh observation array every call (as SyncVectorEnv's ``copy``).
            timeout: as :func:`plan_parallel.make`.
            context: as :func:`plan_parallel.make`.
            adapter: as :func:`plan_parallel.make`.
            small_batch_inline: as :func:`plan_parallel.make`.
            address: as :func:`plan_parallel.make`.
            worker_options: as :func:`plan_parallel.make`.
            pin_workers: as :func:`plan_parallel.make` (the same default).
            execution: as :func:`plan_parallel.make` (the same default).
            max_restarts: dead workers replaced over the env's life (default 3 with
                ``recover``; 0 or None without).
            **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

        Raises:
            ValueError/TypeError: bad arguments.
            StateError: the env's state cannot be captured.
            RuntimeError: the ``env_fns`` sub-envs' spaces do not agree (gymnasium's message).
        """
        super().__init__()
        observation_mode = check_observation_mode(observation_mode)
        checked = None
        if is_env_fns(env):
            if env_kwargs:
                raise TypeError(f"env kwargs {sorted(env_kwargs)} cannot be passed to env_fns (they take none)")
            checked = check_env_fns(env, num_envs, observation_mode)
            num_envs = len(checked.fns)
        elif num_envs is None:
            num_envs = 1
        if not is_int(num_envs) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        try:
            mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode must be one of {[m.value for m in AutoresetMode]}, "
                             f"got {autoreset_mode!r}") from None
        options = check_plan_options(recover, max_restarts, backend=backend, n_workers=n_workers, timeout=timeout,
                                     context=context, adapter=adapter, address=address, worker_options=worker_options,
                                     small_batch_inline=small_batch_inline, pin_workers=pin_workers,
                                     execution=execution)
        self.num_envs = int(num_envs)
        self.autoreset_mode = mode
        self.recover = recover
        self.copy = bool(copy)
        self.observation_mode = observation_mode
        n = self.num_envs
        self._recipes = RecipeGroups(
            checked.fns if checked is not None else [env] * n,  # type: ignore[list-item]
            checked.bases if checked is not None else [0] * n,
            env_kwargs, options, from_fns=checked is not None)
        first = self._recipes.of(0)
        self.single_observation_space = first.plan.observation_space
        self.single_action_space = first.plan.action_space
        if observation_mode == "same":
            self.observation_space = batch_space(self.single_observation_space, n)
        elif checked is not None:
            self.observation_space = checked.observation_space
        else:
            try:
                self.observation_space = batch_differing_spaces([self.single_observation_space] * n)
            except BaseException:  # gymnasium's error: a space it cannot batch
                self._recipes.close()
                self.closed = True  # nothing left for close() (or __del__) to do
                raise
        self.action_space = batch_space(self.single_action_space, n)
        gym_env = first.local.gym_env
        self.metadata = dict(getattr(gym_env, "metadata", {}))
        self.metadata["autoreset_mode"] = mode
        self.render_mode = getattr(gym_env, "render_mode", None)
        self.spec = first.plan.spec
        self._states: list[State | None] = [None] * n
        self._started = np.zeros(n, dtype=np.bool_)  # has a state (reset or set)
        self._all_started = False  # every sub-env has (known once _check_started saw it)
        self._all = np.arange(n)
        self._env_obs: list[Any] = [None] * n
        self._observations = empty_batch(self.single_observation_space, n, np.zeros)  # copy=False
        self._autoreset = np.zeros(n, dtype=np.bool_)
        # Each sub-env's own env for the steps run here (not with frames rendered at every step).
        self._residents = None if self.render_mode in ("human", "rgb_array_list") else Residents(self._recipes, n)
        self._pending: Step | None = None  # step_async's step, until step_wait
        self._sent: list[Step] = []  # send's steps in flight
        self._in_flight = np.zeros(n, dtype=np.bool_)  # sent, not yet done
        self._ready: OrderedDict[int, tuple] = OrderedDict()  # done, not yet returned by recv
        self._action_spaces: dict[int, Any] = {n: self.action_space}
        self._init_attrs()
        self._last_seed: int | None = None  # the seed of _reset_one's reset (None: the sub-env's own RNG went on)

    # ------------------------------------------------------------------ properties
    @property
    def plan_env(self) -> Any:
        """The planning env sub-env 0 is stepped by (``pids``, ``stats``, ``step_batch`` ...).

        With one recipe group (every sub-env the same env: the common case) it
        steps every sub-env; see :attr:`plan_envs` for each group's.
        """
        return self._recipes.of(0).plan

    @property
    def plan_envs(self) -> tuple[Any, ...]:
        """The planning env of each recipe group, oldest first (one unless sub-envs differ, see
        :mod:`plan_parallel.vector.groups`)."""
        return tuple(g.plan for g in self._recipes.groups)

    @property
    def n_workers(self) -> int:
        """Workers of each recipe group's planning env (every group has as many)."""
        return self.plan_env.n_workers

    @property
    def autoreset_envs(self) -> np.ndarray:
        """Which sub-envs ended their episode on the last step (a copy); in NEXT_STEP they reset on the next."""
        return self._autoreset.copy()

    @property
    def stats(self) -> dict:
        """:attr:`plan_env`'s telemetry (items, batches, restarts, timeouts ...).

        With several recipe groups, that of sub-env 0's group only (each group's:
        ``[e.stats for e in plan_envs]``).
        """
        return self.plan_env.stats

    # ------------------------------------------------------------------ checks
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError("this vector env was closed; create a new one with plan_parallel.make_vec")

    def _check_started(self, ids: Sequence[int] | np.ndarray) -> None:
        if self._all_started:
            return
        if self._started.all():
            self._all_started = True  # for good: a sub-env never loses its state
            return
        missing = [int(i) for i in ids if not self._started[i]]
        if missing:
            raise StateError(f"sub-envs {missing} have no state yet: call reset(seed=...) first")

    @property
    def async_state(self) -> AsyncState:
        """What this env waits for: nothing (DEFAULT), a step_async's ``step_wait`` (WAITING_STEP), or the
        ``recv`` of sub-envs sent (WAITING_RECV): read from the step pending and the steps sent, so it cannot
        disagree with them."""
        if self._pending is not None:
            return AsyncState.WAITING_STEP
        return AsyncState.WAITING_RECV if self._sent or self._ready else AsyncState.DEFAULT

    def _check_idle(self, what: str) -> None:
        state = self.async_state
        if state is not AsyncState.DEFAULT:
            refuse_unless_idle(state, what, sorted(set(np.flatnonzero(self._in_flight).tolist()) | set(self._ready)))

    def _check_not_disabled_done(self, ids: np.ndarray) -> None:
        if self.autoreset_mode == AutoresetMode.DISABLED:
            done = [int(i) for i in ids if self._autoreset[i]]
            if done:
                raise ValueError(f"sub-envs {done} ended their episode and autoreset_mode is DISABLED: reset them "
                                 "first with reset(options={'reset_mask': mask})")

    # ------------------------------------------------------------------ resets
    def _reset_one(self, i: int, state: State | None, seed: int | None, options: dict | None) -> tuple:
        """Reset sub-env ``i`` whose current state is ``state`` (None: never reset). Returns ``(state, obs, info)``.

        The env that resets it is restored to ``state`` first, so a reset with
        ``seed=None`` continues the sub-env's own RNG (and every other piece of its
        state that outlives a reset), as a separate env per sub-env would. That env
        is the sub-env's resident env when one was built (for the steps run here):
        after a step here it holds ``state`` (no restore), and after the reset, the
        state the next step starts from. Otherwise its group's local env: a reset
        does not build an env (~0.2 s for an ALE game) that the steps may never use.
        """
        group = self._recipes.of(i)
        env = group.local
        if state is not None:
            if self._residents is not None:  # the sub-env's own env, if built (it may hold ``state``: no restore)
                env = self._residents.built(i) or env
            env.set_state(state)
        elif seed is None and not self._recipes.fresh_for(i):
            # A never-reset sub-env reset without a seed: a fresh env, as SyncVectorEnv's would be.
            with self._recipes.new_sub(i) as fresh:
                out = fresh.reset(seed=None, options=options)
                self._last_seed = fresh.gym_env.np_random_seed
                return out
        if env is group.local:
            group.local_used = True
        out = env.reset(seed=seed, options=options)
        self._last_seed = seed if state is not None else env.gym_env.np_random_seed
        return out

    def _commit(self, i: int, state: State, reset: bool) -> None:
        self._states[i] = state
        self._env_obs[i] = state.obs
        self._started[i] = True
        self._record_frame(i, state, reset)

    def _commit_all(self, states: list[State], reset: Container[int]) -> None:
        """:meth:`_commit` of every sub-env: ``states[i]`` is sub-env i's new state, from a reset if i is in ``reset``."""
        self._states = states  # type: ignore[assignment]  # a list of its own
        self._env_obs = [s.obs for s in states]
        if not self._all_started:
            self._started[:] = True
        if self._frames is not None:
            for i, state in enumerate(states):
                self._record_frame(i, state, i in reset)

    def _batched_obs(self, step: Step | None = None, batch: Any = None) -> Any:
        """The N sub-envs' observations, batched.

        With ``copy`` (the default) a fresh array every call, and nothing kept:
        after a step of an array space the batch's own stacked rows are used and
        only the rows of reset sub-envs are patched (no extra copy of, say, 8 RGB
        frames). Without ``copy``, one buffer updated in place, as SyncVectorEnv.
        """
        space = self.single_observation_space
        if not self.copy:
            self._observations = concatenate(space, self._env_obs, self._observations)
            return self._observations
        if step is None or not is_array_space(space):
            return concatenate(space, self._env_obs, empty_batch(space, self.num_envs))
        if len(step.ids) == self.num_envs:
            out = batch.observations.copy()  # the batch's is read-only: its rows are the states' observations
        else:
            stepped = batch.observations
            if len(step.ids):  # np.empty: gymnasium's create_empty_array costs ~10 us a call
                out = np.empty((self.num_envs, *(space.shape or ())), dtype=space.dtype)
                out[step.ids] = stepped
            else:
                out = empty_batch(space, self.num_envs)
        reset = list(step.resets)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and len(step.ids):
            reset += step.ids[batch.terminations | batch.truncations].tolist()
        for i in reset:
            out[i] = self._env_obs[i]
        return out

    def _drop_in_flight(self) -> None:
        """Forget a pending step and every sent or unreturned sub-env: their results are never returned."""
        self._pending = None
        self._sent = []
        self._in_flight[:] = False
        self._ready.clear()

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset every sub-env (or those in ``options["reset_mask"]``), as SyncVectorEnv does.

        Args:
            seed: None (each sub-env continues its own RNG; a never-reset sub-env
                is seeded at random), an int (sub-env i gets ``seed + i``) or a list
                of N ints or None.
            options: passed to every sub-env's reset, except ``"reset_mask"``: a
                bool array of shape (N,) choosing the sub-envs to reset (the others
                keep their state and observation). The caller's dict is not changed.

        A pending ``step_async`` and any sub-envs sent and not received are dropped:
        their results are never returned.

        Raises:
            TypeError/ValueError: bad seed, options or reset_mask (before anything runs).
            ClosedError: the env was closed.
            Exception: whatever a sub-env's own reset raises, with its own type (no sub-env changed).
        """
        self._check_open()
        seeds = check_reset_seeds(seed, self.num_envs)
        opts, mask = check_reset_options(options, self.num_envs)
        self._drop_in_flight()
        ids = range(self.num_envs) if mask is None else np.flatnonzero(mask).tolist()
        infos: dict = {}
        done = []
        seed_used: dict[int, int | None] = {}
        for i in ids:
            state, _, info = self._reset_one(i, self._states[i], seeds[i], opts)
            seed_used[i] = self._last_seed
            done.append((i, state))
            infos = self._add_info(infos, info, i)
        with ctrl_c_deferred():  # every sub-env commits, or none does
            for i, state in done:
                self._commit(i, state, True)
                self._record_seed(i, seed_used[i])
                self._autoreset[i] = False
        return self._batched_obs(), infos

    # ------------------------------------------------------------------ states
    def get_states(self, indices: Any = None) -> list[State]:
        """The current state of each sub-env in ``indices`` (None: all), usable by the planning API.

        Raises:
            StateError: a sub-env was never reset.
            TypeError/ValueError: bad indices.
        """
        self._check_open()
        ids = check_indices(indices, self.num_envs)
        self._check_started(ids)
        return [self._states[i] for i in ids]  # type: ignore[misc]

    def set_states(self, states: Sequence[State], indices: Any = None, *, autoreset: Any = False) -> None:
        """Make ``states[j]`` the current state of sub-env ``indices[j]`` (None: all N).

        The sub-env's observation becomes the state's. ``autoreset`` (a bool, or
        one per index) marks the sub-env as having ended its episode: in NEXT_STEP
        mode its next step resets it (pass :attr:`autoreset_envs` saved with
        :meth:`get_states` to resume a run exactly); in DISABLED mode it must be
        reset before stepping. Always False in SAME_STEP mode.

        Raises:
            TypeError/ValueError: bad indices, lengths or ``autoreset``.
            StateError: a state of another env, or one without an observation.
            AlreadyPendingCallError: a step or a send is pending.
        """
        self._check_open()
        self._check_idle("set_states")
        ids = check_indices(indices, self.num_envs)
        states = self._recipes.check_states(states, ids)
        for j, s in enumerate(states):
            if s.obs is None:
                raise StateError(f"states[{j}] carries no observation: use states from get_states, reset, "
                                 "step_batch or rollout_batch")
        flags = check_autoreset_flags(autoreset, len(ids))
        if self.autoreset_mode == AutoresetMode.SAME_STEP and flags.any():
            raise ValueError("autoreset=True has no meaning in SAME_STEP mode (ended sub-envs reset at once)")
        with ctrl_c_deferred():  # every sub-env commits, or none does
            for j, i in enumerate(ids.tolist()):
                self._commit(i, states[j], True)
                self._autoreset[i] = flags[j]
        if not self.copy:
            concatenate(self.single_observation_space, self._env_obs, self._observations)

    # ------------------------------------------------------------------ closing
    def close_extras(self, **kwargs: Any) -> None:
        """Drop what is in flight and close every recipe group (its planning env and this process's env)
        and every resident env."""
        self._drop_in_flight()
        try:
            self._recipes.close()
        finally:
            residents = getattr(self, "_residents", None)  # None too when construction failed before it
            if residents is not None:
                residents.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_recipes"):
            self.close()

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else "env"
        groups = len(self._recipes.groups)
        return (f"PlanVectorEnv({name}, num_envs={self.num_envs}, backend={self._recipes.plan_options['backend']!r}, "
                f"n_workers={self.n_workers}, autoreset_mode={self.autoreset_mode.value!r}"
                f"{f', groups={groups}' if groups > 1 else ''}{', closed' if self.closed else ''})")
