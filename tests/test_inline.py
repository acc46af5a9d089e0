"""The PlanEnv API on the inline backend: semantics, result shapes, lifecycle and input errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import plan_parallel as pp
from plan_parallel.errors import ClosedError, PlanParallelError, StateError
from plan_parallel.state import State
from tests.envs import CounterEnv, DictObsEnv, FaultyEnv
from tests.helpers import assert_batches_equal, assert_tree_equal, take


@pytest.fixture
def counter(make_inline):
    return make_inline(CounterEnv, horizon=100)


# --------------------------------------------------------------------------- reset
def test_reset_returns_state_obs_info(counter):
    out = counter.reset(seed=0)
    assert isinstance(out, tuple) and len(out) == 3
    state, obs, info = out
    assert isinstance(state, State)
    assert state.kind == counter.kind
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (2,)
    assert counter.observation_space.contains(obs)
    assert info == {"count": 0}
    assert counter.get_state() == state


def test_reset_is_seeded(counter, make_inline):
    s1, o1, _ = counter.reset(seed=42)
    counter.step(1)
    s2, o2, _ = counter.reset(seed=42)
    other = make_inline(CounterEnv, horizon=100)
    s3, o3, _ = other.reset(seed=42)
    assert s1 == s2 == s3
    assert_tree_equal(o1, o2)
    assert_tree_equal(o1, o3)
    s4, o4, _ = counter.reset(seed=43)
    assert s4 != s1 and o4[1] != o1[1]
    s5, _, _ = counter.reset()  # seed=None: continue the RNG stream
    assert isinstance(s5, State)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_reset_bad_seed(counter, seed):
    with pytest.raises(TypeError, match=r"seed must be None or an integer >= 0, got"):
        counter.reset(seed=seed)


def test_reset_bad_options(counter):
    with pytest.raises(TypeError, match="options must be a dict or None, got list"):
        counter.reset(seed=0, options=[1])


# --------------------------------------------------------------------------- step
def test_step_advances_the_current_state(counter):
    s0, _, _ = counter.reset(seed=0)
    out = counter.step(2)
    assert len(out) == 6
    s1, obs, reward, terminated, truncated, info = out
    assert isinstance(s1, State) and s1 != s0
    assert counter.get_state() == s1
    assert obs[0] == 1.0 and reward == 2.0
    assert isinstance(reward, float)
    assert terminated is False and truncated is False
    assert info["n_steps"] == 1 and info["count"] == 1
    s2, obs2, *_ = counter.step(0)
    assert obs2[0] == 2.0 and counter.get_state() == s2


def test_step_from_a_given_state(counter):
    s0, _, _ = counter.reset(seed=0)
    s1 = counter.step(1)[0]
    counter.step(1)
    counter.step(1)
    s, obs, reward, *_ = counter.step(2, state=s1)
    assert obs[0] == 2.0 and reward == 2.0
    assert counter.get_state() == s
    # The same (state, action) again gives the same result, RNG included.
    again, obs_again, *_ = counter.step(2, state=s1)
    assert again == s
    assert_tree_equal(obs, obs_again)


def test_step_dt_equals_repeated_steps(counter):
    s0, _, _ = counter.reset(seed=3)
    s_dt, obs_dt, r_dt, term, trunc, info = counter.step(2, dt=4)
    assert info["n_steps"] == 4 and r_dt == 8.0 and obs_dt[0] == 4.0
    counter.set_state(s0)
    for _ in range(4):
        s_loop, obs_loop, *_ = counter.step(2)
    assert s_loop == s_dt
    assert_tree_equal(obs_loop, obs_dt)
    s_np, *_ = counter.step(1, state=s0, dt=np.int64(4))
    assert s_np != s_dt  # another action, another total


def test_step_stops_early_at_termination(make_inline):
    env = make_inline(CounterEnv, horizon=3)
    env.reset(seed=0)
    s, obs, reward, terminated, truncated, info = env.step(1, dt=10)
    assert terminated is True and truncated is False
    assert info["n_steps"] == 3 and reward == 3.0 and obs[0] == 3.0


# --------------------------------------------------------------------------- step_batch
def test_step_batch_result_types_and_shapes(counter):
    s0, _, _ = counter.reset(seed=0)
    batch = counter.step_batch([0, 1, 2, 1], states=[s0, s0, s0, s0], dt=[1, 2, 3, 4])
    assert isinstance(batch, pp.StepBatch)
    assert batch._fields == ("states", "observations", "rewards", "terminations", "truncations", "infos")
    states, observations, rewards, terminations, truncations, infos = batch
    assert states is batch.states and observations is batch.observations
    assert len(states) == 4 and all(isinstance(s, State) for s in states)
    assert isinstance(observations, np.ndarray)
    assert observations.shape == (4, 2) and observations.dtype == np.float32
    assert rewards.shape == (4,) and rewards.dtype == np.float64
    assert terminations.shape == (4,) and terminations.dtype == np.bool_
    assert truncations.shape == (4,) and truncations.dtype == np.bool_
    assert isinstance(infos, list) and len(infos) == 4
    assert [i["n_steps"] for i in infos] == [1, 2, 3, 4]
    assert [i["count"] for i in infos] == [1, 2, 3, 4]
    assert len({id(i) for i in infos}) == 4  # one dict per item
    # reward = action, summed over dt
    assert rewards.tolist() == [0.0, 2.0, 6.0, 4.0]
    assert observations[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_step_batch_items_equal_single_steps(counter):
    s0, _, _ = counter.reset(seed=5)
    s1 = counter.step(1)[0]
    states, actions, dt = [s1, s0, s1], [2, 0, 1], [3, 1, 2]
    batch = counter.step_batch(actions, states=states, dt=dt)
    for i in range(3):
        s, obs, r, term, trunc, info = counter.step(actions[i], state=states[i], dt=dt[i])
        assert s == batch.states[i]
        assert_tree_equal(obs, batch.observations[i])
        assert r == batch.rewards[i] and term == batch.terminations[i] and trunc == batch.truncations[i]
        assert info["n_steps"] == batch.infos[i]["n_steps"]


def test_step_batch_with_states_none_uses_the_current_state(counter):
    counter.reset(seed=1)
    current = counter.step(1)[0]
    batch = counter.step_batch([0, 1, 2], dt=2)
    assert counter.get_state() == current  # unchanged
    explicit = counter.step_batch([0, 1, 2], states=[current] * 3, dt=2)
    assert_batches_equal(batch, explicit)
    # ... and the live env still continues from the current state.
    s, obs, *_ = counter.step(0)
    assert obs[0] == 2.0
    assert s == counter.step(0, state=current)[0]


def test_step_batch_leaves_the_current_state_unchanged(counter):
    s0, _, _ = counter.reset(seed=1)
    other = counter.step(2, dt=3)[0]
    counter.step_batch([1, 1], states=[s0, s0], dt=5)
    assert counter.get_state() == other
    s, obs, *_ = counter.step(0)
    assert obs[0] == 4.0  # continued from `other` (count 3), not from the batch items


def test_step_batch_per_item_dt(counter):
    s0, _, _ = counter.reset(seed=0)
    for dt in ([1, 5, 2], np.array([1, 5, 2]), np.array([1, 5, 2], dtype=np.int32), (1, 5, 2)):
        batch = counter.step_batch([1, 1, 1], states=[s0] * 3, dt=dt)
        assert [i["n_steps"] for i in batch.infos] == [1, 5, 2]
        assert batch.rewards.tolist() == [1.0, 5.0, 2.0]
    batch = counter.step_batch([2, 2, 2], states=[s0] * 3, dt=np.int64(3))
    assert batch.rewards.tolist() == [6.0, 6.0, 6.0]


def test_step_batch_stops_early_at_termination(make_inline):
    env = make_inline(CounterEnv, horizon=4)
    s0, _, _ = env.reset(seed=0)
    s2 = env.step(1, dt=2)[0]
    batch = env.step_batch([1, 1, 2, 2], states=[s0, s0, s2, s2], dt=[3, 9, 1, 9])
    assert [i["n_steps"] for i in batch.infos] == [3, 4, 1, 2]
    assert [i["n_steps"] < dt for i, dt in zip(batch.infos, [3, 9, 1, 9])] == [False, True, False, True]
    assert batch.terminations.tolist() == [False, True, False, True]
    assert not batch.truncations.any()
    assert batch.rewards.tolist() == [3.0, 4.0, 2.0, 4.0]


def test_step_batch_dict_observations(make_inline):
    env = make_inline(DictObsEnv, horizon=5)
    s0, obs0, _ = env.reset(seed=0)
    actions = np.array([[0.5, -0.5], [1.0, 1.0], [0.0, 0.0]], dtype=np.float32)
    batch = env.step_batch(actions, states=[s0] * 3, dt=[1, 2, 9])
    assert set(batch.observations) == {"pos", "count"}
    assert batch.observations["pos"].shape == (3, 2) and batch.observations["pos"].dtype == np.float32
    assert batch.observations["count"].tolist() == [1, 2, 5]
    assert batch.terminations.tolist() == [False, False, True]
    for i in range(3):
        _, obs, *_ = env.step(actions[i], state=s0, dt=[1, 2, 9][i])
        assert_tree_equal(obs["pos"], batch.observations["pos"][i])


def test_empty_batch(counter):
    s0, _, _ = counter.reset(seed=0)
    for states in ([], None):
        batch = counter.step_batch(np.empty(0, dtype=np.int64), states=states)
        assert batch.states == [] or len(batch.states) == 0
        assert batch.observations.shape == (0, 2) and batch.observations.dtype == np.float32
        assert batch.rewards.shape == (0,) and batch.rewards.dtype == np.float64
        assert batch.terminations.shape == (0,) and batch.terminations.dtype == np.bool_
        assert batch.truncations.shape == (0,) and batch.truncations.dtype == np.bool_
        assert batch.infos == []
    assert counter.get_state() == s0


def test_empty_batch_discrete_actions_from_a_plain_list(counter):
    counter.reset(seed=0)
    batch = counter.step_batch([], states=[])
    assert batch.rewards.shape == (0,)


def test_empty_batch_dt_from_a_plain_list(counter):
    counter.reset(seed=0)
    batch = counter.step_batch(np.empty(0, dtype=np.int64), states=[], dt=[])
    assert batch.rewards.shape == (0,)


def test_empty_batch_box_actions_from_a_plain_list(make_inline):
    env = make_inline("Pendulum-v1")
    env.reset(seed=0)
    batch = env.step_batch([], states=[])
    assert batch.observations.shape == (0, 3)


def test_actions_in_many_forms(counter):
    s0, _, _ = counter.reset(seed=0)
    ref = counter.step_batch(np.array([0, 1, 2]), states=[s0] * 3)
    for actions in ([0, 1, 2], (0, 1, 2), [np.int64(0), np.int32(1), 2], np.array([0, 1, 2], dtype=np.uint8)):
        assert_batches_equal(counter.step_batch(actions, states=(s0, s0, s0)), ref)


# --------------------------------------------------------------------------- state management
def test_get_set_sync_state(counter, make_inline):
    s0, _, _ = counter.reset(seed=0)
    s3 = counter.step(1, dt=3)[0]
    counter.set_state(s0)
    assert counter.get_state() == s0
    assert counter.step(1, dt=3)[0] == s3
    counter.sync_states(s0)
    assert counter.get_state() == s0
    assert counter.step(1, dt=3)[0] == s3
    other = make_inline(CounterEnv, horizon=100)
    other.sync_states(s3)
    assert other.get_state() == s3


def test_no_current_state_before_reset(counter):
    with pytest.raises(StateError, match=r"no current state yet: call reset\(seed\) or set_state\(state\) first"):
        counter.step(0)
    with pytest.raises(StateError, match="no current state"):
        counter.step_batch([0, 1])
    with pytest.raises(StateError, match="no current state"):
        counter.get_state()


def test_n_workers_and_backend(counter):
    assert counter.n_workers == 1
    assert counter.backend == "inline"
    assert isinstance(counter, pp.PlanEnv)


# --------------------------------------------------------------------------- lifecycle
def test_context_manager_closes():
    with pp.make(CounterEnv, backend="inline") as env:
        state, _, _ = env.reset(seed=0)
        assert env.step(1)[0] != state
    with pytest.raises(ClosedError):
        env.step(0)


def test_close_is_idempotent_and_every_call_raises_after(counter):
    state, _, _ = counter.reset(seed=0)
    counter.close()
    counter.close()
    calls = [
        lambda: counter.reset(seed=0),
        lambda: counter.step(0),
        lambda: counter.step(0, state=state),
        lambda: counter.step_batch([0], states=[state]),
        lambda: counter.step_batch([0]),
        lambda: counter.get_state(),
        lambda: counter.set_state(state),
        lambda: counter.sync_states(state),
        lambda: counter.gym_env,
    ]
    for call in calls:
        with pytest.raises(ClosedError, match="closed"):
            call()
    assert issubclass(ClosedError, PlanParallelError)


def test_closed_check_comes_before_input_checks(counter):
    counter.close()
    with pytest.raises(ClosedError):
        counter.step_batch([99], states=["not a state"], dt=0)


# --------------------------------------------------------------------------- env errors
def test_env_exception_propagates_with_its_own_type(make_inline):
    env = make_inline(FaultyEnv, fault="raise", phase="step", trigger_action=2)
    s0, _, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="injected fault in step") as info:
        env.step_batch([0, 1, 2, 0], states=[s0] * 4)
    assert not isinstance(info.value, PlanParallelError)
    assert env.get_state() == s0  # the failed batch left the current state alone
    # The env is still usable and exact after the failure.
    batch = env.step_batch([0, 1], states=[s0, s0], dt=3)
    clean = make_inline(FaultyEnv, fault="none")
    assert_batches_equal(clean.step_batch([0, 1], states=[s0, s0], dt=3), batch)


def test_env_exception_in_step_keeps_the_current_state(make_inline):
    env = make_inline(FaultyEnv, fault="raise", phase="step")
    env.reset(seed=0)
    s1 = env.step(1)[0]
    with pytest.raises(ValueError, match="injected fault in step"):
        env.step(2)
    assert env.get_state() == s1
    _, obs, *_ = env.step(0)
    assert obs[0] == 2.0


@pytest.mark.parametrize("phase", ["init", "reset", "get_state", "set_state"])
def test_faulty_env_phases_inline(make_inline, phase):
    if phase == "init":
        with pytest.raises(ValueError, match="injected fault in init"):
            make_inline(FaultyEnv, fault="raise", phase="init")
        return
    env = make_inline(FaultyEnv, fault="raise", phase=phase)
    if phase == "reset":
        with pytest.raises(ValueError, match="injected fault in reset"):
            env.reset(seed=0)
        return
    clean = make_inline(FaultyEnv, fault="none")
    s0, _, _ = clean.reset(seed=0)
    poisoned = clean.step(2)[0]  # last action == trigger_action
    assert env.kind == clean.kind
    env.set_state(s0)
    if phase == "get_state":
        assert env.step(1)[0] == clean.step(1, state=s0)[0]
        with pytest.raises(ValueError, match="injected fault in get_state"):
            env.step(2)
    else:
        with pytest.raises(ValueError, match="injected fault in set_state"):
            env.step_batch([0], states=[poisoned])
        with pytest.raises(ValueError, match="injected fault in set_state"):
            env.set_state(poisoned)


def test_faulty_env_once_file(make_inline, tmp_path):
    marker = tmp_path / "fired"
    env = make_inline(FaultyEnv, fault="raise", phase="step", once_file=str(marker))
    s0, _, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="injected fault"):
        env.step(2)
    assert marker.exists()
    again = env.step(2, state=s0)  # the second trigger behaves
    assert again[2] == 2.0


def test_faulty_env_unpicklable_values(make_inline):
    import pickle

    env = make_inline(FaultyEnv, fault="unpicklable", phase="step")
    s0, _, _ = env.reset(seed=0)
    batch = env.step_batch([2], states=[s0])
    with pytest.raises(TypeError):
        pickle.dumps(batch.infos)
    env = make_inline(FaultyEnv, fault="raise_unpicklable", phase="step")
    with pytest.raises(ValueError, match="unpicklable fault") as info:
        env.step(2, state=s0)
    with pytest.raises(TypeError):
        pickle.dumps(info.value)


# --------------------------------------------------------------------------- input errors
def test_mismatched_lengths(counter):
    s0, _, _ = counter.reset(seed=0)
    with pytest.raises(ValueError, match=r"must have shape \(2,\), got shape \(3,\)"):
        counter.step_batch([0, 1, 2], states=[s0, s0])
    with pytest.raises(ValueError, match=r"must have shape \(3,\), got shape \(2,\)"):
        counter.step_batch([0, 1], states=[s0, s0, s0])


@pytest.mark.parametrize(
    "dt, exc, pattern",
    [
        (0, ValueError, r"dt must be an integer >= 1 .*got 0"),
        (-1, ValueError, r"dt must be an integer >= 1 .*got -1"),
        (1.5, TypeError, r"dt must be an integer >= 1 .*got float: 1\.5"),
        (float("nan"), TypeError, r"dt must be an integer >= 1 .*got float: nan"),
        (True, TypeError, r"dt must be an integer >= 1 .*got bool"),
        ("2", TypeError, r"dt must be an integer >= 1 .*got str"),
        (None, TypeError, r"dt must be an integer >= 1 .*got NoneType"),
        ([1, 2], ValueError, r"dt must be integers >= 1 with shape \(3,\), got shape \(2,\)"),
        (np.ones((3, 1), dtype=int), ValueError, r"with shape \(3,\), got shape \(3, 1\)"),
        ([1, 0, 2], ValueError, r"dt must be integers >= 1 with shape \(3,\), got \[1, 0, 2\]"),
        ([1, -1, 2], ValueError, r"dt must be integers >= 1 with shape \(3,\)"),
        ([1.0, 2.0, 3.0], TypeError, r"with shape \(3,\), got dtype float64"),
        (np.array([1, np.nan, 2]), TypeError, r"with shape \(3,\), got dtype float64"),
        ([True, True, True], TypeError, r"got dtype bool"),
    ],
    ids=["0", "-1", "1.5", "nan", "True", "str", "None", "short", "2d", "zero-item", "negative-item",
         "floats", "nan-item", "bools"],
)
def test_bad_dt(counter, dt, exc, pattern):
    s0, _, _ = counter.reset(seed=0)
    with pytest.raises(exc, match=pattern):
        counter.step_batch([0, 1, 2], states=[s0] * 3, dt=dt)
    with pytest.raises(exc, match=pattern):
        counter.step_batch([0, 1, 2], dt=dt)
    assert counter.get_state() == s0


@pytest.mark.parametrize(
    "dt, exc, pattern",
    [
        (0, ValueError, r"got 0"),
        (-1, ValueError, r"got -1"),
        (1.5, TypeError, r"got float: 1\.5"),
        (float("nan"), TypeError, r"got float: nan"),
        ([1], TypeError, r"step takes one integer dt >= 1, got"),
        ([1, 2], ValueError, r"with shape \(1,\), got shape \(2,\)"),
    ],
)
def test_bad_dt_in_step(counter, dt, exc, pattern):
    s0, _, _ = counter.reset(seed=0)
    with pytest.raises(exc, match=pattern):
        counter.step(0, dt=dt)
    assert counter.get_state() == s0


def test_discrete_action_out_of_range(counter):
    s0, _, _ = counter.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions\[1\] = 3 is outside Discrete\(3\)"):
        counter.step_batch([0, 3], states=[s0, s0])
    with pytest.raises(ValueError, match=r"actions\[0\] = -1 is outside Discrete\(3\)"):
        counter.step_batch([-1, 0])
    with pytest.raises(ValueError, match=r"outside Discrete\(3\)"):
        counter.step(3)
    with pytest.raises(TypeError, match=r"actions for Discrete\(3\) must be integers, got dtype float64"):
        counter.step_batch([0.0, 1.0], states=[s0, s0])
    with pytest.raises(TypeError, match=r"must be integers"):
        counter.step(1.0)
    with pytest.raises(ValueError, match=r"must have shape \(2,\), got shape \(2, 1\)"):
        counter.step_batch([[0], [1]], states=[s0, s0])
    with pytest.raises(TypeError, match="must be numeric"):
        counter.step_batch(["a", None], states=[s0, s0])
    assert counter.get_state() == s0


def test_box_action_errors(make_inline):
    env = make_inline("Pendulum-v1")
    s0, _, _ = env.reset(seed=0)
    good = np.zeros((2, 1), dtype=np.float32)
    env.step_batch(good, states=[s0, s0])
    with pytest.raises(ValueError, match=r"must have shape \(2, 1\), got shape \(2, 2\)"):
        env.step_batch(np.zeros((2, 2), dtype=np.float32), states=[s0, s0])
    with pytest.raises(ValueError, match=r"must have shape \(2, 1\), got shape \(2,\)"):
        env.step_batch(np.zeros(2, dtype=np.float32), states=[s0, s0])
    for bad_value, pattern in [(np.nan, r"actions\[1\] = \[nan\] is outside"), (np.inf, r"actions\[1\] = \[inf\] is outside"),
                               (3.0, r"actions\[1\] = \[3\.0\] is outside .*high=\[2\.0\]")]:
        bad = good.copy()
        bad[1, 0] = bad_value
        with pytest.raises(ValueError, match=pattern):
            env.step_batch(bad, states=[s0, s0])
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([np.nan], dtype=np.float32))
    with pytest.raises(ValueError, match=r"an action for Box.* must have shape \(1,\), got shape \(2,\)"):
        env.step(np.zeros(2, dtype=np.float32))
    with pytest.raises(TypeError, match="must be numeric"):
        env.step_batch(np.array([["a"], ["b"]]), states=[s0, s0])
    assert env.get_state() == s0


def test_box_action_dtypes(make_inline):
    env = make_inline("Pendulum-v1")
    s0, _, _ = env.reset(seed=0)
    as_f32 = env.step_batch(np.array([[1.0], [-1.0]], dtype=np.float32), states=[s0, s0])
    as_int = env.step_batch(np.array([[1], [-1]]), states=[s0, s0])
    as_f64 = env.step_batch(np.array([[1.0], [-1.0]]), states=[s0, s0])
    as_list = env.step_batch([[1.0], [-1.0]], states=[s0, s0])
    # Integers are cast to the space's dtype; float32/float64 are kept as given (the env sees them).
    assert_batches_equal(as_int, as_f32)
    assert_batches_equal(as_list, as_f64)


@pytest.mark.parametrize(
    "states, exc, pattern",
    [
        ("one-state", TypeError, r"states must be a sequence of 2 State \(or None\), got State"),
        ("ab", TypeError, r"states must be a sequence of 2 State \(or None\), got str"),
        (b"ab", TypeError, r"got bytes"),
        (7, TypeError, r"got int"),
        ("generator", TypeError, r"got generator"),
        ("array", TypeError, r"got ndarray"),
        ([1, 2], StateError, r"states\[0\]: expected a plan_parallel State, got int"),
        ("one-bad", StateError, r"states\[1\]: expected a plan_parallel State, got dict"),
    ],
)
def test_states_must_be_a_sequence_of_states(counter, states, exc, pattern):
    s0, _, _ = counter.reset(seed=0)
    states = {
        "one-state": s0,
        "generator": (s for s in [s0, s0]),
        "array": np.array([s0, s0], dtype=object),
        "one-bad": [s0, {"kind": s0.kind}],
    }.get(states, states) if isinstance(states, str) else states
    with pytest.raises(exc, match=pattern):
        counter.step_batch([0, 1], states=states)


def test_errors_are_checked_before_the_env_runs(counter):
    s0, _, _ = counter.reset(seed=0)
    items_before = counter.stats["items"]
    for bad in (lambda: counter.step_batch([0, 9], states=[s0, s0]),
                lambda: counter.step_batch([0, 1], states=[s0, s0], dt=0),
                lambda: counter.step_batch([0, 1], states=[s0, "x"])):
        with pytest.raises((ValueError, TypeError)):
            bad()
    assert counter.stats["items"] == items_before
    assert counter.get_state() == s0


# --------------------------------------------------------------------------- make
@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"backend": "nope"}, r"backend must be one of \('inline', 'process', 'ray'\), got 'nope'"),
        ({"backend": "inline", "n_workers": 0}, r"n_workers must be an integer >= 1 or None, got 0"),
        ({"backend": "inline", "n_workers": -2}, r"got -2"),
        ({"backend": "inline", "n_workers": 1.5}, r"got 1\.5"),
        ({"backend": "inline", "n_workers": True}, r"got True"),
        ({"backend": "inline", "timeout": -1}, r"timeout must be a number of seconds > 0 or None, got -1"),
        ({"backend": "inline", "timeout": 0}, r"got 0"),
        ({"backend": "inline", "timeout": float("nan")}, r"got nan"),
        ({"backend": "inline", "timeout": "5"}, r"got '5'"),
        ({"backend": "inline", "max_restarts": -1}, r"max_restarts must be an integer >= 0, got -1"),
    ],
)
def test_make_bad_options(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        pp.make(CounterEnv, **kwargs)


def test_make_bad_env():
    with pytest.raises(TypeError, match="env must be a gymnasium env id"):
        pp.make(42, backend="inline")
    with pytest.raises(TypeError, match=r"must return a gymnasium\.Env, got int"):
        pp.make(lambda: 3, backend="inline")


def test_make_passes_env_kwargs(make_inline):
    env = make_inline(CounterEnv, horizon=2)
    env.reset(seed=0)
    assert env.step(0, dt=5)[3] is True and env.get_state().sim[0] == 2
    cartpole = make_inline("CartPole-v1", max_episode_steps=3)
    cartpole.reset(seed=0)
    assert cartpole.step(0, dt=10)[5]["n_steps"] == 3


# --------------------------------------------------------------------------- the invariant, as a property
@pytest.fixture(scope="module")
def pool():
    """A CounterEnv and some states to draw items from (shared by hypothesis examples)."""
    env = pp.make(CounterEnv, backend="inline", horizon=7)
    states = [env.reset(seed=0)[0]]
    for a in [1, 2, 0, 1, 2, 2]:
        states.append(env.step(a)[0])
    states.append(env.reset(seed=1)[0])
    yield env, states
    env.close()


@given(
    items=st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 2), st.integers(1, 9)), min_size=0, max_size=12
    ),
    cuts=st.lists(st.integers(0, 12), max_size=3),
)
def test_step_batch_equals_serial_steps_and_any_chunking(pool, items, cuts):
    env, states = pool
    env.set_state(states[0])
    item_states = [states[i] for i, _, _ in items]
    actions = np.array([a for _, a, _ in items], dtype=np.int64)
    dt = np.array([d for _, _, d in items], dtype=np.int64)
    whole = env.step_batch(actions, states=item_states, dt=dt)
    assert len(whole.states) == len(items)
    # Serially, with step(action, state, dt).
    for i, (si, a, d) in enumerate(items):
        s, obs, r, term, trunc, info = env.step(a, state=states[si], dt=d)
        assert s == whole.states[i]
        assert_tree_equal(obs, whole.observations[i])
        assert r == whole.rewards[i] and term == whole.terminations[i] and trunc == whole.truncations[i]
        assert info["n_steps"] == whole.infos[i]["n_steps"] == min(d, 7 - states[si].sim[0])
    # In chunks, in any order of chunks.
    bounds = sorted({0, len(items), *[c for c in cuts if c <= len(items)]})
    chunks = list(itertools.pairwise(bounds))
    for lo, hi in reversed(chunks):
        part = env.step_batch(actions[lo:hi], states=item_states[lo:hi], dt=dt[lo:hi])
        assert_batches_equal(part, take(whole, range(lo, hi)))
