"""One adapter per simulator family whose native state calls capture it, registered on import.

Recipes follow the measured survey (``shared/research/state_cloning.md``):

- classic control: the simulator state array, hidden fields, the RNG;
- toy text: every field ``step`` reads, the RNG;
- ALE: ``cloneState`` / ``restoreState`` (serialized to bytes to travel), with ALE's own RNG only
  for the games whose reset draws from it;
- MuJoCo: ``mj_getState(mjSTATE_INTEGRATION)`` plus ``xpos``/``xipos`` (read by
  Ant and Humanoid before ``mj_step``), restored without ``mj_forward``.

The adapters tried after these (action replay, user methods, a pickle) are in
:mod:`plan_parallel.state.fallbacks`.
"""
from __future__ import annotations

import functools
import numbers
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_parallel.state.ale_sticky import (
    set_sticky_previous,
    sticky_previous,
    sticky_probability,
    sticky_quiet_step,
    sticky_taken_over,
    take_over_stickiness,
)
from plan_parallel.state.core import Adapter, State, register_adapter, same_rng
from plan_parallel.state.mujoco_copy import state_copiers
from plan_parallel.state.sim_blobs import register_sim_blobs
from plan_parallel.state.wrappers import direct_step

__all__ = ["ALE_GAMES_RESET_FROM_RNG", "RESTORED_ZERO", "AleAdapter", "ClassicControlAdapter", "MujocoAdapter",
           "RestoredZero", "ToyTextAdapter"]


# --------------------------------------------------------------------------- classic control
class RestoredZero(int):
    """CartPole's ``steps_beyond_terminated == 0`` as restored by plan_parallel.

    It is 0 in arithmetic (``+= 1`` gives a plain 1, the reward branch is the
    same), but not ``== 0``, the one test ``CartPoleEnv.step`` makes before
    warning "You are calling 'step()' even though this environment has already
    returned terminated = True". Search steps terminal states on purpose; a
    state the user steps themselves (``reset``, then the gymnasium env) still warns.
    Never leaves the env: :meth:`ClassicControlAdapter.get_sim` reads it back as 0, and a
    capture of a plain 0 marks the env so (it may step on from that state without a restore).
    """

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


RESTORED_ZERO = RestoredZero(0)


class ClassicControlAdapter(Adapter):
    """``unwrapped.state`` (an array; MountainCar's tuple becomes one) + hidden fields + RNG.

    The classic-control ``step`` methods assign a new ``state`` each step and
    never mutate it in place, so a restored array is handed to the env as is.
    """

    name = "classic"
    EXTRA: dict[str, tuple[str, ...]] = {
        "CartPoleEnv": ("steps_beyond_terminated",),
        "PendulumEnv": ("last_u",),
        "AcrobotEnv": (),
        "MountainCarEnv": (),
        "Continuous_MountainCarEnv": (),
    }
    SIM_SHAPE = {"CartPoleEnv": (4,), "PendulumEnv": (2,), "AcrobotEnv": (4,), "MountainCarEnv": (2,),
                 "Continuous_MountainCarEnv": (2,)}
    RNG_FREE_STEP = {"CartPoleEnv", "PendulumEnv", "MountainCarEnv", "Continuous_MountainCarEnv"}

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        cname = type(self.u).__name__
        names = self.EXTRA[cname]
        self._draws = self.wrappers.draws_rng or not (
            cname in self.RNG_FREE_STEP
            or (cname == "AcrobotEnv" and not getattr(self.u, "torque_noise_max", 0.0))
        )
        # Through attributes, never ``u.__dict__``: on CPython 3.11 an object whose dict was asked for
        # reads its attributes slower for good (CartPole's own step: 9.9 -> 11.1 us).
        u = self.u
        if names == ("steps_beyond_terminated",):
            def get_extra() -> Any:
                v = u.steps_beyond_terminated
                if v is RESTORED_ZERO:
                    return 0
                if type(v) is int and v == 0:  # the env may step on from this captured state, as if restored
                    u.steps_beyond_terminated = RESTORED_ZERO
                return v

            def set_extra(v: Any) -> None:
                # A restored terminal state steps without CartPole's "already returned
                # terminated = True" warning: plan_parallel steps terminal states on purpose.
                u.steps_beyond_terminated = RESTORED_ZERO if v == 0 else v
        elif len(names) == 1:
            (n,) = names

            def get_extra() -> Any:
                return getattr(u, n)

            def set_extra(v: Any) -> None:
                setattr(u, n, v)
        else:
            def get_extra() -> Any:
                return None

            def set_extra(v: Any) -> None:
                return None

        self._get_extra = get_extra
        self._set_extra = set_extra
        self._shape: tuple[int, ...] | None = None

    def get_sim(self) -> tuple[Any, Any]:
        s = self.u.state
        if type(s) is not np.ndarray:  # MountainCar keeps a tuple; None before the first reset
            if s is None:
                from plan_parallel.errors import StateError

                raise StateError(f"{type(self.u).__name__} has no state yet: reset it or restore a state first")
            s = np.array(s)
        # No copy: these envs assign a fresh array every step and never write into it.
        return s, self._get_extra()

    def set_sim(self, sim: Any, extra: Any) -> None:
        self.u.state = sim
        self._set_extra(extra)

    def compile(self) -> None:
        """The base class's compiled capture and restore, with the state array read and set here (no
        ``get_sim`` / ``set_sim`` call, no tuple between): CartPole B=512 inline against the raw loop, paired
        in one process, 0.795 -> 0.816. Anything but the common case (an RNG not known, a state that is no
        array yet) takes the base class's; a subclass that reads or sets the state its own way keeps its own."""
        super().compile()
        cls = type(self)
        if self._draws or any(getattr(cls, m) is not getattr(ClassicControlAdapter, m)
                              for m in ("get_sim", "set_sim", "capture", "restore")):
            return
        u, kind, checker, captured, wrappers = self.u, self.kind, self.checker, State.captured, self.wrappers
        get_extra, set_extra, wget = self._get_extra, self._set_extra, wrappers.get
        compiled_capture, compiled_restore = self.capture, self.restore

        def capture(prev: State | None = None, obs: Any = None) -> State:
            rng, sim = self._rng_known, u.state
            if rng is None or type(sim) is not np.ndarray:
                return compiled_capture(prev, obs)
            return captured(kind, sim, get_extra(), rng, wget(), obs, checker)

        def restore(state: State) -> None:
            rng = state.rng
            if rng is not None and rng is not self._rng_known and not same_rng(rng, self._rng_known):
                compiled_restore(state)
                return
            u.state = state.sim
            set_extra(state.extra)
            self._rng_known = rng
            try:
                wrappers.set(state.wrappers)
            except Exception as exc:
                raise self._wrappers_misfit(state, exc) from exc

        self.capture = capture  # type: ignore[method-assign]
        self.restore = restore  # type: ignore[method-assign]

    def check_extra(self, extra: Any) -> str | None:
        names = self.EXTRA[type(self.u).__name__]
        if not names:
            return super().check_extra(extra)
        # CartPole's steps_beyond_terminated (an int), Pendulum's last_u (a float, or an array of one).
        if extra is None or type(extra) is int or isinstance(extra, (numbers.Real, np.ndarray)):
            return None
        return f"expected extra as {names[0]} (None or a number), got {extra!r:.200}"

    def check_sim(self, sim: Any) -> str | None:
        # The dtype may be float32 or float64 (some envs switch between reset and step).
        want = self.SIM_SHAPE[type(self.u).__name__]
        if not isinstance(sim, np.ndarray) or sim.shape != want or sim.dtype.kind != "f":
            got = f"{sim.dtype} array of shape {sim.shape}" if isinstance(sim, np.ndarray) else type(sim).__name__
            return f"expected a float array of shape {want}, got {got}"
        return None


from gymnasium.envs import classic_control as _cc  # noqa: E402 - part of gymnasium itself

for _name in ClassicControlAdapter.EXTRA:
    register_adapter(ClassicControlAdapter, getattr(_cc, _name))


# --------------------------------------------------------------------------- toy text
class ToyTextAdapter(Adapter):
    """Every field the toy-text ``step`` reads, plus the RNG (slippery/rainy/card draws)."""

    name = "toytext"
    FIELDS: dict[str, tuple[str, ...]] = {
        "FrozenLakeEnv": ("s", "lastaction"),
        "TaxiEnv": ("s", "lastaction", "fickle_step", "taxi_orientation"),
        "CliffWalkingEnv": ("s", "lastaction"),
        "BlackjackEnv": ("player", "dealer", "dealer_top_card_suit", "dealer_top_card_value_str"),
    }

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._fields = self.FIELDS[type(self.u).__name__]

    def get_sim(self) -> tuple[Any, Any]:
        u = self.u  # its attributes, not its __dict__ (see ClassicControlAdapter)
        values = (getattr(u, f, None) for f in self._fields)
        # Blackjack appends to its hands in place: copy lists.
        return tuple(list(v) if isinstance(v, list) else v for v in values), None

    def set_sim(self, sim: Any, extra: Any) -> None:
        u = self.u
        for f, v in zip(self._fields, sim):
            setattr(u, f, list(v) if isinstance(v, list) else v)

    def check_sim(self, sim: Any) -> str | None:
        if not isinstance(sim, tuple) or len(sim) != len(self._fields):
            return f"expected a tuple of {len(self._fields)} fields {self._fields}, got {sim!r:.100}"
        return None


from gymnasium.envs import toy_text as _tt  # noqa: E402 - part of gymnasium itself

for _name in ToyTextAdapter.FIELDS:
    register_adapter(ToyTextAdapter, getattr(_tt, _name))


# --------------------------------------------------------------------------- ALE
# ROMs whose reset draws from ALE's environment RNG (ALE 0.12's src/ale/games/supported:
# AdventureSettings::setMode presses Select for 2 + rng.next() % 256 frames). Their states
# carry that RNG, so a reset without a seed after a restore is exact too.
ALE_GAMES_RESET_FROM_RNG = frozenset({"adventure"})

class AleAdapter(Adapter):
    """``ale.cloneState()``: RAM, CPU, TIA, frame counters and the emulator's RNG.

    ALE's environment RNG (``include_rng=True``) is in the state only for the
    games that draw from it outside sticky actions: Adventure, whose reset
    presses Select for a random number of frames (:data:`ALE_GAMES_RESET_FROM_RNG`).
    Otherwise nothing reads it once stickiness is drawn in Python (below) and
    ALE's own probability is 0: ALE still draws from it at every frame, but the
    draw is compared with 0 and never changes an action. Leaving it out halves
    the state (7.7 KB instead of 14.4 KB serialized) and its capture (~30 us
    instead of ~60 us a Pong frame here).

    The env's ``np_random`` is kept too (stochastic frameskip draws from it). ALE
    settings (sticky probability, frameskip, obs type) are not in the state: a
    state restores only into an env built with the same id and kwargs.

    Sticky actions. ALE keeps the previous *effective* action (the one a sticky
    frame repeats) in a C++ member that ``cloneState`` does not save and that no
    API can read or set, so a restored env would repeat whatever action that env
    last applied. To make it part of the state, binding an env with
    ``repeat_action_probability > 0`` moves stickiness into Python: ALE's own
    probability is set to 0 (an env plan_parallel builds by id is loaded so from
    the start; otherwise the ROM is reloaded and the game state put back), and
    the env's ``step`` is replaced by :func:`~plan_parallel.state.ale_sticky.sticky_step`, which draws one
    uniform per frame from the env's ``np_random`` and repeats the previous
    effective action with the same probability (Machado et al. 2018, as ALE).
    The distribution is ALE's; the random stream is not, so a bound env does not
    reproduce an unbound env's trajectory for the same seed.
    """

    name = "ale"

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        u = self.u
        self._ale = u.ale
        import ale_py

        self._state_type = ale_py.ALEState
        self._noop = ale_py.Action.NOOP.value
        if not sticky_taken_over(u):  # else built by EnvFactory.build_to_bind: taken over already
            take_over_stickiness(u, float(self._ale.getFloat("repeat_action_probability")), reload=True)
        self._sticky = sticky_probability(u) > 0.0
        # How AtariEnv._get_obs reads the observation, as a call that writes it into a given array.
        read = _ALE_READ_INTO.get(getattr(u, "_obs_type", ""))
        self._read_into = None if read is None or getattr(u, "sound_obs", False) else getattr(self._ale, read)
        self._with_rng = getattr(u, "_game", None) in ALE_GAMES_RESET_FROM_RNG  # ALE's own probability is 0 here
        self._draws = self.wrappers.draws_rng or self._sticky or isinstance(getattr(u, "_frameskip", 1), tuple)

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        return type(unwrapped).__module__.startswith("ale_py") and hasattr(unwrapped, "ale")

    def make_quiet_step(self) -> Callable[[Any], tuple] | None:
        # Only stickiness taken over puts a step of ours in the env (an env without sticky actions
        # keeps AtariEnv.step); the screen is read, never written, by the observation.
        if not self._sticky:
            return None
        return direct_step(self.env, functools.partial(sticky_quiet_step, self.u))

    def observe(self) -> tuple[Any, dict]:
        return self.u._get_obs(), self.u._get_info()

    def observation_rows(self) -> tuple[np.dtype, tuple[int, ...]] | None:
        # ALE writes a screen or its RAM into a given array as fast as into a new one: a 100 KB copy less a Pong item.
        if self.quiet_step is None or self._read_into is None:
            return None
        space = self.u.observation_space
        return np.dtype(space.dtype), tuple(space.shape)

    def observe_into(self, row: np.ndarray) -> dict:
        self._read_into(row)  # type: ignore[misc]  # observation_rows made sure of it
        return self.u._get_info()

    def get_sim(self) -> tuple[Any, Any]:
        return self._ale.cloneState(include_rng=self._with_rng), sticky_previous(self.u)

    def set_sim(self, sim: Any, extra: Any) -> None:
        self._ale.restoreState(sim)
        set_sticky_previous(self.u, extra)

    def check_sim(self, sim: Any) -> str | None:
        if not isinstance(sim, self._state_type):
            return f"expected an ale_py.ALEState, got {type(sim).__name__}"
        return None

    def check_extra(self, extra: Any) -> str | None:
        # The previous (action, strength) that sticky actions repeat (the action an int; an
        # ale_py.Action in states saved by earlier versions, which restore alike).
        if type(extra) is not tuple or len(extra) != 2 or not isinstance(extra[1], float):
            return f"expected extra as the sticky (action, strength) pair, got {extra!r:.200}"
        return None


_ALE_READ_INTO = {"rgb": "getScreenRGB", "grayscale": "getScreenGrayscale", "ram": "getRAM"}  # as AtariEnv._get_obs


register_adapter(AleAdapter)


def _ale_state(data: bytes) -> Any:
    import ale_py

    return ale_py.ALEState(data)


# An ALEState travels to and from workers as its serialization (~7.7 KB for Pong), through shared memory.
register_sim_blobs("ale", lambda sim: sim.serialize(), _ale_state)


# --------------------------------------------------------------------------- MuJoCo
class MujocoAdapter(Adapter):
    """``mjSTATE_INTEGRATION`` (warmstart included) + ``xpos`` and ``xipos``, as one float64 array.

    ``xpos``/``xipos`` are outputs of the last forward pass that Ant and Humanoid
    read *before* ``mj_step``; no ``mjtState`` bit holds them, and ``mj_forward``
    after a restore would recompute them for the current ``qpos`` (not bitwise).
    So they are restored as saved, and ``mj_forward`` is not called.
    """

    name = "mujoco"
    step_draws_rng = False

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        import mujoco

        self._mj = mujoco
        self._m = self.u.model
        self._spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
        self._size = int(mujoco.mj_stateSize(self._m, self._spec)) + 2 * self.u.data.xpos.size
        self._copiers()

    def _copiers(self) -> None:
        """The state copiers of the env's MjData (made again when the env holds another: they work on its memory)."""
        self._data = self.u.data
        self._get, self._put = state_copiers(self._mj, self._m, self._data, self._spec)

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        model = getattr(unwrapped, "model", None)
        return (
            "mujoco" in sys.modules
            and type(model).__name__ == "MjModel"
            and type(getattr(unwrapped, "data", None)).__name__ == "MjData"
        )

    def get_sim(self) -> tuple[Any, Any]:
        if self.u.data is not self._data:
            self._copiers()
        return self._get(), None

    def set_sim(self, sim: Any, extra: Any) -> None:
        if self.u.data is not self._data:
            self._copiers()
        self._put(sim)

    def check_sim(self, sim: Any) -> str | None:
        if not isinstance(sim, np.ndarray) or sim.dtype != np.float64 or sim.shape != (self._size,):
            got = f"{sim.dtype}{sim.shape}" if isinstance(sim, np.ndarray) else type(sim).__name__
            return f"expected float64 ({self._size},) for this model, got {got}"
        return None


register_adapter(MujocoAdapter)
