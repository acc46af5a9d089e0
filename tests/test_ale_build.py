"""An ALE env built by id for binding loads its ROM once, and is the same env as one built any other way.

ALE reads its sticky probability when the ROM loads (~0.2 s a load). Binding an
env moves stickiness into Python (``plan_parallel.state.families.ale_sticky``), which
once meant a second load; :meth:`EnvFactory.build_to_bind` builds with the
probability at 0 from the start. The env it makes must be exactly the env an
adapter makes of ``gym.make``'s (the callable path, which still loads twice):
same states after the same seed and actions, states of one restoring the other,
and ``EnvFactory()`` itself (gymnasium's vector envs in the bench) untouched.
"""
from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.factory import EnvFactory
from plan_parallel.state.families.ale_sticky import forget_loads, loads_without_stickiness, sticky_probability, sticky_taken_over

ACTIONS = np.random.default_rng(3).integers(0, 6, size=40)


def _ale_probability(env: Any) -> float:
    return float(env.unwrapped.ale.getFloat("repeat_action_probability"))


def _pong() -> gym.Env:
    import ale_py

    gym.register_envs(ale_py)
    return gym.make("ALE/Pong-v5")


def test_built_to_bind_the_env_draws_its_stickiness_in_python_from_its_one_load() -> None:
    env = EnvFactory("ALE/Pong-v5").build_to_bind()
    try:
        u = env.unwrapped
        assert _ale_probability(env) == 0.0, "the ROM was loaded with ALE's own stickiness"
        assert sticky_probability(u) == 0.25 and "_pp_loaded_at_zero" not in u.__dict__
    finally:
        env.close()


def test_a_plain_build_keeps_ales_own_stickiness() -> None:
    env = EnvFactory("ALE/Pong-v5")()
    try:
        assert _ale_probability(env) == 0.25
        assert not sticky_taken_over(env.unwrapped)
    finally:
        env.close()


def test_no_stickiness_asked_for_none_taken_over() -> None:
    env = EnvFactory("ALE/Pong-v5", {"repeat_action_probability": 0.0}).build_to_bind()
    try:
        assert _ale_probability(env) == 0.0 and not sticky_taken_over(env.unwrapped)
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_the_one_load_env_and_the_two_load_env_are_the_same_env() -> None:
    with pp.make("ALE/Pong-v5", backend="inline") as by_id, pp.make(_pong, backend="inline") as by_callable:
        assert by_id.kind == by_callable.kind
        a, b = by_id.reset(seed=5)[0], by_callable.reset(seed=5)[0]
        assert a == b
        for action in ACTIONS:  # sticky frames draw from each env's np_random
            a, b = by_id.step(int(action), state=a)[0], by_callable.step(int(action), state=b)[0]
            assert a == b
        # a state of one restores the other
        got = by_callable.step_batch(ACTIONS[:6], [a] * 6, dt=3)
        want = by_id.step_batch(ACTIONS[:6], [b] * 6, dt=3)
        assert list(got.states) == list(want.states)
        assert np.array_equal(got.observations, want.observations)


@pytest.mark.timeout(120)
def test_an_env_another_thread_builds_meanwhile_keeps_ales_stickiness() -> None:
    built: list[Any] = []
    with loads_without_stickiness():
        t = threading.Thread(target=lambda: built.append(EnvFactory("ALE/Pong-v5")()))
        t.start()
        t.join(60)
    assert built, "the other thread's build did not finish"
    try:
        assert _ale_probability(built[0]) == 0.25 and "_pp_loaded_at_zero" not in built[0].unwrapped.__dict__
    finally:
        built[0].close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Breakout-v5", "ALE/Adventure-v5"])  # Adventure: ALE's RNG
def test_a_seeded_reset_again_is_the_reset_a_fresh_load_makes(env_id: str) -> None:
    """The process loads the ROM once per recipe and seed and restores that load's state for the seed later,
    in any env of the recipe: the reset states, and every step after them, are those of a real load."""
    with pp.make(env_id, backend="inline") as env, pp.make(env_id, backend="inline") as other:
        forget_loads()
        first = {seed: env.reset(seed=seed)[0] for seed in (4, 9)}
        again = {seed: env.reset(seed=seed)[0] for seed in (9, 4, 9)}  # remembered loads, out of order
        elsewhere = {seed: other.reset(seed=seed)[0] for seed in (4, 9)}  # another env of the recipe
        for seed in (4, 9):
            with pp.make(env_id, backend="inline") as fresh:
                forget_loads()
                want = fresh.reset(seed=seed)[0]  # a real load
                assert first[seed] == want and again[seed] == want and elsewhere[seed] == want
                a, b = other.reset(seed=seed)[0], want
                for action in ACTIONS[:25]:
                    a, b = other.step(int(action) % other.action_space.n, state=a)[0], \
                        fresh.step(int(action) % fresh.action_space.n, state=b)[0]
                    assert a == b
