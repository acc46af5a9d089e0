"""ALE observations made in their batch rows: each item's equals the one a single step makes, on every backend."""
from __future__ import annotations

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch import BatchEnv, Tuner
from plan_parallel.env.plan_env import engine_of
from plan_parallel.factory import EnvFactory

N = 10


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["inline", "process"])
@pytest.mark.parametrize(("obs_type", "dt"), [("rgb", 1), ("rgb", 3), ("grayscale", 2), ("ram", 1)])
def test_a_batch_made_in_rows_equals_its_items_stepped_one_at_a_time(backend: str, obs_type: str, dt: int) -> None:
    kw = {"n_workers": 2, "small_batch_inline": False} if backend == "process" else {}
    with pp.make("ALE/Pong-v5", backend="inline", obs_type=obs_type) as one, pp.make(
        "ALE/Pong-v5", backend=backend, obs_type=obs_type, **kw
    ) as env:
        state, _, _ = one.reset(seed=5)
        states = [state]
        for k in range(N - 1):
            states.append(one.step(k % 6, states[-1], dt=4)[0])
        actions = (np.arange(N) * 5) % 6
        batch = env.step_batch(actions, states, dt)
        assert not batch.observations.flags.writeable
        for i in range(N):
            s, obs, reward, term, trunc, info = one.step(int(actions[i]), states[i], dt=dt)
            assert s == batch.states[i] and reward == batch.rewards[i] and info == batch.infos[i]
            assert (term, trunc) == (batch.terminations[i], batch.truncations[i])
            assert obs.dtype == batch.observations.dtype and np.array_equal(obs, batch.observations[i])
            assert np.array_equal(batch.states[i].obs, obs)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("dt", [1, 3])
def test_a_shared_batch_makes_the_callers_rows_in_its_lent_observations(dt: int) -> None:
    """Every batch shared (a worker takes chunks from the front, this process pieces from the back, made in
    the batch's lent rows): each item equals the one a single step makes; in a second batch the caller's
    rows are made again, not left from the first."""
    with pp.make("ALE/Pong-v5", backend="inline") as one, BatchEnv(
        EnvFactory("ALE/Pong-v5", {}), n_workers=1, tuner=Tuner(1, "share", cores=2)
    ) as env:
        state, _, _ = one.reset(seed=5)
        states = [state]
        for k in range(N - 1):
            states.append(one.step(k % 6, states[-1], dt=4)[0])
        for actions in ((np.arange(N) * 5) % 6, (np.arange(N) * 7 + 1) % 6):
            batch = env.step_batch(actions, states, dt)
            assert not batch.observations.flags.writeable
            for i in range(N):
                s, obs, reward, _, _, info = one.step(int(actions[i]), states[i], dt=dt)
                assert s == batch.states[i] and reward == batch.rewards[i] and info == batch.infos[i]
                assert np.array_equal(obs, batch.observations[i]) and np.array_equal(batch.states[i].obs, obs)
        assert env.stats["shared_items"] > 0 and env.stats["lent_batches"] == 2


@pytest.mark.timeout(60)
def test_only_envs_whose_observation_is_a_read_of_the_emulator_make_it_in_place() -> None:
    with pp.make("ALE/Pong-v5", backend="inline") as pong:
        assert engine_of(pong).observation_form() == (np.dtype(np.uint8), (210, 160, 3))
    with pp.make("ALE/Pong-v5", backend="inline", repeat_action_probability=0.0) as plain:
        assert engine_of(plain).observation_form() is None, "ALE's own step makes the observation: no quiet step"
    with pp.make("CartPole-v1", backend="inline") as cartpole:
        assert engine_of(cartpole).observation_form() is None


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_a_rollout_whose_steps_no_one_observes_equals_its_steps_taken_one_at_a_time(backend: str) -> None:
    """ALE rollouts with given (or uniform) actions make no observation before their last step: each item
    still equals the same actions stepped one at a time, the final observation and info included."""
    kw = {"n_workers": 2, "small_batch_inline": False} if backend == "process" else {}
    horizon, dt = 6, 2
    with pp.make("ALE/Pong-v5", backend="inline") as one, pp.make("ALE/Pong-v5", backend=backend, **kw) as env:
        state, _, _ = one.reset(seed=9)
        states = [state]
        for k in range(3):
            states.append(one.step(k + 1, states[-1], dt=4)[0])
        actions = (np.arange(len(states) * horizon).reshape(len(states), horizon) * 5) % 6
        batch = env.rollout_batch(states, actions, dt=dt)
        for i, start in enumerate(states):
            s, rewards, steps = start, [], 0
            for t in range(horizon):
                s, obs, reward, term, trunc, info = one.step(int(actions[i, t]), s, dt=dt)
                rewards.append(reward)
                steps += info["n_steps"]
                if term or trunc:
                    break
            assert s == batch.states[i] and np.array_equal(obs, batch.observations[i])
            assert list(batch.rewards[i][: len(rewards)]) == rewards and batch.n_steps[i] == steps
            assert {k: v for k, v in info.items() if k != "n_steps"} == batch.infos[i]
