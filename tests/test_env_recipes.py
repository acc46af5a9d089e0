"""What a worker builds is the env the caller described: ids registered at run time, wrappers holding lambdas."""
from __future__ import annotations

import uuid
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TransformReward

import plan_parallel as pp
from tests.helpers import assert_batches_equal

pytestmark = pytest.mark.usefixtures("no_leaks")


def doubled_cartpole() -> Any:
    return TransformReward(gym.make("CartPole-v1"), lambda r: 2 * r)  # the wrapper's spec holds the lambda


@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_an_id_registered_at_run_time_is_known_to_the_workers(context: str) -> None:
    env_id = f"RuntimeCartPole{uuid.uuid4().hex[:8]}-v0"  # registered now, after every worker-side import
    gym.register(env_id, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=7)
    try:
        with pp.make(env_id, backend="inline") as ref, \
                pp.make(env_id, n_workers=2, small_batch_inline=False, context=context) as env:
            s, _, _ = ref.reset(seed=0)
            assert env.reset(seed=0)[0] == s
            actions = np.array([0, 1, 1, 0])
            assert_batches_equal(env.step_batch(actions, [s] * 4, dt=10), ref.step_batch(actions, [s] * 4, dt=10))
            assert env.spec.id == env_id and env.spec.max_episode_steps == 7
    finally:
        gym.registry.pop(env_id, None)


@pytest.mark.timeout(120)
def test_a_wrapper_holding_a_lambda_runs_on_the_workers() -> None:
    with pp.make(doubled_cartpole, backend="inline") as ref, \
            pp.make(doubled_cartpole, n_workers=2, small_batch_inline=False) as env:
        s, _, _ = ref.reset(seed=0)
        env.reset(seed=0)
        got, want = env.step_batch(np.array([0, 1]), [s, s]), ref.step_batch(np.array([0, 1]), [s, s])
        assert_batches_equal(got, want)
        assert list(got.rewards) == [2.0, 2.0]
        assert env.spec is not None and env.spec.additional_wrappers[-1].name == "TransformReward"
