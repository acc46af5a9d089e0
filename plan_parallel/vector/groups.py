"""Recipe groups of :class:`~plan_parallel.vector.PlanVectorEnv`: one planning env per distinct env recipe.

A *recipe* is how a sub-env's env is built: its source (the env id with its
kwargs, the env callable, or its own callable of ``env_fns``) and attribute
overrides set on the env once built (what ``set_attr`` sets outside the env's
state, such as CartPole's ``gravity``, set as SyncVectorEnv sets it:
``env.set_wrapper_attr``). Sub-envs whose envs are the same env share a
*group*: one planning env steps them and one env in this process resets them
and reads their attributes.

- At construction every sub-env of ``make_vec(env, num_envs)`` is one recipe;
  ``env_fns`` callables whose envs are the same env (same class and spec, see
  :mod:`plan_parallel.vector.fns`) share one, others get their own.
- ``set_attr`` of a setting outside the state moves the sub-env, with its
  state, to the group of its recipe plus that override (an override equal to
  the source's own value is dropped, so setting one value back on every
  sub-env ends with one group).
- A group is made when its recipe first appears and closed as soon as no
  sub-env uses it any more.

Cost: each group is a planning env of its own, so it has its own ``n_workers``
workers (process and ray backends) and its own env in this process. Sub-envs of
one recipe, the common case, are one group: no extra workers, and a step is one
``step_batch`` as before. A step of several groups is one ``step_batch`` per
group, gathered back in sub-env order (:class:`GatheredStep`).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array
from gymnasium.wrappers import RenderCollection

from plan_parallel.batch.batch_env import batch_engine_of
from plan_parallel.build import make
from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.errors import StateError, WorkerTimeoutError
from plan_parallel.factory import EnvFactory
from plan_parallel.inputs import check_kind, check_states
from plan_parallel.results import StepBatch, step_batch_of
from plan_parallel.state import State
from plan_parallel.vector.inputs import is_array_space

__all__ = ["ABSENT", "Done", "GatheredStep", "Group", "Recipe", "RecipeGroups", "close_each", "render_collection",
           "same_overrides", "same_value", "wait_done"]


ABSENT = object()  # RecipeGroups.default of an attribute a new env does not have


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` as one bool, for arrays too; False when they cannot be compared."""
    if a is b:
        return True
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else bool(a == b)
    except Exception:
        return False


def same_overrides(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Are two override dicts the same settings (arrays compared by value)?"""
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def render_collection(env: Any) -> RenderCollection | None:
    """The ``RenderCollection`` wrapper of ``env`` (``render_mode="rgb_array_list"``), or None."""
    while env is not None:
        if isinstance(env, RenderCollection):
            return env
        env = getattr(env, "env", None)
    return None


class Done:
    """A finished future (the inline backend runs a batch when it is submitted)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        return self.value


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


class Recipe:
    """A picklable env builder: ``source()``, then each override set with ``set_wrapper_attr`` (as SyncVectorEnv.set_attr).

    Shipped to the workers inside the planning env's factory (cloudpickled with
    its source, so lambdas work); every env a group builds, in a worker or here,
    gets the same overrides.
    """

    def __init__(self, source: Callable[[], Any], overrides: dict[str, Any]) -> None:
        self.source = source
        self.overrides = dict(overrides)

    def __call__(self) -> Any:
        env = self.source()
        for name, value in self.overrides.items():
            env.set_wrapper_attr(name, value)
        return env

    def __repr__(self) -> str:
        return f"Recipe({self.source!r}, overrides={self.overrides!r})"


class Group:
    """The envs of one recipe: ``plan`` steps its sub-envs; ``local``, in this process, resets and reads them.

    ``base`` is the sub-env whose source built them; ``local_used`` tells whether
    ``local`` was reset or restored yet (before that, it is as fresh as a new env).
    """

    def __init__(self, base: int, overrides: dict[str, Any], plan: Any, local: PlanEnv) -> None:
        self.base = base
        self.overrides = overrides
        self.plan = plan
        self.local = local
        self.local_used = False
        self.collector = render_collection(local.gym_env)

    def step_here(self, n: int, run: Callable[[], Any]) -> tuple[bool, Any, tuple | None]:
        """``run()``, a step of ``n`` sub-envs in this process, if the step runs here (always on the inline
        backend; where the tuner places it on the others): ``(True, its value, None)``; else
        ``(False, None, the placement decided)``, for :meth:`submit`."""
        if isinstance(self.plan, PlanEnv):
            return True, run(), None
        engine = batch_engine_of(self.plan)
        decided = engine.place_step(n)
        if decided[1] == "here":
            return True, engine.run_placed_here(decided, n, run), None
        return False, None, decided

    def submit(self, actions: Any, states: Sequence[Any], wait: bool = False,
               here: Callable[..., tuple] | None = None, decided: tuple | None = None,
               ids: np.ndarray | None = None) -> Any:
        """A future of ``plan.step_batch(actions, states)``; the inline backend runs it now, and so
        does ``wait`` (a ``step_batch`` call, which this process may share with the workers).

        ``here(lo, hi, rows=None)`` runs items lo..hi in this process instead of the local env, when they run
        here (their observations made in ``rows`` when given).
        ``decided``: where :meth:`step_here` found the step is placed (not here). ``ids``: the items'
        sub-envs, which the workers keep envs for (see :meth:`BatchEngine.step_batch_checked`).
        """
        # The vector env checked the actions, and its sub-env states were validated when they entered it.
        if isinstance(self.plan, PlanEnv):  # the inline backend: plan is local
            if here is not None:
                return Done(step_batch_of(self.plan.observation_space, here(0, len(states))))
            return Done(engine_of(self.plan).step_batch_checked(actions, states, 1, validated=True))
        engine = batch_engine_of(self.plan)
        if wait:
            return Done(engine.step_batch_checked(actions, states, 1, validated=True, here=here, decided=decided,
                                                  keys=ids))
        return engine.step_batch_checked_async(actions, states, 1, validated=True, here=here, keys=ids)

    def close(self) -> None:
        """Close the planning env and the env in this process."""
        try:
            self.plan.close()
        finally:
            if self.local is not self.plan:
                self.local.close()


class GatheredStep:
    """One step of sub-envs of several groups: each part is ``(positions in the step, that group's future)``.

    ``done()`` when every part is; ``result(timeout)`` waits for every part and
    returns one :class:`StepBatch` in the step's order. A part that failed raises
    its error (a finished part's first, so a part still running cannot hide it
    behind a "not done yet" TimeoutError).
    """

    def __init__(self, parts: list[tuple[np.ndarray, Any]], n: int, space: Any) -> None:
        self.parts = parts
        self.n = n
        self.space = space

    def done(self) -> bool:
        return all(fut.done() for _, fut in self.parts)

    def result(self, timeout: float | None = None) -> StepBatch:
        for _, fut in self.parts:
            if fut.done():
                fut.result(0)  # raises its error if it failed
        deadline = None if timeout is None else time.monotonic() + timeout
        batches = []
        for _, fut in self.parts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            batches.append(fut.result(left))
        n = self.n
        states: list[Any] = [None] * n
        infos: list[Any] = [None] * n
        rewards = np.empty(n, dtype=np.float64)
        terminations = np.empty(n, dtype=np.bool_)
        truncations = np.empty(n, dtype=np.bool_)
        for (pos, _), batch in zip(self.parts, batches):
            for j, p in enumerate(pos.tolist()):
                states[p], infos[p] = batch.states[j], batch.infos[j]
            rewards[pos], terminations[pos], truncations[pos] = batch.rewards, batch.terminations, batch.truncations
        observations: Any
        if is_array_space(self.space):
            observations = np.empty((n, *batches[0].observations.shape[1:]), dtype=batches[0].observations.dtype)
            for (pos, _), batch in zip(self.parts, batches):
                observations[pos] = batch.observations
        else:
            observations = concatenate(self.space, [s.obs for s in states],
                                       create_empty_array(self.space, n))  # type: ignore[arg-type]  # never None
        return StepBatch(states, observations, rewards, terminations, truncations, infos)


class RecipeGroups:
    """Which group each of the N sub-envs is in (see the module docstring).

    Args:
        sources: per sub-env, what builds its env: an env id or a callable
            (the same one for every sub-env of ``make_vec(env, num_envs)``).
        bases: per sub-env, the first sub-env whose source builds the same env
            (its group's envs are built from that one's source).
        env_kwargs: passed to ``gymnasium.make`` (or to the callable).
        plan_options: :func:`plan_parallel.make`'s options (``backend``, ``n_workers``, ...).
        from_fns: the sources are ``env_fns`` (a group's fresh env fits only its base sub-env).

    Raises:
        ValueError/TypeError/StateError: as :func:`plan_parallel.make` (nothing is left open).
        WorkerCrashedError/WorkerTimeoutError: a worker did not build its env (nothing is left open).
        Exception: whatever building the env raises, with its own type (nothing is left open).
    """

    def __init__(self, sources: Sequence[str | Callable[..., Any]], bases: Sequence[int], env_kwargs: dict[str, Any],
                 plan_options: dict[str, Any], from_fns: bool) -> None:
        self.sources = list(sources)
        self.bases = list(bases)
        self.env_kwargs = env_kwargs
        self.plan_options = plan_options
        self.from_fns = from_fns
        self.groups: list[Group] = []
        self.defaults: dict[tuple[int, str], Any] = {}  # a source's own value of an attribute
        members: list[Group] = []
        try:
            for base in self.bases:
                members.append(self.find(base, {}) or self.build(base, {}))
        except BaseException:
            self.close()
            raise
        self.members = members

    # ------------------------------------------------------------------ building
    def recipe(self, i: int, overrides: dict[str, Any]) -> tuple[str | Callable[..., Any], dict[str, Any]]:
        """``(env, env_kwargs)`` for :func:`plan_parallel.make`: sub-env ``i``'s source with ``overrides``."""
        if not overrides:
            return self.sources[i], self.env_kwargs
        return Recipe(EnvFactory(self.sources[i], self.env_kwargs), overrides), {}

    def build(self, base: int, overrides: dict[str, Any]) -> Group:
        """A new group (its planning env and its env here) of ``base``'s source with ``overrides``."""
        env, kwargs = self.recipe(base, overrides)
        plan = make(env, **self.plan_options, **kwargs)
        try:
            local = plan if self.plan_options["backend"] == "inline" else make(
                env, backend="inline", adapter=self.plan_options.get("adapter"), **kwargs)
            group = Group(base, overrides, plan, local)
        except BaseException:
            plan.close()
            raise
        self.groups.append(group)
        return group

    def find(self, base: int, overrides: dict[str, Any]) -> Group | None:
        """The open group of ``base``'s source with exactly ``overrides``, if any."""
        for group in self.groups:
            if group.base == base and same_overrides(group.overrides, overrides):
                return group
        return None

    def new_sub(self, i: int) -> PlanEnv:
        """A fresh env in this process for sub-env ``i`` (from its own source, with its group's overrides)."""
        env, kwargs = self.recipe(i, self.members[i].overrides)
        return make(env, backend="inline", adapter=self.plan_options.get("adapter"), **kwargs)

    # ------------------------------------------------------------------ reading
    def of(self, i: int) -> Group:
        """Sub-env ``i``'s group."""
        return self.members[i]

    def fresh_for(self, i: int) -> bool:
        """Is sub-env ``i``'s group env in this process as a fresh env of sub-env ``i`` would be?"""
        group = self.members[i]
        return not group.local_used and (not self.from_fns or i == group.base)

    def split(self, ids: np.ndarray) -> list[tuple[Group, np.ndarray]]:
        """The sub-envs ``ids`` by group: ``(group, positions in ids)``, groups in order of first appearance."""
        if len(self.groups) == 1:
            return [(self.groups[0], np.arange(len(ids)))]
        by: dict[int, list[int]] = {}
        members = self.members
        for p, i in enumerate(ids.tolist()):
            by.setdefault(id(members[i]), []).append(p)
        return [(members[int(ids[pos[0]])], np.array(pos, dtype=np.int64)) for pos in by.values()]

    def check_states(self, states: Any, ids: np.ndarray) -> Sequence[State]:
        """``states[j]`` checked as a state of sub-env ``ids[j]``'s env (its group's kind).

        Raises:
            TypeError: not a sequence.
            ValueError: not one state per id.
            StateError: a state of another env.
        """
        if len(self.groups) == 1:
            return check_states(states, self.groups[0].local.kind, len(ids), None)
        states = check_states(states, "", len(ids), lambda s: None)  # the sequence only; kinds below
        for j, i in enumerate(ids.tolist()):
            try:
                check_kind(states[j], self.members[i].local.kind)
            except StateError as exc:
                raise StateError(f"states[{j}]: {exc}") from None
        return states

    def default(self, base: int, name: str) -> Any:
        """Attribute ``name`` of an env freshly built from ``base``'s source (read once, then remembered);
        :data:`ABSENT` when it has none."""
        key = (base, name)
        if key not in self.defaults:
            env = EnvFactory(self.sources[base], self.env_kwargs)()
            try:
                self.defaults[key] = env.get_wrapper_attr(name)
            except AttributeError:
                self.defaults[key] = ABSENT
            finally:
                env.close()
        return self.defaults[key]

    # ------------------------------------------------------------------ moving
    def move(self, targets: dict[int, tuple[str, Any]], states: Sequence[State | None]) -> None:
        """Move each sub-env ``i`` of ``targets`` (``i -> (name, value)``) to its recipe plus that override.

        The sub-env keeps ``states[i]``. Groups are made as needed and those left
        without a sub-env are closed. On an error no sub-env moved and the groups
        made here are closed.

        Raises:
            ValueError: the new recipe's env has other spaces than the sub-env's.
            StateError: the new recipe's env cannot restore the sub-env's state.
            Exception: whatever building the new recipe's env raises, with its own type.
        """
        before = list(self.groups)
        placed: dict[int, Group] = {}
        try:
            for i, (name, value) in targets.items():
                old = self.members[i]
                overrides = {**old.overrides, name: deepcopy(value)}
                if same_value(self.default(old.base, name), value):
                    del overrides[name]
                group = self.find(old.base, overrides) or self.build(old.base, overrides)
                for what in ("observation_space", "action_space"):
                    want, got = getattr(old.plan, what), getattr(group.plan, what)
                    if want != got:
                        raise ValueError(f"set_attr({name!r}, {value!r:.100}) on sub-env {i} changes its {what}: "
                                         f"expected {want}, got {got} (no sub-env changed)")
                state = states[i]
                if state is not None:
                    try:
                        group.local.validate(state)
                    except StateError as exc:
                        raise StateError(f"set_attr({name!r}) on sub-env {i}: its state does not fit the env with "
                                         f"{name}={value!r:.100}: {exc} (no sub-env changed)") from exc
                placed[i] = group
        except BaseException:
            self.close_unused(keep=before)
            raise
        for i, group in placed.items():
            self.members[i] = group
        self.close_unused()

    def close_unused(self, keep: Sequence[Group] = ()) -> None:
        """Close every group no sub-env is in (except those in ``keep``)."""
        used = {id(g) for g in self.members} | {id(g) for g in keep}
        unused = [g for g in self.groups if id(g) not in used]
        self.groups = [g for g in self.groups if id(g) in used]
        for group in unused:
            group.close()

    def close(self) -> None:
        """Close every group (each is tried; the first error raises after all were)."""
        groups, self.groups = self.groups, []
        close_each(groups)


def close_each(closables: Sequence[Any]) -> None:
    """``close()`` each of ``closables`` (None entries skipped); the first error raises after all were tried."""
    error: BaseException | None = None
    for obj in closables:
        if obj is None:
            continue
        try:
            obj.close()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
