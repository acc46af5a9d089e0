"""The adapter protocol: capturing and restoring one env instance's complete state.

A :class:`State` (:mod:`plan_parallel.state.state_value`) is what an adapter
captures and restores.

An :class:`Adapter` is bound to one env instance and knows how to capture and
restore that env's state. One adapter class exists per env family
and the fallbacks after them (:mod:`plan_parallel.state.families`); :func:`register_adapter` adds more.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from plan_parallel.errors import StateError
from plan_parallel.state.identity import configuration, kind_mismatch
from plan_parallel.state.own_rng import own_generator_error
from plan_parallel.state.state_value import State, freeze
from plan_parallel.state.wrappers import WrapperStack, direct_step

__all__ = [
    "Adapter",
    "State",
    "adapter_class_for",
    "bind",
    "get_rng_state",
    "register_adapter",
    "same_rng",
    "set_rng_state",
]


def get_rng_state(generator: np.random.Generator) -> dict:
    """The bit-generator state of ``generator`` (a fresh dict of Python ints; any array in it read-only)."""
    return freeze(dict(generator.bit_generator.state))


def set_rng_state(generator: np.random.Generator, state: dict) -> None:
    """Restore a bit-generator state captured by :func:`get_rng_state`."""
    generator.bit_generator.state = state


def same_rng(a: dict | None, b: dict | None) -> bool:
    """Whether two RNG states are one value: the same object, or equal dicts.

    Setting a PCG64 state takes ~3.9 us, comparing two ~0.4: a batch whose states came from several
    chunks (or a worker's table and a chunk) carries equal RNG dicts that are not one object. A dict
    with an array inside (MT19937's key) compares as not equal: it is set again.
    """
    if a is b:
        return True
    if a is None or b is None:
        return False
    try:
        return bool(a == b)
    except ValueError:
        return False


class Adapter:
    """Captures and restores one env instance's complete state.

    Subclasses implement :meth:`get_sim` / :meth:`set_sim` for the simulator part;
    this base class adds the env's RNG and the wrapper stack, and checks that a
    state belongs to this env before restoring it. An adapter that needs to see
    every reset and step (action replay) overrides :meth:`reset` and :meth:`make_step`.

    Class attributes:
        name: the family name, the first part of :attr:`State.kind` (whose last part is the env's
            configuration: see :mod:`plan_parallel.state.identity`).
        step_draws_rng: False when the family's ``step`` never draws from
            ``np_random`` (then the RNG is carried over from the restored state
            instead of being read back after every step, a 1-2 us saving).
        includes_wrappers: True when the adapter's state already re-derives the
            wrappers' state (action replay), so no wrapper walk is done.
        reseedable: False when :meth:`reseed` cannot be represented in a state
            (action replay re-derives the RNG from the reset seed). An instance is not
            reseedable either when the base :meth:`reseed` cannot reach the env's randomness:
            the env holds a generator of its own besides ``np_random``.
    """

    name: ClassVar[str] = "base"
    step_draws_rng: ClassVar[bool] = True
    includes_wrappers: ClassVar[bool] = False
    reseedable: bool = True

    def __init__(self, env: Any) -> None:
        self.env = env
        self.u = env.unwrapped
        self.wrappers = WrapperStack(env) if not self.includes_wrappers else WrapperStack.empty()
        self.kind = f"{self.name}:{type(self.u).__name__}" + (
            "|" + ",".join(self.wrappers.names) if self.wrappers.names else ""
        ) + configuration(env)
        self._draws = self.step_draws_rng or self.wrappers.draws_rng  # a wrapper may draw (StickyAction)
        if self.reseedable and type(self).reseed is Adapter.reseed and own_generator_error(self.u) is not None:
            self.reseedable = False  # a seed could not act (see plan_parallel.state.own_rng)
        # The rng value the env's np_random is known to hold (identity-tracked), or None.
        self._rng_known: dict | None = None
        # A step that skips the observation and info, for the steps of a dt whose observation no one
        # reads (see make_quiet_step); set by bind().
        self.quiet_step: Callable[[Any], tuple] | None = None
        # What the states this adapter captured or validated carry, so that they are not validated again
        # (see validate_each): a weak reference, which no later adapter can be, nor keeps this one alive.
        self.checker = weakref.ref(self)

    # --- to implement per family ---------------------------------------------------
    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        """Whether this adapter can capture ``unwrapped`` faithfully."""
        return False

    def get_sim(self) -> tuple[Any, Any]:
        """Return ``(sim, extra)``: the simulator state and hidden fields, as copies."""
        raise NotImplementedError

    def set_sim(self, sim: Any, extra: Any) -> None:
        """Restore what :meth:`get_sim` returned. Must not keep references the env mutates."""
        raise NotImplementedError

    def check_sim(self, sim: Any) -> str | None:
        """Why ``sim`` cannot belong to this env (None if it looks right). Cheap."""
        return None

    def row_extra(self) -> str | None:
        """Hook: ``"none"``, ``"count"`` or ``"sticky"`` when this env's states fit a fixed row (the lane's row
        layout, :mod:`plan_parallel.wire.lane`): a float64 simulator array or a bytes form of one length, an
        ``extra`` that is None (``"none"``), None or a plain int >= 0 (``"count"``), or a (plain int, float) pair
        (``"sticky"``), and a step that draws nothing from the RNG unless :meth:`row_rng`; None (the default) when
        they do not (the lane then sends the states pickled)."""
        return None

    def row_rng(self) -> bool:
        """Hook: whether a row holds its state's RNG (a PCG64 state, as words), for a step that draws from it."""
        return False

    def check_extra(self, extra: Any) -> str | None:
        """Why ``extra`` cannot belong to this env (None if it looks right). Cheap.

        The base class's :meth:`get_sim` keeps no hidden fields: ``extra`` is None.
        """
        return None if extra is None else f"expected extra None (this env keeps no hidden fields), got {extra!r:.200}"

    def use_factory(self, factory: Callable[[], Any]) -> None:
        """Hook: an adapter that keeps more envs than the one it is bound to builds them with ``factory``."""

    def close(self) -> None:
        """Close the envs this adapter built (not the one it is bound to)."""

    def forget_rng(self) -> None:
        """Trust no RNG value known from the last restore or capture: the next capture reads it back (the env
        may have been stepped or reset without this adapter)."""
        self._rng_known = None

    # --- hooks for adapters that must see resets and steps ---------------------------
    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        """Reset the env; returns ``(obs, info)``."""
        self._rng_known = None
        out = self.env.reset(seed=seed, options=options)
        self.wrappers.after_reset()
        return out

    def make_step(self) -> Callable[[Any], tuple]:
        """The function that steps the env once: the wrapped env's ``step`` (see :func:`direct_step`)."""
        return direct_step(self.env)

    def make_quiet_step(self) -> Callable[[Any], tuple] | None:
        """Hook: a step equal to :meth:`make_step`'s but for the observation and info it skips
        (``(None, reward, terminated, truncated, None)``), or None (the default: the family has none).

        The loops take it for every step of an item's ``dt`` but the last, whose
        observation is returned, and call :meth:`observe` when one ends the
        episode early. Only for a family whose observation is a read of the
        simulator (no side effect) under wrappers that never read it.
        """
        return None

    def observe(self) -> tuple[Any, dict]:
        """The unwrapped env's observation and info now (after :attr:`quiet_step` ended an episode)."""
        raise NotImplementedError(f"{type(self).__name__} has no quiet step")

    def observation_rows(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        """Hook: the dtype and shape of the observation :meth:`observe_into` writes into a row of the
        caller's array (an item's observation made there, not copied there), or None (the default)."""
        return None

    def observe_into(self, row: np.ndarray) -> dict:
        """Hook: write the unwrapped env's observation now into ``row`` (see :meth:`observation_rows`); its info."""
        raise NotImplementedError(f"{type(self).__name__} writes no observation rows")

    # --- the protocol ------------------------------------------------------------------
    def _read_rng(self) -> dict | None:
        gen = getattr(self.u, "_np_random", None)
        if gen is None:
            return None
        return freeze(gen.bit_generator.state)

    def capture(self, prev: State | None = None, obs: Any = None) -> State:
        """The env's current state, keeping ``obs`` with it.

        ``prev`` is accepted for adapters that can share structure with the state
        the env was restored from; the base class does not need it. When the
        family's step never draws from the RNG, the RNG value last restored or
        read is reused instead of being read back (it cannot have changed).
        """
        sim, extra = self.get_sim()
        rng = self._rng_known
        if rng is None or self._draws:
            rng = self._read_rng()
            self._rng_known = rng
        return State.captured(self.kind, sim, extra, rng, self.wrappers.get(), obs, self.checker)

    def compile(self) -> None:
        """Install a faster :meth:`capture` and :meth:`restore` for this instance (called once by :func:`bind`).

        When the family's step never draws from the RNG, the RNG value is the
        one last restored or read, so capture is the simulator, the wrappers and
        one object; this closure skips the checks the general method makes.
        Restore takes the general method only for a state whose RNG the env does
        not hold already.
        """
        if self._draws:
            return
        if type(self).restore is Adapter.restore:
            self._compile_restore()
        if type(self).capture is not Adapter.capture:
            return
        get_sim, wget, kind, general, checker = self.get_sim, self.wrappers.get, self.kind, self.capture, self.checker

        def capture(prev: State | None = None, obs: Any = None) -> State:
            rng = self._rng_known
            if rng is None:
                return general(prev, obs)
            sim, extra = get_sim()
            return State.captured(kind, sim, extra, rng, wget(), obs, checker)

        self.capture = capture  # type: ignore[method-assign]

    def _compile_restore(self) -> None:
        """:meth:`restore` for an env whose step never draws from its RNG: a state with the RNG value
        the env holds (or none) sets the simulator and the wrappers only."""
        general, set_sim, wrappers = self.restore, self.set_sim, self.wrappers

        def restore(state: State) -> None:
            rng = state.rng
            if rng is not None and rng is not self._rng_known and not same_rng(rng, self._rng_known):
                general(state)
                return
            set_sim(state.sim, state.extra)
            self._rng_known = rng
            try:
                wrappers.set(state.wrappers)
            except Exception as exc:
                raise self._wrappers_misfit(state, exc) from exc

        self.restore = restore  # type: ignore[method-assign]

    def reseed(self, seed: int) -> None:
        """Reseed the env's ``np_random`` from ``seed``, keeping the rest of the restored state.

        The generator gets the stream ``env.reset(seed=seed)`` would give it
        (``PCG64(seed)``), so the same (state, action, seed) always samples the
        same outcome and different seeds sample independent ones. Called after
        :meth:`restore`; the next :meth:`capture` records the reseeded RNG.
        Only ``np_random`` is reseeded: a batch with seeds calls :meth:`check_reseed` first.
        """
        fresh = np.random.PCG64(seed)
        gen = getattr(self.u, "_np_random", None)
        if gen is not None and type(gen.bit_generator) is np.random.PCG64:
            gen.bit_generator.state = fresh.state
        else:  # never seeded, or another bit generator: a new PCG64 generator
            self.u._np_random = np.random.Generator(fresh)
        self._rng_known = None  # capture reads the RNG back; restore sets it again

    def check_reseed(self) -> None:
        """Check that :meth:`reseed` reaches the env's randomness, as restored for a batch's first seeded item
        (a scan of the env's attributes, ~3.5 us: once a batch, not once an item).

        Raises:
            StateError: the env draws from a generator of its own (made after the env was
                bound, e.g. in ``reset``), which a seed would not reach.
        """
        why = own_generator_error(self.u)
        if why is not None:
            raise StateError(why)

    def validate(self, state: Any) -> None:
        """Raise :class:`StateError` unless ``state`` can restore this env."""
        if not isinstance(state, State):
            raise StateError(f"expected a plan_parallel State, got {type(state).__name__}: {state!r:.200}")
        if state.kind != self.kind:
            raise StateError(kind_mismatch(state.kind, self.kind))
        why = self.check_sim(state.sim)
        if why is None:
            why = self._check_rest(state)
        if why is not None:
            raise StateError(f"malformed {self.name} state: {why}")

    def _check_rest(self, state: State) -> str | None:
        """Why the state's extra, rng or wrapper fields cannot belong to this env (None if they look right)."""
        w = state.wrappers
        if type(w) is not tuple or len(w) != self.wrappers.n_stateful:
            return f"expected wrappers as a tuple of {self.wrappers.n_stateful} values, got {w!r:.200}"
        rng = state.rng
        if rng is not None and rng is not self._rng_known and not _is_rng_state(rng):
            return f"expected rng as None or a numpy bit generator's state dict, got {rng!r:.200}"
        return self.check_extra(state.extra)

    def restore(self, state: State) -> None:
        """Restore ``state`` into the env (assumes :meth:`validate` passed).

        Raises:
            StateError: the wrappers' values do not fit this env's wrappers.
        """
        self.set_sim(state.sim, state.extra)
        rng = state.rng
        if rng is not None and (self._draws or not same_rng(rng, self._rng_known)):
            gen = self.u._np_random
            if gen is None:  # never reset nor seeded
                gen = self.u._np_random = np.random.Generator(getattr(np.random, rng["bit_generator"])())
            gen.bit_generator.state = rng
        self._rng_known = rng
        try:
            self.wrappers.set(state.wrappers)
        except Exception as exc:
            raise self._wrappers_misfit(state, exc) from exc

    def _wrappers_misfit(self, state: State, exc: Exception) -> StateError:
        """The error of a state whose wrapper values the wrappers refused (validate checked their number,
        not what each wrapper accepts)."""
        return StateError(
            f"malformed {self.name} state: wrapper values {state.wrappers!r:.200} do not fit the wrappers "
            f"{self.wrappers.names}: {type(exc).__name__}: {exc}"
        )


_REGISTRY: list[tuple[type, type[Adapter]]] = []
_CHAIN: list[type[Adapter]] = []  # adapters consulted by accepts(), in order


def _is_rng_state(rng: Any) -> bool:
    """Whether ``rng`` looks like ``np.random.<BitGenerator>().state``."""
    if type(rng) is not dict or not isinstance(rng.get("state"), dict):
        return False
    name = rng.get("bit_generator")
    return type(name) is str and name in _BIT_GENERATORS


_BIT_GENERATORS = frozenset(
    name for name, v in vars(np.random).items() if isinstance(v, type) and issubclass(v, np.random.BitGenerator)
)


def register_adapter(adapter: type[Adapter], env_class: type | None = None) -> type[Adapter]:
    """Register an adapter class.

    Args:
        adapter: a subclass of :class:`Adapter`.
        env_class: when given, ``adapter`` is used for envs whose unwrapped class is
            exactly this class (registered later wins), and for its subclasses only
            where ``adapter.accepts(unwrapped)`` says so: a subclass may hold state the
            adapter does not know, and a silently incomplete state is worse than an
            error. When None, ``adapter.accepts(unwrapped)`` decides, after every
            class-keyed entry.

    Returns:
        ``adapter`` (so this can decorate a class).

    Raises:
        TypeError: ``adapter`` is not an Adapter subclass.
    """
    if not (isinstance(adapter, type) and issubclass(adapter, Adapter)):
        raise TypeError(f"adapter must be a subclass of plan_parallel.state.Adapter, got {adapter!r}")
    if env_class is None:
        _CHAIN.append(adapter)
    else:
        _REGISTRY.insert(0, (env_class, adapter))
    return adapter


def adapter_class_for(unwrapped: Any) -> type[Adapter]:
    """The adapter class that captures ``unwrapped`` faithfully.

    Raises:
        StateError: nothing can capture this env exactly; the message says why.
    """
    cls = type(unwrapped)
    for env_class, adapter in _REGISTRY:
        if cls is env_class:
            return adapter
    for env_class, adapter in _REGISTRY:
        if issubclass(cls, env_class) and adapter.accepts(unwrapped):
            return adapter
    for adapter in _CHAIN:
        if adapter.accepts(unwrapped):
            return adapter
    from plan_parallel.state.families.generic import explain_unsupported

    raise StateError(explain_unsupported(unwrapped))


def bind(env: Any, adapter: type[Adapter] | None = None) -> Adapter:
    """Bind the right adapter (or ``adapter``) to a gymnasium env with its wrapper stack."""
    cls = adapter if adapter is not None else adapter_class_for(env.unwrapped)
    bound = cls(env)
    bound.compile()
    bound.quiet_step = bound.make_quiet_step()
    return bound
