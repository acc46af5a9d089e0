"""The differential fuzzer of the public API (DESIGN, invariant 1): random call sequences, two references.

:class:`ApiMachine` drives one env under test (any backend) through random sequences of the public API
and checks every answer against two references:

- **gymnasium's own env** (``gym.make`` of the same id, or the user's class itself), for the calls
  gymnasium has: ``reset`` with and without a seed, and ``step`` from the current state, for as long as
  the env's current state is on the reference's trajectory;
- **the inline backend** (``PlanEnv``), driven through the same calls, for everything: ``step`` from
  given states, ``step_batch`` / ``rollout_batch`` from old and new states (dt, seeds, policies,
  ``return_all``), ``get_state`` / ``set_state`` / ``sync_states``, futures awaited out of order, a
  worker killed between calls, and edits of what the calls returned (states are read-only; the
  observations ``reset`` and ``step`` return are the caller's to scribble on, and are scribbled on).

:class:`VectorMachine` does the same for ``make_vec`` against ``gymnasium.vector.SyncVectorEnv``
(autoresets included). The tables that run them are in ``tests/test_fuzz.py``; their budget is
:func:`fuzz_settings`.
"""
from __future__ import annotations

import os
import signal
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from plan_parallel import State
from tests.helpers import assert_batches_equal, assert_tree_equal, sample_actions
from tests.test_faults import wait_dead

__all__ = ["ApiMachine", "Case", "ObsPolicy", "VectorCase", "VectorMachine", "fuzz_settings", "writable_arrays"]

MAX_KEPT = 24  # states the machine keeps to start later calls from
SEEDS = st.integers(0, 2**16)


def fuzz_settings(examples: int, steps: int) -> settings:
    """The budget: ``examples`` call sequences of at most ``steps`` calls each (PP_FUZZ_EXAMPLES and
    PP_FUZZ_STEPS multiply them: ``PP_FUZZ_EXAMPLES=20 PP_FUZZ_STEPS=3`` runs 20 times as many sequences,
    each three times as long)."""
    scale = float(os.environ.get("PP_FUZZ_EXAMPLES", "1"))
    length = float(os.environ.get("PP_FUZZ_STEPS", "1"))
    return settings(max_examples=max(1, round(examples * scale)), stateful_step_count=max(2, round(steps * length)),
                    deadline=None, derandomize=os.environ.get("PP_FUZZ_RANDOM") is None,
                    suppress_health_check=list(HealthCheck))


def writable_arrays(value: Any, path: str) -> list[str]:
    """Where ``value`` holds a writable ndarray (in tuples, lists and dict values)."""
    if isinstance(value, np.ndarray):
        return [path] if value.flags.writeable else []
    if isinstance(value, (tuple, list)):
        return [p for i, v in enumerate(value) for p in writable_arrays(v, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in writable_arrays(v, f"{path}[{k!r}]")]
    return []


def assert_read_only(state: State) -> None:
    """Every array ``state`` holds is read-only, and an edit of one raises."""
    names = ("sim", "extra", "rng", "wrappers", "obs")
    found = [p for n in names for p in writable_arrays(getattr(state, n), n)]
    assert not found, f"a state's arrays are writable: {found}"
    if isinstance(state.sim, np.ndarray) and state.sim.size:
        try:
            np.add(state.sim, 1, out=state.sim, casting="unsafe")
        except ValueError:
            return
        raise AssertionError("an in-place edit of a state's sim went through")


def scribble(obs: Any) -> None:
    """Edit an observation ``reset`` or ``step`` returned, in place: it is the caller's (a copy)."""
    if isinstance(obs, np.ndarray) and obs.size and obs.dtype.kind in "biuf":
        assert obs.flags.writeable, "reset/step returned a read-only observation (gymnasium's are writable)"
        obs.flat[0] = obs.flat[0] + 1 if obs.dtype.kind != "b" else not obs.flat[0]
    elif isinstance(obs, dict):
        for v in obs.values():
            scribble(v)


class ObsPolicy:
    """A rollout policy that reads the observation (a state's ``obs`` is its first input) and its RNG."""

    def __init__(self, space: spaces.Space) -> None:
        self.space = space

    def __call__(self, obs: Any, rng: np.random.Generator) -> Any:
        if isinstance(self.space, spaces.Discrete):
            arrays = [obs] if isinstance(obs, np.ndarray) else [v for v in obs.values() if isinstance(v, np.ndarray)] \
                if isinstance(obs, dict) else [np.asarray(obs)]
            h = sum(zlib.crc32(np.ascontiguousarray(a).tobytes()) for a in arrays)
            return self.space.start + (h + int(rng.integers(2))) % self.space.n
        return sample_actions(self.space, 1, rng)[0]


def gym_step(env: gym.Env, action: Any, dt: int) -> tuple[Any, float, bool, bool, dict]:
    """``dt`` steps of gymnasium's env with one action, as a plan_parallel item takes them (stops at an end)."""
    total = 0.0
    for _ in range(dt):
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if terminated or truncated:
            break
    return obs, total, bool(terminated), bool(truncated), info


def same_float(a: Any, b: Any, what: str) -> None:
    assert float(a).hex() == float(b).hex(), f"{what}: {a!r} vs {b!r}"


@dataclass
class Case:
    """One env under test and its references.

    Attributes:
        subject: the env under test (``pp.make`` of any backend).
        oracle: an inline env of the same env.
        reference: builds gymnasium's own env, or None (no gymnasium comparison).
        fresh_reference: every seeded reset is compared with a newly built reference (Box2D: gymnasium's
            own env reset again keeps its world, and BipedalWalker then steps differently; see docs/guides/states.md).
        kill: a worker may be killed between calls (the process backend).
    """

    subject: Any
    oracle: Any
    reference: Callable[[], gym.Env] | None
    fresh_reference: bool = False
    kill: bool = False


class ApiMachine(RuleBasedStateMachine):
    """Random sequences of the public API on ``case.subject``, each answer checked (module docstring)."""

    def __init__(self, case: Case) -> None:
        super().__init__()
        self.case = case
        self.kept: list[tuple[State, State]] = []  # (subject's, oracle's) states to start later calls from
        self.ref: gym.Env | None = None
        self.on_ref = False  # the subject's current state is the reference's
        self.ended = False  # the current state ended its episode

    # ------------------------------------------------------------------ helpers
    def keep(self, a: State, b: State) -> None:
        assert a == b, f"states differ in {a.diff(b)}"
        assert_read_only(a)
        assert_read_only(b)
        self.kept.append((a, b))
        if len(self.kept) > MAX_KEPT:
            del self.kept[len(self.kept) // 2]  # keep the first ones (often reused) and the newest

    def pick(self, data: st.DataObject, n: int) -> list[tuple[State, State]]:
        return [self.kept[data.draw(st.integers(0, len(self.kept) - 1), label="state")] for _ in range(n)]

    def actions(self, data: st.DataObject, n: int) -> np.ndarray:
        rng = np.random.default_rng(data.draw(SEEDS, label="actions"))
        return sample_actions(self.case.subject.action_space, n, rng)

    def seeds(self, data: st.DataObject, n: int) -> np.ndarray | None:
        if not self.case.subject.reseedable or not data.draw(st.booleans(), label="with seeds"):
            return None
        return np.array(data.draw(st.lists(SEEDS, min_size=n, max_size=n), label="seeds"), dtype=np.int64)

    def close_reference(self) -> None:
        if self.ref is not None:
            self.ref.close()
            self.ref = None

    def teardown(self) -> None:
        self.close_reference()

    # ------------------------------------------------------------------ rules
    @initialize(seed=SEEDS)
    def first_reset(self, seed: int) -> None:
        self.reset(seed)

    @rule(seed=st.none() | SEEDS)
    def reset(self, seed: int | None) -> None:
        """``reset(seed)`` / ``reset()``: equal to inline, and to gymnasium's env on its trajectory."""
        s1, o1, i1 = self.case.subject.reset(seed=seed)
        s2, o2, i2 = self.case.oracle.reset(seed=seed)
        assert_tree_equal(o1, o2)
        assert_tree_equal(i1, i2, "info")
        self.keep(s1, s2)
        if self.case.reference is not None:
            if seed is not None:
                if self.ref is None or self.case.fresh_reference:
                    self.close_reference()
                    self.ref = self.case.reference()
                self.on_ref = True
            if self.on_ref:
                assert self.ref is not None
                ref_obs, ref_info = self.ref.reset(seed=seed)
                assert_tree_equal(o1, ref_obs, "obs (gymnasium's env)")
                assert_tree_equal(i1, ref_info, "info (gymnasium's env)")
        self.ended = False
        scribble(o1)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """``step(action, state=None | given, dt)``: equal to inline; from the current state on gymnasium's
        trajectory, equal to gymnasium's env stepped ``dt`` times."""
        given = self.ended or data.draw(st.booleans(), label="from a given state")
        dt = data.draw(st.integers(1, 3), label="dt")
        action = self.actions(data, 1)[0]
        pair = self.pick(data, 1)[0] if given else (None, None)
        r1 = self.case.subject.step(action, state=pair[0], dt=dt)
        r2 = self.case.oracle.step(action, state=pair[1], dt=dt)
        assert_tree_equal(r1[1], r2[1])
        for k, what in ((2, "reward"), (3, "terminated"), (4, "truncated")):
            assert type(r1[k]) is type(r2[k]) and r1[k] == r2[k], f"{what}: {r1[k]!r} vs {r2[k]!r}"
        assert_tree_equal(r1[5], r2[5], "info")
        self.keep(r1[0], r2[0])
        if given:
            self.on_ref = False
        elif self.on_ref:
            assert self.ref is not None
            obs, reward, terminated, truncated, info = gym_step(self.ref, action, dt)
            assert_tree_equal(r1[1], obs, "obs (gymnasium's env)")
            same_float(r1[2], reward, "reward (gymnasium's env)")
            assert (r1[3], r1[4]) == (terminated, truncated), f"ends {(r1[3], r1[4])} vs gymnasium's {(terminated, truncated)}"
            assert_tree_equal({k: v for k, v in r1[5].items() if k != "n_steps"}, info, "info (gymnasium's env)")
        self.ended = bool(r1[3] or r1[4])
        scribble(r1[1])

    @rule(data=st.data())
    def step_batch(self, data: st.DataObject) -> None:
        """``step_batch`` from kept states (repeats included) or the current one, dt an int or per item, seeds."""
        n = data.draw(st.integers(0, 6), label="n")
        from_current = data.draw(st.booleans(), label="from the current state")
        pairs = [] if from_current else self.pick(data, n)
        dt: Any = data.draw(st.integers(1, 3) | st.lists(st.integers(1, 3), min_size=n, max_size=n).map(
            lambda d: np.array(d, dtype=np.int64)),
                            label="dt")
        actions, seeds = self.actions(data, n), self.seeds(data, n)
        b1 = self.case.subject.step_batch(actions, states=None if from_current else [p[0] for p in pairs], dt=dt, seeds=seeds)
        b2 = self.case.oracle.step_batch(actions, states=None if from_current else [p[1] for p in pairs], dt=dt, seeds=seeds)
        self.check_batches(b1, b2)

    def check_batches(self, b1: Any, b2: Any) -> None:
        assert_batches_equal(b1, b2)
        assert not writable_arrays(b1.observations, "observations"), "a batch's observations are writable"
        for a, b in zip(b1.states, b2.states):
            self.keep(a, b)

    @rule(data=st.data())
    def rollout_batch(self, data: st.DataObject) -> None:
        """``rollout_batch`` with actions, a policy that reads observations, or uniform actions."""
        n = data.draw(st.integers(0, 4), label="n")
        pairs = self.pick(data, n)
        horizon = data.draw(st.integers(1, 4), label="horizon")
        dt = data.draw(st.integers(1, 2), label="dt")
        how = data.draw(st.sampled_from(["actions", "policy", "uniform"]), label="actions from")
        actions = self.actions(data, n * horizon).reshape(n, horizon, *self.case.subject.action_space.shape) \
            if how == "actions" else None
        policy = ObsPolicy(self.case.subject.action_space) if how == "policy" else None
        seeds = self.seeds(data, n)
        return_all = data.draw(st.booleans(), label="return_all")
        kw = dict(dt=dt, seeds=seeds, return_all=return_all, policy=policy, horizon=None if how == "actions" else horizon)
        r1 = self.case.subject.rollout_batch([p[0] for p in pairs], actions, **kw)
        r2 = self.case.oracle.rollout_batch([p[1] for p in pairs], actions, **kw)
        assert_tree_equal(r1.observations, r2.observations)
        assert not writable_arrays([r1.observations, r1.all_observations], "observations"), "writable observations"
        for name in ("rewards", "terminations", "truncations", "n_steps"):
            assert_tree_equal(np.asarray(getattr(r1, name)), np.asarray(getattr(r2, name)), name)
        assert_tree_equal(list(r1.infos), list(r2.infos), "infos")
        if return_all:
            assert_tree_equal(r1.all_observations, r2.all_observations, "all_observations")
            for row1, row2 in zip(r1.all_states, r2.all_states):
                for a, b in zip(row1, row2):
                    assert a == b, f"all_states differ in {a.diff(b)}"
                    assert_read_only(a)
        for a, b in zip(r1.states, r2.states):
            self.keep(a, b)

    @rule(data=st.data(), sync=st.booleans())
    def set_state(self, data: st.DataObject, sync: bool) -> None:
        """``set_state`` / ``sync_states`` of a kept state; ``get_state`` then gives it back."""
        a, b = self.pick(data, 1)[0]
        current = self.case.subject.get_state()
        (self.case.subject.sync_states if sync else self.case.subject.set_state)(a)
        (self.case.oracle.sync_states if sync else self.case.oracle.set_state)(b)
        assert self.case.subject.get_state() == self.case.oracle.get_state() == a
        self.on_ref = self.on_ref and a == current
        if a != current:
            self.ended = True  # not known: the next step from the current state is from a given one

    @precondition(lambda self: hasattr(self.case.subject, "step_batch_async"))
    @rule(data=st.data())
    def futures_out_of_order(self, data: st.DataObject) -> None:
        """Two or three batches in flight, awaited in a drawn order."""
        k = data.draw(st.integers(2, 3), label="in flight")
        calls = []
        for _ in range(k):
            n = data.draw(st.integers(1, 5), label="n")
            pairs, actions = self.pick(data, n), self.actions(data, n)
            dt = data.draw(st.integers(1, 3), label="dt")
            fut = self.case.subject.step_batch_async(actions, states=[p[0] for p in pairs], dt=dt)
            calls.append((fut, self.case.oracle.step_batch(actions, states=[p[1] for p in pairs], dt=dt)))
        for i in data.draw(st.permutations(range(k)), label="order"):
            self.check_batches(calls[i][0].result(timeout=60), calls[i][1])

    @precondition(lambda self: self.case.kill)
    @rule(data=st.data())
    def kill_a_worker(self, data: st.DataObject) -> None:
        """SIGKILL a worker between calls: the next calls are answered exactly (replayed on its replacement)."""
        pid = self.case.subject.pids[data.draw(st.integers(0, self.case.subject.n_workers - 1), label="worker")]
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return  # killed by the rule before, and no call since has replaced it
        wait_dead(pid)

    @rule(data=st.data())
    def edit_a_state(self, data: st.DataObject) -> None:
        """Try to edit a kept state in place: its arrays are read-only (the next calls still start from it)."""
        assert_read_only(self.pick(data, 1)[0][0])


@dataclass
class VectorCase:
    """``make_vec`` under test, and the ``SyncVectorEnv`` of gymnasium's own envs it must equal."""

    subject: Any
    reference: Callable[[], gym.vector.VectorEnv]
    fresh_reference: bool = False  # a reset with every seed given is compared with a new reference (see Case)


class VectorMachine(RuleBasedStateMachine):
    """Random resets (seeds, none, masks) and steps of a vector env, autoresets included, against SyncVectorEnv;
    and ``set_states(get_states())``, which must change nothing."""

    def __init__(self, case: VectorCase) -> None:
        super().__init__()
        self.case = case
        self.ref = case.reference()
        self.n = case.subject.num_envs

    def teardown(self) -> None:
        self.ref.close()

    def compare(self, got: tuple, want: tuple, what: str) -> None:
        for k, (a, b) in enumerate(zip(got, want)):
            assert_tree_equal(a, b, f"{what}[{k}]")

    @initialize(seed=SEEDS)
    def first_reset(self, seed: int) -> None:
        self.compare(self.case.subject.reset(seed=seed), self.ref.reset(seed=seed), "reset")

    @rule(seed=st.none() | SEEDS | st.lists(st.none() | SEEDS, min_size=1).map(tuple))
    def reset(self, seed: Any) -> None:
        if isinstance(seed, tuple):
            seed = list((seed * self.n)[: self.n])
        if self.case.fresh_reference and seed is not None:
            if isinstance(seed, list) and None in seed:
                return  # a sub-env reset with a seed would meet a used world in gymnasium's env
            self.ref.close()
            self.ref = self.case.reference()
        self.compare(self.case.subject.reset(seed=seed), self.ref.reset(seed=seed), "reset")

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        for _ in range(data.draw(st.integers(1, 12), label="steps")):
            rng = np.random.default_rng(data.draw(SEEDS, label="actions"))
            actions = sample_actions(self.ref.single_action_space, self.n, rng)
            self.compare(self.case.subject.step(actions), self.ref.step(actions), "step")

    @rule()
    def states_round_trip(self) -> None:
        states = self.case.subject.get_states()
        for state in states:
            assert_read_only(state)
        self.case.subject.set_states(states, autoreset=self.case.subject.autoreset_envs)  # pending autoresets too
