"""The state of every wrapper on a gymnasium wrapper stack.

Each wrapper class maps to a *codec*: how to read and write the attributes that
change its outputs. Wrappers whose only state is "has been reset / has been
checked" (OrderEnforcing, PassiveEnvChecker) are *primed* once so that a state
can be restored into an env that was never reset; they add nothing per state.

A wrapper contributes its own state by defining ``get_wrapper_state()`` and
``set_wrapper_state(state)``, or through :func:`register_wrapper`. An unknown
wrapper falls back to a deep copy of its plain ``__dict__`` entries (not spaces,
callables or the wrapped env); a wrapper whose entries cannot be copied raises
:class:`~plan_parallel.errors.StateError` when the env is bound.
"""
from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from typing import Any, overload

import gymnasium as gym
import numpy as np

from plan_parallel.errors import StateError

__all__ = ["STATELESS_WRAPPERS", "WrapperStack", "direct_step", "register_wrapper"]

Getter = Callable[[Any], Any]
Setter = Callable[[Any, Any], None]

# name -> (getter, setter); getters return values the wrapper will never mutate.
_CODECS: dict[str, tuple[Getter, Setter]] = {}
# getter -> the one attribute it reads as it is (no copy): a single-attribute codec without ``deep``.
_PLAIN_ATTR: dict[Getter, str] = {}
# name -> {attr: value} applied once so a never-reset env accepts a restored state.
_PRIMERS: dict[str, dict[str, Any]] = {
    "OrderEnforcing": {"_has_reset": True},
    "PassiveEnvChecker": {
        "checked_reset": True,
        "checked_step": True,
        "checked_data_reuse": True,
        "_previous_data": None,
    },
}
# Wrappers with no state that changes outputs (configuration only).
STATELESS_WRAPPERS = frozenset(
    {
        "ClipAction", "RescaleAction", "TransformAction", "TransformObservation",
        "TransformReward", "ClipReward", "FlattenObservation", "ResizeObservation",
        "GrayscaleObservation", "ReshapeObservation", "RescaleObservation",
        "DtypeObservation", "FilterObservation", "AddRenderObservation",
        "RenderCollection", "HumanRendering", "EnvCompatibility", "DiscretizeAction",
        "DiscretizeObservation", "ArrayConversion", "NumpyToTorch", "JaxToNumpy",
    }
)


# Wrappers known to draw from the env's np_random inside step (StickyAction's repeat
# draw; Autoreset's reset). A wrapper plan_parallel does not know is assumed to draw.
RNG_DRAWING_WRAPPERS = frozenset({"StickyAction", "Autoreset"})
_NON_DRAWING_WRAPPERS = frozenset(
    {"TimeLimit", "OrderEnforcing", "PassiveEnvChecker", "FrameStackObservation", "RecordEpisodeStatistics",
     "AtariPreprocessing", "TimeAwareObservation", "DelayObservation", "NormalizeObservation",
     "NormalizeReward", "MaxAndSkipObservation"}
) | STATELESS_WRAPPERS


def register_wrapper(name_or_class: str | type, get: Getter, set: Setter) -> None:
    """Teach the wrapper walk how to capture a wrapper class's state.

    Args:
        name_or_class: the wrapper class or its ``__name__``.
        get: ``get(wrapper) -> value``; the value must be a copy the wrapper will not mutate.
        set: ``set(wrapper, value)``; must not keep references into ``value`` that the
            wrapper then mutates (copy mutable parts).
    """
    name = name_or_class if isinstance(name_or_class, str) else name_or_class.__name__
    _CODECS[name] = (get, set)


def _attrs_codec(*names: str, deep: bool = False) -> tuple[Getter, Setter]:
    cp = copy.deepcopy if deep else (lambda v: v)
    if len(names) == 1:
        (n,) = names

        def get1(w: Any) -> Any:
            return cp(getattr(w, n))

        def set1(w: Any, v: Any) -> None:
            setattr(w, n, cp(v))

        if not deep:  # a stack of one such wrapper reads and writes its attribute directly (WrapperStack)
            _PLAIN_ATTR[get1] = n
        return get1, set1

    def get(w: Any) -> Any:
        return tuple(cp(getattr(w, n)) for n in names)

    def set_(w: Any, v: Any) -> None:
        for n, x in zip(names, v):
            setattr(w, n, cp(x))

    return get, set_


def _frame_stack_get(w: Any) -> Any:
    return (tuple(np.array(o) for o in w.obs_queue), w.padding_value)


def _frame_stack_set(w: Any, v: Any) -> None:
    queue, padding = v
    w.obs_queue = deque((np.array(o) for o in queue), maxlen=w.obs_queue.maxlen)
    w.padding_value = padding


def _episode_stats_get(w: Any) -> Any:
    # Not the wall-clock fields (episode_start_time, time_queue): they are not part of
    # what a step computes from, and capturing them would make equal states differ.
    return (w.episode_count, w.episode_returns, w.episode_lengths, tuple(w.return_queue), tuple(w.length_queue))


def _episode_stats_set(w: Any, v: Any) -> None:
    (w.episode_count, w.episode_returns, w.episode_lengths, rq, lq) = v
    w.return_queue = deque(rq, maxlen=w.return_queue.maxlen)
    w.length_queue = deque(lq, maxlen=w.length_queue.maxlen)


def _delay_get(w: Any) -> Any:
    return tuple(copy.deepcopy(o) for o in w.observation_queue)


def _delay_set(w: Any, v: Any) -> None:
    w.observation_queue.clear()
    w.observation_queue.extend(copy.deepcopy(o) for o in v)


register_wrapper("TimeLimit", *_attrs_codec("_elapsed_steps"))
register_wrapper("FrameStackObservation", _frame_stack_get, _frame_stack_set)
register_wrapper("RecordEpisodeStatistics", _episode_stats_get, _episode_stats_set)
register_wrapper("AtariPreprocessing", *_attrs_codec("lives", "game_over", "obs_buffer", deep=True))
register_wrapper(
    "StickyAction", *_attrs_codec("last_action", "is_sticky_actions", "num_repeats", "repeats_taken", deep=True)
)
register_wrapper("Autoreset", *_attrs_codec("autoreset"))
register_wrapper("TimeAwareObservation", *_attrs_codec("timesteps"))
register_wrapper("DelayObservation", _delay_get, _delay_set)
register_wrapper("NormalizeObservation", *_attrs_codec("obs_rms", "_update_running_mean", deep=True))
register_wrapper(
    "NormalizeReward", *_attrs_codec("return_rms", "discounted_reward", "_update_running_mean", deep=True)
)
register_wrapper("MaxAndSkipObservation", *_attrs_codec("_obs_buffer", deep=True))

_GENERIC_SKIP = {"env", "_action_space", "_observation_space", "_metadata", "_cached_spec", "_reward_range", "_np_random"}


def _generic_keys(w: Any) -> list[str]:
    keys = []
    for k, v in w.__dict__.items():
        if k in _GENERIC_SKIP or isinstance(v, (gym.Space, gym.Env)) or callable(v):
            continue
        keys.append(k)
    return keys


def _generic_codec(w: Any) -> tuple[Getter, Setter]:
    keys = _generic_keys(w)
    try:
        copy.deepcopy({k: w.__dict__[k] for k in keys})
    except Exception as exc:
        raise StateError(
            f"wrapper {type(w).__name__} holds state that cannot be copied ({type(exc).__name__}: {exc}); "
            "give it get_wrapper_state()/set_wrapper_state() or register it with "
            "plan_parallel.state.register_wrapper"
        ) from exc

    def get(wr: Any) -> Any:
        d = wr.__dict__
        return copy.deepcopy({k: d[k] for k in keys if k in d})

    def set_(wr: Any, v: Any) -> None:
        wr.__dict__.update(copy.deepcopy(v))

    return get, set_


def _codec_for(w: Any) -> tuple[Getter, Setter] | None:
    """The codec of one wrapper, or None when it holds no state."""
    cls = type(w)
    if callable(getattr(cls, "get_wrapper_state", None)) and callable(getattr(cls, "set_wrapper_state", None)):
        return (lambda wr: wr.get_wrapper_state(), lambda wr, v: wr.set_wrapper_state(v))
    name = cls.__name__
    if name in _CODECS:
        return _CODECS[name]
    if name in _PRIMERS or name in STATELESS_WRAPPERS:
        return None
    return _generic_codec(w)


class WrapperStack:
    """The stateful wrappers of one env, bound once; ``get``/``set`` per state."""

    def __init__(self, env: Any) -> None:
        self.names: tuple[str, ...] = ()
        self._primers: list[tuple[Any, dict[str, Any]]] = []
        bound: list[tuple[Any, Getter, Setter]] = []
        names = []
        e = env
        while isinstance(e, gym.Wrapper):
            name = type(e).__name__
            names.append(name)
            if name in _PRIMERS:
                self._primers.append((e, _PRIMERS[name]))
            codec = _codec_for(e)
            if codec is not None:
                bound.append((e, codec[0], codec[1]))
            e = e.env
        self.names = tuple(names)
        # Does some wrapper's step draw from the env's RNG? Then the RNG must be captured
        # with every state even when the env's own step draws none.
        self.draws_rng = any(n in RNG_DRAWING_WRAPPERS or n not in _NON_DRAWING_WRAPPERS for n in names)
        self._primed = False
        self._compile(bound)
        if not self._primers:
            self.after_reset()

    @classmethod
    def empty(cls) -> WrapperStack:
        return cls(None)

    def _compile(self, bound: list[tuple[Any, Getter, Setter]]) -> None:
        n = len(bound)
        if n == 0:
            self.get = _empty_get
            self._set = _noop_set
        elif n == 1 and bound[0][1] in _PLAIN_ATTR:  # TimeLimit alone: its counter (a call each way, not three)
            w, attr = bound[0][0], _PLAIN_ATTR[bound[0][1]]
            self.get = lambda: (getattr(w, attr),)
            self._set = lambda v: setattr(w, attr, v[0])
        elif n == 1:
            w, g, s = bound[0]
            self.get = lambda: (g(w),)
            self._set = lambda v: s(w, v[0])
        else:
            def get() -> tuple:
                return tuple(g(w) for w, g, _ in bound)

            def set_(v: tuple) -> None:
                for (w, _, s), x in zip(bound, v):
                    s(w, x)

            self.get = get
            self._set = set_
        self.n_stateful = n

    def set(self, values: tuple) -> None:
        """Restore the wrappers' state (priming the reset/check flags the first time: then ``set`` is
        the compiled setter itself)."""
        if not self._primed:
            self.prime()
        self._set(values)

    def prime(self) -> None:
        """Mark every wrapper as reset and checked, as if the env had been reset once."""
        for w, attrs in self._primers:
            for name, value in attrs.items():
                setattr(w, name, value)
        self.after_reset()

    def after_reset(self) -> None:
        """The env was reset: its wrappers are primed by the reset itself."""
        self._primed = True
        self.set = self._set  # type: ignore[method-assign,assignment]  # nothing left to prime


def _empty_get() -> tuple:
    return ()


def _noop_set(v: tuple) -> None:
    return None


@overload
def direct_step(env: Any) -> Callable[[Any], tuple]: ...


@overload
def direct_step(env: Any, inner: Callable[[Any], tuple]) -> Callable[[Any], tuple] | None: ...


def direct_step(env: Any, inner: Callable[[Any], tuple] | None = None) -> Callable[[Any], tuple] | None:
    """``env.step``, without the Python layers of gymnasium's default wrappers once they only pass through.

    ``gym.make`` puts ``TimeLimit``, ``OrderEnforcing`` and ``PassiveEnvChecker``
    around most envs. After the first reset (or the first restore, which primes
    them) the last two only forward the call, and ``TimeLimit`` counts. When the
    outermost layers are exactly these classes, the function returned calls the
    first other layer (usually the env itself) directly and counts the steps as
    ``TimeLimit.step`` does; whenever a gate is still closed it calls ``env.step``
    instead, so a never-reset env raises as before. A subclass or any other
    wrapper is left to its own ``step``. Worth ~4 us per step of a classic-control
    env, a third of its cost.

    ``inner``: a step of the unwrapped env to call in place of its own (an ALE
    step that skips the observation); then the result is None unless every layer
    above the unwrapped env is one of these classes, which never read the
    observation.
    """
    limits: list[Any] = []
    gates: list[Any] = []
    e = env
    while type(e) in _FUSIBLE:
        (limits if type(e) is gym.wrappers.TimeLimit else gates).append(e)
        e = e.env
    if inner is not None and (e is not env.unwrapped or len(limits) > 1):
        return None
    if not limits and not gates:
        return env.step if inner is None else inner  # nothing to take out
    if len(limits) > 1:
        return env.step  # stacked time limits: not worth a special case
    if inner is None:
        inner = e.step
    full = env.step
    checked = [w for w in gates if type(w) is gym.wrappers.PassiveEnvChecker]
    ordered = [w for w in gates if type(w) is gym.wrappers.OrderEnforcing]
    opened = False  # the gates, once open, stay open (gymnasium never closes them)

    def gates_open() -> bool:
        nonlocal opened
        opened = all(w._has_reset for w in ordered) and all(w.checked_step and w.checked_data_reuse for w in checked)
        return opened

    if not limits:
        def step(action: Any) -> tuple:
            return inner(action) if opened or gates_open() else full(action)

        return step
    (limit,) = limits

    def step_with_limit(action: Any) -> tuple:
        if not (opened or gates_open()):
            return full(action)
        obs, reward, terminated, truncated, info = inner(action)
        n = limit._elapsed_steps = limit._elapsed_steps + 1
        if n >= limit._max_episode_steps:
            truncated = True
        return obs, reward, terminated, truncated, info

    return step_with_limit


_FUSIBLE = frozenset({gym.wrappers.TimeLimit, gym.wrappers.OrderEnforcing, gym.wrappers.PassiveEnvChecker})
