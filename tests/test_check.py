"""check_clonable and `plan-parallel check`: passes on the supported families, diagnoses broken adapters."""
from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation

import plan_parallel as pp
from plan_parallel.cli.main import main as cli_main
from plan_parallel.state.families import ClassicControlAdapter, ToyTextAdapter
from plan_parallel.state.families.generic import GenericPickleAdapter


def _framestack_cartpole():
    return FrameStackObservation(gym.make("CartPole-v1"), 4)


CLONABLE = [
    ("CartPole-v1", {}),
    ("Acrobot-v1", {}),
    ("Pendulum-v1", {}),
    ("MountainCar-v0", {}),
    ("FrozenLake-v1", {"is_slippery": True}),
    ("Taxi-v4", {"is_rainy": True, "fickle_passenger": True}),
    ("Blackjack-v1", {}),
    ("ALE/Pong-v5", {}),  # sticky actions on (repeat_action_probability=0.25)
    ("Hopper-v5", {}),
    ("Ant-v5", {}),
    ("LunarLander-v3", {}),
    ("BipedalWalker-v3", {}),  # its Box2D world outlives resets: "copies, one step each" failed before
    ("MiniGrid-Empty-5x5-v0", {}),
    (_framestack_cartpole, {}),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env,kwargs", CLONABLE, ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", ""))
def test_check_passes_on_supported_families(env, kwargs):
    report = pp.check_clonable(env, steps=16, budget=600, **kwargs)
    assert report.ok, str(report)
    names = [c.name for c in report.checks]
    assert "fresh process, never-reset env" in names and "fresh process, reset env" in names
    assert all(c.ok for c in report.checks if c.name.startswith(("restore", "perturbed", "fresh"))), str(report)
    assert report.state_bytes > 0 and report.step_us > 0
    assert "CLONABLE" in str(report)


class ForgetsTerminationCounter(ClassicControlAdapter):
    """Broken on purpose: drops CartPole's steps_beyond_terminated."""

    def get_sim(self):
        sim, _ = super().get_sim()
        return sim, None

    def set_sim(self, sim, extra):
        self.u.state = sim


class ForgetsRng(ToyTextAdapter):
    """Broken on purpose: never restores the RNG that slippery FrozenLake draws from."""

    def restore(self, state):
        self.set_sim(state.sim, state.extra)
        self.wrappers.set(state.wrappers)


class ForgetsTimeLimit(ClassicControlAdapter):
    """Broken on purpose: leaves the TimeLimit counter where it was."""

    def restore(self, state):
        self.set_sim(state.sim, state.extra)


@pytest.mark.timeout(120)
def test_check_diagnoses_a_dropped_hidden_field():
    report = pp.check_clonable("CartPole-v1", adapter=ForgetsTerminationCounter, fresh_process=False, budget=600)
    assert not report.ok
    fail = report.first_failure
    assert fail is not None and fail.name == "termination", str(report)
    assert "steps_beyond_terminated" in report.hint or "termination" in report.hint
    assert "NOT CLONABLE" in str(report) and "diverged at step" in str(report)


@pytest.mark.timeout(120)
def test_check_diagnoses_a_missing_rng():
    report = pp.check_clonable(
        "FrozenLake-v1", adapter=ForgetsRng, fresh_process=False, is_slippery=True, steps=32, budget=600
    )
    assert not report.ok
    fail = report.first_failure
    assert fail.name == "restore" and fail.step is not None, str(report)
    assert "RNG" in report.hint or "rng" in fail.detail, str(report)


@pytest.mark.timeout(120)
def test_check_diagnoses_a_missing_wrapper_counter():
    report = pp.check_clonable("CartPole-v1", adapter=ForgetsTimeLimit, fresh_process=False, budget=600)
    assert not report.ok
    failed = {c.name for c in report.checks if c.ok is False}
    assert "perturbed restore" in failed or "time limit" in failed, str(report)
    assert "wrapper" in report.hint or "TimeLimit" in report.hint, str(report)


def test_check_reports_unsupported_env_without_raising():
    class Opaque(gym.Env):
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            self.handle = open(__file__)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return 0, {}

        def step(self, a):
            return 0, 0.0, False, False, {}

        def close(self):
            self.handle.close()

    report = pp.check_clonable(Opaque, fresh_process=False)
    assert not report.ok
    assert "cannot capture the state" in report.error and "get_state" in report.error


@pytest.mark.timeout(120)
def test_cli_check_exit_codes(capsys):
    assert cli_main(["check", "CartPole-v1", "--no-fresh-process", "--steps", "8"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1: CLONABLE" in out
    assert cli_main(["check", "FrozenLake-v1", "--kw", "is_slippery=True", "--no-fresh-process"]) == 0
    assert cli_main(["check", "CartPole-v1", "--kw", "oops"]) == 2
    assert "key=value" in capsys.readouterr().err


class HoldsALambda(gym.Env):
    """Like gymnasium's GenericTestEnv: its step is a function kept as an attribute (here a lambda)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,))
        self.action_space = gym.spaces.Discrete(2)
        self.step_func = lambda a: (np.zeros(1, dtype=np.float32), 0.0, False, False, {})

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action: int) -> tuple:
        return self.step_func(action)


def test_the_pickle_adapter_on_an_env_holding_a_lambda_reports_the_attribute() -> None:
    report = pp.check_clonable(HoldsALambda, adapter=GenericPickleAdapter, fresh_process=False, budget=50)
    assert not report.ok
    assert "HoldsALambda.step_func does not pickle" in report.error, str(report)
    assert "NOT CLONABLE" in str(report)


class CountsResets(gym.Wrapper):
    """Counts every reset of the envs it wraps (a class attribute: action replay rebuilds its envs' wrappers)."""

    resets = 0

    def reset(self, **kwargs):
        CountsResets.resets += 1
        return super().reset(**kwargs)


@pytest.mark.timeout(120)
def test_check_times_an_action_replay_restore_as_a_reset_and_a_replay() -> None:
    """The set cost of a replay state is a restore the env cannot shortcut, not a no-op on the history it holds.

    Every timed restore is a reset plus a replay of the whole history (before: restores
    alternated between a state and its copy, which the env already held: 0 resets, 'set 1.0 us').
    """
    CountsResets.resets = 0
    report = pp.check_clonable(lambda: CountsResets(gym.make("LunarLander-v3")), fresh_process=False, budget=300)
    assert report.ok, str(report)
    untimed = 50  # resets of the protocol's own checks (13 here)
    assert CountsResets.resets > untimed + 100, CountsResets.resets
    assert "set is a reset and a replay of the history: 11 steps here" in str(report), str(report)


def _module_step(self: gym.Env, action: int) -> tuple:
    return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


class BindsMethods(gym.Env):
    """As gymnasium's GenericTestEnv: ``step`` bound with ``types.MethodType`` to a module function of another name.

    The bound method pickles (by name: ``getattr(env, "_module_step")``) but does not
    unpickle, so the pickle adapter's restore raises AttributeError.
    """

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,))
        self.action_space = gym.spaces.Discrete(2)
        self.step = types.MethodType(_module_step, self)  # type: ignore[method-assign]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}


def test_a_state_that_does_not_restore_is_reported_not_raised() -> None:
    report = pp.check_clonable(BindsMethods, adapter=GenericPickleAdapter, fresh_process=False, budget=50)
    assert not report.ok
    assert "restoring a state raised AttributeError" in report.error, str(report)
    assert "_module_step" in report.error
    assert "NOT CLONABLE" in str(report)
