"""The state protocol: bit-identical replay from captured states, for every env family.

The pattern (``check_replay``): reset with a seed, walk random steps collecting
states, then run ``step_batch(actions, states, dt)`` on items drawn from those
states in

1. the original env (the reference), and again in the same, now perturbed, env;
2. a fresh, never-reset env, on pickled states, in a permuted order;
3. a fresh spawned process, on a never-reset env and on one reset with another seed;
4. the states step_batch returned, continued in both envs.

Observations, rewards, terminations, truncations, ``n_steps`` and the returned
states must be bitwise equal everywhere.
"""
from __future__ import annotations

import os
import pickle
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils import EzPickle
from gymnasium.wrappers import FrameStackObservation, RecordEpisodeStatistics, StickyAction, TimeLimit

import plan_parallel as pp
from plan_parallel.errors import StateError
from plan_parallel.state import (
    Adapter,
    GenericPickleAdapter,
    State,
    get_state,
    register_adapter,
    set_state,
)
from tests.conftest import FRESH_PROCESS_TIMEOUT
from tests.envs import CounterEnv, DictObsEnv, UnclonableEnv
from tests.helpers import (
    assert_batches_equal,
    assert_tree_equal,
    batch_payload,
    replay_in_fresh_process,
    sample_actions,
    take,
)


# --------------------------------------------------------------------------- the pattern
def walk(env: pp.PlanEnv, seed: int, n_steps: int, rng: np.random.Generator) -> list[State]:
    """Reset, then take random steps; a new episode (next seed) after each end. All states, in order."""
    state, _, _ = env.reset(seed=seed)
    states = [state]
    episode = 0
    for _ in range(n_steps):
        action = sample_actions(env.action_space, 1, rng)[0]
        state, _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            episode += 1
            state, _, _ = env.reset(seed=seed + 1000 * episode)
        states.append(state)
    return states


def roundtrip(states: list[State]) -> list[State]:
    out = pickle.loads(pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL))
    for a, b in zip(states, out):
        assert a == b, f"a state changed in a pickle round trip: {a.diff(b)}"
    return out


def check_replay(
    make_inline: Any,
    fresh_process: Any,
    env_id: Any,
    env_kwargs: dict | None = None,
    *,
    seed: int = 0,
    n_walk: int = 20,
    n_items: int = 10,
    max_dt: int = 3,
) -> pp.StepBatch:
    """Run the replay pattern of this module's docstring; returns the reference batch."""
    env_kwargs = env_kwargs or {}
    rng = np.random.default_rng(seed + 7)
    env = make_inline(env_id, **env_kwargs)
    states = walk(env, seed, n_walk, rng)
    assert any(s != states[0] for s in states[1:]), "the walk never changed the state: a useless test"

    idx = rng.integers(len(states), size=n_items)
    item_states = [states[i] for i in idx] + [states[idx[0]]]  # the last item repeats the first
    actions = sample_actions(env.action_space, n_items, rng)
    actions = np.concatenate([actions, actions[:1]])
    dt = rng.integers(1, max_dt + 1, size=n_items)
    dt = np.concatenate([dt, dt[:1]])
    n = n_items + 1

    current = env.get_state()
    snapshot_items = pickle.dumps(item_states)
    ref = env.step_batch(actions, states=item_states, dt=dt)
    assert env.get_state() == current, "step_batch changed the current state"
    assert len(ref.states) == n and ref.rewards.shape == (n,)
    snapshot_ref = pickle.dumps(list(ref.states))

    # 3. fresh process, started now so it overlaps with the in-process checks.
    pickled = roundtrip(item_states)
    future = fresh_process.submit(
        replay_in_fresh_process,
        cloudpickle.dumps(pp.EnvFactory(env_id, env_kwargs)),
        pickle.dumps((pickled, actions, dt), protocol=pickle.HIGHEST_PROTOCOL),
        seed + 12345,
    )

    # Identical items give identical results (each restores its own RNG).
    assert_batches_equal(take(ref, [0]), take(ref, [n - 1]))
    # 1. the same env again (its live state is now wherever the last item left it).
    assert_batches_equal(env.step_batch(actions, states=item_states, dt=dt), ref)
    # step(action, state, dt) agrees with the batch, item by item.
    for i in range(min(3, n)):
        s, obs, r, term, trunc, info = env.step(actions[i], state=item_states[i], dt=int(dt[i]))
        assert s == ref.states[i], f"step item {i} state differs in {s.diff(ref.states[i])}"
        assert float(r).hex() == float(ref.rewards[i]).hex()
        assert (term, trunc, info["n_steps"]) == (ref.terminations[i], ref.truncations[i], ref.infos[i]["n_steps"])

    # 2. a fresh, never-reset env, pickled states, permuted order.
    other = make_inline(env_id, **env_kwargs)
    perm = rng.permutation(n)
    permuted = other.step_batch(actions[perm], states=[pickled[i] for i in perm], dt=dt[perm])
    assert_batches_equal(permuted, take(ref, perm))

    # 4. continue from the returned states (those that did not end), in both envs.
    alive = [i for i in range(n) if not (ref.terminations[i] or ref.truncations[i])]
    if alive:
        next_states = [ref.states[i] for i in alive]
        next_actions = sample_actions(env.action_space, len(alive), rng)
        a = env.step_batch(next_actions, states=next_states, dt=2)
        b = other.step_batch(next_actions[::-1], states=roundtrip(next_states)[::-1], dt=2)
        assert_batches_equal(b, take(a, range(len(alive) - 1, -1, -1)))

    pid, never_reset, reset_other_seed = pickle.loads(future.result(timeout=FRESH_PROCESS_TIMEOUT))
    assert pid != os.getpid()
    assert_batches_equal(never_reset, batch_payload(ref))
    assert_batches_equal(reset_other_seed, batch_payload(ref))

    # States are values: restoring, stepping and continuing from them never mutated one.
    for name, before, after in [("input", snapshot_items, item_states), ("returned", snapshot_ref, ref.states)]:
        for i, (x, y) in enumerate(zip(pickle.loads(before), after)):
            assert x == y, f"{name} state {i} was mutated in place: {x.diff(y)}"
    return ref


# --------------------------------------------------------------------------- every family
def _sticky_cartpole():
    return StickyAction(gym.make("CartPole-v1"), repeat_action_probability=0.5)


def _sticky_hopper():
    return StickyAction(gym.make("Hopper-v5"), repeat_action_probability=0.5)


def _sticky_counter():
    return StickyAction(CounterEnv(horizon=50), repeat_action_probability=0.5, repeat_action_duration=(1, 3))



FAMILIES = [
    # classic control
    pytest.param("CartPole-v1", {}, {}, id="CartPole-v1"),
    pytest.param("Pendulum-v1", {}, {}, id="Pendulum-v1"),
    pytest.param("Acrobot-v1", {}, {}, id="Acrobot-v1"),
    pytest.param("MountainCar-v0", {}, {}, id="MountainCar-v0"),
    pytest.param("MountainCarContinuous-v0", {}, {}, id="MountainCarContinuous-v0"),
    # toy text (stochastic transitions drawn from np_random)
    pytest.param("FrozenLake-v1", {"is_slippery": True}, {"n_walk": 30}, id="FrozenLake-v1-slippery"),
    pytest.param("Taxi-v4", {}, {}, id="Taxi-v4"),
    pytest.param(
        "Taxi-v4", {"is_rainy": True, "fickle_passenger": True, "fickle_probability": 1.0},
        {"n_walk": 40, "n_items": 20}, id="Taxi-v4-rainy-fickle",
    ),
    pytest.param("CliffWalking-v1", {}, {}, id="CliffWalking-v1"),
    pytest.param("CliffWalking-v1", {"is_slippery": True}, {}, id="CliffWalking-v1-slippery"),
    pytest.param("Blackjack-v1", {}, {"n_walk": 30}, id="Blackjack-v1"),
    # ALE, sticky actions on (repeat_action_probability=0.25 by default)
    pytest.param("ALE/Pong-v5", {}, {"n_walk": 15, "max_dt": 4}, id="ALE/Pong-v5-sticky"),
    pytest.param("ALE/Pong-v5", {"frameskip": (2, 5)}, {"n_walk": 10}, id="ALE/Pong-v5-stochastic-frameskip"),
    # MuJoCo
    pytest.param("Hopper-v5", {}, {}, id="Hopper-v5"),
    pytest.param("Ant-v5", {}, {"n_walk": 10, "n_items": 6}, id="Ant-v5"),
    # Box2D: action replay
    pytest.param("LunarLander-v3", {}, {"n_walk": 15, "n_items": 6}, id="LunarLander-v3"),
    pytest.param("LunarLanderContinuous-v3", {}, {"n_walk": 10, "n_items": 5}, id="LunarLanderContinuous-v3"),
    # MiniGrid: generic pickle fallback, Dict observations
    pytest.param("MiniGrid-Empty-5x5-v0", {}, {}, id="MiniGrid-Empty-5x5-v0"),
    pytest.param("MiniGrid-DoorKey-5x5-v0", {}, {}, id="MiniGrid-DoorKey-5x5-v0"),
    # user envs (get_state/set_state on the class)
    pytest.param(CounterEnv, {"horizon": 6}, {}, id="CounterEnv"),
    pytest.param(DictObsEnv, {"horizon": 6}, {}, id="DictObsEnv"),
    # a wrapper that draws from the env's np_random in step
    pytest.param(_sticky_counter, {}, {}, id="StickyAction-CounterEnv"),
    pytest.param(_sticky_cartpole, {}, {}, id="StickyAction-CartPole-v1"),
    pytest.param(_sticky_hopper, {}, {}, id="StickyAction-Hopper-v5"),
]


@pytest.mark.parametrize("env_id, env_kwargs, opts", FAMILIES)
def test_bit_identical_replay(make_inline, fresh_process, env_id, env_kwargs, opts):
    check_replay(make_inline, fresh_process, env_id, env_kwargs, **opts)


def test_a_mujoco_env_given_a_new_mjdata_is_restored_and_captured_through_it(make_inline):
    """The MuJoCo adapter keeps flat views of the env's MjData (``xpos``, ``xipos``, which Ant reads before
    ``mj_step``): an env that replaces its MjData is restored and captured through the new one."""
    import mujoco

    env = make_inline("Ant-v5")
    s0 = env.reset(seed=1)[0]
    action = np.linspace(-1.0, 1.0, env.action_space.shape[0]).astype(env.action_space.dtype)
    s1, obs1, *_ = env.step(action, state=s0)
    u = env.gym_env.unwrapped
    u.data = mujoco.MjData(u.model)  # a fresh one: zero xpos, unlike s0's
    s1_again, obs1_again, *_ = env.step(action, state=s0)
    assert s1_again == s1
    np.testing.assert_array_equal(obs1_again, obs1)
    assert env.get_state() == s1


def test_an_ale_reset_that_draws_from_ales_rng_is_exact_after_a_restore(make_inline):
    """Adventure's reset, in a mode other than its default, presses Select for a random number of frames
    drawn from ALE's environment RNG: its states carry that RNG, so an env whose RNG went another way
    resets from a restored state as the env that made the state. (Pong's states leave that RNG out:
    nothing reads it; the replay rows in fresh processes show it.)"""
    made = make_inline("ALE/Adventure-v5", mode=2)
    made.reset(seed=1)
    for a in [1, 2, 3, 4, 5]:
        state = made.step(a)[0]
    other = make_inline("ALE/Adventure-v5", mode=2)
    other.reset(seed=2)  # another seed: another ALE RNG
    other.set_state(state)
    for env in (made, other):
        env.gym_env.unwrapped.reset()  # no seed: the RNG goes on from the state
    ram = [env.gym_env.unwrapped.ale.getRAM() for env in (made, other)]
    np.testing.assert_array_equal(ram[1], ram[0])


def test_families_bind_the_expected_adapters(make_inline):
    expected = {
        "CartPole-v1": "classic", "FrozenLake-v1": "toytext", "ALE/Pong-v5": "ale",
        "Hopper-v5": "mujoco", "LunarLander-v3": "replay", "MiniGrid-Empty-5x5-v0": "pickle",
    }
    for env_id, family in expected.items():
        env = make_inline(env_id)
        state, _, _ = env.reset(seed=0)
        assert state.family == family, env_id
        assert env.kind == state.kind and env.kind.startswith(family + ":")
    assert make_inline(CounterEnv).kind == "user:CounterEnv"


def test_minigrid_dict_observations_key_by_key(make_inline):
    env = make_inline("MiniGrid-Empty-5x5-v0")
    state, obs, _ = env.reset(seed=1)
    batch = env.step_batch([2, 1, 2], states=[state] * 3)
    assert set(batch.observations) == set(obs) == {"image", "direction", "mission"}
    other = make_inline("MiniGrid-Empty-5x5-v0")
    again = other.step_batch([2, 1, 2], states=roundtrip([state] * 3))
    for key in obs:
        assert_tree_equal(batch.observations[key], again.observations[key], f"obs[{key!r}]")
    assert batch.observations["image"].shape == (3, *obs["image"].shape)
    assert batch.observations["image"].dtype == obs["image"].dtype


def test_ale_sticky_items_do_not_depend_on_batch_order(make_inline):
    """Each item run alone in its own new env equals the item run inside a batch (sticky actions on)."""
    env = make_inline("ALE/Pong-v5")
    rng = np.random.default_rng(3)
    states = walk(env, 3, 12, rng)
    # Items alternate between states reached by different actions: the previous
    # effective action (what a sticky frame repeats) differs from item to item.
    items = [states[4], states[8], states[12], states[4], states[12], states[8]]
    actions = np.array([0, 2, 3, 5, 0, 2])
    batch = env.step_batch(actions, states=items, dt=4)
    for i in range(len(items)):
        alone = make_inline("ALE/Pong-v5")
        single = alone.step_batch(actions[i : i + 1], states=[items[i]], dt=4)
        assert_batches_equal(single, take(batch, [i]))
        alone.close()


# --------------------------------------------------------------------------- wrappers
def _cartpole_limit_5():
    return gym.make("CartPole-v1", max_episode_steps=5)


def _counter_limit_5():
    return TimeLimit(CounterEnv(horizon=100), max_episode_steps=5)


@pytest.mark.parametrize("factory", [_cartpole_limit_5, _counter_limit_5], ids=["CartPole", "CounterEnv"])
def test_time_limit_truncation_replays_from_the_step_before(make_inline, fresh_process, factory):
    env = make_inline(factory)
    states = [env.reset(seed=5)[0]]
    for a in [0, 1, 0, 1]:
        s, _, _, terminated, truncated, _ = env.step(a)
        assert not (terminated or truncated)
        states.append(s)
    s3, s4 = states[3], states[4]

    ref = env.step_batch([1, 1, 0], states=[s4, s3, s3], dt=[1, 1, 3])
    assert ref.truncations.tolist() == [True, False, True]
    assert not ref.terminations.any()
    assert [info["n_steps"] for info in ref.infos] == [1, 1, 2]  # stopped early at the limit

    fresh = make_inline(factory)  # never reset
    assert_batches_equal(fresh.step_batch([1, 1, 0], states=roundtrip([s4, s3, s3]), dt=[1, 1, 3]), ref)

    future = fresh_process.submit(
        replay_in_fresh_process,
        cloudpickle.dumps(pp.EnvFactory(factory)),
        pickle.dumps(([s4, s3, s3], np.array([1, 1, 0]), np.array([1, 1, 3]))),
        99,
    )
    pid, *payloads = pickle.loads(future.result(timeout=FRESH_PROCESS_TIMEOUT))
    assert pid != os.getpid()
    for payload in payloads:
        assert_batches_equal(payload, batch_payload(ref))


def test_frame_stack_observation(make_inline, fresh_process):
    ref = check_replay(
        make_inline, fresh_process, lambda: FrameStackObservation(gym.make("CartPole-v1"), 4),
        n_walk=15, n_items=8,
    )
    assert ref.observations.shape == (9, 4, 4)
    env = make_inline(lambda: FrameStackObservation(gym.make("CartPole-v1"), 4))
    state, obs, _ = env.reset(seed=0)
    # The frame queue is part of the state: the same simulator state with another history differs.
    s1 = env.step(0)[0]
    s2 = env.step(1, state=state)[0]
    assert "wrappers" in s1.diff(s2)


def test_record_episode_statistics_before_any_episode_end(make_inline, fresh_process):
    # Items stay far from termination (CartPole cannot fall within 5 steps of a reset).
    ref = check_replay(
        make_inline, fresh_process, lambda: RecordEpisodeStatistics(gym.make("CartPole-v1")),
        n_walk=3, n_items=6, max_dt=2,
    )
    assert not ref.terminations.any()


def test_record_episode_statistics_state_after_episode_end_is_reproducible(make_inline):
    env = make_inline(lambda: RecordEpisodeStatistics(gym.make("CartPole-v1")))
    state, _, _ = env.reset(seed=0)
    first = env.step_batch([0], states=[state], dt=100)
    assert first.terminations[0]
    second = env.step_batch([0], states=[state], dt=100)
    assert second.states[0] == first.states[0], f"differs in {second.states[0].diff(first.states[0])}"


def test_record_episode_statistics_counts_are_restored(make_inline):
    env = make_inline(lambda: RecordEpisodeStatistics(gym.make("CartPole-v1")))
    state, _, _ = env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    # Restoring the reset state puts the episode return/length back to 0: one step later they are 1.
    env.set_state(state)
    env.step(1)
    wrapper = env.gym_env
    assert (wrapper.episode_returns, wrapper.episode_lengths) == (1.0, 1)


# --------------------------------------------------------------------------- free functions
def test_free_functions_on_raw_gymnasium_envs():
    for env_id, kwargs in [("CartPole-v1", {}), ("FrozenLake-v1", {"is_slippery": True}), ("Hopper-v5", {})]:
        a = gym.make(env_id, **kwargs)
        a.reset(seed=11)
        a.action_space.seed(11)
        for _ in range(4):
            a.step(a.action_space.sample())
        state = get_state(a)
        b = gym.make(env_id, **kwargs)  # never reset
        set_state(b, state)
        assert get_state(b) == state
        for _ in range(5):
            action = a.action_space.sample()
            out_a, out_b = a.step(action), b.step(action)
            for x, y in zip(out_a[:4], out_b[:4]):
                assert_tree_equal(x, y, env_id)
        assert get_state(a) == get_state(b)
        a.close()
        b.close()


def test_free_functions_interoperate_with_plan_env(make_inline):
    env = make_inline("Pendulum-v1")
    state, _, _ = env.reset(seed=4)
    raw = gym.make("Pendulum-v1")
    set_state(raw, state)
    obs, reward, terminated, truncated, _ = raw.step(np.array([0.5], dtype=np.float32))
    s, obs2, reward2, terminated2, truncated2, _ = env.step(np.array([0.5], dtype=np.float32))
    assert_tree_equal(obs, obs2)
    assert float(reward).hex() == float(reward2).hex()
    assert (terminated, truncated) == (terminated2, truncated2)
    env.set_state(get_state(raw))
    assert env.get_state().sim.tobytes() == s.sim.tobytes()
    raw.close()


def test_free_get_state_needs_a_state():
    env = gym.make("CartPole-v1")
    with pytest.raises(StateError, match="no state yet"):
        get_state(env)
    env.close()


def test_free_functions_refuse_action_replay_envs():
    env = gym.make("LunarLander-v3")
    env.reset(seed=0)
    with pytest.raises(StateError, match="action-replay"):
        get_state(env)
    env.close()


def test_never_reset_env_accepts_a_state(make_inline):
    env = make_inline("Acrobot-v1")
    env.reset(seed=8)
    for a in [0, 2, 1, 2]:
        state = env.step(a)[0]
    fresh = make_inline("Acrobot-v1")
    with pytest.raises(StateError, match="no current state"):
        fresh.get_state()
    fresh.set_state(pickle.loads(pickle.dumps(state)))
    assert fresh.get_state() == state
    s_a, obs_a, r_a, *_ = env.step(1, state=state, dt=3)
    s_b, obs_b, r_b, *_ = fresh.step(1, dt=3)
    assert s_a == s_b
    assert_tree_equal(obs_a, obs_b)
    assert r_a.hex() == r_b.hex()


# --------------------------------------------------------------------------- wrong states
def test_state_from_another_family_is_refused(make_inline):
    cartpole = make_inline("CartPole-v1")
    pendulum_state = make_inline("Pendulum-v1").reset(seed=0)[0]
    taxi_state = make_inline("Taxi-v4").reset(seed=0)[0]
    cartpole.reset(seed=0)
    for bad in (pendulum_state, taxi_state):
        with pytest.raises(StateError, match="cannot restore an env of kind") as info:
            cartpole.set_state(bad)
        assert bad.kind in str(info.value) and cartpole.kind in str(info.value)
        with pytest.raises(StateError, match="states\\[1\\]"):
            cartpole.step_batch([0, 1], states=[cartpole.get_state(), bad])
        with pytest.raises(StateError):
            cartpole.step(0, state=bad)
    raw = gym.make("FrozenLake-v1")
    with pytest.raises(StateError):
        set_state(raw, taxi_state)
    raw.close()


def test_state_from_another_wrapper_stack_is_refused(make_inline):
    plain = make_inline("CartPole-v1")
    stacked = make_inline(lambda: FrameStackObservation(gym.make("CartPole-v1"), 4))
    state = stacked.reset(seed=0)[0]
    with pytest.raises(StateError, match="wrapper stack"):
        plain.set_state(state)


@pytest.mark.parametrize(
    "bad",
    [None, "state", {"sim": 1}, np.zeros(4)],
    ids=["None", "str", "dict", "ndarray"],
)
def test_not_a_state_is_refused(make_inline, bad):
    env = make_inline("CartPole-v1")
    env.reset(seed=0)
    if bad is not None:
        with pytest.raises(StateError, match="expected a plan_parallel State"):
            env.set_state(bad)
        with pytest.raises(StateError, match="expected a plan_parallel State"):
            env.step(0, state=bad)
    with pytest.raises(StateError, match="expected a plan_parallel State"):
        env.step_batch([0], states=[bad])


def test_malformed_state_is_refused(make_inline):
    env = make_inline("CartPole-v1")
    state, _, _ = env.reset(seed=0)
    bad = State(state.kind, "garbage", state.extra, state.rng, state.wrappers)
    with pytest.raises(StateError, match="malformed classic state"):
        env.set_state(bad)
    with pytest.raises(StateError, match="malformed classic state"):
        env.step(0, state=bad)
    assert env.get_state() == state  # a refused state changes nothing

    hopper = make_inline("Hopper-v5")
    hs, _, _ = hopper.reset(seed=0)
    with pytest.raises(StateError, match=r"expected float64 \(\d+,\) for this model"):
        hopper.set_state(State(hs.kind, hs.sim[:-1], hs.extra, hs.rng, hs.wrappers))

    pong = make_inline("ALE/Pong-v5")
    ps, _, _ = pong.reset(seed=0)
    with pytest.raises(StateError, match="ALEState"):
        pong.set_state(State(ps.kind, b"ram", ps.extra, ps.rng, ps.wrappers))


def test_malformed_state_is_refused_by_step_batch(make_inline):
    env = make_inline("CartPole-v1")
    state, _, _ = env.reset(seed=0)
    bad = State(state.kind, "garbage", state.extra, state.rng, state.wrappers)
    with pytest.raises(StateError, match="malformed"):
        env.step_batch([0, 0], states=[state, bad])


def test_wrapper_values_that_do_not_fit_the_wrappers_are_refused(make_inline):
    # Validation counts the wrapper values; a frame stack's own setter refuses a queue that is not one.
    env = make_inline(lambda: FrameStackObservation(gym.make("CartPole-v1"), 2))
    state, _, _ = env.reset(seed=0)
    bad = State(state.kind, state.sim, state.extra, state.rng, ((5, 0.0), *state.wrappers[1:]))
    with pytest.raises(StateError, match="do not fit the wrappers"):
        env.set_state(bad)
    with pytest.raises(StateError, match="do not fit the wrappers"):
        env.step_batch([0], [bad])
    assert env.step_batch([0], [state]).states[0] == env.step(0, state=state)[0]


def test_states_of_other_episodes_restore_their_own_rng(make_inline):
    env = make_inline("CartPole-v1")
    a, _, _ = env.reset(seed=1)
    b, _, _ = env.reset(seed=2)
    out = env.step_batch([0, 1, 0], [a, b, a])
    assert [s.rng for s in out.states] == [a.rng, b.rng, a.rng]
    for state, seed in ((a, 1), (b, 2), (a, 1)):
        fresh = gym.make("CartPole-v1")
        fresh.reset(seed=seed)
        env.set_state(state)
        # A reset without a seed draws from the restored RNG, as the fresh env's second reset does.
        np.testing.assert_array_equal(env.reset()[1], fresh.reset()[0])


def test_equal_rng_dicts_that_are_not_one_object_restore_as_one_value(make_inline):
    """A batch's states from several chunks carry equal RNG dicts that are not one object: the env's RNG is
    not set again for each (same_rng), and one of another value still is."""
    from plan_parallel.state.core import same_rng

    env = make_inline("CartPole-v1")
    a, _, _ = env.reset(seed=1)
    b, _, _ = env.reset(seed=2)
    a2 = pickle.loads(pickle.dumps(a))  # equal, another dict
    assert a2.rng is not a.rng and same_rng(a.rng, a2.rng) and not same_rng(a.rng, b.rng)
    out = env.step_batch([0, 1, 0, 1], [a, a2, b, a2])
    assert [s.rng for s in out.states] == [a.rng, a.rng, b.rng, a.rng]
    for state, seed in ((a2, 1), (b, 2)):
        fresh = gym.make("CartPole-v1")
        fresh.reset(seed=seed)
        env.set_state(state)
        np.testing.assert_array_equal(env.reset()[1], fresh.reset()[0])
    mt = {"bit_generator": "MT19937", "state": {"key": np.arange(624, dtype=np.uint32), "pos": 624}}
    mt2 = {"bit_generator": "MT19937", "state": {"key": np.arange(624, dtype=np.uint32), "pos": 624}}
    assert same_rng(mt, mt) and not same_rng(mt, mt2), "arrays inside: not compared (set again), no error"
    assert not same_rng(None, a.rng) and same_rng(None, None)


def test_classic_state_of_the_wrong_length_is_refused(make_inline):
    env = make_inline("CartPole-v1")
    state, _, _ = env.reset(seed=0)
    bad = State(state.kind, np.zeros(3), state.extra, state.rng, state.wrappers)
    with pytest.raises(StateError, match="malformed"):
        env.set_state(bad)


# --------------------------------------------------------------------------- unsupported envs
def test_env_without_a_faithful_adapter_is_refused(make_inline):
    with pytest.raises(StateError) as info:
        make_inline(UnclonableEnv)
    msg = str(info.value)
    assert "cannot capture the state of tests.envs.UnclonableEnv exactly" in msg
    assert "no registered adapter knows which fields its step reads" in msg
    assert "get_state()" in msg and "register_adapter" in msg
    with pytest.raises(StateError, match="UnclonableEnv"):
        get_state(UnclonableEnv())


class _EzEnv(gym.Env, EzPickle):
    def __init__(self) -> None:
        EzPickle.__init__(self)
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


def test_ezpickle_env_refusal_explains_why(make_inline):
    with pytest.raises(StateError, match="EzPickle, which re-runs the constructor"):
        make_inline(_EzEnv)


# --------------------------------------------------------------------------- registry
def _plain_counter_class():
    """A fresh env class per call (so registering an adapter for it cannot leak into other tests)."""

    class PlainCounter(gym.Env):
        def __init__(self) -> None:
            self.action_space = gym.spaces.Discrete(3)
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
            self.count, self.noise = 0, 0.0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.count, self.noise = 0, float(self.np_random.random())
            return np.array([self.count, self.noise]), {}

        def step(self, action):
            self.count += int(action)
            self.noise = float(self.np_random.random())
            return np.array([self.count, self.noise]), float(self.noise), False, False, {}

    return PlainCounter


class _PlainCounterAdapter(Adapter):
    name = "plaincounter"

    def get_sim(self):
        return (self.u.count, self.u.noise), None

    def set_sim(self, sim, extra):
        self.u.count, self.u.noise = sim

    def check_sim(self, sim):
        return None if isinstance(sim, tuple) and len(sim) == 2 else f"expected (count, noise), got {sim!r}"


def test_register_adapter_for_a_user_env_class(make_inline):
    cls = _plain_counter_class()
    with pytest.raises(StateError):
        make_inline(cls)
    assert register_adapter(_PlainCounterAdapter, cls) is _PlainCounterAdapter
    env = make_inline(cls)
    assert env.kind == "plaincounter:PlainCounter"
    state, _, _ = env.reset(seed=2)
    ref = env.step_batch([1, 2, 0, 2], states=[state] * 4, dt=[1, 2, 3, 4])
    other = make_inline(cls)
    assert_batches_equal(other.step_batch([1, 2, 0, 2], states=roundtrip([state] * 4), dt=[1, 2, 3, 4]), ref)
    # The RNG is captured by the base Adapter: identical items, identical noise.
    assert ref.observations[0, 1] == other.step_batch([1], states=[state]).observations[0, 1]
    with pytest.raises(StateError, match="malformed plaincounter state"):
        env.set_state(State(state.kind, (1, 2, 3), None, state.rng, state.wrappers))


def test_register_adapter_covers_subclasses_only_where_it_accepts_them(make_inline):
    """A subclass may hold state the adapter does not know: it is covered only when accepts() says so."""
    cls = _plain_counter_class()
    register_adapter(_PlainCounterAdapter, cls)
    sub = type("SubCounter", (cls,), {})
    with pytest.raises(StateError):
        make_inline(sub)

    class Accepting(_PlainCounterAdapter):
        @classmethod
        def accepts(cls_, unwrapped):
            return isinstance(unwrapped, cls)

    register_adapter(Accepting, cls)
    assert make_inline(sub).kind == "plaincounter:SubCounter"


def test_register_adapter_with_accepts_chain(make_inline):
    cls = _plain_counter_class()

    class ChainAdapter(_PlainCounterAdapter):
        name = "chained"

        @classmethod
        def accepts(cls_, unwrapped):
            return type(unwrapped) is cls

    register_adapter(ChainAdapter)
    env = make_inline(cls)
    assert env.kind == "chained:PlainCounter"
    state, _, _ = env.reset(seed=0)
    assert env.step(1, state=state)[0] == env.step(1, state=state)[0]


def test_register_adapter_rejects_non_adapters():
    with pytest.raises(TypeError, match=r"subclass of plan_parallel\.state\.Adapter"):
        register_adapter(object, CounterEnv)  # type: ignore[arg-type]


def test_adapter_override_in_make(make_inline):
    env = make_inline(CounterEnv, adapter=GenericPickleAdapter, horizon=4)
    assert env.kind == "pickle:CounterEnv"
    state, _, _ = env.reset(seed=3)
    ref = env.step_batch([2, 1, 0], states=[state] * 3, dt=[1, 2, 5])
    assert ref.terminations.tolist() == [False, False, True]
    other = make_inline(CounterEnv, adapter=GenericPickleAdapter, horizon=4)
    assert_batches_equal(other.step_batch([2, 1, 0], states=roundtrip([state] * 3), dt=[1, 2, 5]), ref)


@pytest.mark.timeout(60)
def test_a_state_given_a_new_sim_is_checked_again_though_its_env_made_it() -> None:
    """A state an env captured (or checked once) is not checked again when it comes back; one whose
    simulator value was replaced is, and a malformed one fails before anything runs."""
    with pp.make("CartPole-v1", backend="inline") as env:
        start, _, _ = env.reset(seed=0)
        batch = env.step_batch(np.array([0, 1]), [start, start])
        again = env.step_batch(np.array([1]), [batch.states[0]])
        assert again.states[0] == env.step(1, batch.states[0])[0]
        batch.states[1].sim = np.zeros(3)
        with pytest.raises(pp.StateError, match=r"states\[0\]: malformed classic state"):
            env.step_batch(np.array([0]), [batch.states[1]])
