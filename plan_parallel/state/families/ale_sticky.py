"""ALE's sticky actions, drawn in Python so that they are part of a state (see :class:`~plan_parallel.state.AleAdapter`).

ALE keeps the previous effective action (the one a sticky frame repeats) in a
C++ member that ``cloneState`` does not save, so binding an env with
``repeat_action_probability > 0`` sets ALE's own probability to 0 and replaces
the env's ``step`` with :func:`sticky_step`, which draws one uniform per frame
from the env's ``np_random``.

ALE reads its settings when the ROM loads, and a load costs ~0.2 s (Pong: 225 ms
of an env's 455 ms build here). An env that :class:`~plan_parallel.PlanEnv` builds
by id (:meth:`~plan_parallel.factory.EnvFactory.build_to_bind`) is built inside
:func:`loads_without_stickiness`, so its one load has the probability at 0 already,
and :func:`draw_sticky_in_python` takes its stickiness over without a second load.
An env built any other way (a callable) is loaded a second time when it is bound.
A seeded reset loads the ROM too; the process remembers what the loads of bound
envs made (``_loads_remembered``), so a seed seen before costs a restore instead.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["REMEMBERED_LOADS", "draw_sticky_in_python", "forget_loads", "loads_without_stickiness", "set_sticky_previous",
           "sticky_frames", "sticky_previous", "sticky_probability", "sticky_quiet_step", "sticky_step", "sticky_taken_over",
           "take_over_stickiness"]

_LOADED_AT_ZERO = "_pp_loaded_at_zero"  # an AtariEnv attribute: the sticky probability asked for, ALE's being 0
REMEMBERED_LOADS = 64  # the states the last ROM loads left (per recipe and seed), this process's
_LOADS: OrderedDict[tuple, Any] = OrderedDict()
_LOADS_LOCK = threading.Lock()
_building = threading.local()  # .on: this thread is inside loads_without_stickiness


@contextlib.contextmanager
def loads_without_stickiness() -> Iterator[None]:
    """Around building one ALE env (``gym.make`` of an ALE id) in this thread: its ROM loads with ALE's sticky
    probability at 0, and the probability asked for is kept in the env for :func:`draw_sticky_in_python`,
    which must follow (until then the env steps without sticky actions).

    Other threads building AtariEnvs meanwhile are not affected. Without ``AtariEnv.load_game`` (another
    ale_py) nothing changes: the env is loaded again when bound.
    """
    _install()
    _building.on = True
    try:
        yield
    finally:
        _building.on = False


@functools.cache
def _install() -> None:
    """Wrap ``AtariEnv.load_game`` once per process: inside :func:`loads_without_stickiness`, the first load of
    an env puts ALE's probability to 0 first (and keeps the one asked for)."""
    from ale_py import env as ale_env

    native = getattr(ale_env.AtariEnv, "load_game", None)
    if native is None:
        return

    @functools.wraps(native)
    def load_game(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_building, "on", False) and not hasattr(self, _LOADED_AT_ZERO):
            p = float(self.ale.getFloat("repeat_action_probability"))
            if p > 0.0:
                self.ale.setFloat("repeat_action_probability", 0.0)
                setattr(self, _LOADED_AT_ZERO, p)
        return native(self, *args, **kwargs)

    ale_env.AtariEnv.load_game = load_game  # type: ignore[method-assign]  # a wrapper of the same call


def draw_sticky_in_python(u: Any) -> None:
    """Take over the stickiness of AtariEnv ``u`` built inside :func:`loads_without_stickiness` (nothing to do
    when it asked for none, or was not loaded there)."""
    p = getattr(u, _LOADED_AT_ZERO, None)
    if p is not None:
        delattr(u, _LOADED_AT_ZERO)
        take_over_stickiness(u, p, reload=False)


def take_over_stickiness(u: Any, p: float, reload: bool) -> None:
    """Give ``u`` the sticky probability ``p`` and no previous action; when ``p > 0``, draw its sticky
    actions in Python: ALE's probability at 0 (``reload``: loading the ROM again and putting the game state
    back) and ``u.step``/``u.reset`` routed through :func:`sticky_step`."""
    import ale_py

    u._pp_sticky_p = p
    u._pp_sticky_prev = (ale_py.Action.NOOP.value, 1.0)
    if p <= 0.0:
        return
    ale = u.ale
    if reload:
        snapshot = ale.cloneState(include_rng=True)
        ale.setFloat("repeat_action_probability", 0.0)
        u.load_game()  # settings are read when the ROM loads
        ale.restoreState(snapshot)
    native_reset = u.reset
    u.load_game = _loads_remembered(u, u.load_game)  # AtariEnv.reset(seed=...) loads the ROM again

    def reset(*args: Any, **kwargs: Any) -> Any:
        out = native_reset(*args, **kwargs)
        u._pp_sticky_prev = (u._pp_noop, 1.0)  # ALE's softReset does the same
        return out

    # Actions kept as ints (ALE's act takes them): the previous action is part of every state,
    # and an int pickles in a byte where an ale_py.Action unpickles through a call (~0.6 us).
    u._pp_noop = ale_py.Action.NOOP.value
    u._pp_action_ids = [a.value for a in u._action_set]
    u.reset = reset
    u.step = functools.partial(sticky_step, u)


def sticky_taken_over(u: Any) -> bool:
    """Whether :func:`take_over_stickiness` ran on AtariEnv ``u``."""
    return hasattr(u, "_pp_sticky_p")


def sticky_probability(u: Any) -> float:
    """The probability that AtariEnv ``u`` (taken over) repeats the previous action at a frame."""
    return u._pp_sticky_p


def sticky_previous(u: Any) -> tuple:
    """What AtariEnv ``u`` (taken over) acted last: ``(action id, strength)``, part of its state."""
    return u._pp_sticky_prev


def set_sticky_previous(u: Any, prev: tuple) -> None:
    """Restore what AtariEnv ``u`` (taken over) acted last (:func:`sticky_previous`)."""
    u._pp_sticky_prev = prev


def forget_loads() -> None:
    """Drop the remembered ROM loads (see :func:`take_over_stickiness`): the next seeded resets load again."""
    _LOADS.clear()


def _recipe_key(u: Any) -> Any:
    """What an env's ROM loads depend on besides the seed: its constructor's kwargs (an env from
    ``gym.make``, whose spec has them), or the env itself."""
    kwargs = getattr(getattr(u, "spec", None), "kwargs", None)
    if kwargs is None:
        if not hasattr(u, "_pp_load_key"):
            u._pp_load_key = object()
        return u._pp_load_key
    return tuple(sorted((k, repr(v)) for k, v in kwargs.items()))


def _loads_remembered(u: Any, native_load: Callable[[], Any]) -> Callable[[], None]:
    """``u.load_game`` that loads each (recipe, ALE seed) once per process: later it restores
    the state the load left (with ALE's RNG), which is what the load makes again, in ~0.1 ms instead of ~0.2 s.

    A seeded reset (``AtariEnv.reset(seed=s)``) seeds ALE and loads the ROM; the
    states a seed's load makes are the same every time and in every env of the
    same kwargs, so resets with seeds seen before (tests, evaluations, a vector
    env's sub-envs reset again on other envs) skip the load. The last
    :data:`REMEMBERED_LOADS` are kept (~14 KB each). ALE settings changed by hand
    on ``u.ale`` after the env was built are not part of the key.
    """
    recipe = _recipe_key(u)

    def load_game() -> None:
        ale = u.ale
        key = (recipe, int(ale.getInt("random_seed")))  # mode and difficulty: the recipe's
        with _LOADS_LOCK:
            state = _LOADS.get(key)
            if state is not None:
                _LOADS.move_to_end(key)
        if state is not None:
            ale.restoreState(state)
            return
        native_load()
        state = ale.cloneState(include_rng=True)
        with _LOADS_LOCK:
            _LOADS[key] = state
            if len(_LOADS) > REMEMBERED_LOADS:
                _LOADS.popitem(last=False)

    return load_game


def sticky_step(u: Any, action: Any) -> tuple:
    """``AtariEnv.step`` with sticky actions drawn from ``u.np_random``."""
    reward, terminated, truncated = sticky_frames(u, action)
    return u._get_obs(), reward, terminated, truncated, u._get_info()


def sticky_quiet_step(u: Any, action: Any) -> tuple:
    """:func:`sticky_step` without the observation and info (None): a step whose observation no one reads."""
    reward, terminated, truncated = sticky_frames(u, action)
    return None, reward, terminated, truncated, None


def sticky_frames(u: Any, action: Any) -> tuple[float, bool, bool]:
    """The frames of one :func:`sticky_step`: its reward, terminated and truncated."""
    fs = u._frameskip
    rng = u.np_random
    if not isinstance(fs, int):
        fs = int(rng.integers(*fs))
    if u.continuous:
        x = action[0] * np.cos(action[1])
        y = action[0] * np.sin(action[1])
        th = u.continuous_action_threshold
        wanted = (
            u.map_action_idx(
                left_center_right=-int(x < -th) + int(x > th),
                down_center_up=-int(y < -th) + int(y > th),
                fire=bool(action[-1] > th),
            ).value,
            float(action[0]),
        )
    else:
        wanted = (u._pp_action_ids[action], 1.0)
    p, prev, ale, reward = u._pp_sticky_p, u._pp_sticky_prev, u.ale, 0.0
    # As Python floats: a numpy comparison (rng.random(fs) < p, ~1 us) slowed the 4 Pong frames after it, 351 -> 406 us.
    for x in rng.random(fs).tolist():
        if not x < p:
            prev = wanted
        reward += ale.act(prev[0], prev[1])
    u._pp_sticky_prev = prev
    return reward, ale.game_over(with_truncation=False), ale.game_truncated()
