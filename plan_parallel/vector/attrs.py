"""The attribute side of :class:`~plan_parallel.vector.PlanVectorEnv`: ``call``, ``get_attr``, ``set_attr``, ``render``.

A sub-env is a state, not an env object, so its attributes are read from an env
in this process (its recipe group's, see :mod:`plan_parallel.vector.groups`)
restored to that state. What the state does not hold is kept where gymnasium's
``SyncVectorEnv`` keeps it on each env:

- settings outside the state (``gravity``): in the sub-env's recipe; ``set_attr``
  moves the sub-env to the recipe group with that setting, whose envs (its
  workers' and this process's) have it;
- ``np_random_seed``: here, the seed each sub-env was last reset with;
- attributes ``set_attr`` creates (names the env does not have): here, per sub-env;
- with ``render_mode="rgb_array_list"``, each sub-env's frames since its last
  ``render`` (one per reset and per step, as gymnasium's ``RenderCollection``): here.

A sub-env never reset is read from a fresh env (as SyncVectorEnv's are before
their first reset; with ``env_fns``, from its own callable); what the call
changes there is not kept.
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np

from plan_parallel.errors import ClosedError, StateError
from plan_parallel.state import State, get_state
from plan_parallel.vector.groups import RecipeGroups, same_value
from plan_parallel.vector.inputs import check_indices

__all__ = ["VectorAttrs", "has_attr"]


def has_attr(env: Any, name: str) -> bool:
    """Does ``env`` (or one of its wrappers) have attribute ``name``?"""
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


class VectorAttrs:
    """Mixin of :class:`~plan_parallel.vector.PlanVectorEnv`: per-sub-env attributes (see the module docstring)."""

    num_envs: int
    closed: bool
    _recipes: RecipeGroups
    _states: list[State | None]
    _started: np.ndarray

    def _init_attrs(self) -> None:
        n = self.num_envs
        self._side: list[dict[str, Any]] = [{} for _ in range(n)]  # per sub-env, outside the state
        self._created: set[str] = set()  # the names set_attr created (the env has no such attribute)
        collects = self._recipes.of(0).collector is not None
        self._frames: list[list[Any]] | None = [[] for _ in range(n)] if collects else None

    def _record_frame(self, i: int, state: State, reset: bool) -> None:
        """With ``rgb_array_list``: the frame of sub-env ``i`` in ``state`` joins its list (a reset clears it first)."""
        if self._frames is None:  # no rgb_array_list rendering: nothing to record
            return
        group = self._recipes.of(i)
        collector = group.collector
        if collector is None:
            return
        if reset and collector.reset_clean:
            self._frames[i] = []
        group.local.set_state(state)
        group.local_used = True
        self._frames[i].append(collector.env.render())

    def _record_seed(self, i: int, seed: int | None) -> None:
        if seed is not None:
            self._side[i]["np_random_seed"] = int(seed)

    @property
    def np_random_seed(self) -> tuple[Any, ...]:
        """The seed each sub-env was last reset with (a tuple, as SyncVectorEnv's)."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[Any, ...]:
        """Each sub-env's random generator (copies: changing one changes no sub-env)."""
        return self.get_attr("np_random")

    def _attr_ids(self, indices: Any) -> list[int]:
        if self.closed:
            raise ClosedError("this vector env was closed; create a new one with plan_parallel.make_vec")
        return [int(i) for i in check_indices(indices, self.num_envs)]

    def _read(self, i: int, env: Any, name: str, args: tuple, kwargs: dict) -> Any:
        if name in self._side[i]:
            return self._side[i][name]
        collector = self._recipes.of(i).collector
        if name == "render" and self._frames is not None:
            frames = self._frames[i]
            if collector is not None and collector.pop_frames:
                self._frames[i] = []
            return frames
        attr = env.get_wrapper_attr(name)
        if callable(attr):
            return attr(*args, **kwargs)
        # Mutable values are copied: the env in this process is restored to another sub-env's state next.
        return deepcopy(attr) if isinstance(attr, (np.ndarray, np.random.Generator, list, dict, set)) else attr

    def call(self, name: str, *args: Any, indices: Any = None, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of each sub-env in ``indices`` (None: all).

        Runs on an env in this process restored to the sub-env's current state
        (e.g. ``call("render")``). What the call changes is not kept: the sub-env's
        state stays as it was (use :meth:`set_attr` or :meth:`set_states`).

        Raises:
            AttributeError: no such attribute.
            Exception: whatever the method raises, with its own type.
        """
        out = []
        for i in self._attr_ids(indices):
            state = self._states[i]
            if state is None:
                with self._recipes.new_sub(i) as fresh:
                    out.append(self._read(i, fresh.gym_env, name, args, kwargs))
                continue
            group = self._recipes.of(i)
            group.local.set_state(state)
            group.local_used = True
            out.append(self._read(i, group.local.gym_env, name, args, kwargs))
        return tuple(out)

    def get_attr(self, name: str, indices: Any = None) -> tuple[Any, ...]:
        """Attribute ``name`` of each sub-env in ``indices`` (as SyncVectorEnv: a method is called)."""
        return self.call(name, indices=indices)

    def render(self) -> tuple[Any, ...]:
        """Each sub-env's ``render()``, from an env restored to its state (see :meth:`call`)."""
        return self.call("render")

    def _check_idle(self, what: str) -> None:
        raise NotImplementedError

    def set_attr(self, name: str, values: Any, indices: Any = None) -> None:
        """Set attribute ``name`` of the sub-envs in ``indices`` (a list/tuple: one value each; else the same value).

        As SyncVectorEnv's ``set_wrapper_attr`` on each sub-env's env, by what the attribute is:

        - part of the env's state (e.g. CartPole's ``state``): captured into the
          sub-env's state, which the workers restore (the sub-env must have been
          reset); its observation is unchanged until its next step;
        - a setting outside the state (``gravity``, ``force_mag``): the sub-env
          moves, keeping its state, to the recipe group of its env with that
          setting, made if needed (its own workers: see
          :mod:`plan_parallel.vector.groups`); groups left without a sub-env close;
        - a name the env does not have: where ``set_wrapper_attr`` puts it. On an env
          without wrappers that is the env itself, whose code may read it: then as
          above (in the state, or a setting outside it). On a wrapped env it is the
          outermost wrapper, which no env code reads: kept per sub-env in this process.

        Raises:
            ValueError: wrong number of values, or a setting that changes the env's spaces.
            StateError: a state attribute of a sub-env never reset; a state the env
                with the new setting cannot restore. In every case no sub-env changed.
            AlreadyPendingCallError: a step or a send is pending.
        """
        ids = self._attr_ids(indices)
        if not isinstance(values, (list, tuple)):
            values = [values] * len(ids)
        if len(values) != len(ids):
            raise ValueError("Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {len(ids)} environments.")
        self._check_idle("set_attr")
        created: list[tuple[int, Any]] = []
        new_states: list[tuple[int, State]] = []
        moves: dict[int, tuple[str, Any]] = {}
        for i, value in zip(ids, values):
            env = self._recipes.of(i).local.gym_env
            if name in self._created or (env is not env.unwrapped and not has_attr(env, name)):
                created.append((i, value))
                continue
            in_state, state = self._try_in_state(i, name, value)
            if state is not None:
                new_states.append((i, state))
            elif not in_state:
                moves[i] = (name, value)
        if moves:
            self._recipes.move(moves, self._states)
        for i, value in created:
            self._created.add(name)
            self._side[i][name] = value
        for i, state in new_states:
            self._states[i] = state

    def _try_in_state(self, i: int, name: str, value: Any) -> tuple[bool, State | None]:
        """Set ``name`` to ``value`` on sub-env ``i``'s state, if the state holds it (nothing is committed).

        Returns:
            ``(True, new state)`` when the state holds the attribute; ``(True, None)``
            when it has that value already; ``(False, None)`` when it is a setting
            outside the state (this process's env is left as it was).

        Raises:
            StateError: the state holds it but sub-env ``i`` was never reset.
        """
        group = self._recipes.of(i)
        local = group.local
        state = self._states[i]
        if state is None:  # never reset: any state of its env tells where the attribute lives
            try:
                probe = local.get_state()
            except StateError:
                probe = local.reset()[0]
        else:
            probe = state
        local.set_state(probe)
        group.local_used = True
        env = local.gym_env
        had = has_attr(env, name)  # if not, the env is unwrapped (set_attr): set_wrapper_attr puts it on the env
        old = env.get_wrapper_attr(name) if had else None
        if had and same_value(old, value):
            return True, None
        env.set_wrapper_attr(name, value)
        s = get_state(env)
        new = State(s.kind, s.sim, s.extra, s.rng, s.wrappers, probe.obs)
        if had:  # is the value in the state, or only on this env?
            env.set_wrapper_attr(name, old)
        else:
            delattr(env, name)
        local.set_state(new)
        if not (has_attr(env, name) and same_value(env.get_wrapper_attr(name), value)):
            local.set_state(probe)
            return False, None
        if state is None:
            raise StateError(f"set_attr({name!r}): sub-env {i} has no state yet to hold it (the attribute is part "
                             "of the env's state): call reset first (no sub-env changed)")
        return True, new
