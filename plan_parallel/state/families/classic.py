"""Classic control: the simulator state array, the hidden fields ``step`` reads, the RNG."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from gymnasium.envs import classic_control as _cc

from plan_parallel.state.core import Adapter, State, register_adapter, same_rng

__all__ = ["RESTORED_ZERO", "ClassicControlAdapter", "RestoredZero"]


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

    def row_extra(self) -> str | None:
        """``"count"`` for CartPole, ``"none"`` for the envs without hidden fields, when the step draws nothing
        and the adapter is this class's own (a subclass may read or set the state its own way)."""
        if self._draws or type(self) is not ClassicControlAdapter:
            return None
        names = self.EXTRA[type(self.u).__name__]
        return "count" if names == ("steps_beyond_terminated",) else "none" if not names else None

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



for _name in ClassicControlAdapter.EXTRA:
    register_adapter(ClassicControlAdapter, getattr(_cc, _name))


