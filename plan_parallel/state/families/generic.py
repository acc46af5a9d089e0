"""The adapters tried after the simulator families and action replay (registered on import, in this order).

- user envs that define ``get_state()`` / ``set_state(state)``;
- pure-Python envs proven faithful (MiniGrid): a pickle of the unwrapped ``__dict__``;
- and, when nothing fits, :func:`explain_unsupported` says why.
"""
from __future__ import annotations

import pickle
from typing import Any

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, register_adapter
from plan_parallel.state.values import Pickled

__all__ = ["GenericPickleAdapter", "UserMethodsAdapter", "explain_unsupported"]


# --------------------------------------------------------------------------- user envs
class UserMethodsAdapter(Adapter):
    """An env whose unwrapped class defines ``get_state()`` and ``set_state(state)`` (plangym's convention).

    Whatever ``get_state`` returns is the simulator part; the env's RNG and the
    wrapper stack are captured as for every family. ``get_state`` must return a
    value the env will not mutate later (a copy), and ``set_state`` gets the state's
    read-only arrays: it copies in any array the env will write into.
    """

    name = "user"

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        t = type(unwrapped)
        get, set_ = getattr(t, "get_state", None), getattr(t, "set_state", None)
        if not (callable(get) and callable(set_)):
            return False
        import inspect

        try:
            params = [
                p for p in inspect.signature(set_).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            return True
        # set_state(self, state): exactly one required argument besides self.
        # (gymnasium's MujocoEnv.set_state(qpos, qvel) is not this protocol.)
        return len(params) == 2

    def get_sim(self) -> tuple[Any, Any]:
        return self.u.get_state(), None

    def set_sim(self, sim: Any, extra: Any) -> None:
        self.u.set_state(sim)

    def row_extra(self) -> str | None:
        """``"none"`` when the adapter is this class's own: a state whose ``get_state`` value is a float64 array or
        a tuple of floats, ints and bools takes the lane's rows (any other value travels pickled)."""
        return "none" if type(self) is UserMethodsAdapter else None

    def row_rng(self) -> bool:
        """True: a user env's step may draw from its ``np_random``."""
        return True


register_adapter(UserMethodsAdapter)


# --------------------------------------------------------------------------- generic pickle
# Not part of the state: render handles, and the spaces (static, and their
# sampling RNG belongs to whoever samples actions, not to the simulation).
_RENDER_KEYS = frozenset(
    {"window", "clock", "screen", "surf", "window_surface", "viewer", "renderer", "isopen", "_window",
     "action_space", "observation_space"}
)


class GenericPickleAdapter(Adapter):
    """A pickle of the whole unwrapped ``__dict__`` (minus render handles), restored by ``__dict__.update``.

    Exact for pure-Python envs: one ``pickle.dumps`` keeps aliasing between
    attributes, including the env's ``np_random``. Used automatically only for
    env classes where it was proven bitwise (MiniGrid); register it for your own
    pure-Python env once :func:`plan_parallel.check_clonable` passes with it.
    Never for envs that wrap C/C++ state (pickling those re-runs the constructor).
    """

    name = "pickle"
    PROVEN_BASES = ("minigrid.minigrid_env.MiniGridEnv",)

    def _read_rng(self) -> dict | None:
        return None  # the RNG is inside the pickled __dict__

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        names = {f"{c.__module__}.{c.__qualname__}" for c in type(unwrapped).__mro__}
        return any(b in names for b in cls.PROVEN_BASES) and not _is_ezpickle(unwrapped)

    def get_sim(self) -> tuple[Any, Any]:
        d = {
            k: v for k, v in self.u.__dict__.items()
            if k not in _RENDER_KEYS and not type(v).__module__.startswith("pygame")
        }
        try:
            return Pickled(pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL)), None
        except Exception as exc:  # a lambda, a lock, an open file among the attributes
            raise StateError(_unpicklable_attribute(type(self.u).__name__, d, exc)) from exc

    def set_sim(self, sim: Any, extra: Any) -> None:
        self.u.__dict__.update(pickle.loads(sim.data))

    def check_sim(self, sim: Any) -> str | None:
        if not isinstance(sim, Pickled):
            return f"expected a Pickled dict of attributes, got {type(sim).__name__}"
        return None


register_adapter(GenericPickleAdapter)


def _unpicklable_attribute(cls_name: str, attrs: dict[str, Any], exc: Exception) -> str:
    """Why the pickle adapter cannot copy an env: the first attribute that does not pickle."""
    for k, v in attrs.items():
        try:
            pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            return (f"{cls_name}.{k} does not pickle ({type(e).__name__}: {e}); the pickle adapter copies every "
                    "attribute of the env: give the env get_state()/set_state(), or register an adapter")
    return f"{cls_name}'s attributes do not pickle together: {type(exc).__name__}: {exc}"


def _is_ezpickle(obj: Any) -> bool:
    return any(c.__name__ == "EzPickle" for c in type(obj).__mro__)


def explain_unsupported(unwrapped: Any) -> str:
    """Why no adapter captures ``unwrapped``, and what the user can do."""
    cls = type(unwrapped)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if _is_ezpickle(unwrapped):
        why = (
            "it pickles through EzPickle, which re-runs the constructor: a pickle or deepcopy "
            "is a fresh, never-reset env, not a copy of this one"
        )
    else:
        why = "no registered adapter knows which fields its step reads"
    return (
        f"cannot capture the state of {where} exactly: {why}. Options: define get_state() and "
        "set_state(state) on the env class; register an Adapter with "
        "plan_parallel.state.register_adapter; or, for a pure-Python env, check it with "
        "plan_parallel.check_clonable(env, adapter=plan_parallel.state.GenericPickleAdapter) "
        "and then pass adapter=plan_parallel.state.GenericPickleAdapter to plan_parallel.make (or call "
        "register_adapter(GenericPickleAdapter, YourEnvClass) in the module that defines the env: a "
        "registration in a script's __main__ does not reach worker processes)"
    )
