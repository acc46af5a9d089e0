"""plangym's API contract (``plangym/api_tests.py``, class ``TestPlanEnv``), translated to plan_parallel.

Each test names the plangym test it follows. The translation keeps each claim
and uses this library's calls: ``step`` and ``step_batch`` always return the new
states (plangym's ``return_state`` switch is not needed: results are named
fields), ``info["n_steps"]`` is plangym's ``info["n_step"]``, a batch from the
current state is ``states=None`` (plangym's ``[None] * N`` is refused here with a
``StateError`` naming the item), and ``clone()`` is a second env from the same
recipe. plangym claims that do not carry over, and why:

- ``test_class_attributes`` / ``test_has_properties`` / ``test_obs_shape`` /
  ``test_img_shape`` / ``test_action_shape`` / ``test_return_image``: plangym's
  own attributes (``obs_shape``, ``return_image``, ``STATE_IS_ARRAY``...); here
  the gymnasium spaces say the same, checked in ``test_spaces_describe_what_is_returned``.
- ``test_unwrapped`` / ``test_delay_setup``: plangym's class hierarchy and lazy setup.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.errors import ClosedError, StateError
from plan_parallel.state import State

pytestmark = pytest.mark.usefixtures("no_leaks_module")

ENV_IDS = ["CartPole-v1", "ALE/Pong-v5", "Hopper-v5", "FrozenLake-v1", "LunarLander-v3"]
BACKENDS = ["inline", "process"]
BATCH = 4


@pytest.fixture(scope="module")
def envs(keep_processes: Callable) -> Iterator[Callable[[str, str], Any]]:
    made: dict[tuple[str, str], Any] = {}

    def get(env_id: str, backend: str) -> Any:
        if (env_id, backend) not in made:
            if backend == "inline":
                made[(env_id, backend)] = pp.make(env_id, backend="inline")
            else:
                env = pp.make(env_id, n_workers=2, small_batch_inline=False)
                keep_processes(env.pids)
                made[(env_id, backend)] = env
        return made[(env_id, backend)]

    yield get
    for env in made.values():
        env.close()


@pytest.fixture(params=[(e, b) for e in ENV_IDS for b in BACKENDS], ids=lambda p: f"{p[0]}-{p[1]}")
def env(request: pytest.FixtureRequest, envs: Callable[[str, str], Any]) -> Any:
    return envs(*request.param)


def sample(env: Any, n: int, seed: int = 0) -> np.ndarray:
    space = env.action_space
    space.seed(seed)
    return np.array([space.sample() for _ in range(n)])


def check_step_result(env: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any, dt: int) -> None:
    """Follows plangym's ``step_tuple_test``: an observation of the space, a float reward, bool flags, n_steps <= dt."""
    assert obs in env.observation_space or np.asarray(obs).shape == env.observation_space.shape
    assert isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info, dict) and 1 <= info["n_steps"] <= dt


@pytest.mark.timeout(120)
def test_repr(env: Any) -> None:
    """Follows ``test_repr``."""
    assert str(env) == repr(env)


@pytest.mark.timeout(120)
def test_spaces_describe_what_is_returned(env: Any) -> None:
    """Follows ``TestPlangymEnv.test_obvervation_space`` / ``test_action_space`` (and ``test_obs_shape``)."""
    assert isinstance(env.observation_space, gym.Space) and isinstance(env.action_space, gym.Space)
    _, obs, _ = env.reset(seed=0)
    assert np.asarray(obs).shape == env.observation_space.shape
    assert all(a in env.action_space for a in sample(env, 3))


@pytest.mark.timeout(120)
def test_reset(env: Any) -> None:
    """Follows ``test_reset``: a state, an observation and an info dict."""
    state, obs, info = env.reset(seed=0)
    assert isinstance(state, State) and isinstance(info, dict)
    assert isinstance(obs, np.ndarray) or np.isscalar(obs)


@pytest.mark.timeout(120)
def test_get_state(env: Any) -> None:
    """Follows ``test_get_state``: after reset the env's state is the reset state."""
    state, _, _ = env.reset(seed=0)
    assert env.get_state() == state


@pytest.mark.timeout(120)
def test_set_state(env: Any) -> None:
    """Follows ``test_set_state``: a state set after a step is the state got back."""
    env.reset(seed=0)
    state = env.get_state()
    env.step(sample(env, 1)[0])
    assert env.get_state() != state  # the step moved it
    env.set_state(state)
    assert env.get_state() == state


@pytest.mark.timeout(120)
@pytest.mark.parametrize("given", [False, True], ids=["from-current", "from-given-state"])
def test_step(env: Any, given: bool) -> None:
    """Follows ``test_step``: the new state is returned and becomes the env's state."""
    state, _, _ = env.reset(seed=0)
    new_state, obs, reward, terminated, truncated, info = env.step(sample(env, 1)[0], state=state if given else None)
    assert isinstance(new_state, State) and env.get_state() == new_state
    check_step_result(env, obs, reward, terminated, truncated, info, dt=1)


@pytest.mark.timeout(120)
def test_step_dt_values(env: Any) -> None:
    """Follows ``test_step_dt_values``: dt=3 steps up to 3 times."""
    env.reset(seed=0)
    _, obs, reward, terminated, truncated, info = env.step(sample(env, 1)[0], dt=3)
    check_step_result(env, obs, reward, terminated, truncated, info, dt=3)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("states", ["None", "given"])
def test_step_batch(env: Any, states: str) -> None:
    """Follows ``test_step_batch``: N states, observations, rewards, flags and infos; the env's state unchanged."""
    state, _, _ = env.reset(seed=0)
    batch = env.step_batch(sample(env, BATCH), states=None if states == "None" else [state] * BATCH)
    assert len(batch.states) == len(batch.observations) == len(batch.rewards) == BATCH
    assert len(batch.terminations) == len(batch.truncations) == len(batch.infos) == BATCH
    assert all(isinstance(s, State) for s in batch.states)
    assert env.get_state() == state


@pytest.mark.timeout(120)
def test_step_batch_with_none_items_is_refused(env: Any) -> None:
    """Follows ``test_step_batch[None_list]``: plangym reads ``[None] * N`` as the current state; here it is an error."""
    env.reset(seed=0)
    with pytest.raises(StateError, match=r"states\[0\]: expected a plan_parallel State, got NoneType"):
        env.step_batch(sample(env, BATCH), states=[None] * BATCH)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dt", ["3", "array"])
def test_step_batch_dt_values(env: Any, dt: str) -> None:
    """Follows ``test_step_batch_dt_values``: each item steps at most its dt times."""
    env.reset(seed=0)
    dts = np.full(BATCH, 3) if dt == "3" else np.random.default_rng(0).integers(1, 4, BATCH)
    batch = env.step_batch(sample(env, BATCH), dt=3 if dt == "3" else dts)
    assert all(1 <= info["n_steps"] <= d for info, d in zip(batch.infos, dts))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "LunarLander-v3"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_clone_and_close(env_id: str, backend: str) -> None:
    """Follows ``test_clone_and_close``: a second env from the same recipe gives the same states; close is final."""
    kw: dict[str, Any] = {} if backend == "inline" else {"n_workers": 1}
    one = pp.make(env_id, backend=backend, **kw)
    two = pp.make(env_id, backend=backend, **kw)
    try:
        assert one.reset(seed=5)[0] == two.reset(seed=5)[0]
    finally:
        one.close()
        two.close()
    two.close()  # idempotent
    with pytest.raises(ClosedError):
        two.reset(seed=0)


@pytest.mark.timeout(120)
def test_get_image() -> None:
    """Follows ``test_get_image``: the env at its current state renders an image (inline: ``gym_env``)."""
    with pp.make("CartPole-v1", backend="inline", render_mode="rgb_array") as env:
        env.reset(seed=0)
        env.step(1)
        img = env.gym_env.render()
        assert isinstance(img, np.ndarray) and img.ndim == 3
