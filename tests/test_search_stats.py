"""Planners that do not fail silently: a search that saw no reward says so, and does not replay action 0 forever.

FrozenLake (not slippery) pays 1 only at the goal, 6 steps from the start: a
search that looks 1-2 steps ahead sees no reward. Before seeded tie-breaking,
MCTS and shooting then played the lowest action every time (Breakout's NOOP: the
ball was never launched, 1 point in 300 decisions of seed 0).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import plan_parallel as pp
from plan_parallel.cli.main import main
from plan_parallel.planners import MCTS, BeamSearch, RandomShooting
from plan_parallel.planners.presets import PLANNERS, PRESETS, REASONS, make_planner

BLIND: dict[str, Callable[[int], Any]] = {
    "mcts": lambda seed: MCTS(budget=8, leaves_per_batch=4, rollout_depth=1, seed=seed),
    "shooting": lambda seed: RandomShooting(budget=8, horizon=2, seed=seed),
}


@pytest.fixture
def lake() -> Iterator[Any]:
    with pp.make("FrozenLake-v1", backend="inline", is_slippery=False) as env:
        yield env


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(BLIND))
def test_a_search_that_sees_no_reward_says_so_and_draws_among_the_tied_actions(name: str, lake: Any) -> None:
    start = lake.reset(seed=0)[0]
    planner = BLIND[name](0)
    actions = []
    for _ in range(12):
        actions.append(planner.plan(lake, start))
        stats = planner.last_stats
        assert stats["zero_return_share"] == 1.0
        assert stats["tied"] > 1
        assert 1 <= stats["lookahead"] <= 3
    assert len(set(actions)) > 1, f"the same action every time: {actions}"
    again = BLIND[name](0)
    assert [again.plan(lake, start) for _ in range(12)] == actions  # the draws are seeded


@pytest.mark.timeout(60)
def test_search_stats_report_reward_and_how_far_the_search_looked() -> None:
    with pp.make("CartPole-v1", backend="inline") as env:
        state = env.reset(seed=0)[0]
        mcts = MCTS(budget=8, leaves_per_batch=4, rollout_depth=3, dt=2, seed=0)
        mcts.plan(env, state)
        s = mcts.last_stats
        assert s["zero_return_share"] == 0.0  # CartPole pays 1 a step
        assert 3 * 2 < s["lookahead"] <= (s["max_depth"] + 3) * 2
        shooting = RandomShooting(budget=4, horizon=4, seed=0)
        shooting.plan(env, state)
        assert shooting.last_stats["lookahead"] == 4 and shooting.last_stats["zero_return_share"] == 0.0
    with pp.make("FrozenLake-v1", backend="inline", is_slippery=False) as lake:
        beam = BeamSearch(width=2, depth=2, seed=0)
        beam.plan(lake, lake.reset(seed=0)[0])
        assert beam.last_stats["zero_return_share"] == 1.0 and beam.last_stats["lookahead"] == 2


@pytest.mark.timeout(60)
def test_plan_command_says_when_searches_saw_no_reward(capsys: Any) -> None:
    argv = ["plan", "FrozenLake-v1", "--kw", "is_slippery=False", "--backend", "inline", "--budget", "8",
            "--depth", "1", "--max-steps", "10", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    m = re.search(r"(\d+) of (\d+) decisions \(100%\) saw no reward in any rollout", out)
    assert m is not None and m.group(1) == m.group(2), out
    assert main(["plan", "CartPole-v1", "--backend", "inline", "--budget", "8", "--max-steps", "5", "--no-progress"]) == 0
    assert "saw no reward" not in capsys.readouterr().out


@pytest.mark.timeout(30)
def test_every_preset_value_has_a_reason_and_builds_its_planner() -> None:
    assert "ALE/Breakout-v5" in PRESETS
    for env_id, planners in PRESETS.items():
        for name, params in planners.items():
            assert name in PLANNERS
            assert params.keys() == REASONS[env_id][name].keys()
            for key, why in REASONS[env_id][name].items():
                assert len(why) > 20, f"{env_id} {name} {key}: {why!r}"
            planner = make_planner(name, env_id)
            assert all(getattr(planner, k) == v for k, v in params.items())


def test_the_plan_commands_help_names_every_preset() -> None:
    import argparse

    from plan_parallel.cli.plan import add_plan_arguments

    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    listed = (p.epilog or "").replace("\n", " ")
    assert {"ALE/Freeway-v5", "HalfCheetah-v5"} <= PRESETS.keys()
    assert [env_id for env_id in PRESETS if env_id not in listed] == []
