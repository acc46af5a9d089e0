"""ALE: ``cloneState`` / ``restoreState`` (serialized to bytes to travel), with ALE's own RNG only for the games
whose reset draws from it; sticky actions drawn in Python (:mod:`.ale_sticky`)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from plan_parallel.state.core import Adapter, register_adapter
from plan_parallel.state.families.ale_sticky import (
    set_sticky_previous,
    sticky_previous,
    sticky_probability,
    sticky_quiet_step,
    sticky_taken_over,
    take_over_stickiness,
)
from plan_parallel.state.sim_blobs import register_sim_blobs
from plan_parallel.state.wrappers import direct_step

__all__ = ["ALE_GAMES_RESET_FROM_RNG", "AleAdapter"]


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
    the env's ``step`` is replaced by :func:`~plan_parallel.state.families.ale_sticky.sticky_step`, which draws one
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

    def row_extra(self) -> str | None:
        """``"sticky"``: a state is its bytes form (one length a game), the sticky pair, and its RNG (:meth:`row_rng`),
        when the adapter is this class's own."""
        return "sticky" if type(self) is AleAdapter else None

    def row_rng(self) -> bool:
        """True: sticky actions and a stochastic frameskip draw from the env's ``np_random``."""
        return True

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


