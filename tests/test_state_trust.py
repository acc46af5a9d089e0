"""The workers check each state once: a chunk of states they checked before, or made, is not checked again.

A worker checks every state a chunk brings before it restores one, as the inline
backend checks the states it is given. The states of a chunk the workers
answered, and the states they return, carry the pool's token, and a chunk made
of such states tells the workers not to check them (``stats["states_checked"]``
counts the states they checked). The rows: which states are checked again,
that results stay equal to inline's, and that a state changed through its
``sim`` is checked again and refused as inline refuses it.
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from plan_parallel.errors import StateError
from tests.helpers import assert_batches_equal

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_leaks_module")]

N = 6


def _start(inline: Any) -> tuple[list, np.ndarray]:
    state, _, _ = inline.reset(seed=3)
    states = [state]
    for a in (0, 1, 1, 0, 1):
        states.append(inline.step(a, states[-1])[0])
    return states, np.array([0, 1, 0, 1, 1, 0])


def _copies(states: Any) -> list:
    """Equal states, new objects: the oracle's check leaves the originals' tokens alone (a state keeps the
    token of the last env that checked it)."""
    return pickle.loads(pickle.dumps(list(states)))


def test_states_are_checked_once_and_those_the_workers_return_are_not_checked(cartpole_pair: tuple[Any, Any]) -> None:
    inline, process = cartpole_pair
    states, actions = _start(inline)
    checked = process.stats["states_checked"]
    first = process.step_batch(actions, states)
    assert process.stats["states_checked"] == checked + N, "states the workers never saw: each checked"
    assert_batches_equal(first, inline.step_batch(actions, _copies(states)))
    again = process.step_batch(actions, states)
    assert process.stats["states_checked"] == checked + N, "the same state objects: not checked again"
    assert_batches_equal(again, first)
    nxt = process.step_batch(actions, first.states)
    assert process.stats["states_checked"] == checked + N, "states the workers made: not checked"
    assert_batches_equal(nxt, inline.step_batch(actions, _copies(first.states)))
    plans = np.tile(actions[:, None], (1, 3))
    rolled = process.rollout_batch(list(nxt.states), plans)
    assert process.stats["states_checked"] == checked + N
    oracle = inline.rollout_batch(_copies(nxt.states), plans)
    assert list(rolled.states) == list(oracle.states)
    assert np.array_equal(rolled.rewards, oracle.rewards) and np.array_equal(rolled.observations, oracle.observations)
    process.step_batch(actions, _copies(states))  # equal values, new objects: checked, as inline checks them
    assert process.stats["states_checked"] == checked + 2 * N


def test_a_state_whose_sim_was_replaced_is_checked_again_and_refused_as_inline_refuses_it(cartpole_pair: tuple[Any, Any]) -> None:
    inline, process = cartpole_pair
    states, actions = _start(inline)
    batch = process.step_batch(actions, states)
    bad = list(batch.states)
    bad[4] = pickle.loads(pickle.dumps(bad[4]))
    bad[4].sim = np.zeros(3)  # a value of another shape: the token the state carried is dropped with the old value
    errors = []
    for env, given in ((inline, _copies(bad)), (process, bad)):
        with pytest.raises(StateError) as info:
            env.step_batch(actions, given)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and errors[0].startswith("states[4]: "), errors
    good = process.step_batch(actions, batch.states)  # the env stays usable, the trusted states still run
    assert_batches_equal(good, inline.step_batch(actions, _copies(batch.states)))


def test_a_state_passed_to_two_envs_in_turn_is_checked_once_by_each(cartpole_pair: tuple[Any, Any]) -> None:
    """A state keeps the tokens of several envs' checks: another env's check does not erase the workers'."""
    inline, process = cartpole_pair
    states, actions = _start(inline)
    states = _copies(states)  # not made by the inline env: its own check marks them too
    checked = process.stats["states_checked"]
    for _ in range(3):
        assert_batches_equal(process.step_batch(actions, states), inline.step_batch(actions, states))
    assert process.stats["states_checked"] == checked + N
