"""A held state is not restored again, and skipping that restore changes no result.

A planning env remembers the state object its env equals (the one it last
captured, reset to or set); an item starting from that very object steps on
without restoring it. The table compares, per env family and with stateful
wrappers, a chain of steps and batches that take that path with the same
inputs given as copies of the states (never the held object, so always
restored): every state, observation, reward, flag and info must be equal. The
claim is about each family's capture being complete, so the envs are real.
"""
from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation, NormalizeObservation, TimeAwareObservation

import plan_parallel as pp


def _wrapped_cartpole() -> Any:
    return TimeAwareObservation(NormalizeObservation(FrameStackObservation(gym.make("CartPole-v1"), 3)))


FAMILIES: list[tuple[str, Any, dict]] = [
    ("CartPole", "CartPole-v1", {}),
    ("MountainCar (tuple state)", "MountainCar-v0", {}),
    ("Pendulum", "Pendulum-v1", {}),
    ("Acrobot", "Acrobot-v1", {}),
    ("FrozenLake slippery (RNG each step)", "FrozenLake-v1", {"is_slippery": True}),
    ("Pong (sticky actions)", "ALE/Pong-v5", {}),
    ("HalfCheetah", "HalfCheetah-v5", {}),
    ("Hopper", "Hopper-v5", {}),
    ("BipedalWalker (action replay)", "BipedalWalker-v3", {}),
    ("LunarLander (action replay)", "LunarLander-v3", {}),
    ("CartPole + frame stack, normalize, time-aware", _wrapped_cartpole, {}),
]
STEPS = 12


def _copy(state: pp.State) -> pp.State:
    """An equal state that is not the held object (so it is restored)."""
    return pickle.loads(pickle.dumps(state))


def _outcome(state: pp.State, obs: Any, reward: float, term: bool, trunc: bool, info: dict) -> tuple:
    return state.key(), pickle.dumps(obs), float(reward), bool(term), bool(trunc), pickle.dumps(sorted(info.items()))


def _batch_outcome(batch: Any) -> list[tuple]:
    return [_outcome(s, s.obs, r, te, tr, info)
            for s, r, te, tr, info in zip(batch.states, batch.rewards, batch.terminations, batch.truncations,
                                          batch.infos)]


def _walk(env: Any, actions: list, held: bool) -> list:
    """Steps and batches from the env's own states (``held``) or from copies of them; every outcome."""
    state, obs, _ = env.reset(seed=5)
    out: list = [state.key()]
    for a in actions[: STEPS // 2]:  # step from the current state
        state, obs, r, te, tr, info = env.step(a, state=None if held else _copy(state))
        out.append(_outcome(state, obs, r, te, tr, info))
        if te or tr:
            state, obs, _ = env.reset(seed=6)
    start = state if held else _copy(state)
    # The held state twice: the first item skips its restore, the second must restore it.
    batch = env.step_batch(actions[:2], states=[start, start if held else _copy(state)])
    out.append(_batch_outcome(batch))
    # The first item's end state is not held any more (the second item moved the env on).
    state, obs, r, te, tr, info = env.step(actions[5], state=batch.states[0] if held else _copy(batch.states[0]))
    out.append(_outcome(state, obs, r, te, tr, info))
    batch = env.step_batch(actions[:2], states=[start, start if held else _copy(start)])
    nxt = batch.states[1] if held else _copy(batch.states[1])  # the state the env holds now
    batch = env.step_batch(actions[2:4], states=[nxt, nxt if held else _copy(batch.states[1])], dt=2,
                           seeds=[11, 12] if env.reseedable else None)
    out.append(_batch_outcome(batch))
    roll = env.rollout_batch([batch.states[1] if held else _copy(batch.states[1])],
                             np.array([actions[4:8]]), return_all=True)
    out.append([s.key() for s in roll.all_states[0]] + [roll.rewards.tobytes(), roll.terminations.tolist()])
    last = roll.states[0] if held else _copy(roll.states[0])
    state, obs, r, te, tr, info = env.step(actions[8], state=last)
    out.append(_outcome(state, obs, r, te, tr, info))
    return out


@pytest.mark.parametrize("env_id, kwargs", [pytest.param(e, k, id=label) for label, e, k in FAMILIES])
def test_stepping_on_from_the_held_state_equals_restoring_it(env_id: Any, kwargs: dict) -> None:
    with pp.make(env_id, backend="inline", **kwargs) as held, pp.make(env_id, backend="inline", **kwargs) as copies:
        space = held.action_space
        space.seed(1)
        actions = [space.sample() for _ in range(STEPS)]
        assert _walk(held, actions, held=True) == _walk(copies, actions, held=False)


def test_the_env_handed_out_is_restored_before_the_next_item() -> None:
    """After ``gym_env`` was handed out (and stepped by its holder), the held state is restored again."""
    with pp.make("CartPole-v1", backend="inline") as env, pp.make("CartPole-v1", backend="inline") as ref:
        state, _, _ = env.reset(seed=0)
        ref.reset(seed=0)
        env.gym_env.step(1)  # moves the live env away from the state it held
        env.gym_env.step(1)
        got = env.step_batch([0], states=[state])
        want = ref.step_batch([0], states=[_copy(state)])
        assert _batch_outcome(got) == _batch_outcome(want)


def test_an_env_error_leaves_no_held_state() -> None:
    """An item that raises leaves the env somewhere unknown: the next item from the held state restores it."""
    from tests.envs import CounterEnv

    class Fails(CounterEnv):
        def step(self, action: Any) -> tuple:
            if action == 2:
                raise RuntimeError("boom")
            return super().step(action)

    with pp.make(Fails, backend="inline") as env, pp.make(Fails, backend="inline") as ref:
        state, _, _ = env.reset(seed=0)
        ref.reset(seed=0)
        after, *_ = env.step(1)  # the env holds `after`
        with pytest.raises(RuntimeError, match="boom"):
            env.step_batch([1, 2], states=[after, state])  # item 1 restores another state, then raises
        got = env.step_batch([0], states=[after])
        want = ref.step_batch([0], states=[_copy(after)])
        assert _batch_outcome(got) == _batch_outcome(want)


@pytest.mark.parametrize("env_id, kwargs", [("FrozenLake-v1", {"is_slippery": True}), ("ALE/Pong-v5", {})])
def test_set_state_restores_unless_the_env_holds_that_very_state(env_id: str, kwargs: dict) -> None:
    """``set_state`` then a reset without a seed (a vector env's autoreset) equals the same on a fresh env."""
    with pp.make(env_id, backend="inline", **kwargs) as env, pp.make(env_id, backend="inline", **kwargs) as fresh:
        start, _, _ = env.reset(seed=3)
        mid, *_ = env.step(1)
        env.step_batch([2, 3, 1], states=[start, mid, mid])  # the env moves away from `mid` (and its RNG on)
        env.set_state(mid)  # restored
        env.set_state(mid)  # held: nothing to restore
        state, obs, info = env.reset()
        fresh.set_state(_copy(mid))
        want_state, want_obs, want_info = fresh.reset()
        assert _outcome(state, obs, 0.0, False, False, info) == _outcome(want_state, want_obs, 0.0, False, False,
                                                                          want_info)
