"""The attribute side of :class:`~plan_parallel.vector.PlanVectorEnv`: ``call``, ``get_attr``, ``set_attr``, ``render``.

A sub-env is a state, not an env object, so its attributes are read from an env
in this process restored to that state. What the state does not hold is kept
here, per sub-env, where gymnasium's ``SyncVectorEnv`` keeps it on each env:

- ``np_random_seed``: the seed each sub-env was last reset with;
- attributes ``set_attr`` creates (names the env does not have);
- with ``render_mode="rgb_array_list"``, each sub-env's frames since its last
  ``render`` (one per reset and per step, as gymnasium's ``RenderCollection``).

A sub-env never reset is read from a fresh env (as SyncVectorEnv's are before
their first reset; with ``env_fns``, from its own callable); what the call
changes there is not kept.
"""
from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.wrappers import RenderCollection

from plan_parallel.errors import ClosedError, StateError
from plan_parallel.state import State, get_state
from plan_parallel.vector_inputs import check_indices

__all__ = ["VectorAttrs", "same_value"]


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` as one bool, for arrays too; False when they cannot be compared."""
    if a is b:
        return True
    try:
        return bool(np.array_equal(a, b)) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else bool(a == b)
    except Exception:
        return False


def _render_collection(env: Any) -> RenderCollection | None:
    while env is not None:
        if isinstance(env, RenderCollection):
            return env
        env = getattr(env, "env", None)
    return None


class VectorAttrs:
    """Mixin of :class:`~plan_parallel.vector.PlanVectorEnv`: per-sub-env attributes (see the module docstring)."""

    num_envs: int
    closed: bool
    _local: Any
    _local_used: bool
    _states: list[State | None]
    _started: np.ndarray
    _new_sub: Callable[[int], Any]

    def _init_attrs(self) -> None:
        n = self.num_envs
        self._side: list[dict[str, Any]] = [{} for _ in range(n)]  # per sub-env, outside the state
        self._created: set[str] = set()  # the names set_attr created (the env has no such attribute)
        self._collector = _render_collection(self._local.gym_env)
        self._frames: list[list[Any]] | None = [[] for _ in range(n)] if self._collector is not None else None

    def _record_frame(self, i: int, state: State, reset: bool) -> None:
        """With ``rgb_array_list``: the frame of sub-env ``i`` in ``state`` joins its list (a reset clears it first)."""
        if self._frames is None or self._collector is None:
            return
        if reset and self._collector.reset_clean:
            self._frames[i] = []
        self._local.set_state(state)
        self._local_used = True
        self._frames[i].append(self._collector.env.render())

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
        if name == "render" and self._frames is not None:
            frames = self._frames[i]
            if self._collector is not None and self._collector.pop_frames:
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
            AttributeError: no such attribute. The method's own exception.
        """
        out = []
        for i in self._attr_ids(indices):
            state = self._states[i]
            if state is None:
                with self._new_sub(i) as fresh:
                    out.append(self._read(i, fresh.gym_env, name, args, kwargs))
                continue
            self._local.set_state(state)
            self._local_used = True
            out.append(self._read(i, self._local.gym_env, name, args, kwargs))
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

        An attribute that is part of the env's state (e.g. CartPole's ``state``)
        is captured into the sub-env's state, which the workers restore; the
        sub-env's observation is unchanged until its next step. A name the env
        does not have is created, kept per sub-env in this process (the env's
        code does not read it). A setting outside the state (``force_mag``,
        ``gravity``) would reach only this process's env, so it is refused.

        Raises:
            ValueError: wrong number of values, or ``name`` is not part of the
                env's state (no sub-env changed). StateError: a state attribute
                of a sub-env never reset, or an env whose state cannot be captured.
        """
        ids = self._attr_ids(indices)
        if not isinstance(values, (list, tuple)):
            values = [values] * len(ids)
        if len(values) != len(ids):
            raise ValueError("Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {len(ids)} environments.")
        self._check_idle("set_attr")
        env = self._local.gym_env
        if name in self._created or not self._has_attr(name):
            self._created.add(name)
            for i, value in zip(ids, values):
                self._side[i][name] = value
            return
        missing = [i for i in ids if not self._started[i]]
        if missing:
            raise StateError(f"set_attr({name!r}): sub-envs {missing} have no state yet to hold it: call reset first "
                             "(a setting outside the env's state, such as gravity, cannot be set per sub-env: pass it "
                             "to make_vec as an env kwarg)")
        new: list[tuple[int, State]] = []
        for i, value in zip(ids, values):
            old_state = self._states[i]
            assert old_state is not None
            self._local.set_state(old_state)
            self._local_used = True
            old = env.get_wrapper_attr(name)
            env.set_wrapper_attr(name, value)
            s = get_state(env)
            state = State(s.kind, s.sim, s.extra, s.rng, s.wrappers, old_state.obs)
            if not same_value(old, value):
                env.set_wrapper_attr(name, old)  # is the value in the state, or only on this env?
                self._local.set_state(state)
                if not same_value(env.get_wrapper_attr(name), value):
                    self._local.set_state(old_state)
                    raise ValueError(f"set_attr({name!r}): this attribute is not part of the env's state, so the "
                                     "workers would not see it (no sub-env changed); pass it to make_vec as an "
                                     "env kwarg instead")
            new.append((i, state))
        for i, state in new:
            self._states[i] = state

    def _has_attr(self, name: str) -> bool:
        try:
            self._local.gym_env.get_wrapper_attr(name)
        except AttributeError:
            return False
        return True
