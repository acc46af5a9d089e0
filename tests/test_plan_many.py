"""``plan_many``: B searches advanced together decide exactly as B planners seeded ``seed + k``, on every backend.

The contract (DESIGN): after ``planner.reset(seed)``, root k of ``plan_many``
decides as a planner with the same options reset with ``seed + k`` and asked
``plan(env, states[k])`` — its tree reuse or warm start included, over
consecutive calls. Tiny budgets on CartPole: the table checks equality, not play.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import plan_parallel as pp
from plan_parallel.planners import MCTS, BeamSearch, RandomShooting

pytestmark = pytest.mark.usefixtures("no_leaks")

PLANNERS: dict[str, Callable[[int], Any]] = {
    "mcts": lambda seed: MCTS(budget=12, leaves_per_batch=4, rollout_depth=6, seed=seed),
    "shooting": lambda seed: RandomShooting(budget=8, horizon=6, seed=seed),
    "cem": lambda seed: RandomShooting(budget=8, horizon=6, iterations=2, seed=seed),
    "beam": lambda seed: BeamSearch(width=3, depth=4, seed=seed),
}
BACKENDS = [("inline", None), ("process", 1), ("process", 2)]
SHARED = ("env_calls", "env_seconds", "seconds")  # figures of the whole call, shared by its roots
SEED, ROOTS, CALLS = 7, 3, 3


@pytest.fixture
def inline() -> Iterator[Any]:
    with pp.make("CartPole-v1", backend="inline") as env:
        yield env


@pytest.fixture(params=BACKENDS, ids=[f"{b}-W{w}" if w else b for b, w in BACKENDS])
def env(request: pytest.FixtureRequest) -> Iterator[Any]:
    backend, workers = request.param
    if backend == "inline":
        with pp.make("CartPole-v1", backend="inline") as e:
            yield e
    else:  # small_batch_inline=False: every batch really goes through the workers
        with pp.make("CartPole-v1", backend=backend, n_workers=workers, small_batch_inline=False) as e:
            yield e


def _own(stats: dict[str, Any]) -> str:
    """A root's statistics without the call-wide figures, as text (NaN Q values compare equal)."""
    return repr(sorted((k, v) for k, v in stats.items() if k not in SHARED))


def _starts(inline: Any, n: int) -> list[Any]:
    return [inline.reset(seed=100 + k)[0] for k in range(n)]


def _alone(name: str, inline: Any, seed: int, state: Any, calls: int, dt: int) -> tuple[list[Any], list[str]]:
    """One planner reset with ``seed`` deciding ``calls`` times along the chain of its own actions."""
    planner = PLANNERS[name](seed)
    actions, stats = [], []
    for _ in range(calls):
        a = planner.plan(inline, state)
        actions.append(a)
        stats.append(_own(planner.last_stats))
        state = inline.step(a, state, dt=dt)[0]
    return actions, stats


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_root_k_of_plan_many_decides_as_plan_after_reset_seed_plus_k(name: str, env: Any, inline: Any) -> None:
    planner = PLANNERS[name](0)
    planner.reset(SEED)
    states = _starts(inline, ROOTS)
    many_actions: list[list[Any]] = [[] for _ in range(ROOTS)]
    many_stats: list[list[str]] = [[] for _ in range(ROOTS)]
    for _ in range(CALLS):
        actions = planner.plan_many(env, states)
        assert len(actions) == len(planner.root_stats) == ROOTS
        assert planner.last_stats["roots"] == ROOTS
        for k, a in enumerate(actions):
            many_actions[k].append(a)
            many_stats[k].append(_own(planner.root_stats[k]))
        states = [inline.step(a, s, dt=planner.dt)[0] for a, s in zip(actions, states)]
    for k, start in enumerate(_starts(inline, ROOTS)):
        alone_actions, alone_stats = _alone(name, inline, SEED + k, start, CALLS, planner.dt)
        assert many_actions[k] == alone_actions, f"root {k}"
        assert many_stats[k] == alone_stats, f"root {k}"
    if name == "mcts":  # the table holds tree reuse too
        assert "('reused', True)" in many_stats[0][1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(PLANNERS))
def test_roots_name_which_searches_decide_when_some_episodes_ended(name: str, inline: Any) -> None:
    planner = PLANNERS[name](SEED)
    states = _starts(inline, ROOTS)
    first = planner.plan_many(inline, states)
    # root 1 ended: roots 2 and 0 go on (in another order), each from its own next state
    nxt = {k: inline.step(first[k], states[k], dt=planner.dt)[0] for k in (0, 2)}
    second = planner.plan_many(inline, [nxt[2], nxt[0]], roots=[2, 0])
    for k, a in zip((2, 0), second):
        alone_actions, _ = _alone(name, inline, SEED + k, states[k], 2, planner.dt)
        assert [first[k], a] == alone_actions, f"root {k}"


@pytest.mark.timeout(60)
def test_each_round_is_one_step_batch_and_one_rollout_over_all_roots(inline: Any) -> None:
    planner = MCTS(budget=12, leaves_per_batch=4, rollout_depth=6, seed=SEED)
    planner.plan_many(inline, _starts(inline, ROOTS))
    rounds = max(s["batches"] for s in planner.root_stats)
    assert planner.last_stats["env_calls"] <= 2 * rounds
    alone_calls = 0
    for k, start in enumerate(_starts(inline, ROOTS)):
        alone = MCTS(budget=12, leaves_per_batch=4, rollout_depth=6, seed=SEED + k)
        alone.plan(inline, start)
        alone_calls += alone.last_stats["env_calls"]
    assert planner.last_stats["env_calls"] < alone_calls
    shooting = RandomShooting(budget=8, horizon=6, iterations=2, seed=SEED)
    shooting.plan_many(inline, _starts(inline, ROOTS))
    assert shooting.last_stats["env_calls"] == 2  # one rollout call per CEM round, all roots in it
    assert shooting.last_stats["transitions"] == sum(s["transitions"] for s in shooting.root_stats)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "states, roots, error, match",
    [
        ([], None, ValueError, r"states must be a non-empty sequence of State, got an empty one"),
        ("state", None, TypeError, r"states must be a non-empty sequence of State, got State"),
        ("pair", None, TypeError, r"states\[1\] must be a State, got int: 3"),
        ("pair", [0], ValueError, r"roots must hold one int >= 0 per state \(2\), got 1"),
        ("pair", [1, 1], ValueError, r"roots must be distinct \(each is one search\), got \[1, 1\]"),
        ("pair", [0, -1], ValueError, r"roots\[1\] must be an integer >= 0, got -1"),
        ("pair", [0, 1.5], TypeError, r"roots\[1\] must be an integer >= 0, got float"),
    ],
)
@pytest.mark.parametrize("name", ["mcts", "beam"])
def test_plan_many_refuses_bad_input_naming_expected_and_given(
    name: str, inline: Any, states: Any, roots: Any, error: type, match: str
) -> None:
    state = inline.reset(seed=0)[0]
    given = {"state": state, "pair": [state, 3]}.get(states, states) if isinstance(states, str) else states
    if states == "pair" and roots is not None:
        given = [state, inline.step(0, state)[0]]
    planner = PLANNERS[name](0)
    with pytest.raises(error, match=match):
        planner.plan_many(inline, given, roots=roots)
    with pytest.raises(TypeError, match=r"state must be a State, got list"):
        planner.plan(inline, [state])


class _Failing:
    """An env whose ``fail``-th env call (step_batch, rollout_batch or their async forms) raises, else ``env``'s."""

    def __init__(self, env: Any, fail: int) -> None:
        self.env, self.fail, self.calls = env, fail, 0
        self.action_space = env.action_space

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.fail:
            raise RuntimeError("env broke")
        return getattr(self.env, name)(*args, **kwargs)

    def step_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("step_batch", *args, **kwargs)

    def rollout_batch(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("rollout_batch", *args, **kwargs)

    def step_batch_async(self, *args: Any, **kwargs: Any) -> Any:  # for planner.overlap > 1
        return self._call("step_batch_async", *args, **kwargs)

    def rollout_batch_async(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("rollout_batch_async", *args, **kwargs)


@pytest.mark.timeout(60)
def test_an_env_error_drops_the_roots_half_updated_trees(inline: Any) -> None:
    planner = PLANNERS["mcts"](SEED)
    states = _starts(inline, 2)
    actions = planner.plan_many(inline, states)
    nxt = [inline.step(a, s)[0] for a, s in zip(actions, states)]
    with pytest.raises(RuntimeError, match="env broke"):
        planner.plan_many(_Failing(inline, fail=2), nxt)
    planner.plan_many(inline, nxt)  # the trees to reuse were dropped, not left with simulations in flight
    assert [s["reused"] for s in planner.root_stats] == [False, False]
    again = PLANNERS["mcts"](SEED)
    again.plan_many(inline, states)
    again.plan_many(inline, nxt)
    assert [s["reused"] for s in again.root_stats] == [True, True]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(PLANNERS))
@pytest.mark.parametrize("overlap", [2, 3])
def test_overlapped_groups_of_roots_decide_as_plan_after_reset_seed_plus_k(name: str, overlap: int,
                                                                             inline: Any) -> None:
    """``planner.overlap``: groups of roots with their rollout calls in flight together; the same decisions."""
    planner = PLANNERS[name](SEED)
    planner.overlap = overlap
    states = _starts(inline, ROOTS + 1)
    many = []
    with pp.make("CartPole-v1", backend="process", n_workers=2, small_batch_inline=False) as env:
        for _ in range(2):
            actions = planner.plan_many(env, states)
            many.append((actions, [_own(s) for s in planner.root_stats]))
            states = [inline.step(a, s, dt=planner.dt)[0] for a, s in zip(actions, states)]
    for k, start in enumerate(_starts(inline, ROOTS + 1)):
        alone_actions, alone_stats = _alone(name, inline, SEED + k, start, 2, planner.dt)
        assert [m[0][k] for m in many] == alone_actions, f"root {k}"
        assert [m[1][k] for m in many] == alone_stats, f"root {k}"


@pytest.mark.timeout(60)
def test_an_env_error_with_overlapped_calls_in_flight_leaves_the_env_usable() -> None:
    planner = PLANNERS["mcts"](SEED)
    planner.overlap = 2
    with pp.make("CartPole-v1", backend="process", n_workers=2, small_batch_inline=False) as env:
        states = _starts(env, 4)
        with pytest.raises(RuntimeError, match="env broke"):
            planner.plan_many(_Failing(env, fail=4), states)  # a rollout sent while another is in flight
        planner.plan_many(env, states)
        assert [s["reused"] for s in planner.root_stats] == [False] * 4
        assert len(env.step_batch([0, 1], states=states[:2]).states) == 2
