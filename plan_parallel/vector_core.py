"""The base of :class:`~plan_parallel.vector.PlanVectorEnv`: construction, resets, states, closing.

The N sub-envs are states kept in this process (see :mod:`plan_parallel.vector`);
this module holds what every vector call shares: building the planning env and
this process's env, the checks, resets (:meth:`VectorCore.reset`), committing a
sub-env's new state, batching the observations, ``get_states`` / ``set_states``
and closing. Stepping (``step``, ``send`` / ``recv``) is in :mod:`plan_parallel.vector`.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Self

import numpy as np
from gymnasium.error import AlreadyPendingCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from plan_parallel.build import make
from plan_parallel.errors import ClosedError, StateError, WorkerTimeoutError
from plan_parallel.inputs import check_states
from plan_parallel.state import State
from plan_parallel.vector_attrs import VectorAttrs
from plan_parallel.vector_fns import check_env_fns, is_env_fns
from plan_parallel.vector_inputs import (
    check_autoreset_flags,
    check_indices,
    check_reset_options,
    check_reset_seeds,
    is_array_space,
    is_int,
)

__all__ = ["Done", "Received", "Step", "VectorCore", "empty_batch", "wait_done"]


def empty_batch(space: Any, n: int, fn: Any = np.empty) -> Any:
    """gymnasium's ``create_empty_array`` for ``n`` rows (typed: its stubs allow None, which it never returns)."""
    return create_empty_array(space, n=n, fn=fn)


class Received(NamedTuple):
    """What :meth:`PlanVectorEnv.recv` returns: k sub-envs' results, in the order of ``env_ids``.

    Fields as in ``VectorEnv.step`` for a batch of k (infos merged with ``_key``
    masks over the k positions), plus ``env_ids``: int64 ``(k,)``, which sub-env each row is.
    """

    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict
    env_ids: np.ndarray


class Done:
    """A finished future (the inline backend runs a batch when it is submitted)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self.value


class Step(NamedTuple):
    """One submitted step of some sub-envs: ``fut`` steps ``ids`` (in order); ``resets`` are done already."""

    fut: Any
    ids: np.ndarray
    resets: dict


def wait_done(fut: Any, timeout: float | None) -> bool:
    """Wait up to ``timeout`` for ``fut``: True when it finished, False when it is still running.

    Its failure raises (an env's own TimeoutError and WorkerTimeoutError too:
    ``result`` raises TimeoutError both for "not done yet" and for those).
    """
    try:
        fut.result(timeout)
        return True
    except TimeoutError as exc:
        if isinstance(exc, WorkerTimeoutError) or fut.done():
            fut.result(0)  # finished since (returns) or failed (raises its error)
            return True
        return False


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
        recover: bool = True,
        copy: bool = True,
        timeout: float | None = None,
        max_restarts: int | None = None,
        context: str | None = None,
        adapter: Any = None,
        small_batch_inline: bool = True,
        address: str | None = None,
        worker_options: dict | None = None,
        **env_kwargs: Any,
    ) -> None:
        """Build the planning env and this process's env; no sub-env is reset yet (call :meth:`reset`).

        Args:
            env: a gymnasium env id, a callable returning a ``gymnasium.Env``, or a
                list of such callables, one per sub-env (gymnasium's ``env_fns``; they
                must build the same env, see :mod:`plan_parallel.vector_fns`).
            num_envs: N, the number of sub-envs (any N >= 1, independent of ``n_workers``;
                default 1, or ``len(env_fns)``).
            n_workers: workers of the ``"process"`` and ``"ray"`` backends (default: CPU count).
            backend: ``"inline"``, ``"process"`` (default) or ``"ray"``, as :func:`plan_parallel.make`.
            autoreset_mode: ``AutoresetMode.NEXT_STEP`` (default), ``SAME_STEP`` or
                ``DISABLED`` (or their string values), with gymnasium's conventions.
            recover: replace a worker that dies and replay its items (the step gives
                the same result); False: a death raises :class:`~plan_parallel.WorkerCrashedError`.
            copy: return a fresh observation array every call (as SyncVectorEnv's ``copy``).
            timeout, context, adapter, small_batch_inline, address, worker_options:
                options of :func:`plan_parallel.make`.
            max_restarts: dead workers replaced over the env's life (default 3 with
                ``recover``; 0 or None without).
            **env_kwargs: passed to ``gymnasium.make`` (or to the callable).

        Raises:
            ValueError/TypeError: bad arguments. StateError: the env's state cannot be captured.
        """
        super().__init__()
        fns: list[Callable[[], Any]] | None = None
        if is_env_fns(env):
            if env_kwargs:
                raise TypeError(f"env kwargs {sorted(env_kwargs)} cannot be passed to env_fns (they take none)")
            fns, num_envs = check_env_fns(env, num_envs)
        elif num_envs is None:
            num_envs = 1
        recipe: str | Callable[..., Any] = fns[0] if fns is not None else env  # type: ignore[assignment]
        if not is_int(num_envs) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        try:
            mode = autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode must be one of {[m.value for m in AutoresetMode]}, "
                             f"got {autoreset_mode!r}") from None
        if not isinstance(recover, bool):
            raise TypeError(f"recover must be a bool, got {recover!r}")
        opts = {k: v for k, v in {"timeout": timeout, "context": context, "adapter": adapter, "address": address,
                                  "worker_options": worker_options}.items() if v is not None}
        opts["small_batch_inline"] = small_batch_inline
        if not recover and max_restarts:
            raise ValueError(f"recover=False means max_restarts=0, got max_restarts={max_restarts!r}")
        if recover and max_restarts == 0:
            raise ValueError("recover=True needs max_restarts >= 1 (or None: 3); use recover=False for none")
        opts["max_restarts"] = (3 if max_restarts is None else max_restarts) if recover else 0
        self.num_envs = int(num_envs)
        self.autoreset_mode = mode
        self.recover = recover
        self.copy = bool(copy)
        self._new_local: Callable[[], Any] = lambda: make(recipe, backend="inline", adapter=adapter, **env_kwargs)
        self._from_fns = fns is not None
        # A fresh env for sub-env i, never reset by the vector env: from its own callable with env_fns.
        self._new_sub: Callable[[int], Any] = (
            (lambda i: make(fns[i], backend="inline", adapter=adapter)) if fns is not None else (lambda i: self._new_local()))
        self._plan = make(recipe, backend=backend, n_workers=n_workers, **opts, **env_kwargs)
        try:
            self._local = self._plan if backend == "inline" else self._new_local()
        except BaseException:
            self._plan.close()
            raise
        self._local_used = False  # has the local env been reset or restored yet?
        self.single_observation_space = self._plan.observation_space
        self.single_action_space = self._plan.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        gym_env = self._local.gym_env
        self.metadata = dict(getattr(gym_env, "metadata", {}))
        self.metadata["autoreset_mode"] = mode
        self.render_mode = getattr(gym_env, "render_mode", None)
        self.spec = self._plan.spec
        n = self.num_envs
        self._states: list[State | None] = [None] * n
        self._started = np.zeros(n, dtype=np.bool_)  # has a state (reset or set)
        self._all = np.arange(n)
        self._env_obs: list[Any] = [None] * n
        self._observations = empty_batch(self.single_observation_space, n, np.zeros)  # copy=False
        self._autoreset = np.zeros(n, dtype=np.bool_)
        self._pending: Step | None = None  # step_async's step, until step_wait
        self._groups: list[Step] = []  # send's steps in flight
        self._in_flight = np.zeros(n, dtype=np.bool_)  # sent, not yet done
        self._ready: OrderedDict[int, tuple] = OrderedDict()  # done, not yet returned by recv
        self._action_spaces: dict[int, Any] = {n: self.action_space}
        self._init_attrs()
        self._last_seed: int | None = None  # the seed of _reset_one's reset (None: the sub-env's own RNG went on)

    # ------------------------------------------------------------------ properties
    @property
    def plan_env(self) -> Any:
        """The planning env the sub-envs are stepped by (``pids``, ``stats``, ``step_batch`` ...)."""
        return self._plan

    @property
    def n_workers(self) -> int:
        return self._plan.n_workers

    @property
    def autoreset_envs(self) -> np.ndarray:
        """Which sub-envs ended their episode on the last step (a copy); in NEXT_STEP they reset on the next."""
        return self._autoreset.copy()

    @property
    def stats(self) -> dict:
        """The planning env's telemetry (items, batches, restarts, timeouts ...)."""
        return self._plan.stats

    # ------------------------------------------------------------------ checks
    def _check_open(self) -> None:
        if self.closed:
            raise ClosedError("this vector env was closed; create a new one with plan_parallel.make_vec")

    def _check_started(self, ids: Sequence[int] | np.ndarray) -> None:
        if self._started.all():
            return
        missing = [int(i) for i in ids if not self._started[i]]
        if missing:
            raise StateError(f"sub-envs {missing} have no state yet: call reset(seed=...) first")

    def _check_idle(self, what: str) -> None:
        if self._pending is not None:
            raise AlreadyPendingCallError(f"{what}: a step_async is pending; call step_wait() first "
                                          "(or reset(), which drops it)", "step")
        if self._in_flight.any() or self._ready:
            busy = sorted(set(np.flatnonzero(self._in_flight).tolist()) | set(self._ready))
            raise AlreadyPendingCallError(f"{what}: sub-envs {busy} were sent and not yet received; "
                                          "call recv() first (or reset(), which drops them)", "send")

    def _check_not_disabled_done(self, ids: np.ndarray) -> None:
        if self.autoreset_mode == AutoresetMode.DISABLED:
            done = [int(i) for i in ids if self._autoreset[i]]
            if done:
                raise ValueError(f"sub-envs {done} ended their episode and autoreset_mode is DISABLED: reset them "
                                 "first with reset(options={'reset_mask': mask})")

    # ------------------------------------------------------------------ resets
    def _reset_one(self, state: State | None, seed: int | None, options: dict | None, i: int = 0) -> tuple:
        """Reset sub-env ``i`` whose current state is ``state`` (None: never reset). Returns ``(state, obs, info)``.

        The local env is restored to ``state`` first, so a reset with ``seed=None``
        continues the sub-env's own RNG (and every other piece of its state that
        outlives a reset), as a separate env per sub-env would.
        """
        local = self._local
        if state is not None:
            local.set_state(state)
        elif seed is None and (self._local_used or (i and self._from_fns)):
            # A never-reset sub-env reset without a seed: a fresh env, as SyncVectorEnv's would be.
            with self._new_sub(i) as fresh:
                out = fresh.reset(seed=None, options=options)
                self._last_seed = fresh.gym_env.np_random_seed
                return out
        self._local_used = True
        out = local.reset(seed=seed, options=options)
        self._last_seed = seed if state is not None else local.gym_env.np_random_seed
        return out

    def _commit(self, i: int, state: State, reset: bool) -> None:
        self._states[i] = state
        self._env_obs[i] = state.obs
        self._started[i] = True
        self._record_frame(i, state, reset)

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
            out = empty_batch(space, self.num_envs)
            if len(step.ids):
                out[step.ids] = batch.observations
        reset = list(step.resets)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and len(step.ids):
            reset += step.ids[batch.terminations | batch.truncations].tolist()
        for i in reset:
            out[i] = self._env_obs[i]
        return out

    def _drop_in_flight(self) -> None:
        """Forget a pending step and every sent or unreturned sub-env: their results are never returned."""
        self._pending = None
        self._groups = []
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
            ClosedError. The env's own exception from its reset (no sub-env changed).
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
            state, _, info = self._reset_one(self._states[i], seeds[i], opts, i)
            seed_used[i] = self._last_seed
            done.append((i, state))
            infos = self._add_info(infos, info, i)
        for i, state in done:
            self._commit(i, state, True)
            self._record_seed(i, seed_used[i])
            self._autoreset[i] = False
        return self._batched_obs(), infos

    # ------------------------------------------------------------------ states
    def get_states(self, indices: Any = None) -> list[State]:
        """The current state of each sub-env in ``indices`` (None: all), usable by the planning API.

        Raises:
            StateError: a sub-env was never reset. TypeError/ValueError: bad indices.
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
        states = check_states(states, self._local.kind, len(ids), None)
        for j, s in enumerate(states):
            if s.obs is None:
                raise StateError(f"states[{j}] carries no observation: use states from get_states, reset, "
                                 "step_batch or rollout_batch")
        flags = check_autoreset_flags(autoreset, len(ids))
        if self.autoreset_mode == AutoresetMode.SAME_STEP and flags.any():
            raise ValueError("autoreset=True has no meaning in SAME_STEP mode (ended sub-envs reset at once)")
        for j, i in enumerate(ids.tolist()):
            self._commit(i, states[j], True)
            self._autoreset[i] = flags[j]
        if not self.copy:
            concatenate(self.single_observation_space, self._env_obs, self._observations)

    # ------------------------------------------------------------------ closing
    def close_extras(self, **kwargs: Any) -> None:
        """Drop what is in flight and close the planning env (and this process's env)."""
        self._drop_in_flight()
        try:
            self._plan.close()
        finally:
            if self._local is not self._plan:
                self._local.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_local"):
            self.close()

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else "env"
        return (f"PlanVectorEnv({name}, num_envs={self.num_envs}, backend={self._plan.backend!r}, "
                f"n_workers={self.n_workers}, autoreset_mode={self.autoreset_mode.value!r}"
                f"{', closed' if self.closed else ''})")
