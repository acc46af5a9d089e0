"""A worker's kept envs (one per sub-env of a vector env) never change a result.

Rows of the invariant tables:

* **exact**: an item whose start state is the value its kept env holds steps on
  without a restore, and any other start state (another sub-env's, one differing
  only in a wrapper's value) is restored; every result equals the inline
  backend's from the same states;
* **never the wrong data**: kept envs evicted by the bound, or not built yet, stay exact
  (a make_vec whose workers are killed between steps: ``test_vector``'s recovery table,
  its sticky-Pong rows).

Kept envs serve families whose states travel in a bytes form: ALE, so the envs
are Pong (RAM observations, short episodes, sticky actions drawn from the RNG).
"""
from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.factory import EnvFactory
from plan_parallel.state import State
from plan_parallel.workers import kept_envs
from plan_parallel.workers.kept_envs import KeptEnvs, fingerprint
from tests.helpers import assert_tree_equal

PONG = ("ALE/Pong-v5", {"obs_type": "ram", "max_episode_steps": 400})
N = 3


def _factory() -> EnvFactory:
    return EnvFactory(*PONG)


def _wired(states: list[State]) -> list[State]:
    """The states as a worker gets them: new objects of equal value."""
    return [pickle.loads(pickle.dumps(s)) for s in states]


def _same_results(got: tuple, want: tuple, where: str) -> None:
    """Kept envs' lists against ``EnvEngine.run_raw``'s: states, observations, rewards, flags, infos."""
    for k, name in enumerate(("states", "obs", "rewards", "terms", "truncs", "infos")):
        assert len(got[k]) == len(want[k]), f"{where}: {name}"
        for j, (g, w) in enumerate(zip(got[k], want[k])):
            if name == "states":
                assert g == w, f"{where}: {name}[{j}]"
            else:
                assert_tree_equal(g, w, f"{where}: {name}[{j}]")


@contextmanager
def _ref_and_kept(**options: float) -> Iterator[tuple[PlanEnv, KeptEnvs]]:
    """An inline env (the reference) and kept envs with a spare env of their own, all closed after."""
    ref, spare = PlanEnv(_factory()), PlanEnv(_factory())
    kept = KeptEnvs(lambda: PlanEnv(_factory()), spare, **options)  # type: ignore[arg-type]
    try:
        yield ref, kept
    finally:
        kept.close()
        spare.close()
        ref.close()


def _step_along(ref: PlanEnv, kept: KeptEnvs, actions: np.ndarray, steps: int,
                timeout: float | None = None) -> Iterator[int]:
    """Step N sub-envs from seeded resets ``steps`` times on the kept envs (calls given ``timeout``), each
    step checked against the reference's; yields after each step (its index)."""
    states = [ref.reset(seed=s)[0] for s in range(N)]
    for t in range(steps):
        got = kept.run(list(range(N)), _wired(states), actions, timeout=timeout)
        _same_results(got, engine_of(ref).run_raw(states, actions, 1), f"step {t}")
        states = list(got[0])
        yield t


@pytest.fixture(autouse=True)
def _calls_build_all_they_lack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call builds every env it lacks (and has room for), however slow the machine: a minute's budget,
    unless the call's timeout says less."""
    monkeypatch.setattr(kept_envs, "BUILD_CALL_SECONDS", 60.0)


@pytest.fixture
def envs() -> Iterator[tuple[PlanEnv, KeptEnvs]]:
    with _ref_and_kept() as both:
        yield both


@pytest.mark.timeout(60)
def test_items_from_the_states_their_envs_returned_step_on_without_a_restore(envs) -> None:
    """Step after step, each sub-env's state comes back as an equal copy: the first call builds an env for
    each key (each restores its item once), and after it nothing is restored; every result equals the
    inline backend's from the same states."""
    ref, kept = envs
    states = [ref.reset(seed=s)[0] for s in range(N)]
    rng = np.random.default_rng(0)
    for t in range(12):
        actions = rng.integers(0, 6, N)
        want = engine_of(ref).run_raw(states, actions, 1)
        got = kept.run(list(range(N)), _wired(states), actions)
        _same_results(got, want, f"step {t}")
        states = list(got[0])
        assert len(kept) == N
    assert kept.restores == N


@pytest.mark.timeout(60)
def test_a_start_state_its_env_does_not_hold_is_restored(envs) -> None:
    """Sub-envs' states given under each other's keys, and a state that differs from the held one only in
    its TimeLimit counter: each is restored, and the results equal the inline backend's."""
    ref, kept = envs
    states = [ref.reset(seed=s)[0] for s in range(N)]
    actions = np.array([1, 2, 3])
    states = list(kept.run(list(range(N)), _wired(states), actions)[0])
    restored = kept.restores
    swapped = states[1:] + states[:1]
    _same_results(kept.run(list(range(N)), _wired(swapped), actions), engine_of(ref).run_raw(swapped, actions, 1), "swapped")
    assert kept.restores == restored + N
    ends = list(engine_of(ref).run_raw(swapped, actions, 1)[0])
    later = pickle.loads(pickle.dumps(ends[0]))
    later.wrappers = tuple(w + 1 if type(w) is int else w for w in later.wrappers)
    assert later.wrappers != ends[0].wrappers and fingerprint(later) != fingerprint(ends[0])
    restored = kept.restores
    _same_results(kept.run([0], [later], actions[:1]), engine_of(ref).run_raw([later], actions[:1], 1), "counter moved")
    assert kept.restores == restored + 1


@pytest.mark.timeout(60)
def test_the_bound_replaces_the_least_recently_used_env_once_a_call_and_results_stay_exact() -> None:
    """Three keys and room for two envs: each call replaces one env (the least recently used), and every
    result equals the inline backend's."""
    with _ref_and_kept(limit=2, build_share=1.0) as (ref, kept):
        for _ in _step_along(ref, kept, np.array([0, 2, 3]), 4):
            assert len(kept) == 2
        assert kept.restores >= N + 3  # each later call: at least the key left without an env


@pytest.mark.timeout(60)
def test_replacements_wait_their_share_of_the_time_and_items_without_an_env_stay_exact() -> None:
    """With replacements allowed 0.1 % of the time, the first call replaces one env and the next calls (well
    within 1,000 times that build's duration) none: the key left without an env steps on the spare env,
    exactly."""
    with _ref_and_kept(limit=2, build_share=0.001) as (ref, kept):
        for _ in _step_along(ref, kept, np.array([4, 0, 5]), 4):
            assert len(kept) == 2
        assert kept.restores == 3 + 3  # the first call's three new envs; then key 0 on the spare each time


@pytest.mark.timeout(60)
def test_a_call_builds_within_a_quarter_of_its_timeout_and_the_next_builds_on() -> None:
    """Calls given 1 ms have no time for builds beyond their first: each builds one env while there is room
    (the rest of its items on the spare env), and every result equals the inline backend's."""
    with _ref_and_kept() as (ref, kept):
        for t in _step_along(ref, kept, np.array([1, 5, 2]), 4, timeout=0.001):
            assert len(kept) == min(t + 1, N)
