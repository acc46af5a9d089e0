"""A researcher's first hour (issue 55): what tripped a newcomer on e06f264, one row each.

The mistakes a user makes from the README and docstrings alone, each answered by a clear error (naming
what was expected and what was given, before anything is sent), or made to work.
"""
from __future__ import annotations

import gymnasium as gym
import psutil
import pytest

import plan_parallel as pp

BACKENDS = ["inline", "process"]


def cartpole_with(n_worker: int = 1, timeouts: float = 0.0) -> gym.Env:
    """A user's env factory whose own arguments look like options of ``make``."""
    env = gym.make("CartPole-v1")
    env.unwrapped.n_worker, env.unwrapped.timeouts = n_worker, timeouts  # type: ignore[attr-defined]
    return env


# ---------------------------------------------------------------- point 4: a misspelt option of make
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("kwargs", "says"), [
    ({"n_worker": 2}, "make() got an unexpected keyword argument 'n_worker'; did you mean n_workers=?"),
    ({"timout": 5.0}, "make() got an unexpected keyword argument 'timout'; did you mean timeout=?"),
    ({"max_restart": 1}, "did you mean max_restarts=?"),
    ({"gravity": 1.0}, "CartPole-v1 (CartPoleEnv) got an unexpected keyword argument 'gravity' (it takes: "),
], ids=["n_worker", "timout", "max_restart", "gravity"])
def test_a_misspelt_option_of_make_names_the_nearest_one_before_any_worker_starts(
        backend: str, kwargs: dict, says: str) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError) as info:
        pp.make("CartPole-v1", backend=backend, n_workers=1, **kwargs)
    assert says in str(info.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # nothing was started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_argument_close_to_an_option_of_make_is_the_envs(backend: str) -> None:
    with pp.make(cartpole_with, backend=backend, n_workers=1, n_worker=3, timeouts=2.5) as env:
        env.reset(seed=0)
        assert env.step_batch([0, 1]).observations.shape == (2, 4)
    with pp.make("Pendulum-v1", backend=backend, n_workers=1, g=2.0, max_episode_steps=50) as env:
        assert env.reset(seed=0)[1].shape == (3,)
