"""A MuJoCo state copied out of and into MjData by one gather / scatter equals what mj_getState / mj_setState copy.

The state is ``mj_getState(mjSTATE_INTEGRATION)`` then ``xpos`` and ``xipos``
(:class:`~plan_parallel.state.MujocoAdapter`); :mod:`plan_parallel.state.families.mujoco_copy`
copies it with numpy when its entries are float64 arrays of the MjData buffer,
else with the two calls. Both ways must copy the very same values.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from plan_parallel.state.families.mujoco_copy import gather_map, state_copiers

mujoco = pytest.importorskip("mujoco")
SPEC = int(mujoco.mjtState.mjSTATE_INTEGRATION)

GYMNASIUM_ENVS = ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Humanoid-v5", "HumanoidStandup-v5", "InvertedDoublePendulum-v5",
                  "InvertedPendulum-v5", "Pusher-v5", "Reacher-v5", "Swimmer-v5", "Walker2d-v5"]

# Mocap bodies, user data and an actuator with an activation: every kind of float64 entry in the state.
WIDE_MODEL = """
<mujoco>
  <size nuserdata="3"/>
  <worldbody>
    <body mocap="true" pos="1 0 0"><geom size=".1" contype="0" conaffinity="0"/></body>
    <body name="ball" pos="0 0 1"><freejoint/><geom size=".2"/></body>
    <body name="arm" pos="0 1 1"><joint name="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 .5 0 0" size=".05"/></body>
  </worldbody>
  <actuator><general joint="hinge" dyntype="integrator" gainprm="1"/></actuator>
</mujoco>
"""
# An equality constraint: eq_active is bytes in MjData, a float in the state.
EQUALITY_MODEL = WIDE_MODEL.replace("</actuator>", "</actuator><equality><weld body1=\"ball\" body2=\"arm\"/></equality>")


def _native(m, d) -> np.ndarray:
    head = np.empty(mujoco.mj_stateSize(m, SPEC))
    mujoco.mj_getState(m, d, head, SPEC)
    return np.concatenate((head, d.xpos.ravel(), d.xipos.ravel()))


def _moved(m, d, seed: int) -> None:
    """Step ``d`` a little with random controls and forces, so that every entry holds a value of its own."""
    rng = np.random.default_rng(seed)
    d.ctrl[:] = rng.uniform(-1, 1, m.nu)
    d.qfrc_applied[:] = rng.uniform(-1, 1, m.nv)
    d.xfrc_applied[:] = rng.uniform(-1, 1, d.xfrc_applied.shape)
    d.mocap_pos[:] = rng.uniform(-1, 1, d.mocap_pos.shape)
    d.userdata[:] = rng.uniform(-1, 1, m.nuserdata)
    for _ in range(5):
        mujoco.mj_step(m, d)


def _check_both_ways(m, d) -> None:
    get, put = state_copiers(mujoco, m, d, SPEC)
    _moved(m, d, 0)
    first = get()
    np.testing.assert_array_equal(first, _native(m, d))
    _moved(m, d, 1)
    assert not np.array_equal(_native(m, d), first)
    put(first)
    np.testing.assert_array_equal(_native(m, d), first)


@pytest.mark.parametrize("env_id", GYMNASIUM_ENVS)
def test_every_gymnasium_mujoco_env_is_copied_by_a_gather_equal_to_mj_getstate(env_id):
    env = gym.make(env_id)
    try:
        env.reset(seed=0)
        m, d = env.unwrapped.model, env.unwrapped.data
        assert gather_map(mujoco, m, d, SPEC) is not None
        _check_both_ways(m, d)
    finally:
        env.close()


def test_mocap_userdata_and_activations_are_gathered_exactly():
    m = mujoco.MjModel.from_xml_string(WIDE_MODEL)
    d = mujoco.MjData(m)
    assert m.nmocap == 1 and m.nuserdata == 3 and m.na == 1
    assert gather_map(mujoco, m, d, SPEC) is not None
    _check_both_ways(m, d)


def test_a_model_with_equality_constraints_keeps_mj_getstate_and_mj_setstate():
    m = mujoco.MjModel.from_xml_string(EQUALITY_MODEL)
    d = mujoco.MjData(m)
    assert m.neq == 1
    assert gather_map(mujoco, m, d, SPEC) is None
    _check_both_ways(m, d)
    d.eq_active[0] = 0  # the bytes entry goes into the state and back
    get, put = state_copiers(mujoco, m, d, SPEC)
    off = get()
    d.eq_active[0] = 1
    put(off)
    assert d.eq_active[0] == 0


def test_finding_the_map_leaves_the_data_as_it_was():
    m = mujoco.MjModel.from_xml_string(WIDE_MODEL)
    d = mujoco.MjData(m)
    _moved(m, d, 2)
    before = _native(m, d)
    assert gather_map(mujoco, m, d, SPEC) is not None
    np.testing.assert_array_equal(_native(m, d), before)
