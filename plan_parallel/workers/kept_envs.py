"""A worker's envs kept at the states of a vector env's sub-envs: one env per key, stepped on without a restore.

A vector env's step sent to the workers carries each item's key (its sub-env's
index). The worker steps the item on the env of that key. When the item starts
from the state that env returned at its last step (the same value, come back
from the caller), the env holds it already and steps on without a restore: ALE's
``restoreState`` is ~100 us of a ~300 us Pong step with frameskip 1. Any other start state is
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
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plan_parallel.env.loops import step_each
from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.state import State

__all__ = ["BUILD_CALL_SECONDS", "BUILD_SHARE", "MAX_KEPT", "KeptEnvs", "fingerprint"]

MAX_KEPT = 64  # envs a worker keeps at most (an ALE env ~1.1 MB); the least recently used is closed
# While a worker has room for more envs, a call builds one for each key that has none, until it has run
# this long (a quarter of the call's timeout, when that is less; the first build of a call goes ahead
# either way, as when a call built one at most): the builds stall the first calls, not calls all along.
# (make_vec, 8 Pongs on W=2, default options, 60 steps untimed then 540 timed, against AsyncVectorEnv in
# shuffled turns, three runs: built one a call in at most a quarter of the time, the timed steps ran
# 0.58-0.60 of its throughput, with 5-6 turns of 5 steps over 100 ms, up to 673; built at once,
# 0.89-0.94, and none. A Pong env takes ~150-300 ms to build, nearly all of it ALE's ``loadROM``, which
# holds the GIL: a thread building one stalled the worker's calls all the same when the cores were busy.)
BUILD_CALL_SECONDS = 1.0
# With no room, building an env (replacing the least recently used) takes at most about this share of
# a worker's time: after a build of d seconds the next waits d (1 / share - 1): a vector env of more
# sub-envs than ``MAX_KEPT`` does not rebuild envs at every step.
BUILD_SHARE = 0.25


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
    """Envs built with ``build()`` for keys, each with the state it holds (and that state's :func:`fingerprint`);
    at most ``limit`` of them.

    While there are fewer than ``limit``, a call builds an env for each key that has none, the second
    and later ones only until it has run :data:`BUILD_CALL_SECONDS` or a quarter of its timeout; then
    one env at most (replacing the least recently used one), and only when such builds have taken no
    more than ``build_share`` of the time since the first (see :data:`BUILD_SHARE`). The items of keys
    without an env step on ``spare`` (the worker's own env), restored, as they would without kept envs.
    """

    def __init__(self, build: Callable[[], PlanEnv], spare: PlanEnv, limit: int = MAX_KEPT,
                 build_share: float = BUILD_SHARE) -> None:
        self._build = build
        self._spare = spare
        self._limit = limit
        self._build_share = build_share
        self._next_build = 0.0  # no env is built before this time.monotonic()
        self._kept: OrderedDict[int, tuple[PlanEnv, State | None, tuple[bytes, bytes] | None]] = OrderedDict()
        self.restores = 0  # items that started from a state their env did not hold (telemetry, and for tests)

    def __len__(self) -> int:
        return len(self._kept)

    def _new(self, key: int) -> tuple[PlanEnv, None, None]:
        """A new env for ``key``; when there are ``limit``, the least recently used one is closed first, and
        the next such replacement waits (:data:`BUILD_SHARE`)."""
        full = len(self._kept) >= self._limit
        while len(self._kept) >= self._limit:
            _, (old, _, _) = self._kept.popitem(last=False)
            old.close()
        t0 = time.monotonic()
        kept = self._kept[key] = (self._build(), None, None)
        if full:
            self._next_build = t0 + (time.monotonic() - t0) / self._build_share
        return kept

    def run(self, keys: Sequence[int], states: Sequence[State], actions: Any, rows: np.ndarray | None = None,
            timeout: float | None = None) -> tuple:
        """One step (dt=1) of each item from ``states[j]`` with ``actions[j]`` (checked), on the env of
        ``keys[j]`` (its observation made in ``rows[j]`` when given); lists as :meth:`EnvEngine.run_raw`. On
        an env error the exception carries the failing item's index (:func:`~plan_parallel.errors.failed_item`),
        and that env holds no known state. ``timeout``: the seconds the caller gives the call (None: no limit)."""
        start = time.monotonic()
        budget = BUILD_CALL_SECONDS if timeout is None else min(BUILD_CALL_SECONDS, timeout / 4)
        replaced = start < self._next_build  # (as if this call had replaced one already)
        built = False

        def one(j: int) -> tuple:
            nonlocal replaced, built
            key = keys[j]
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
            elif len(self._kept) < self._limit:
                if not built or time.monotonic() - start < budget:
                    kept, built = self._new(key), True
            elif not replaced:
                kept, replaced = self._new(key), True
            row = None if rows is None else rows[j]
            if kept is None:  # no env for this key, and none is built now
                self.restores += 1
                return engine_of(self._spare).step_from(states[j], actions[j], row)
            return self._step_kept(key, kept, states[j], actions[j], row)

        return step_each(len(states), one)

    def _step_kept(self, key: int, kept: tuple[PlanEnv, State | None, tuple[bytes, bytes] | None], state: State,
                   action: Any, row: np.ndarray | None) -> tuple:
        """One step of ``state`` on ``key``'s env, without a restore when the env holds that value."""
        env, held, held_print = kept
        self._kept[key] = (env, None, None)  # unknown until the step returns (it may raise)
        if held is not None and held_print is not None and held_print == fingerprint(state):
            state = held  # the very object the env holds: no restore
        else:
            self.restores += 1
        out = engine_of(env).step_from(state, action, row)
        self._kept[key] = (env, out[0], fingerprint(out[0]))
        return out

    def close(self) -> None:
        """Close every kept env."""
        kept, self._kept = self._kept, OrderedDict()
        for env, _, _ in kept.values():
            env.close()
