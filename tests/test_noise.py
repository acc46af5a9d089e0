"""Quiet by default: no ALE banner, no MuJoCo deprecations of gymnasium's models, no warning for
the terminal states search steps on purpose; the user's own stepping still warns."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import gymnasium as gym
import pytest

import plan_parallel as pp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERMINATED_AGAIN = "even though this environment has already returned terminated = True"


def run_child(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="always")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=ROOT)


def terminal_cartpole_state(env: pp.PlanEnv) -> pp.State:
    state, _, _ = env.reset(seed=0)
    for _ in range(500):
        state, _, _, terminated, _, _ = env.step(0, state=state)
        if terminated:
            return state
    raise AssertionError("CartPole pushed left never terminated")


def test_process_backend_builds_and_steps_quietly() -> None:
    pytest.importorskip("ale_py")
    pytest.importorskip("mujoco")
    done = run_child("""
        import plan_parallel as pp
        for env_id in ("ALE/Pong-v5", "HalfCheetah-v5"):
            with pp.make(env_id, backend="process", n_workers=2, small_batch_inline=False) as env:
                state, _, _ = env.reset(seed=0)
                batch = env.step_batch([env.action_space.sample() for _ in range(4)], states=[state] * 4)
                assert len(batch.states) == 4
        env = pp.make("CartPole-v1", backend="process", n_workers=2, small_batch_inline=False)
        state, _, _ = env.reset(seed=0)
        for _ in range(500):
            state, _, _, terminated, _, _ = env.step(0, state=state)
            if terminated:
                break
        batch = env.step_batch([0, 1] * 4, states=[state] * 8, dt=3)
        assert batch.terminations.all()
        env.close()
        print("done")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert done.stderr == ""


def test_a_script_that_never_closes_its_envs_exits_quietly() -> None:
    """Envs left open are closed as the interpreter shuts down, when the signal module may already be torn down."""
    done = run_child("""
        import plan_parallel as pp
        vec = pp.make_vec("CartPole-v1", 4, n_workers=2)
        vec.reset(seed=0)
        vec.step(vec.action_space.sample())
        env = pp.make("CartPole-v1", n_workers=2, small_batch_inline=False)
        state, _, _ = env.reset(seed=0)
        env.step_batch([0, 1], [state, state])
        print("done")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert done.stderr == ""


def test_terminal_states_step_without_warning_in_process() -> None:
    env = pp.make("CartPole-v1", backend="inline")
    terminal = terminal_cartpole_state(env)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = env.step_batch([0, 1, 0], states=[terminal] * 3, dt=[1, 1, 5])
        rollouts = env.rollout_batch(states=[terminal] * 2, horizon=4)
        state, _, reward, terminated, _, info = env.step(1, state=terminal)
    assert [str(w.message) for w in caught if TERMINATED_AGAIN in str(w.message)] == []
    assert batch.terminations.all() and list(batch.rewards) == [0.0, 0.0, 0.0]
    assert terminated and reward == 0.0 and info["n_steps"] == 1
    assert rollouts.terminations.all()
    # the counter CartPole keeps is a plain int again in the states plan_parallel returns
    again = env.step_batch([0], states=[state]).states[0]
    assert state == env.step_batch([1], states=[terminal]).states[0]
    assert again != state
    env.close()


def test_the_users_own_stepping_still_warns() -> None:
    raw = gym.make("CartPole-v1")
    raw.reset(seed=0)
    terminated = False
    while not terminated:
        _, _, terminated, _, _ = raw.step(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raw.step(0)
    assert any(TERMINATED_AGAIN in str(w.message) for w in caught)
