"""A researcher's first hour (issue 55): what tripped a newcomer on e06f264, one row each.

The mistakes a user makes from the README and docstrings alone, each answered by a clear error (naming
what was expected and what was given, before anything is sent), or made to work.
"""
from __future__ import annotations

import subprocess
import sys

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


# ---------------------------------------------------------------- point 3: legacy Atari ids in a fresh process
def in_fresh_process(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported before it); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(300)
def test_legacy_atari_ids_work_in_a_fresh_process() -> None:
    out = in_fresh_process(
        "import plan_parallel as pp\n"
        "for env_id, backend in [('Pong-v4', 'process'), ('Breakout-v0', 'inline'), ('MsPacman-v4', 'inline')]:\n"
        "    with pp.make(env_id, backend=backend, n_workers=1, small_batch_inline=False) as env:\n"
        "        state = env.reset(seed=0)[0]\n"
        "        batch = env.step_batch([0, 1], states=[state, state])\n"
        "        print(env_id, env.kind.split('|')[0], batch.observations.shape)\n"
    )
    assert out.splitlines() == [
        "Pong-v4 ale:AtariEnv (2, 210, 160, 3)",
        "Breakout-v0 ale:AtariEnv (2, 210, 160, 3)",
        "MsPacman-v4 ale:AtariEnv (2, 210, 160, 3)",
    ], out


@pytest.mark.timeout(300)
def test_an_unknown_atari_id_is_answered_alike_whatever_was_imported_and_points_to_its_ale_id() -> None:
    code = ("import plan_parallel as pp\n"
            "try:\n"
            "    pp.make('MsPacman-v5', backend='inline')\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    plain, after_ale = in_fresh_process(code), in_fresh_process("import ale_py\n" + code)
    assert plain == after_ale, (plain, after_ale)
    assert plain.startswith("VersionNotFound ") and plain.strip().endswith("Did you mean `ALE/MsPacman-v5`?"), plain
