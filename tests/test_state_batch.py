"""StateBatch: a step_batch's states as a Sequence[State], made on first read, equal to the inline backend's."""
from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.state import State
from plan_parallel.state.state_batch import StateBatch

N = 12


def _batches(env_id: str) -> tuple[pp.StepBatch, pp.StepBatch]:
    """The same batch stepped inline and on 2 process workers (every batch on them)."""
    with pp.make(env_id, backend="inline") as inline, pp.make(
        env_id, backend="process", n_workers=2, small_batch_inline=False
    ) as proc:
        start, _, _ = inline.reset(seed=3)
        inline.action_space.seed(0)
        states = [start]
        for _ in range(N - 1):
            states.append(inline.step(inline.action_space.sample(), states[-1])[0])
        actions = np.array([inline.action_space.sample() for _ in range(N)])
        return inline.step_batch(actions, states), proc.step_batch(actions, states)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5", "HalfCheetah-v5"])
def test_a_batch_from_the_workers_reads_as_the_inline_backends_states(env_id: str) -> None:
    want, got = _batches(env_id)
    assert isinstance(got.states, StateBatch) and isinstance(want.states, StateBatch)
    assert len(got.states) == N and got.states == want.states == list(want.states)
    assert got.states[N - 1] is got.states[-1], "made once, the same object after"
    assert all(isinstance(s, State) for s in got.states)
    assert got.states[2:5] == [want.states[k] for k in range(2, 5)]
    for k, s in enumerate(got.states):  # each state's observation is its row of the batch's, read-only
        assert np.shares_memory(s.obs, got.observations)
        assert np.array_equal(s.obs, got.observations[k]) and not s.obs.flags.writeable
    with pytest.raises(IndexError):
        got.states[N]
    with pytest.raises(TypeError):
        hash(got.states)


@pytest.mark.timeout(120)
def test_a_state_batch_pickles_as_its_states_and_steps_again_alike() -> None:
    want, got = _batches("ALE/Pong-v5")
    again = pickle.loads(pickle.dumps(got.states))
    assert again == want.states and isinstance(again, StateBatch)
    with pp.make("ALE/Pong-v5", backend="inline") as env:
        acts = np.zeros(N, dtype=np.int64)
        assert env.step_batch(acts, again).states == env.step_batch(acts, list(want.states)).states


@pytest.mark.timeout(120)
def test_threads_reading_one_batch_at_once_get_equal_states() -> None:
    want, got = _batches("CartPole-v1")
    seen: list[list[State]] = [[], [], [], []]
    errors: list[BaseException] = []

    def read(j: int) -> None:
        try:
            seen[j] = [got.states[k] for k in range(N)]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and all(row == list(want.states) for row in seen)


@pytest.mark.timeout(120)
def test_a_rollout_batch_gives_its_final_states_as_a_state_batch_too() -> None:
    with pp.make("CartPole-v1", backend="inline") as inline, pp.make(
        "CartPole-v1", backend="process", n_workers=2, small_batch_inline=False
    ) as proc:
        start, _, _ = inline.reset(seed=1)
        actions = np.zeros((6, 4), dtype=np.int64)
        want, got = inline.rollout_batch([start] * 6, actions), proc.rollout_batch([start] * 6, actions)
        assert isinstance(want.states, StateBatch) and isinstance(got.states, StateBatch)
        assert got.states == want.states and len(got.states) == 6


@pytest.mark.timeout(60)
def test_iterating_makes_each_state_once_and_keeps_the_ones_read_before() -> None:
    with pp.make("CartPole-v1", backend="inline") as env:
        start, _, _ = env.reset(seed=1)
        states = list(env.step_batch(np.array([0, 1, 0, 1, 1]), [start] * 5).states)
    calls: list[int] = []

    def make(k: int) -> State:  # a part's maker, as a chunk's columns give one
        calls.append(k)
        return State.captured(states[2 + k].kind, states[2 + k].sim, states[2 + k].extra, states[2 + k].rng,
                              states[2 + k].wrappers, None, None)

    rows = np.array([s.obs for s in states])
    batch = StateBatch(5, [(0, 2, states[:2]), (2, 5, make)], rows)
    read_first = batch[3]
    assert calls == [1]
    made = list(batch)
    assert calls == [1, 0, 2], "each state made once"
    assert made[3] is read_first and made[0] is states[0] and made == states
    assert all(batch[k] is made[k] for k in range(5)) and batch[1:4] == made[1:4]
    assert all(made[k].obs is not None and np.array_equal(made[k].obs, rows[k]) for k in range(2, 5))
    assert calls == [1, 0, 2], "nothing made again"
