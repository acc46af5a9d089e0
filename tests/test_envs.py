"""The test envs themselves: determinism, and FaultyEnv's process-killing faults (in child processes)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import plan_parallel as pp
from tests.envs import FAULTS, PHASES, CounterEnv, DictObsEnv, FaultyEnv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_TIMEOUT = 60.0


def test_counter_env_is_deterministic_per_seed():
    a, b = CounterEnv(horizon=3), CounterEnv(horizon=3)
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    assert oa.tobytes() == ob.tobytes()
    for action in [2, 0, 1]:
        ra, rb = a.step(action), b.step(action)
        assert ra[0].tobytes() == rb[0].tobytes() and ra[1:4] == rb[1:4]
    assert ra[1:4] == (1.0, True, False)
    assert a.observation_space.contains(ra[0])


def test_dict_obs_env_spaces():
    env = DictObsEnv(horizon=2)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, _ = env.step(np.array([1.0, -1.0], dtype=np.float32))
    assert env.observation_space.contains(obs) and isinstance(reward, float)
    state = env.get_state()
    state[0][0] = 99.0  # get_state returns a copy
    assert env.pos[0] != 99.0


def test_faulty_env_rejects_unknown_options():
    with pytest.raises(ValueError, match="fault must be one of"):
        FaultyEnv(fault="explode")
    with pytest.raises(ValueError, match="phase must be one of"):
        FaultyEnv(phase="render")
    assert "hang" in FAULTS and "set_state" in PHASES


def test_faulty_env_none_behaves_like_counter_env():
    with pp.make(FaultyEnv, backend="inline", fault="none") as faulty, pp.make(CounterEnv, backend="inline") as plain:
        fs, fo, _ = faulty.reset(seed=1)
        ps, po, _ = plain.reset(seed=1)
        assert fo.tobytes() == po.tobytes()
        fb = faulty.step_batch([2, 1, 0], states=[fs] * 3, dt=3)
        pb = plain.step_batch([2, 1, 0], states=[ps] * 3, dt=3)
        assert fb.observations.tobytes() == pb.observations.tobytes()
        assert fb.rewards.tolist() == pb.rewards.tolist() == [6.0, 3.0, 0.0]


_CHILD = textwrap.dedent(
    """
    import sys
    import plan_parallel as pp
    from tests.envs import FaultyEnv

    fault, phase = sys.argv[1], sys.argv[2]
    env = pp.make(FaultyEnv, backend="inline", fault=fault, phase=phase)
    if phase == "step":
        env.reset(seed=0)
        env.step(1)
    print("armed", flush=True)
    if phase == "step":
        env.step(2)
    else:
        env.reset(seed=0)
    print("survived", flush=True)
    """
)


@pytest.mark.parametrize(
    "fault, phase, returncode",
    [
        ("exit", "step", 3),
        ("sigkill", "step", -signal.SIGKILL),
        ("segfault", "step", -signal.SIGSEGV),
        ("exit", "reset", 3),
    ],
)
def test_faulty_env_kills_its_process(fault, phase, returncode):
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, fault, phase],
        cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
    )
    assert proc.stdout.splitlines() == ["armed"], proc.stderr
    assert proc.returncode == returncode, proc.stderr


def test_faulty_env_hangs():
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "hang", "step"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "armed"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)  # it hangs: no exit, no "survived"
    finally:
        proc.kill()
        proc.wait(timeout=CHILD_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    assert "survived" not in proc.stdout.read()
