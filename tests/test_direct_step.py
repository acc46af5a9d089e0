"""direct_step: gymnasium's default wrappers taken out of the step path, with the same results; and ALE's
quiet step, the steps of a dt whose observations nobody reads, with the same results.

The claim is about gymnasium's own wrappers, so the tests use real envs built by
``gym.make`` and compare with stepping the same env through its wrappers.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import FrameStackObservation, TimeLimit

import plan_parallel as pp
from plan_parallel.env.plan_env import PlanEnv, engine_of
from plan_parallel.factory import EnvFactory
from plan_parallel.state import set_state
from plan_parallel.state.wrappers import direct_step
from tests.helpers import assert_batches_equal, assert_tree_equal


def _walk(step, actions) -> list[tuple]:
    return [(obs.tobytes(), float(r), bool(term), bool(trunc), sorted(info)) for obs, r, term, trunc, info in map(step, actions)]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "HalfCheetah-v5"])
def test_direct_step_equals_the_wrapped_step_through_truncation(env_id: str) -> None:
    a, b = gym.make(env_id, max_episode_steps=7), gym.make(env_id, max_episode_steps=7)
    a.reset(seed=3)
    b.reset(seed=3)
    a.action_space.seed(0)
    actions = [a.action_space.sample() for _ in range(7)]
    fast = direct_step(a)
    assert fast != a.step  # the layers were taken out
    got, want = _walk(fast, actions), _walk(b.step, actions)
    assert got == want
    assert got[-1][3] is True and not any(t for *_, t, _ in got[:-1])  # truncated at step 7, not before
    assert a.get_wrapper_attr("_elapsed_steps") == b.get_wrapper_attr("_elapsed_steps") == 7


def test_a_closed_gate_falls_back_to_the_wrapped_step() -> None:
    env = gym.make("CartPole-v1")
    with pytest.raises(ResetNeeded):
        direct_step(env)(0)  # never reset: OrderEnforcing raises, as env.step does
    env2 = gym.make("CartPole-v1")
    env2.reset(seed=0)
    step = direct_step(env2)
    assert env2.get_wrapper_attr("checked_step") is False
    step(0)  # PassiveEnvChecker's first step still runs its checks, through the wrapped step
    assert env2.get_wrapper_attr("checked_step") is True


def test_other_wrappers_and_subclasses_keep_their_own_step() -> None:
    class MyLimit(TimeLimit):
        pass

    env = MyLimit(gym.make("CartPole-v1").unwrapped, 5)
    assert direct_step(env) == env.step
    plain = gym.make("CartPole-v1", max_episode_steps=5).unwrapped
    assert direct_step(plain) == plain.step


def test_a_planning_env_truncates_where_gymnasium_does() -> None:
    """The PlanEnv path (restore, direct step, capture) truncates at max_episode_steps, resumed from states."""
    env = pp.make("CartPole-v1", max_episode_steps=4)
    state, _, _ = env.reset(seed=1)
    truncs = []
    for _ in range(4):
        state, _, _, term, trunc, _ = env.step(0, state=state)
        truncs.append(bool(trunc))
    assert truncs == [False, False, False, True]
    batch = env.step_batch(np.zeros(3, dtype=np.int64), [state] * 3)
    assert batch.truncations.all()  # a step past the limit is still truncated, as TimeLimit says


# --------------------------------------------------------------------------- ALE's quiet step
def _pong(**kw: object) -> PlanEnv:
    return PlanEnv(EnvFactory("ALE/Pong-v5", dict(kw)))


@pytest.mark.parametrize("kw, walk", [({"max_episode_steps": 12}, 11), ({"max_num_frames_per_episode": 60}, 14)],
                         ids=["TimeLimit", "ALE frame limit"])
def test_ale_steps_of_a_dt_skip_their_observations_with_the_same_results(kw: dict, walk: int) -> None:
    """Every step of an ALE item's dt but the last skips its observation and info (nobody reads them);
    items whose episode ends in the middle of their dt (gymnasium's TimeLimit, ALE's own frame limit)
    return that step's observation and info, as with every step observed."""
    quiet, loud = _pong(**kw), _pong(**kw)
    assert engine_of(quiet).adapter.quiet_step is not None
    engine_of(loud).adapter.quiet_step = None  # every step observed
    states = [quiet.reset(seed=0)[0]]
    for t in range(walk):
        states.append(quiet.step(t % 6)[0])
    items = states[-8:]
    actions = np.arange(len(items)) % 6
    got, want = quiet.step_batch(actions, items, dt=4), loud.step_batch(actions, items, dt=4)
    assert_batches_equal(got, want)
    n_steps = [info["n_steps"] for info in got.infos]
    assert got.truncations.any() and any(0 < n < 4 for n in n_steps)  # ended mid-dt, and observed there
    rolled = [env.rollout_batch(items, dt=3, horizon=3, seeds=np.arange(len(items))) for env in (quiet, loud)]
    assert_tree_equal(rolled[0].observations, rolled[1].observations)
    assert list(rolled[0].states) == list(rolled[1].states)
    np.testing.assert_array_equal(rolled[0].rewards, rolled[1].rewards)
    for env in (quiet, loud):
        env.close()


def test_a_wrapper_that_reads_observations_keeps_every_step_observed() -> None:
    """Under FrameStackObservation every observation is stacked: no quiet step, and dt=3 stacks all three."""
    def stacked() -> gym.Env:
        return FrameStackObservation(gym.make("ALE/Pong-v5", obs_type="ram"), 3)

    env = PlanEnv(stacked)
    assert engine_of(env).adapter.quiet_step is None
    s0 = env.reset(seed=1)[0]
    batch = env.step_batch([2], [s0], dt=3)
    plain = stacked()
    set_state(plain, s0)
    for _ in range(3):
        obs = plain.step(2)[0]
    np.testing.assert_array_equal(batch.observations[0], obs)
    env.close()
