"""The differential fuzzer's tables (``tests/fuzz_api.py``): every state family on every backend, and
``make_vec`` against ``SyncVectorEnv``.

Budget: 4-16 call sequences a row here (the whole table takes about a minute on two idle cores); a larger budget
multiplies it, e.g. ``PP_FUZZ_EXAMPLES=20 PP_FUZZ_STEPS=2 python -m pytest tests/test_fuzz.py -p no:randomly``
(``PP_FUZZ_RANDOM=1`` draws new sequences each run instead of the same ones). A hole the fuzzer finds
becomes a named row of the invariant tables (``tests/test_exact_paths.py``).
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from hypothesis.stateful import run_state_machine_as_test

import plan_parallel as pp
from tests.envs import ArrayStateEnv, ShiftingStateEnv
from tests.fuzz_api import ApiMachine, Case, VectorCase, VectorMachine, fuzz_settings

# family -> (env, make kwargs, gymnasium's own env builder kwargs, examples, steps). ALE is slow (an item
# is ~0.2-1 ms of emulation) and gets fewer calls; the gymnasium comparison uses ALE without sticky
# actions (with them, plan_parallel draws the sticky choice from the env's np_random: a deliberate
# deviation, see test_exact_paths.py).
FAMILIES: dict[str, tuple[Any, dict, int, int]] = {
    "classic": ("CartPole-v1", {}, 16, 16),
    "classic-box": ("Pendulum-v1", {}, 8, 14),
    "toy_text": ("FrozenLake-v1", {}, 16, 16),
    "box2d": ("LunarLander-v3", {}, 8, 14),
    "mujoco": ("HalfCheetah-v5", {}, 8, 14),
    "ale": ("ALE/Pong-v5", {"repeat_action_probability": 0.0}, 4, 10),
    # RAM observations: the lane takes these states pickled, their blobs in its segment (wire.lane's state regions)
    "ale-ram": ("ALE/Pong-v5", {"repeat_action_probability": 0.0, "obs_type": "ram"}, 4, 10),
    "pickle": ("MiniGrid-Empty-5x5-v0", {}, 8, 14),
    "user": (ArrayStateEnv, {}, 16, 16),
    # a tuple of ints and a float, of other forms at every fourth count: the lane's rows, pickles and general path
    "user-tuple": (ShiftingStateEnv, {"horizon": 40}, 16, 16),
}
BACKENDS: dict[str, dict[str, Any]] = {
    "inline": {"backend": "inline"},
    "process": {"backend": "process", "n_workers": 2, "max_restarts": 1000},
    "process-workers": {"backend": "process", "n_workers": 2, "max_restarts": 1000, "small_batch_inline": False},
}


def _reference(env: Any, kwargs: dict) -> gym.Env:
    return gym.make(env, **kwargs) if isinstance(env, str) else env(**kwargs)


def _run(family: str, options: dict[str, Any]) -> None:
    env, kwargs, examples, steps = FAMILIES[family]
    if family in ("ale", "ale-ram", "pickle"):
        gym.register_envs(pytest.importorskip("minigrid" if family == "pickle" else "ale_py"))
    with pp.make(env, **options, **kwargs) as subject, pp.make(env, backend="inline", **kwargs) as oracle:
        case = Case(subject, oracle, functools.partial(_reference, env, kwargs),
                    fresh_reference=family == "box2d", kill=options["backend"] == "process")
        run_state_machine_as_test(lambda: ApiMachine(case), settings=fuzz_settings(examples, steps))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_random_call_sequences_equal_inline_and_gymnasium(family: str, backend: str) -> None:
    _run(family, BACKENDS[backend])


@pytest.mark.ray
@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", ["classic", "toy_text", "user"])
def test_random_call_sequences_on_ray(family: str) -> None:
    pytest.importorskip("ray")
    _run(family, {"backend": "ray", "n_workers": 2, "max_restarts": 1000, "small_batch_inline": False})


VECTOR_ENVS = {"classic": "CartPole-v1", "toy_text": "FrozenLake-v1", "box2d": "LunarLander-v3",
               "box2d-walker": "BipedalWalker-v3", "mujoco": "Hopper-v5"}


@pytest.fixture(params=["inline", "process"])
def vector_backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    yield {"backend": "inline"} if request.param == "inline" else {"backend": "process", "n_workers": 2}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", list(VECTOR_ENVS))
def test_random_vector_sequences_equal_sync_vector_env(family: str, vector_backend: dict[str, Any]) -> None:
    env_id, n = VECTOR_ENVS[family], 3
    with pp.make_vec(env_id, n, **vector_backend) as subject:
        case = VectorCase(subject, lambda: gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n),
                          fresh_reference=family.startswith("box2d"))
        run_state_machine_as_test(lambda: VectorMachine(case), settings=fuzz_settings(10, 12))
