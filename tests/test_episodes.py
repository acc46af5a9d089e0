"""Episodes played together (one ``plan_many`` a round) are each the episode ``run_episode`` plays with its seed.

Weak planners on CartPole, so the episodes end at different steps and the
rounds lose roots as they go; ``max_steps`` cuts the longest ones.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import plan_parallel as pp
from plan_parallel.cli.main import main
from plan_parallel.planners import MCTS, BeamSearch, RandomShooting, run_episode, run_episodes

pytestmark = pytest.mark.usefixtures("no_leaks")

WEAK: dict[str, Callable[[], Any]] = {
    "mcts": lambda: MCTS(budget=3, leaves_per_batch=2, rollout_depth=2),
    "shooting": lambda: RandomShooting(budget=2, horizon=3),
    "beam": lambda: BeamSearch(width=1, depth=2),
}
SEEDS = [3, 0, 5, 8]  # not in order, not consecutive
SHARED = ("env_calls", "env_seconds", "seconds")  # figures of a whole plan_many call


@pytest.fixture(params=[("inline", None), ("process", 2)], ids=["inline", "process-W2"])
def env(request: pytest.FixtureRequest) -> Iterator[Any]:
    backend, workers = request.param
    with pp.make("CartPole-v1", backend=backend, n_workers=workers, small_batch_inline=False) as e:
        yield e


def _own(search: list[dict[str, Any]]) -> str:
    return repr([sorted((k, v) for k, v in s.items() if k not in SHARED) for s in search])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(WEAK))
def test_each_episode_played_together_is_the_one_played_alone_with_its_seed(name: str, env: Any) -> None:
    together = run_episodes(WEAK[name](), env, seeds=SEEDS, max_steps=40)
    assert [ep.seed for ep in together] == SEEDS
    assert len({ep.steps for ep in together}) > 1, "the episodes should end at different steps"
    for ep in together:
        alone = run_episode(WEAK[name](), env, seed=ep.seed, max_steps=40)
        assert ep.actions == alone.actions and ep.rewards == alone.rewards, f"seed {ep.seed}"
        assert (ep.steps, ep.decisions, ep.episode_return) == (alone.steps, alone.decisions, alone.episode_return)
        assert (ep.terminated, ep.truncated) == (alone.terminated, alone.truncated)
        assert ep.final_state == alone.final_state
        assert _own(ep.search) == _own(alone.search)
        assert ep.transitions == alone.transitions
        assert 0 < ep.env_seconds and 0 < ep.plan_seconds <= ep.wall_seconds


@pytest.mark.timeout(60)
def test_one_after_the_other_plays_the_same_episodes_and_takes_a_plan_only_planner() -> None:
    with pp.make("CartPole-v1", backend="inline") as env:
        together = run_episodes(WEAK["beam"](), env, seeds=SEEDS, max_steps=40)
        apart = run_episodes(WEAK["beam"](), env, seeds=SEEDS, max_steps=40, together=False)
        assert [ep.actions for ep in together] == [ep.actions for ep in apart]

        class PlanOnly:  # the Planner interface without plan_many
            dt, meter, last_stats = 1, WEAK["beam"]().meter, {}

            def reset(self, seed: int | None = None) -> None:
                pass

            def plan(self, env: Any, state: Any) -> int:
                return 0

        eps = run_episodes(PlanOnly(), env, seeds=[0, 1], max_steps=5, together=False)
        assert [ep.actions for ep in eps] == [[0] * ep.decisions for ep in eps] and eps[0].decisions > 0
        with pytest.raises(TypeError, match=r"planner must have plan_many.*pass together=False"):
            run_episodes(PlanOnly(), env, seeds=[0, 1])


@pytest.mark.timeout(60)
def test_the_callback_sees_the_live_env_at_its_episodes_state() -> None:
    seen: list[tuple[int | None, int]] = []
    with pp.make("CartPole-v1", backend="inline") as env:

        def check(ep: Any) -> None:
            if ep.decisions:
                assert env.get_state() == ep.final_state
            seen.append((ep.seed, ep.decisions))

        eps = run_episodes(WEAK["mcts"](), env, seeds=[0, 1, 2], max_steps=8, callback=check)
    assert sorted(seen) == sorted((ep.seed, d) for ep in eps for d in range(ep.decisions + 1))


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "seeds, error, match",
    [
        ([], ValueError, r"seeds must be a non-empty sequence of distinct ints >= 0, got an empty one"),
        ([1, 1], ValueError, r"seeds must be distinct \(one episode each\), got \[1, 1\]"),
        ([0, -2], ValueError, r"seeds\[1\] must be an integer >= 0, got -2"),
        ([0, None], TypeError, r"seeds\[1\] must be an integer >= 0, got NoneType"),
        (5, TypeError, r"seeds must be a sequence of distinct ints >= 0, got int: 5"),
    ],
)
def test_run_episodes_refuses_bad_seeds(seeds: Any, error: type, match: str) -> None:
    with pp.make("CartPole-v1", backend="inline") as env:
        for together in (True, False):
            with pytest.raises(error, match=match):
                run_episodes(WEAK["beam"](), env, seeds=seeds, together=together)


def _rows(out: str) -> list[list[str]]:
    """The episode rows of the summary: seed, return, steps, decisions, end."""
    return [line.split()[1:6] for line in out.splitlines() if re.match(r"\s+\d+\s+\d+\s+-?\d", line)]


@pytest.mark.timeout(90)
def test_plan_command_plays_the_episodes_together_with_the_results_of_playing_them_apart(capsys: Any) -> None:
    argv = ["plan", "CartPole-v1", "--backend", "process", "--workers", "2", "--budget", "3", "--depth", "2",
            "--leaves", "2", "--max-steps", "30", "--episodes", "3", "--seed", "4", "--no-progress"]
    assert main(argv) == 0
    together = capsys.readouterr().out
    assert main(argv + ["--sequential"]) == 0
    apart = capsys.readouterr().out
    assert "3 episode(s) together" in together and "3 episode(s) one after the other" in apart
    assert _rows(together) == _rows(apart) and [r[0] for r in _rows(together)] == ["4", "5", "6"]
    mean = re.search(r"mean return (\S+) ± (\S+) over 3 episode\(s\)", together)
    assert mean is not None and mean.group(0) in apart
