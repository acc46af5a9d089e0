"""MuJoCo: ``mj_getState(mjSTATE_INTEGRATION)`` plus ``xpos``/``xipos`` (read by Ant and Humanoid before
``mj_step``), restored without ``mj_forward``; the copies through :mod:`.mujoco_copy`."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from plan_parallel.state.core import Adapter, register_adapter
from plan_parallel.state.families.mujoco_copy import state_copiers

__all__ = ["MujocoAdapter"]


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

    def row_extra(self) -> str | None:
        """``"none"`` (its state is one float64 array, no extra) when neither the step nor a wrapper draws and the
        adapter is this class's own."""
        return None if self._draws or type(self) is not MujocoAdapter else "none"

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
