"""direct_step: gymnasium's default wrappers taken out of the step path, with the same results.

The claim is about gymnasium's own wrappers, so the tests use real envs built by
``gym.make`` and compare with stepping the same env through its wrappers.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import TimeLimit

import plan_parallel as pp
from plan_parallel.state.wrappers import direct_step


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
