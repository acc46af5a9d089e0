"""Action replay: the state of a simulator that cannot be read or written (Box2D), as its history.

A state is the reset seed, the reset options and every action since
(:class:`ActionLog`), where a reset without a seed is one more entry of the
history (:class:`SeedlessReset`): gymnasium's env goes on from its RNG and its
world there, and so does the replay. Restoring replays them: a reset plus one
step (or seedless reset) per entry, O(depth). Two things keep that cheap and exact:

- an env extends the history it holds when the target continues it (histories
  are compared by a chained digest, so a copy from another process is recognised);
- an adapter given its env's factory keeps up to :data:`HELD_HISTORIES` envs,
  each holding one history (the sub-envs of a vector env, the recent nodes of a
  search), and restores into the one that holds the longest prefix of the target.
"""
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, State, register_adapter

__all__ = ["HELD_HISTORIES", "ActionLog", "ActionReplayAdapter", "SeedlessReset"]

HELD_HISTORIES = 8  # envs an adapter with a factory keeps, each holding one history


@dataclass(frozen=True)
class SeedlessReset:
    """An entry of a history that is not an action: ``env.reset(options=options)`` without a seed."""

    options: dict | None = None


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
        # The actions (stacked into one array when they are arrays of one shape and dtype) and
        # every node's key: unpickling builds the nodes without hashing the history again.
        nodes = []
        node: ActionLog | None = self
        while node is not None:
            nodes.append(node)
            node = node.parent
        nodes.reverse()
        actions: Any = [n.action for n in nodes]
        first = actions[0]
        if isinstance(first, np.ndarray) and first.ndim > 0 and all(
                type(a) is np.ndarray and a.shape == first.shape and a.dtype == first.dtype for a in actions):
            actions = np.array(actions)  # one array, as a stack (faster than np.stack for small rows)
        return (ActionLog.rebuild, (actions, b"".join(n.key for n in nodes)))

    @staticmethod
    def rebuild(actions: Any, keys: bytes) -> ActionLog | None:
        """The log :meth:`__reduce__` pickled: its actions and, for each node, the key it had."""
        if len(keys) != 16 * len(actions):
            raise StateError(f"a pickled ActionLog of {len(actions)} actions carries {len(keys)} key bytes, "
                             f"expected {16 * len(actions)}")
        node = None
        new = ActionLog.__new__
        for i, a in enumerate(actions):
            parent, node = node, new(ActionLog)
            node.parent = parent
            node.action = a
            node.length = i + 1
            node.key = keys[16 * i:16 * i + 16]
        return node

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ActionLog):
            return NotImplemented
        return self.key == other.key

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return self.length


@dataclass
class HeldHistory:
    """An env and the history it holds (``seed`` None: never reset)."""

    env: Any
    seed: int | None = None
    options: dict | None = None
    log: ActionLog | None = None
    was_reset: bool = False

    def steps_to(self, seed: int, options: dict | None, log: ActionLog | None) -> int | None:
        """Steps to replay to reach the target history from this one, or None when this is not a prefix of it."""
        if self.seed != seed or self.options != options:
            return None
        held_len = 0 if self.log is None else self.log.length
        if log is None:
            return 0 if self.log is None else None
        if log.length < held_len:
            return None
        base = log.ancestor(held_len)
        if self.log is None:
            return log.length
        return log.length - held_len if base is not None and base.key == self.log.key else None


class ActionReplayAdapter(Adapter):
    """Exact state by replay: the reset seed, reset options and every action since.

    For simulators whose state cannot be read and written (Box2D). RNG, wrapper
    state and everything else are re-derived by the replay itself. See the module
    docstring for what keeps restores cheap.
    """

    name = "replay"
    includes_wrappers = True
    reseedable = False

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._held = HeldHistory(env)  # the env this adapter steps now
        self._spares: list[HeldHistory] = []  # other envs, most recently used first
        self._factory: Callable[[], Any] | None = None
        self._bound_env = env

    @classmethod
    def accepts(cls, unwrapped: Any) -> bool:
        return type(unwrapped).__module__.startswith("gymnasium.envs.box2d")

    def use_factory(self, factory: Callable[[], Any]) -> None:
        self._factory = factory

    def close(self) -> None:
        for h in [self._held, *self._spares]:
            if h.env is not self._bound_env:
                h.env.close()
        self._spares = []
        self._held = HeldHistory(self._bound_env)

    def reset(self, seed: int | None, options: dict | None) -> tuple[Any, dict]:
        h = self._held
        if seed is None and h.seed is not None:  # on from the history the env holds, in the same world
            out = h.env.reset(options=options)
            h.log = ActionLog(h.log, SeedlessReset(options))
            return out
        if seed is None:
            gen = getattr(self.u, "_np_random", None)
            # A first reset without a seed: derived from the env's RNG when it has one
            # (seeded by the user), so that it stays reproducible.
            seed = int(gen.integers(2**31)) if gen is not None else secrets.randbits(31)
        return self._reset_as_new(int(seed), options)

    def _reset_as_new(self, seed: int, options: dict | None) -> tuple[Any, dict]:
        """``env.reset(seed, options)`` as on a new env.

        gymnasium's Box2D envs keep their ``b2World`` across resets, and a world
        that ran earlier episodes steps differently (BipedalWalker diverged three
        resets in): a replayed history would depend on the env it lands on. Before
        every reset but the first, the env's bodies are destroyed and its world
        replaced by the world of a newly built env of the same class and arguments.
        """
        u, h = self.u, self._held
        if h.was_reset and hasattr(u, "_destroy") and hasattr(u, "_ezpickle_args") and hasattr(u, "world"):
            u._destroy()
            u.world = type(u)(*u._ezpickle_args, **u._ezpickle_kwargs).world
        h.was_reset = True
        h.seed, h.options, h.log = seed, options, None
        return self.env.reset(seed=seed, options=options)

    def make_step(self) -> Callable[[Any], tuple]:
        def logged_step(action: Any) -> tuple:
            h = self._held  # looked up per step: a restore may switch to another held env
            out = h.env.step(action)
            h.log = ActionLog(h.log, np.array(action) if isinstance(action, np.ndarray) else action)
            return out

        return logged_step

    def get_sim(self) -> tuple[Any, Any]:
        h = self._held
        if h.seed is None:
            raise StateError("the env has no replayable history yet: reset it first")
        return (h.seed, h.options, h.log), None

    def capture(self, prev: State | None = None, obs: Any = None) -> State:
        sim, _ = self.get_sim()
        return State(self.kind, sim, None, None, (), obs)

    def restore(self, state: State) -> None:
        seed, options, log = state.sim
        steps = self._held.steps_to(seed, options, log)
        if steps != 0 and self._factory is not None:
            self._switch(seed, options, log, steps)
            steps = self._held.steps_to(seed, options, log)
        h = self._held
        if steps is None:
            self._reset_as_new(seed, options)
            tail = [] if log is None else log.to_list()
        else:
            held_len = 0 if h.log is None else h.log.length
            tail = []
            node = log
            while node is not None and node.length > held_len:
                tail.append(node.action)
                node = node.parent
            tail.reverse()
        step, reset = h.env.step, h.env.reset
        for a in tail:
            if type(a) is SeedlessReset:
                reset(options=a.options)
            else:
                step(a)
        h.log = log

    def _switch(self, seed: int, options: dict | None, log: ActionLog | None, steps: int | None) -> None:
        """Make current the held env cheapest to bring to the target (a new one while fewer than allowed)."""
        best, best_steps = None, steps
        for k, h in enumerate(self._spares):
            s = h.steps_to(seed, options, log)
            if s is not None and (best_steps is None or s < best_steps):
                best, best_steps = k, s
        if best is None and best_steps is None:  # nobody holds a prefix: replay on a new or the oldest env
            if self._factory is not None and len(self._spares) + 1 < HELD_HISTORIES:
                self._spares.append(HeldHistory(self._factory()))
            if not self._spares:
                return
            best = len(self._spares) - 1
        if best is not None:
            chosen = self._spares.pop(best)
            self._spares.insert(0, self._held)
            self._held = chosen
            self.env, self.u = chosen.env, chosen.env.unwrapped

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
