"""A worker's envs kept at the states of a vector env's sub-envs: one env per key, stepped on without a restore.

A vector env's step sent to the workers carries each item's key (its sub-env's
index). The worker steps the item on the env of that key. When the item starts
from the state that env returned at its last step (the same value, come back
from the caller), the env holds it already and steps on without a restore: ALE's
``restoreState`` is ~100 us of a ~300 us Pong step. Any other start state is
restored first, so a result never depends on which env ran it, nor on what that
env held: the same value restored sets what the env holds already (a captured
state is complete).

"The same value" is checked bitwise: the simulator's bytes form
(:func:`~plan_parallel.state.sim_blobs.register_sim_blobs`) and the pickled rest
(extra, RNG, wrappers). Only families whose states have a bytes form keep envs
(for the others a restore costs about as much as the check).
"""
from __future__ import annotations

import pickle
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from plan_parallel.env import PlanEnv
from plan_parallel.state import State

__all__ = ["MAX_KEPT", "KeptEnvs", "fingerprint"]

MAX_KEPT = 64  # envs a worker keeps at most (an ALE env ~1.1 MB); the least recently used is closed


def fingerprint(state: State) -> tuple[bytes, bytes] | None:
    """The state's value, bitwise: its simulator's bytes form and its pickled extra, RNG and wrappers; None
    for a family without a bytes form, or a value that does not pickle (it is restored, never matched)."""
    try:
        blob = state.sim_blob()
        if blob is None:
            return None
        return blob, pickle.dumps((state.kind, state.extra, state.rng, state.wrappers), pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


class KeptEnvs:
    """Envs built with ``build()`` on first use of a key, each with the state it holds (and that state's
    :func:`fingerprint`); at most ``limit`` of them."""

    def __init__(self, build: Callable[[], PlanEnv], limit: int = MAX_KEPT) -> None:
        self._build = build
        self._limit = limit
        self._kept: OrderedDict[int, tuple[PlanEnv, State | None, tuple[bytes, bytes] | None]] = OrderedDict()
        self.restores = 0  # items that started from a state their env did not hold (telemetry, and for tests)

    def __len__(self) -> int:
        return len(self._kept)

    def _env(self, key: int) -> tuple[PlanEnv, State | None, tuple[bytes, bytes] | None]:
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        while len(self._kept) >= self._limit:
            _, (old, _, _) = self._kept.popitem(last=False)
            old.close()
        kept = self._kept[key] = (self._build(), None, None)
        return kept

    def run(self, keys: Sequence[int], states: Sequence[State], actions: Any) -> tuple:
        """One step (dt=1) of each item from ``states[j]`` with ``actions[j]`` (checked), on the env of
        ``keys[j]``; lists as :meth:`PlanEnv.run_raw`. On an env error the exception carries the failing
        item's index as ``_pp_item``, and that env holds no known state."""
        n = len(states)
        ends: list[State | None] = [None] * n
        obs: list[Any] = [None] * n
        rewards, terms, truncs = [0.0] * n, [False] * n, [False] * n
        infos: list[dict] = [{}] * n
        j = 0
        try:
            for j in range(n):
                key, state = keys[j], states[j]
                env, held, held_print = self._env(key)
                self._kept[key] = (env, None, None)  # unknown until the step returns (it may raise)
                if held is not None and held_print is not None and held_print == fingerprint(state):
                    state = held  # the very object the env holds: no restore
                else:
                    self.restores += 1
                ends[j], obs[j], rewards[j], terms[j], truncs[j], info = env.step_from(state, actions[j])
                end = ends[j]
                self._kept[key] = (env, end, fingerprint(end))  # type: ignore[arg-type]
                infos[j] = {**info, "n_steps": 1} if info else {"n_steps": 1}  # a copy: the env may reuse its dict
        except Exception as e:
            e._pp_item = j  # type: ignore[attr-defined]
            raise
        return ends, obs, rewards, terms, truncs, infos

    def close(self) -> None:
        """Close every kept env."""
        kept, self._kept = self._kept, OrderedDict()
        for env, _, _ in kept.values():
            env.close()
