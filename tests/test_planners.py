"""The reference planners: they play CartPole, are deterministic per seed, and decide the same on every backend.

Small budgets only: the targets (CartPole 500, Acrobot, MountainCar, Pong) are
shown by ``plan-parallel plan``, not by timed tests.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.cli.main import main
from plan_parallel.planners import MCTS, BeamSearch, Planner, RandomShooting, rollout, run_episode
from plan_parallel.planners.presets import make_planner

pytestmark = pytest.mark.usefixtures("no_leaks")

SMALL = {
    "mcts": lambda seed: MCTS(budget=16, leaves_per_batch=8, rollout_depth=10, seed=seed),
    "shooting": lambda seed: RandomShooting(budget=16, horizon=10, seed=seed),
    "beam": lambda seed: BeamSearch(width=4, depth=6, seed=seed),
}


@pytest.fixture
def cartpole() -> Iterator[Any]:
    with pp.make("CartPole-v1", backend="inline") as env:
        yield env


@pytest.fixture(params=["process", pytest.param("ray", marks=pytest.mark.ray)])
def cartpole_parallel(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "ray":
        pytest.importorskip("ray")
    # small_batch_inline=False: every batch really goes through the two workers
    with pp.make("CartPole-v1", backend=request.param, n_workers=2, small_batch_inline=False) as env:
        yield env


# =========================================================================== playing
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "planner",
    [
        MCTS(budget=24, leaves_per_batch=8, rollout_depth=15, seed=0),
        RandomShooting(budget=32, horizon=15, seed=0),
        RandomShooting(budget=32, horizon=15, iterations=2, seed=0),
        BeamSearch(width=16, depth=20, seed=0),
    ],
    ids=["mcts", "shooting", "cem", "beam"],
)
def test_planners_balance_cartpole_for_200_steps(cartpole: Any, planner: Planner) -> None:
    ep = run_episode(planner, cartpole, seed=0, max_steps=200)
    assert ep.steps == 200 and ep.decisions == 200, f"fell after {ep.steps} steps"
    assert not ep.terminated
    assert ep.episode_return == 200.0 == sum(ep.rewards)
    assert len(ep.actions) == len(ep.search) == 200
    assert ep.transitions > 200 and 0 < ep.env_share <= 1


@pytest.mark.timeout(60)
def test_shooting_handles_box_actions() -> None:
    with pp.make("Pendulum-v1", backend="inline") as env:
        planner = RandomShooting(budget=24, horizon=8, iterations=2, seed=3)
        ep = run_episode(planner, env, seed=3, max_steps=5)
        assert ep.steps == 5
        for a in ep.actions:
            assert isinstance(a, np.ndarray) and a.dtype == env.action_space.dtype and env.action_space.contains(a)


@pytest.mark.timeout(60)
def test_mountaincar_reaches_the_goal_with_deep_rollouts() -> None:
    with pp.make("MountainCar-v0", backend="inline") as env:
        planner = MCTS(budget=48, leaves_per_batch=16, rollout_depth=25, dt=8, seed=0)
        ep = run_episode(planner, env, seed=0)
    assert ep.terminated and ep.steps < 200, f"no goal: {ep.steps} steps"


# =========================================================================== determinism
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_episode(cartpole: Any, name: str) -> None:
    first = run_episode(SMALL[name](5), cartpole, seed=5, max_steps=40)
    again = run_episode(SMALL[name](99), cartpole, seed=5, max_steps=40)  # run_episode reseeds the planner
    assert first.actions == again.actions and first.rewards == again.rewards
    assert first.final_state == again.final_state


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_inline_and_parallel_backends_choose_the_same_actions(cartpole: Any, cartpole_parallel: Any, name: str) -> None:
    inline = run_episode(SMALL[name](1), cartpole, seed=1, max_steps=30)
    parallel = run_episode(SMALL[name](1), cartpole_parallel, seed=1, max_steps=30)
    assert inline.actions == parallel.actions
    assert inline.rewards == parallel.rewards
    assert inline.final_state == parallel.final_state
    assert [s["transitions"] for s in inline.search] == [s["transitions"] for s in parallel.search]


@pytest.mark.timeout(60)
def test_mcts_reuses_the_subtree_of_the_played_action(cartpole: Any) -> None:
    planner = MCTS(budget=32, leaves_per_batch=4, rollout_depth=5, seed=0)
    state, _, _ = cartpole.reset(seed=0)
    action = planner.plan(cartpole, state)
    assert not planner.last_stats["reused"] and planner.last_stats["simulations"] == 32
    assert sum(planner.last_stats["root_visits"]) == 32
    child, *_ = cartpole.step(action, state)
    planner.plan(cartpole, child)
    assert planner.last_stats["reused"] and planner.last_stats["reused_visits"] > 0
    other, _, _ = cartpole.reset(seed=1)
    planner.plan(cartpole, other)
    assert not planner.last_stats["reused"]
    # plan() never moves the env's current state
    assert cartpole.get_state() == other


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["rollout_batch", "step_batch"])
def test_rollout_equals_stepping_each_item(cartpole: Any, how: str) -> None:
    rng = np.random.default_rng(0)
    state, _, _ = cartpole.reset(seed=0)
    states = [state, cartpole.step(0, state)[0], cartpole.step(1, state)[0]]
    actions = rng.integers(0, 2, size=(3, 40))
    # "step_batch": an env without rollout_batch, so rollout() falls back to one step_batch per step
    target = cartpole if how == "rollout_batch" else SimpleNamespace(step_batch=cartpole.step_batch)
    out = rollout(target, states, actions, dt=2)
    assert out.rewards.shape == (3, 40) and out.rewards.dtype == np.float64
    for i, s in enumerate(states):
        rewards, steps = [], 0
        for t in range(40):
            s, _, r, term, trunc, info = cartpole.step(int(actions[i, t]), s, dt=2)
            rewards.append(r)
            steps += info["n_steps"]
            if term or trunc:
                break
        rewards += [0.0] * (40 - len(rewards))
        assert out.rewards[i].tolist() == rewards
        assert out.n_steps[i] == steps and out.terminations[i] == term and out.truncations[i] == trunc
        assert out.states[i] == s


# =========================================================================== bad input
@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "cls, kwargs, error, match",
    [
        (MCTS, {"budget": 0}, ValueError, r"budget must be an integer >= 1, got 0"),
        (MCTS, {"budget": 2.5}, TypeError, r"budget must be an integer >= 1, got float"),
        (MCTS, {"leaves_per_batch": 0}, ValueError, r"leaves_per_batch must be an integer >= 1"),
        (MCTS, {"exploration": -1.0}, ValueError, r"exploration must be a finite number in \[0.0, inf\]"),
        (MCTS, {"exploration": math.nan}, ValueError, r"exploration must be a finite number"),
        (MCTS, {"rollout_depth": -1}, ValueError, r"rollout_depth must be an integer >= 0"),
        (MCTS, {"dt": 0}, ValueError, r"dt must be an integer >= 1"),
        (MCTS, {"discount": 0.0}, ValueError, r"discount must be a finite number in \(0.0, 1.0\]"),
        (MCTS, {"discount": 1.5}, ValueError, r"discount must be a finite number in \(0.0, 1.0\]"),
        (MCTS, {"seed": -1}, ValueError, r"seed must be an integer >= 0"),
        (RandomShooting, {"horizon": 0}, ValueError, r"horizon must be an integer >= 1"),
        (RandomShooting, {"iterations": 3, "budget": 5}, ValueError, r"budget must be >= 2 \* iterations \(6\)"),
        (RandomShooting, {"elite_frac": 0.0}, ValueError, r"elite_frac must be a finite number in \(0.0, 1.0\]"),
        (RandomShooting, {"smoothing": 1.0}, ValueError, r"smoothing must be .* \[0.0, 1.0\)"),
        (RandomShooting, {"budget": True}, TypeError, r"budget must be an integer >= 1, got bool"),
        (BeamSearch, {"width": 0}, ValueError, r"width must be an integer >= 1, got 0"),
        (BeamSearch, {"depth": 1.5}, TypeError, r"depth must be an integer >= 1, got float"),
        (BeamSearch, {"discount": 0.0}, ValueError, r"discount must be a finite number in \(0.0, 1.0\]"),
    ],
)
def test_bad_parameters_raise_clear_errors(cls: type, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        cls(**kwargs)


@pytest.mark.timeout(30)
def test_wrong_action_space_or_planner_or_max_steps() -> None:
    with pp.make("Pendulum-v1", backend="inline") as env:
        state, _, _ = env.reset(seed=0)
        with pytest.raises(TypeError, match=r"MCTS needs a Discrete action space, got Box"):
            MCTS().plan(env, state)
        with pytest.raises(TypeError, match=r"BeamSearch needs a Discrete action space, got Box"):
            BeamSearch().plan(env, state)
        with pytest.raises(ValueError, match=r"max_steps must be an integer >= 1, got 0"):
            run_episode(RandomShooting(), env, max_steps=0)
        with pytest.raises(TypeError, match=r"planner must have plan\(env, state\)"):
            run_episode(object(), env)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"planner must be one of \['beam', 'mcts', 'shooting'\], got 'astar'"):
        make_planner("astar")


# =========================================================================== the command
@pytest.mark.timeout(60)
def test_plan_command_prints_a_summary_and_records(tmp_path: Any, capsys: Any) -> None:
    gif = tmp_path / "episode.gif"
    argv = ["plan", "CartPole-v1", "--backend", "inline", "--budget", "8", "--max-steps", "12", "--episodes", "2"]
    assert main(argv + ["--no-progress", "--record", str(gif)]) == 0
    out = capsys.readouterr().out
    assert "mean return 12.0 ± 0.0 over 2 episode(s)" in out
    assert "decisions/s" in out and "transitions/s" in out and "time in env calls" in out
    assert f"recorded episode 0 (13 frames) to {gif}" in out  # reset + 12 decisions
    import imageio.v3 as iio

    frames = iio.imread(gif)  # (Pillow merges identical consecutive frames)
    assert frames.ndim == 4 and frames.shape[0] > 1 and frames.shape[-1] in (3, 4)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "argv, match",
    [
        (["--planner", "shooting", "--leaves", "4"], r"--leaves does not apply to --planner shooting"),
        (["--record", "x.avi"], r"--record must name a .gif or .mp4 file"),
        (["--episodes", "0"], r"--episodes must be >= 1"),
        (["--budget", "0"], r"budget must be an integer >= 1"),
    ],
)
def test_plan_command_rejects_bad_options(argv: list[str], match: str, capsys: Any) -> None:
    assert main(["plan", "CartPole-v1", "--backend", "inline"] + argv) == 2
    import re

    assert re.search(match, capsys.readouterr().err)


@pytest.mark.timeout(30)
def test_plan_command_mcts_on_box_actions_says_what_to_use(capsys: Any) -> None:
    assert main(["plan", "Pendulum-v1", "--backend", "inline", "--planner", "mcts"]) == 2
    assert "try --planner shooting" in capsys.readouterr().err
