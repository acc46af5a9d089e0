"""Bad input is answered alike everywhere: the same exception type and message on every backend.

A table of bad inputs (malformed states per env family, out-of-range and wrong-dtype
actions, absurd dt and seeds) over every backend and both sides of the parallel
backends' decision where a batch runs: the inline env is the reference; the process
env runs every batch on its workers (``mode="workers"``), every batch in the calling
process (``mode="here"``), or shares each batch (``mode="share"``: with one worker
the last chunk of a batch of 3 or more runs in the calling process); Ray, when
installed, runs CartPole's rows on its workers.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch import BatchEnv
from plan_parallel.batch.tuner import Tuner
from plan_parallel.factory import EnvFactory
from plan_parallel.state import State

pytestmark = pytest.mark.usefixtures("no_leaks_module")

try:
    import ray  # noqa: F401 - the ray extra

    HAS_RAY = True
except ImportError:
    HAS_RAY = False

FAMILIES = ["CartPole-v1", "ALE/Pong-v5", "Hopper-v5", "FrozenLake-v1", "LunarLander-v3"]
SETUPS = ["process-workers", "process-here", "process-share"]


def with_fields(s: State, **fields: Any) -> State:
    """``s`` with some fields replaced (States are values: a new one)."""
    f = {"kind": s.kind, "sim": s.sim, "extra": s.extra, "rng": s.rng, "wrappers": s.wrappers, "obs": s.obs}
    f.update(fields)
    return State(**f)


def bad_states(s: State) -> dict[str, State | Any]:
    """Malformed states for the env ``s`` came from (the same kind, one part wrong)."""
    out: dict[str, State | Any] = {
        "sim short array": with_fields(s, sim=np.zeros(2)),
        "sim str": with_fields(s, sim="abc"),
        "sim None": with_fields(s, sim=None),
        "sim int": with_fields(s, sim=3),
        "sim bytes": with_fields(s, sim=b"xx"),
        "another kind": with_fields(s, kind="classic:OtherEnv"),
        "not a State": 5,
        "extra junk": with_fields(s, extra=("junk",)),
        "rng junk": with_fields(s, rng={"bit_generator": "NoSuchGenerator"}),
        "one wrapper value too many": with_fields(s, wrappers=(*s.wrappers, 0)),
    }
    if isinstance(s.sim, np.ndarray):
        out["sim long array"] = with_fields(s, sim=np.zeros(s.sim.size + 3))
    return out


def bad_calls(env: Any, s: State) -> dict[str, Callable[[], Any]]:
    """Calls with one bad input each, on ``env`` from its reset state ``s``."""
    space = env.action_space
    if isinstance(space, gymnasium.spaces.Discrete):
        good = np.arange(4) % space.n + space.start
    else:
        good = np.tile(np.clip(0.0, space.low, space.high), (4, 1)).astype(space.dtype)
    calls: dict[str, Callable[[], Any]] = {}
    for name, bad in bad_states(s).items():
        calls[f"step_batch, {name}"] = lambda bad=bad: env.step_batch(good, [s, s, bad, s])
        # Last: in the chunk a shared batch leaves to the calling process.
        calls[f"step_batch, {name} last"] = lambda bad=bad: env.step_batch(good, [s, s, s, bad])
        # Twice in a row: an item that repeats the one before is not checked again, and must not be let through.
        calls[f"step_batch, {name} twice"] = lambda bad=bad: env.step_batch(good, [s, bad, bad, s])
        # Apart: the calling process, taking a shared batch from the back, meets the later one first.
        calls[f"step_batch, {name} apart"] = lambda bad=bad: env.step_batch(good, [s, bad, s, bad])
        calls[f"rollout_batch, {name}"] = lambda bad=bad: env.rollout_batch([s, bad], good[:2, None])
        calls[f"rollout_batch, {name} last"] = lambda bad=bad: env.rollout_batch([s, s, s, bad], good[:, None])
        calls[f"step, {name}"] = lambda bad=bad: env.step(good[0], state=bad)
        calls[f"set_state, {name}"] = lambda bad=bad: env.set_state(bad)
    if isinstance(space, gymnasium.spaces.Discrete):
        calls["action above the space"] = lambda: env.step_batch(np.array([0, space.n, 0, 0]), [s] * 4)
        calls["action below the space"] = lambda: env.step_batch(np.array([0, 0, -1, 0]), [s] * 4)
        calls["float actions for Discrete"] = lambda: env.step_batch(np.zeros(4), [s] * 4)
        calls["one action above the space"] = lambda: env.step(space.n, state=s)
    else:
        calls["action NaN"] = lambda: env.step_batch(np.where(np.arange(4)[:, None] == 1, np.nan, good), [s] * 4)
        calls["action above high"] = lambda: env.step_batch(good + 10.0, [s] * 4)
        calls["one action of the wrong shape"] = lambda: env.step(np.zeros(space.shape[0] + 1), state=s)
    calls["actions of the wrong length"] = lambda: env.step_batch(good[:3], [s] * 4)
    calls["string actions"] = lambda: env.step_batch(np.array(["a"] * 4), [s] * 4)
    calls["actions and states swapped"] = lambda: env.step_batch([s] * 4, good)
    calls["rollout states and actions swapped"] = lambda: env.rollout_batch(good[:, None], [s] * 4)
    calls["step state and action swapped"] = lambda: env.step(s, good[0])
    calls["states not a sequence"] = lambda: env.step_batch(good, s)
    calls["states None twice"] = lambda: env.step_batch(good, [None, None, s, s])
    calls["dt 0"] = lambda: env.step_batch(good, [s] * 4, dt=0)
    calls["dt 2**63"] = lambda: env.step_batch(good, [s] * 4, dt=2**63)
    calls["dt uint64 2**63"] = lambda: env.step_batch(good, [s] * 4, dt=np.full(4, 2**63, dtype=np.uint64))
    calls["dt float"] = lambda: env.step_batch(good, [s] * 4, dt=1.5)
    calls["dt bool"] = lambda: env.step_batch(good, [s] * 4, dt=True)
    calls["dt of the wrong shape"] = lambda: env.step_batch(good, [s] * 4, dt=np.ones(3, dtype=np.int64))
    calls["negative seeds"] = lambda: env.step_batch(good, [s] * 4, seeds=np.array([0, -1, 0, 0]))
    calls["rollout horizon 0"] = lambda: env.rollout_batch([s] * 4, horizon=0)
    calls["rollout actions and horizon disagree"] = lambda: env.rollout_batch([s] * 4, good[:, None], horizon=3)
    return calls


def outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "no error", ""


@pytest.fixture(scope="module")
def envs(keep_processes: Callable) -> Iterator[Callable[[str, str], Any]]:
    """``get(env_id, setup)``: one env per (env id, setup) for the module, reset with seed 0."""
    made: dict[tuple[str, str], Any] = {}

    def get(env_id: str, setup: str) -> Any:
        if (env_id, setup) not in made:
            if setup == "inline":
                env = pp.make(env_id, backend="inline")
            else:
                backend, mode = ("ray", "workers") if setup == "ray" else ("process", setup.split("-")[1])
                env = BatchEnv(EnvFactory(env_id, {}), backend=backend, n_workers=1, tuner=Tuner(1, mode))
                keep_processes(env.pids)
            env.reset(seed=0)
            made[(env_id, setup)] = env
        return made[(env_id, setup)]

    yield get
    for env in made.values():
        env.close()


# Ray's rows run on CartPole only: its workers take seconds to start.
ROWS = [(env_id, setup) for env_id in FAMILIES for setup in SETUPS] + ([("CartPole-v1", "ray")] if HAS_RAY else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("env_id,setup", ROWS)
def test_bad_input_is_answered_alike(envs: Callable[[str, str], Any], env_id: str, setup: str) -> None:
    ref, env = envs(env_id, "inline"), envs(env_id, setup)
    s = ref.get_state()
    assert env.get_state() == s
    ref_calls, calls = bad_calls(ref, s), bad_calls(env, s)
    differ = []
    for name in ref_calls:
        counted = env.stats["items"], env.stats["batches"]
        want, got = outcome(ref_calls[name]), outcome(calls[name])
        assert want[0] != "no error", f"{name}: the inline env accepted it"
        if got != want:
            differ.append(f"{name}:\n  inline: {want}\n  {setup}: {got}")
        if (env.stats["items"], env.stats["batches"]) != counted:  # a refused batch ran nothing
            differ.append(f"{name}: {setup} counted it in stats (items, batches): {counted} -> "
                          f"{(env.stats['items'], env.stats['batches'])}")
    assert not differ, "\n".join(differ)
    assert env.get_state() == s  # nothing moved the current state
    batch = env.step_batch(np.array([env.action_space.sample()] * 2), [s, s])  # and the env still works
    assert len(batch.states) == 2


class TypedActionsEnv(gymnasium.Env):
    """Refuses any action its space does not contain (gymnasium 1.x checks the dtype with ``np.can_cast``)."""

    def __init__(self, multi: bool = False) -> None:
        self.multi = multi
        self.action_space = (
            gymnasium.spaces.MultiDiscrete([2, 3], dtype=np.int8) if multi
            else gymnasium.spaces.Discrete(4, start=1, dtype=np.int32)
        )
        self.observation_space = gymnasium.spaces.Box(-100.0, 100.0, (1,))
        self.x = 0.0

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.x = 0.0
        return np.array([self.x], dtype=np.float32), {}

    def step(self, action: Any) -> tuple:
        assert action in self.action_space, f"{action!r} ({np.asarray(action).dtype}) is not in {self.action_space}"
        self.x += float(np.sum(action))
        return np.array([self.x], dtype=np.float32), 1.0, False, False, {}

    def get_state(self) -> float:
        return self.x

    def set_state(self, state: float) -> None:
        self.x = state


@pytest.mark.timeout(120)
@pytest.mark.parametrize("multi", [False, True], ids=["Discrete-int32-start1", "MultiDiscrete-int8"])
@pytest.mark.parametrize("setup", ["inline", *SETUPS])
def test_integer_actions_reach_the_env_in_the_space_dtype(multi: bool, setup: str) -> None:
    if setup == "inline":
        env: Any = pp.make(TypedActionsEnv, backend="inline", multi=multi)
    else:
        env = BatchEnv(EnvFactory(TypedActionsEnv, {"multi": multi}), n_workers=1, tuner=Tuner(1, setup.split("-")[1]))
    with env:
        s, _, _ = env.reset(seed=0)
        actions = np.array([[1, 2], [0, 0], [1, 1]]) if multi else np.array([1, 4, 2])  # int64, as users write them
        batch = env.step_batch(actions, [s] * 3, dt=2)
        assert [st.obs[0] for st in batch.states] == [6.0, 0.0, 4.0] if multi else [2.0, 8.0, 4.0]
        roll = env.rollout_batch([s] * 3, np.repeat(actions[:, None], 2, axis=1))
        assert roll.rewards.sum() == 6.0
        s2, *_ = env.step(actions[0], state=s)
        assert s2.obs[0] == (3.0 if multi else 1.0)


def test_swapped_arguments_name_the_call_that_was_made() -> None:
    with pp.make("CartPole-v1", backend="inline") as env:
        s = env.reset(seed=0)[0]
        with pytest.raises(TypeError, match=r"got a State: step takes \(action, state\)"):
            env.step(s, 1)
        with pytest.raises(TypeError, match=r"step_batch takes \(actions, states\)"):
            env.step_batch([s] * 2, [0, 1])
