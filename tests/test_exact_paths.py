"""Exactness along the paths the differential fuzzer walks (DESIGN, invariant 1): one named row per hole.

Each row failed on e06f264 (the first three are issue 50's; the others the fuzzer found), and the last
rows state the deliberate deviations from gymnasium (the README names them; the table of families in
docs/guides/states.md says them too).
The fuzzer itself is ``tests/test_fuzz.py``.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import plan_parallel as pp
from tests.envs import ArrayStateEnv, OffDtypeEnv
from tests.helpers import assert_tree_equal, sample_actions
from tests.test_faults import wait_dead

BACKENDS = {
    "inline": {"backend": "inline"},
    "process": {"backend": "process", "n_workers": 2},
    "process-workers": {"backend": "process", "n_workers": 2, "small_batch_inline": False},
}


@pytest.fixture(params=list(BACKENDS))
def options(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield BACKENDS[request.param]


def play(env: Any, ours: bool, episodes: int, steps: int, seed: int = 1) -> list:
    """``reset(seed)``, then ``reset()`` for each later episode, with the same actions: every observation and
    reward, from gymnasium's env (``ours`` False) or plan_parallel's (``ours`` True)."""
    rng = np.random.default_rng(0)
    out: list = []
    for episode in range(episodes):
        got = env.reset(seed=seed if episode == 0 else None)
        out.append(got[1] if ours else got[0])
        for _ in range(steps):
            action = sample_actions(env.action_space, 1, rng)[0]
            got = env.step(action)
            obs, reward, terminated, truncated = got[1:5] if ours else got[:4]
            out.append((obs, float(reward)))
            if terminated or truncated:
                break
    return out


def assert_same_episodes(env_id: str, options: dict[str, Any], episodes: int, steps: int, **kwargs: Any) -> None:
    want = play(gym.make(env_id, **kwargs), False, episodes, steps)
    with pp.make(env_id, **options, **kwargs) as env:
        got = play(env, True, episodes, steps)
    assert len(got) == len(want), f"{len(got)} observations against gymnasium's {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        assert_tree_equal(a, b, f"observation {k}")


# ---------------------------------------------------------------- issue 50's three holes
@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "Taxi-v4"])
def test_a_reset_without_a_seed_goes_on_from_the_current_state_on_every_backend(env_id: str, options: dict) -> None:
    """Hole 1 (toy text): worker 0 reset with its own RNG, not the current state's (FrozenLake differed at its
    second episode's 12th step)."""
    assert_same_episodes(env_id, options, episodes=4, steps=200)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env_id", ["LunarLander-v3", "BipedalWalker-v3"])
def test_a_box2d_reset_without_a_seed_equals_gymnasiums_on_every_backend(env_id: str, options: dict) -> None:
    """Hole 1 (Box2D): a seedless reset drew a new seed; gymnasium's env goes on with its RNG and its world
    (a seedless reset is now an entry of the replayed history)."""
    assert_same_episodes(env_id, options, episodes=3, steps=120)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env_id", ["LunarLander-v3", "BipedalWalker-v3"])
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_make_vec_after_an_autoreset_equals_sync_vector_env_on_box2d(env_id: str, backend: str) -> None:
    """Hole 2: equal to SyncVectorEnv until the first sub-env ended (step 63 / 66 with seed 123), then not."""
    n = 3
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
    kw = {"n_workers": 2} if backend == "process" else {}
    rng = np.random.default_rng(0)
    with pp.make_vec(env_id, n, backend=backend, **kw) as venv:
        assert_tree_equal(venv.reset(seed=123)[0], ref.reset(seed=123)[0])
        ended = 0
        for t in range(260):
            actions = sample_actions(ref.single_action_space, n, rng)
            got, want = venv.step(actions), ref.step(actions)
            for k in range(4):
                assert_tree_equal(got[k], want[k], f"step {t}, field {k}")
            ended += int(np.sum(want[2] | want[3]))
    ref.close()
    assert ended >= 1, "no sub-env ended: the row did not reach an autoreset"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "HalfCheetah-v5"])
def test_a_state_the_workers_keep_cannot_be_edited_in_place(env_id: str, options: dict) -> None:
    """Hole 3: after a state was sent three times (the workers keep it), ``s.sim[2] += 0.05`` went through, and
    the workers stepped the state as it was while inline stepped the edited one. Now every array of a state
    is read-only; an edit is made on a copy, as a new state, and every backend steps that one."""
    with pp.make(env_id, **options) as env, pp.make(env_id, backend="inline") as oracle:
        s, _, _ = env.reset(seed=0)
        actions = sample_actions(env.action_space, 4, np.random.default_rng(0))
        for _ in range(3):
            env.step_batch(actions, states=[s] * 4)
        with pytest.raises(ValueError, match="read-only"):
            s.sim[2] += 0.05
        sim = s.sim.copy()
        sim[2] += 0.05
        edited = pp.State(s.kind, sim, s.extra, s.rng, s.wrappers, s.obs)
        got = env.step_batch(actions, states=[edited] * 4)
        want = oracle.step_batch(actions, states=[edited] * 4)
        assert list(got.states) == list(want.states)
        assert_tree_equal(got.observations, want.observations)
        assert list(got.states) != list(env.step_batch(actions, states=[s] * 4).states)


@pytest.mark.timeout(120)
def test_every_array_a_state_holds_is_read_only_on_every_backend(options: dict) -> None:
    """Of every call that returns states: reset, step, step_batch, rollout_batch (return_all too), get_state;
    a batch's observations too. ``reset`` and ``step`` return observations the caller may change (copies)."""
    from tests.fuzz_api import assert_read_only, writable_arrays

    with pp.make("ALE/Pong-v5", **options) as env:
        s, obs, _ = env.reset(seed=0)
        obs[0, 0, 0] += 1  # the caller's copy
        got = env.step(1)
        got[1][0, 0, 0] += 1
        batch = env.step_batch([0, 1, 2], states=[s, got[0], s])
        roll = env.rollout_batch([s, got[0]], horizon=2, return_all=True)
        states = [s, got[0], env.get_state(), *batch.states, *roll.states, *[x for row in roll.all_states for x in row]]
        for state in states:
            assert_read_only(state)
        assert not writable_arrays([batch.observations, roll.observations, roll.all_observations], "observations")
        assert env.step_batch([], states=[]).observations.flags.writeable is False  # the fuzzer's first find


# ---------------------------------------------------------------- what the fuzzer found
@pytest.mark.timeout(120)
def test_a_seedless_reset_right_after_worker_0_died_goes_on_from_the_current_state() -> None:
    """Found by the fuzzer: kill worker 0, then ``reset()``. The reset was replayed on a new worker that had never
    been reset (the call did not carry the current state, which the dead worker held): another episode."""
    with pp.make("CartPole-v1", backend="process", n_workers=2) as env, \
            pp.make("CartPole-v1", backend="inline") as oracle:
        env.reset(seed=0)
        oracle.reset(seed=0)
        pid = env.pids[0]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        assert env.reset()[0] == oracle.reset()[0]


@pytest.mark.timeout(120)
def test_an_empty_batch_is_the_same_result_on_every_backend(options: dict) -> None:
    """Found by the fuzzer: an empty ``step_batch`` on the process backend gave a plain list of states and
    writable observations; inline, a StateBatch (its observations writable too)."""
    with pp.make(ArrayStateEnv, **options) as env:
        env.reset(seed=0)
        batch = env.step_batch(np.zeros(0, dtype=np.int64), states=[])
        assert isinstance(batch.states, pp.StateBatch) and len(batch.states) == 0
        assert batch.observations.shape == (0, 3) and not batch.observations.flags.writeable


@pytest.mark.timeout(120)
def test_an_empty_rollout_returning_all_steps_works_with_a_custom_subspace(options: dict) -> None:
    """Found by the fuzzer (a larger, random budget): MiniGrid's Dict observation holds a custom space (its
    mission), whose empty batch gymnasium makes as None; an empty ``rollout_batch(return_all=True)`` raised
    AttributeError splitting it, on every backend."""
    gym.register_envs(pytest.importorskip("minigrid"))
    with pp.make("MiniGrid-Empty-5x5-v0", **options) as env:
        env.reset(seed=0)
        roll = env.rollout_batch([], horizon=2, return_all=True)
        assert len(roll.states) == 0 and roll.all_observations["image"].shape == (0, 2, 7, 7, 3)


# ---------------------------------------------------------------- deliberate deviations, stated
def forms(value: Any) -> Any:
    """The dtype of each array (the type of anything else) in a result, nested as the result is."""
    if isinstance(value, np.ndarray):
        return str(value.dtype)
    if isinstance(value, (list, tuple)):
        return [forms(v) for v in value]
    if isinstance(value, dict):
        return {k: forms(v) for k, v in value.items()}
    return type(value).__name__


def observation_forms(options: dict[str, Any], form: str) -> dict[str, Any]:
    """Every observation the public calls hand back, as ``forms`` of it, from an OffDtypeEnv."""
    out: dict[str, Any] = {}
    with pp.make(OffDtypeEnv, form=form, **options) as env:
        state, obs, _ = env.reset(seed=1)
        out["reset"] = forms(obs)
        out["state"] = forms(state.obs)
        out["step"] = forms(env.step(1)[1])
        for dt in (1, 2):
            batch = env.step_batch([0, 1, 0, 1], [state] * 4, dt=dt)
            out[f"step_batch dt={dt}"] = forms((batch.observations, batch.states[3].obs))
        rollout = env.rollout_batch([state] * 3, [[0, 1, 1, 1]] * 3, return_all=True)
        out["rollout_batch"] = forms((rollout.observations, rollout.all_observations, rollout.states[0].obs))
    for mode in gym.vector.AutoresetMode:
        with pp.make_vec(OffDtypeEnv, 2, form=form, autoreset_mode=mode, **options) as envs:
            got = [envs.reset(seed=2)]
            got += [envs.step(np.array([1, 0])) for _ in range(3)]
            out[f"make_vec {mode.value}"] = forms(got)
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", ["float64", "int64", "float16", "list", "scalar"])
def test_observations_off_their_declared_dtype_reach_the_caller_alike_on_every_backend(options: dict,
                                                                                     form: str) -> None:
    """Issue 50's last residual: an env whose observations disagree with its declared Box(float32) hands the
    caller the same dtypes on every backend (batches and make_vec in the declared dtype, a single step's and a
    state's observation as the env made it), and make_vec's equal SyncVectorEnv's."""
    got = observation_forms(options, form)
    assert got == observation_forms(BACKENDS["inline"], form)
    for mode in gym.vector.AutoresetMode:
        ref = gym.vector.SyncVectorEnv([lambda: OffDtypeEnv(form)] * 2, autoreset_mode=mode)
        want = [ref.reset(seed=2)] + [ref.step(np.array([1, 0])) for _ in range(3)]
        ref.close()
        assert got[f"make_vec {mode.value}"] == forms(want), mode


@pytest.mark.timeout(120)
def test_ale_equals_gymnasium_without_sticky_actions_and_deviates_with_them() -> None:
    """ALE's sticky actions are drawn from the env's ``np_random`` (a C++ field ALE cannot restore): the same
    distribution, not gymnasium's random stream. Without sticky actions, seeded and seedless episodes are
    gymnasium's bit for bit."""
    gym.register_envs(pytest.importorskip("ale_py"))
    assert_same_episodes("ALE/Pong-v5", BACKENDS["inline"], episodes=2, steps=60, repeat_action_probability=0.0)
    want = play(gym.make("ALE/Pong-v5"), False, 1, 60)
    with pp.make("ALE/Pong-v5", backend="inline") as env:
        got = play(env, True, 1, 60)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(got[1:], want[1:])), "sticky actions: now equal?"


@pytest.mark.timeout(120)
def test_bipedal_walker_reset_with_a_seed_is_a_new_envs_reset() -> None:
    """gymnasium's BipedalWalker reset with a seed after earlier episodes keeps its Box2D world and steps
    differently from a new env reset with that seed; plan_parallel's seeded reset is always a new env's."""
    def episode(env: Any, ours: bool) -> list:
        return play(env, ours, 1, 100, seed=5)

    used = gym.make("BipedalWalker-v3")
    play(used, False, 2, 200, seed=1)
    fresh = episode(gym.make("BipedalWalker-v3"), False)
    with pp.make("BipedalWalker-v3", backend="inline") as env:
        play(env, True, 2, 200, seed=1)
        ours = episode(env, True)
    for k, (a, b) in enumerate(zip(ours, fresh)):
        assert_tree_equal(a, b, f"observation {k}")
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(episode(used, False)[1:], fresh[1:])), \
        "gymnasium's used env now equals a new one: the deviation is gone (update the README and docs/guides/states.md)"
