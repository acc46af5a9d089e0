"""The adapters tried after the simulator families (registered on import, in this order).

- Box2D and other envs with no capturable simulator: action replay -- reset
  seed, options and the action history; restoring costs O(depth) steps;
- user envs that define ``get_state()`` / ``set_state(state)``;
- pure-Python envs proven faithful (MiniGrid): a pickle of the unwrapped ``__dict__``;
- and, when nothing fits, :func:`explain_unsupported` says why.
"""
from __future__ import annotations

import hashlib
import pickle
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

import plan_parallel.state.families  # noqa: F401 - registered first: these adapters are tried after them
from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, Pickled, State, register_adapter

__all__ = ["ActionLog", "ActionReplayAdapter", "GenericPickleAdapter", "UserMethodsAdapter", "explain_unsupported"]


# --------------------------------------------------------------------------- action replay (Box2D)
class ActionLog:
    """An immutable, structure-sharing list of actions (a cons cell) with a digest of its whole history.

    Appending is O(1) and a child state shares its parent's history. ``key`` is a
    digest chained over every action so far (BLAKE2b of the parent's key and the
    action's bytes): two logs are equal exactly when their keys are, and a copy
    that travelled through pickle is recognised as the history an env holds.
    Pickles as a flat list, so deep histories do not hit the recursion limit.
    """

    __slots__ = ("action", "key", "length", "parent")

    def __init__(self, parent: ActionLog | None, action: Any) -> None:
        self.parent = parent
        self.action = action
        self.length: int = 1 if parent is None else parent.length + 1
        h = hashlib.blake2b(b"" if parent is None else parent.key, digest_size=16)
        if isinstance(action, np.ndarray):
            h.update(f"{action.dtype.str}{action.shape}".encode())
            h.update(np.ascontiguousarray(action).tobytes())
        else:
            h.update(repr(action).encode())
        self.key: bytes = h.digest()

    def ancestor(self, length: int) -> ActionLog | None:
        """The log of this history's first ``length`` actions (None for 0)."""
        node: ActionLog | None = self
        while node is not None and node.length > length:
            node = node.parent
        return node

    def to_list(self) -> list:
        out = []
        node: ActionLog | None = self
        while node is not None:
            out.append(node.action)
            node = node.parent
        out.reverse()
        return out

    @staticmethod
    def from_list(actions: list) -> ActionLog | None:
        node = None
        for a in actions:
            node = ActionLog(node, a)
        return node

    def __reduce__(self):
        return (ActionLog.from_list, (self.to_list(),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ActionLog):
            return NotImplemented
        return self.key == other.key

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return self.length


class ActionReplayAdapter(Adapter):
    """Exact state by replay: the reset seed, reset options and every action since.

    For simulators whose state cannot be read and written (Box2D). Restoring
    resets with the recorded seed and replays the actions: it costs a reset plus
    one step per recorded action, so O(depth). When the target history extends
    the env's current one, only the new actions are replayed. RNG, wrapper state
    and everything else are re-derived by the replay itself.
    """

    name = "replay"
    includes_wrappers = True
    reseedable = False

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._seed: int | None = None
        self._options: dict | None = None
        self._log: ActionLog | None = None
        self._was_reset = False

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        return type(unwrapped).__module__.startswith("gymnasium.envs.box2d")

    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        if seed is None:
            gen = getattr(self.u, "_np_random", None)
            # Derived from the env's RNG when it has one, so an unseeded reset after a
            # seeded one stays reproducible.
            seed = int(gen.integers(2**31)) if gen is not None else secrets.randbits(31)
        self._seed, self._options, self._log = int(seed), options, None
        return self._reset_as_new(int(seed), options)

    def _reset_as_new(self, seed: int, options: dict | None) -> tuple[Any, dict]:
        """``env.reset(seed, options)`` as on a new env.

        gymnasium's Box2D envs keep their ``b2World`` across resets, and a world
        that ran earlier episodes steps differently (BipedalWalker diverged three
        resets in): a replayed history would depend on the env it lands on. Before
        every reset but the first, the env's bodies are destroyed and its world
        replaced by the world of a newly built env of the same class and arguments.
        """
        u = self.u
        if self._was_reset and hasattr(u, "_destroy") and hasattr(u, "_ezpickle_args") and hasattr(u, "world"):
            u._destroy()
            u.world = type(u)(*u._ezpickle_args, **u._ezpickle_kwargs).world
        self._was_reset = True
        return self.env.reset(seed=seed, options=options)

    def make_step(self) -> Callable[[Any], tuple]:
        step = self.env.step

        def logged_step(action: Any) -> tuple:
            out = step(action)
            self._log = ActionLog(self._log, np.array(action) if isinstance(action, np.ndarray) else action)
            return out

        return logged_step

    def get_sim(self) -> tuple[Any, Any]:
        if self._seed is None:
            raise StateError("the env has no replayable history yet: reset it first")
        return (self._seed, self._options, self._log), None

    def capture(self, prev: State | None = None, obs: Any = None) -> State:
        sim, _ = self.get_sim()
        return State(self.kind, sim, None, None, (), obs)

    def restore(self, state: State) -> None:
        seed, options, log = state.sim
        if seed == self._seed and options == self._options:
            # Does the target extend (or equal) the history the env holds? Then replay only
            # the tail. Compared by digest: the target may be a copy from another process.
            held = self._log
            held_len = 0 if held is None else held.length
            if log is not None and log.length >= held_len:
                base = log.ancestor(held_len)
                same = base is None if held is None else base is not None and base.key == held.key
            else:
                same = log is None and held is None
            if same:
                tail = []
                node = log
                while node is not None and node.length > held_len:
                    tail.append(node.action)
                    node = node.parent
                step = self.env.step
                for a in reversed(tail):
                    step(a)
                self._log = log
                return
        self._reset_as_new(seed, options)
        step = self.env.step
        for a in ([] if log is None else log.to_list()):
            step(a)
        self._seed, self._options, self._log = seed, options, log

    def reseed(self, seed: int) -> None:
        """Refused: a replayed state re-derives its RNG from the reset seed, so a reseed would be lost.

        Raises:
            StateError: always.
        """
        raise StateError(f"per-item seeds cannot reseed {type(self.u).__name__}: its state is an action-replay "
                         "history, which re-derives the RNG from the reset seed")

    def check_sim(self, sim: Any) -> str | None:
        if not (isinstance(sim, tuple) and len(sim) == 3 and isinstance(sim[0], int)):
            return f"expected (seed, options, ActionLog), got {sim!r:.100}"
        if sim[2] is not None and not isinstance(sim[2], ActionLog):
            return f"expected an ActionLog history, got {type(sim[2]).__name__}"
        return None


register_adapter(ActionReplayAdapter)


# --------------------------------------------------------------------------- user envs
class UserMethodsAdapter(Adapter):
    """An env whose unwrapped class defines ``get_state()`` and ``set_state(state)`` (plangym's convention).

    Whatever ``get_state`` returns is the simulator part; the env's RNG and the
    wrapper stack are captured as for every family. ``get_state`` must return a
    value the env will not mutate later (a copy).
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
        "and then register_adapter(GenericPickleAdapter, YourEnvClass)"
    )
