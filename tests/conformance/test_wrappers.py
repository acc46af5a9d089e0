"""Follows gymnasium tests/wrappers/vector: vector wrappers over make_vec behave as over SyncVectorEnv.

Not applicable:
- test_array_conversion.py (all): the Jax/Torch/array-API converters need jax or
  torch, not installed here; they touch only observations already returned.
- test_human_rendering.py: opens a pygame window (no display here).
- test_record_video.py: writes videos with moviepy; the frames it records come
  from ``render()``, ported in test_sync_async.py::test_render.
- test_dict_info_to_list.py::test_update_info, ::test_errors and the argument
  checks of test_normalize_*.py / test_transform_*.py (bad epsilon, gamma,
  mismatched spaces): they test the wrapper's own code on hand-made infos or
  arguments, with no vector env stepping.
- test_vector_wrappers.py's CarRacing rows (GrayscaleObservation, ResizeObservation,
  ReshapeObservation, DtypeObservation): the same comparison as the rows kept,
  on an env too slow to build for a 2-minute suite.
"""
from __future__ import annotations

from collections.abc import Callable
from re import escape as re_escape
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import wrappers
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.conformance.envs import SpaceSampleEnv, TenStepEnv

pytestmark = pytest.mark.timeout(120)

W = wrappers.vector


def drop_time(infos: Any) -> None:
    """Remove every ``episode["t"]`` (wall-clock seconds) from infos, dicts or lists of dicts."""
    if isinstance(infos, list):
        for info in infos:
            drop_time(info)
    elif isinstance(infos, dict):
        if isinstance(infos.get("episode"), dict):
            infos["episode"].pop("t", None)
        for value in infos.values():
            drop_time(value)


def run_both(envs: Any, ref: Any, n_steps: int, seed: int = 123) -> None:
    """Reset both with ``seed`` and step them ``n_steps`` times with the same actions; every return must be equal."""
    assert envs.action_space == ref.action_space and envs.observation_space == ref.observation_space
    assert envs.single_observation_space == ref.single_observation_space
    assert data_equivalence(envs.reset(seed=seed), ref.reset(seed=seed))
    ref.action_space.seed(seed)
    for _ in range(n_steps):
        actions = ref.action_space.sample()
        out, want = envs.step(actions), ref.step(actions)
        drop_time(out[4])  # RecordEpisodeStatistics' wall-clock times differ, as between two runs
        drop_time(want[4])
        for a, b in zip(out, want, strict=True):
            assert data_equivalence(a, b), (a, b)
        if ref.metadata["autoreset_mode"] == AutoresetMode.DISABLED and (want[2] | want[3]).any():
            mask = want[2] | want[3]
            assert data_equivalence(envs.reset(options={"reset_mask": mask}), ref.reset(options={"reset_mask": mask}))


EQUIV = {  # (env id, vector wrapper, single-env wrapper, kwargs): as upstream's table, without CarRacing
    "FlattenObservation": ("CartPole-v1", {}),
    "RescaleObservation": ("CartPole-v1", {"min_obs": np.array([0, -np.inf, 0, -np.inf]),
                                           "max_obs": np.array([1, np.inf, 1, np.inf])}),
    "ClipAction": ("MountainCarContinuous-v0", {}),
    "RescaleAction": ("MountainCarContinuous-v0", {"min_action": 1, "max_action": 2}),
    "ClipReward": ("CartPole-v1", {"min_reward": -0.25, "max_reward": 0.75}),
}


@pytest.mark.parametrize("name", list(EQUIV))
def test_vector_wrapper_equivalence(make_pp: Any, name: str) -> None:
    """Follows gymnasium tests/wrappers/vector/test_vector_wrappers.py::test_vector_wrapper_equivalence.

    The vector wrapper over make_vec equals make_vec over sub-envs with the
    single-env wrapper (env_fns), on every step of a run crossing episode ends.
    Upstream parametrizes autoreset_mode without passing it on: NEXT_STEP only.
    """
    mode = AutoresetMode.NEXT_STEP
    env_id, kwargs = EQUIV[name]
    wrapped_vec = getattr(W, name)(make_pp(env_id, 3, autoreset_mode=mode), **kwargs)
    fns = [lambda: getattr(wrappers, name)(gym.make(env_id), **kwargs) for _ in range(3)]
    vec_wrapped = make_pp(fns, autoreset_mode=mode)
    run_both(wrapped_vec, vec_wrapped, 40)


def sync(env_id: str, n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode=mode)


WRAPPERS: dict[str, tuple[Callable[[Any], Any], str]] = {
    # name: (wrap a vector env, the upstream test it follows)
    "RecordEpisodeStatistics": (W.RecordEpisodeStatistics,
                                "test_record_episode_statistics.py::test_record_episode_statistics"),
    "NormalizeObservation": (W.NormalizeObservation, "test_normalize_observation.py::test_wrapper_equivalence"),
    "NormalizeReward": (W.NormalizeReward, "test_normalize_reward.py::test_against_wrapper"),
    "DictInfoToList": (W.DictInfoToList, "test_dict_info_to_list.py::test_usage_in_vector_env"),
    "TransformObservation": (lambda e: W.TransformObservation(e, lambda o: o * 2), "test_transform_observation.py::"
                             "test_transform"),
    "TransformAction": (lambda e: W.TransformAction(e, lambda a: 1 - a), "test_transform_action.py::"
                        "test_action_space_from_single_action_space"),
}


POPPED_MASK = pytest.mark.xfail(strict=True, reason=(
    "SyncVectorEnv.reset pops 'reset_mask' from the caller's options dict, so RecordEpisodeStatistics (which "
    "reads the mask after the reset) resets every sub-env's counters; make_vec leaves the caller's dict alone "
    "and the wrapper resets only the masked ones (see test_episode_statistics_disabled_partial_reset)"))


@pytest.mark.parametrize("name,mode", [
    pytest.param(n, m, marks=POPPED_MASK if (n, m) == ("RecordEpisodeStatistics", AutoresetMode.DISABLED) else ())
    for n in WRAPPERS for m in AutoresetMode])
def test_wrapper_over_make_vec(make_pp: Any, name: str, mode: AutoresetMode) -> None:
    """Follows gymnasium tests/wrappers/vector/ (the test named in WRAPPERS[name]), against SyncVectorEnv.

    Also test_record_episode_statistics.py::test_episode_statistics_with_autoreset_mode for the three modes.
    """
    wrap, _ = WRAPPERS[name]
    try:
        ref = wrap(sync("CartPole-v1", 3, mode))
    except ValueError as exc:  # the wrapper refuses this mode: it must refuse make_vec's alike
        with pytest.raises(ValueError, match=re_escape(str(exc))):
            wrap(make_pp("CartPole-v1", 3, autoreset_mode=mode))
        return
    envs = wrap(make_pp("CartPole-v1", 3, autoreset_mode=mode))
    run_both(envs, ref, 60)
    if name == "RecordEpisodeStatistics":
        assert envs.episode_count == ref.episode_count > 0
        assert list(envs.return_queue) == list(ref.return_queue)
    if name == "NormalizeObservation":
        assert np.array_equal(envs.obs_rms.mean, ref.obs_rms.mean)
    ref.close()


def test_vectorize_dict_to_box_obs(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_vectorize_transform.py::test_vectorize_dict_to_box_obs (its idea).

    A single-env observation wrapper vectorised by VectorizeTransformObservation.
    """
    def wrap(e: Any) -> Any:
        return W.VectorizeTransformObservation(e, wrappers.TransformObservation,
                                               func=lambda o: o[:2], observation_space=gym.spaces.Box(
                                                   -np.inf, np.inf, shape=(2,), dtype=np.float32))
    envs, ref = wrap(make_pp("CartPole-v1", 2)), wrap(sync("CartPole-v1", 2))
    assert envs.single_observation_space.shape == (2,)
    run_both(envs, ref, 20)
    ref.close()


def test_episode_statistics_disabled_partial_reset(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_record_episode_statistics.py::test_episode_statistics_with_autoreset_mode.

    DISABLED mode with partial resets, without comparing to SyncVectorEnv (see
    POPPED_MASK): every recorded episode length is the number of steps the
    sub-env took since its reset, and the returns equal the lengths (CartPole's reward is 1).
    """
    envs = W.RecordEpisodeStatistics(make_pp("CartPole-v1", 3, autoreset_mode=AutoresetMode.DISABLED))
    envs.reset(seed=5)
    steps = np.zeros(3, dtype=int)
    seen = 0
    for _ in range(80):
        _, _, terms, truncs, infos = envs.step(np.ones(3, dtype=np.int64))
        steps += 1
        dones = terms | truncs
        if dones.any():
            assert np.array_equal(infos["episode"]["l"][dones], steps[dones])
            assert np.array_equal(infos["episode"]["r"][dones], steps[dones].astype(float))
            seen += int(dones.sum())
            envs.reset(options={"reset_mask": dones.copy()})
            steps[dones] = 0
    assert seen >= 3 and envs.episode_count == seen


# Upstream's create_env of test_normalize_observation.py / test_transform_observation.py: a Box(3)
# observation sampled at every step (SpaceSampleEnv draws from the env's seeded RNG, and truncates at step 5).
BOX3 = gym.spaces.Box(low=np.array([0, -10, -5], dtype=np.float32), high=np.array([10, -5, 10], dtype=np.float32))


def test_normalization(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_observation.py::test_normalization.

    Seed 0, not upstream's 123: with SpaceSampleEnv's samples seed 123 misses the
    tolerance (mean -0.171 against atol 0.15) on SyncVectorEnv as on make_vec; the
    observations are also compared with SyncVectorEnv's.
    """
    envs = W.NormalizeObservation(make_pp(SpaceSampleEnv, 2, space=BOX3))
    ref = W.NormalizeObservation(SyncVectorEnv([lambda: SpaceSampleEnv(BOX3) for _ in range(2)]))
    observations = []
    for e in (envs, ref):
        e.reset(seed=0)
        e.action_space.seed(0)
        for _ in range(250):
            e.step(e.action_space.sample())
        observations.append(np.array([e.step(e.action_space.sample())[0] for _ in range(100)]))
    assert np.array_equal(observations[0], observations[1])
    assert np.allclose(observations[0].mean(axis=(0, 1)), np.zeros(3), atol=0.15)
    assert np.allclose(observations[0].var(axis=(0, 1)), np.ones(3), atol=0.2)
    ref.close()


def test_update_running_mean(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_observation.py::test_update_running_mean."""
    envs = W.NormalizeObservation(make_pp(SpaceSampleEnv, 2, space=BOX3))
    assert envs.update_running_mean
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(100):
        envs.step(envs.action_space.sample())
    envs.update_running_mean = False
    mean, var = np.copy(envs.obs_rms.mean), np.copy(envs.obs_rms.var)
    for _ in range(10):
        envs.step(envs.action_space.sample())
    assert np.all(mean == envs.obs_rms.mean) and np.all(var == envs.obs_rms.var)
    envs.update_running_mean = True
    for _ in range(10):
        envs.step(envs.action_space.sample())
    assert np.any(mean != envs.obs_rms.mean) and np.any(var != envs.obs_rms.var)


def test_normalized_observation_space_and_dtype(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_observation.py::test_observation_space_and_dtype."""
    envs = W.NormalizeObservation(make_pp(SpaceSampleEnv, 2, space=BOX3))
    space = envs.single_observation_space
    assert space.dtype == np.float32 and np.all(space.low == -np.inf) and np.all(space.high == np.inf)
    obs, _ = envs.reset(seed=123)
    assert obs.dtype == np.float32
    obs, *_ = envs.step(envs.action_space.sample())
    assert obs.dtype == np.float32


def test_normalize_reward_functionality(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_reward.py::test_functionality."""
    envs = W.NormalizeReward(make_pp(TenStepEnv, 3))
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(100):
        envs.step(envs.action_space.sample())
    envs.reset()
    forward_rets, accumulated = [], np.zeros(3)
    for _ in range(100):
        _, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
        accumulated = accumulated * 0.9 * (terminated | truncated) + reward
        forward_rets.append(accumulated)
    assert np.allclose(np.std(np.asarray(forward_rets), axis=0), 0.89, atol=0.1)


def test_normalize_reward_equivalence_with_wrapper(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_reward.py::test_equivalence_with_wrapper.

    The vector wrapper over make_vec against the single-env wrapper inside SyncVectorEnv
    (make_vec's sub-envs are states, so the single-env side is the reference).
    """
    per_env = SyncVectorEnv([lambda: wrappers.NormalizeReward(TenStepEnv())])
    per_env.reset(seed=42)
    envs = W.NormalizeReward(make_pp(TenStepEnv, 1))
    envs.reset(seed=42)
    per_env.action_space.seed(42)
    for _ in range(50):
        actions = per_env.action_space.sample()
        per_env.step(actions)
        envs.step(actions)
    want = per_env.envs[0].return_rms
    assert envs.return_rms.count == want.count
    assert np.allclose(envs.return_rms.mean, want.mean, rtol=1e-4)
    assert np.allclose(envs.return_rms.var, want.var, rtol=1e-4)
    per_env.close()


def test_same_step_autoreset_updates_return_rms(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_normalize_reward.py::test_same_step_autoreset_updates_return_rms.

    Upstream's 4-step episodes of reward 1 are CartPole's first 4 steps (max_episode_steps=4).
    """
    envs = W.NormalizeReward(make_pp("CartPole-v1", 2, autoreset_mode=AutoresetMode.SAME_STEP, max_episode_steps=4))
    envs.reset(seed=123)
    envs.action_space.seed(123)
    ends = 0
    for _ in range(12):
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        dones = terminated | truncated
        ends += int(dones.sum())
        assert np.all(envs.accumulated_reward[dones] == 0)
    assert ends == 6 and np.isclose(envs.return_rms.count, 12 * 2)


def test_transform_observation_space_from_single_space(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_transform_observation.py::
    test_observation_space_from_single_observation_space."""
    shifted = gym.spaces.Box(low=BOX3.low + 100, high=BOX3.high + 100)
    envs = W.TransformObservation(make_pp(SpaceSampleEnv, 5, space=BOX3), func=lambda x: x + 100,
                                  single_observation_space=shifted)
    assert envs.single_observation_space == shifted
    assert envs.observation_space.shape == (5, 3) and envs.observation_space.dtype == np.float32
    assert (envs.observation_space.low == np.array([[100, 90, 95]] * 5, dtype=np.float32)).all()
    assert (envs.observation_space.high == np.array([[110, 95, 110]] * 5, dtype=np.float32)).all()
    obs, _ = envs.reset(seed=0)
    assert obs in envs.observation_space
    obs, *_ = envs.step(envs.action_space.sample())
    assert obs in envs.observation_space


def test_vectorize_box_to_dict_action(make_pp: Any) -> None:
    """Follows gymnasium tests/wrappers/vector/test_vectorize_transform.py::test_vectorize_box_to_dict_action.

    Upstream only steps; here every return is also compared with SyncVectorEnv's.
    """
    box = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    def wrap(e: Any) -> Any:
        return W.VectorizeTransformAction(e, wrappers.TransformAction, func=lambda x: x["key"],
                                          action_space=gym.spaces.Dict({"key": box}))
    envs = wrap(make_pp(SpaceSampleEnv, 2, space=box))
    ref = wrap(SyncVectorEnv([lambda: SpaceSampleEnv(box) for _ in range(2)]))
    run_both(envs, ref, 12)
    ref.close()
