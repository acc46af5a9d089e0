"""One adapter per simulator family whose native state calls capture it, then the fallbacks; each is
registered when its module is imported, and the imports below set the order they are tried in.

The recipes, each measured bitwise by :func:`plan_parallel.check_clonable`:

- ``classic``: classic control, the simulator state array, hidden fields, the RNG;
- ``toy_text``: every field ``step`` reads, the RNG;
- ``ale``: ``cloneState`` / ``restoreState`` (serialized to bytes to travel), with ALE's own RNG only
  for the games whose reset draws from it, and sticky actions drawn in Python (``ale_sticky``);
- ``mujoco``: ``mj_getState(mjSTATE_INTEGRATION)`` plus ``xpos``/``xipos`` (read by
  Ant and Humanoid before ``mj_step``), restored without ``mj_forward`` (``mujoco_copy``);
- then, for an env none of these takes: ``replay`` (a reset seed and the actions since), and
  ``generic``: the env's own ``get_state``/``set_state``, or a pickle of a pure-Python env.
"""
# The families (keyed by env class, or taking only their own envs), then the fallbacks in the order they are tried.
from plan_parallel.state.families.ale import ALE_GAMES_RESET_FROM_RNG, AleAdapter
from plan_parallel.state.families.classic import RESTORED_ZERO, ClassicControlAdapter, RestoredZero
from plan_parallel.state.families.mujoco import MujocoAdapter
from plan_parallel.state.families.toy_text import ToyTextAdapter

# isort: split
from plan_parallel.state.families.replay import ActionLog, ActionReplayAdapter

# isort: split
from plan_parallel.state.families.generic import GenericPickleAdapter, UserMethodsAdapter, explain_unsupported

__all__ = ["ALE_GAMES_RESET_FROM_RNG", "RESTORED_ZERO", "ActionLog", "ActionReplayAdapter", "AleAdapter",
           "ClassicControlAdapter", "GenericPickleAdapter", "MujocoAdapter", "RestoredZero", "ToyTextAdapter",
           "UserMethodsAdapter", "explain_unsupported"]
