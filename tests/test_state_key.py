"""State.key() and hash: equal states have equal keys, in any process; a set of states deduplicates."""
from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.state import State
from plan_parallel.state.values import value_digest

FAMILIES = ["CartPole-v1", "ALE/Pong-v5", "Hopper-v5", "FrozenLake-v1", "LunarLander-v3", "MiniGrid-Empty-5x5-v0"]
KEY_OF_A_RESET = (
    "import plan_parallel as pp, sys\n"
    "with pp.make(sys.argv[1], backend='inline') as env:\n"
    "    print(env.reset(seed=0)[0].key().hex())\n"
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", FAMILIES)
def test_equal_states_have_equal_keys_and_hashes(env_id: str) -> None:
    with pp.make(env_id, backend="inline") as env:
        s, _, _ = env.reset(seed=0)
        again, _, _ = env.reset(seed=0)
        actions = np.array([env.action_space.sample()] * 2 + [env.action_space.sample()])
        batch = env.step_batch(actions, [s] * 3)
        copy = pickle.loads(pickle.dumps(batch.states[0]))
        assert again == s and again.key() == s.key() and hash(again) == hash(s)
        assert copy == batch.states[0] and copy.key() == batch.states[0].key()
        assert batch.states[0].key() != s.key()  # a step changed the state
        assert len({s, again, batch.states[0], batch.states[1]}) == 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
def test_a_key_is_the_same_in_another_process(env_id: str) -> None:
    with pp.make(env_id, backend="inline") as env:
        here = env.reset(seed=0)[0].key().hex()
    there = subprocess.run([sys.executable, "-c", KEY_OF_A_RESET, env_id], capture_output=True, text=True,
                           timeout=100, check=True).stdout.strip()
    assert there == here


def test_digests_agree_with_equality() -> None:
    """Values equal under values_equal digest alike (numbers by value, dicts in any order); others differ."""
    same = [((1, 2.5), (np.int64(1), np.float64(2.5))), ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
            (np.arange(3.0), np.arange(3.0)), (1, 1.0), (float("nan"), float("nan"))]
    for a, b in same:
        assert value_digest(a) == value_digest(b), (a, b)
    other = [((1, 2), [1, 2]), (np.arange(3.0), np.arange(3.0).astype(np.float32)), (0.1, np.float32(0.1)),
             ("1", 1), (b"x", "x"), (None, 0)]
    for a, b in other:
        assert value_digest(a) != value_digest(b), (a, b)


def test_a_state_built_by_hand_hashes_too() -> None:
    s = State("classic:X", np.zeros(4), None, None, (0,))
    assert hash(s) == hash(State("classic:X", np.zeros(4), None, None, (0,)))
    assert s in {State("classic:X", np.zeros(4), None, None, (0,))}
