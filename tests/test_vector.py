"""make_vec: a gymnasium VectorEnv over the planning workers, checked against SyncVectorEnv.

The oracle is ``gymnasium.vector.SyncVectorEnv`` over the same env, seeds and
actions: observations, rewards, flags and infos must be bitwise equal, over runs
that cross episode ends, in every autoreset mode, on every backend and worker count.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

import plan_parallel as pp
from plan_parallel.factory import EnvFactory
from plan_parallel.vector import AsyncState
from tests.conftest_leaks import live_children
from tests.envs import CounterEnv, DictObsEnv, FaultyEnv
from tests.helpers import assert_tree_equal

pytestmark = pytest.mark.usefixtures("no_leaks")

MODES = list(AutoresetMode)
# (backend, n_workers): inline is the reference; the process backend with 1 and 2 workers.
BACKENDS = [("inline", 1), ("process", 1), ("process", 2)]
BACKEND_IDS = ["inline", "process-W1", "process-W2"]
INLINE_AND_W2 = pytest.mark.parametrize("backend,w", [("inline", 1), ("process", 2)], ids=["inline", "process-W2"])
SEED = 7
ADAPTIVE = pp.ExecutionPolicy(placement="adaptive")  # the measured placement, which shares steps with this process


# ---------------------------------------------------------------------------- test envs
class SlowActionEnv(CounterEnv):
    """A CounterEnv whose step sleeps ``delay`` seconds when the action is 2."""

    def __init__(self, delay: float = 0.3, horizon: int = 10) -> None:
        super().__init__(horizon=horizon)
        self.delay = delay

    def step(self, action: Any) -> tuple:
        if int(action) == 2:
            time.sleep(self.delay)
        return super().step(action)


class SpacesEnv(gym.Env):
    """Tuple observations (Box, MultiDiscrete, MultiBinary) and Dict actions (Discrete, Box); RNG in every step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, horizon: int = 6) -> None:
        self.horizon = horizon
        self.observation_space = spaces.Tuple((
            spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32),
            spaces.MultiDiscrete([3, 4]),
            spaces.MultiBinary(2),
        ))
        self.action_space = spaces.Dict({"move": spaces.Discrete(3), "push": spaces.Box(-1.0, 1.0, (2,), np.float32)})
        self.pos = np.zeros(2, dtype=np.float32)
        self.count = 0

    def _obs(self) -> tuple:
        bits = (self.pos > 0).astype(np.int8)
        return (self.pos.copy(), np.array([self.count % 3, self.count % 4]), bits)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self.count = 0
        return self._obs(), {"start": self.pos.copy()}

    def step(self, action: dict) -> tuple:
        noise = self.np_random.normal(0, 0.01, size=2).astype(np.float32)
        self.pos = np.clip(self.pos + action["push"] * (action["move"] - 1) + noise, -10, 10).astype(np.float32)
        self.count += 1
        return self._obs(), float(self.pos.sum()), self.count >= self.horizon, False, {"count": self.count}

    def get_state(self) -> tuple:
        return (self.pos.copy(), self.count)

    def set_state(self, state: tuple) -> None:
        self.pos, self.count = np.array(state[0], dtype=np.float32), int(state[1])


def _bound(factory: EnvFactory) -> Any:
    """The env as plan_parallel binds it (sticky actions drawn in Python), for an oracle of sticky ALE."""
    env = factory()
    pp.state.bind(env)
    return env


# ---------------------------------------------------------------------------- helpers
def oracle(env: Any, n: int, mode: AutoresetMode, bound: bool = False, **kw: Any) -> SyncVectorEnv:
    fns = [EnvFactory(env, kw) for _ in range(n)]
    if bound:
        fns = [lambda f=f: _bound(f) for f in fns]
    return SyncVectorEnv(fns, autoreset_mode=mode)


def make(env: Any, n: int, mode: AutoresetMode, backend: str, w: int, **kw: Any) -> pp.vector.PlanVectorEnv:
    if backend != "inline" and "execution" not in kw:
        kw.setdefault("small_batch_inline", False)  # every step on the workers
    return pp.make_vec(env, n, n_workers=w, backend=backend, autoreset_mode=mode, **kw)


def same(got: tuple, want: tuple, where: str) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_tree_equal(g, w, f"{where}[{k}]")


def drive(vec: Any, ref: SyncVectorEnv, steps: int, seed: int = 0) -> None:
    """Run both vector envs through the same resets and random actions, comparing every result."""
    n = ref.num_envs
    same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset(seed)")
    rng = np.random.default_rng(seed)
    space = batch_space(ref.single_action_space, n)
    space.seed(seed)
    for t in range(steps):
        if t == 2 * steps // 3:  # every sub-env, no seed: each continues its own RNG
            same(vec.reset(), ref.reset(), f"reset()@{t}")
        mask = np.zeros(n, dtype=bool)
        if t == steps // 3:  # some sub-envs reset mid-episode, continuing their RNG
            mask = rng.random(n) < 0.5
            mask[t % n] = True
        if vec.autoreset_mode == AutoresetMode.DISABLED:
            mask |= vec.autoreset_envs
        if mask.any():
            same(vec.reset(options={"reset_mask": mask}), ref.reset(options={"reset_mask": mask}), f"mask@{t}")
        actions = space.sample()
        same(vec.step(actions), ref.step(actions), f"step {t}")


@pytest.mark.timeout(120)
def test_step_may_be_shared_with_this_process_and_step_async_is_not() -> None:
    """The adaptive placement: the tuner's first steps measure each place in turn, "share" among them (the
    calling process runs the last chunk of the 7 sub-envs' step); step_async's futures never share."""
    n = 7
    ref = oracle(CounterEnv, n, AutoresetMode.NEXT_STEP, horizon=10**6)
    with pp.make_vec(CounterEnv, n, n_workers=2, horizon=10**6, execution=ADAPTIVE) as vec:
        same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        rng = np.random.default_rng(3)
        for t in range(12):
            actions = rng.integers(0, 3, n)
            same(vec.step(actions), ref.step(actions), f"step {t}")
        assert vec.stats["shared_batches"] >= 3 and vec.stats["shared_items"] > 0
        shared = vec.stats["shared_batches"]
        for t in range(12):
            actions = rng.integers(0, 3, n)
            vec.step_async(actions)
            same(vec.step_wait(), ref.step(actions), f"step_async {t}")
        assert vec.stats["shared_batches"] == shared


def info_row(infos: dict, j: int) -> dict:
    """Row j of vector infos: the keys whose ``_key`` mask is set, nested dicts included."""
    return {k: info_row(v, j) if isinstance(v, dict) else v[j]
            for k, v in infos.items() if not k.startswith("_") and infos["_" + k][j]}


# ---------------------------------------------------------------------------- differential
CASES = {
    "cartpole": ("CartPole-v1", {}, 4, 150),
    "pong-ram": ("ALE/Pong-v5", {"obs_type": "ram", "repeat_action_probability": 0.0, "max_episode_steps": 25}, 3, 70),
    "dict": (DictObsEnv, {"horizon": 8}, 3, 60),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
@pytest.mark.parametrize("backend,w", BACKENDS, ids=BACKEND_IDS)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_sync_vector_env(case: str, backend: str, w: int, mode: AutoresetMode) -> None:
    env, kw, n, steps = CASES[case]
    ref = oracle(env, n, mode, **kw)
    with make(env, n, mode, backend, w, **kw) as vec:
        assert vec.single_observation_space == ref.single_observation_space
        assert vec.observation_space == ref.observation_space
        assert vec.action_space == ref.action_space
        drive(vec, ref, steps)
        if backend != "inline":
            assert vec.stats["inline_batches"] == 0 and vec.stats["items"] > 0  # the workers did the steps
    ref.close()


@pytest.mark.timeout(60)
@INLINE_AND_W2
def test_pong_rgb_and_sticky_actions(backend: str, w: int) -> None:
    """A short RGB run, and sticky actions (p=0.25) against envs bound as plan_parallel binds them."""
    rgb = {"max_episode_steps": 6}
    ref = oracle("ALE/Pong-v5", 2, AutoresetMode.SAME_STEP, repeat_action_probability=0.0, **rgb)
    with make("ALE/Pong-v5", 2, AutoresetMode.SAME_STEP, backend, w, repeat_action_probability=0.0, **rgb) as vec:
        assert vec.observation_space.shape == (2, 210, 160, 3)
        drive(vec, ref, 14)
    ref.close()
    sticky = {"obs_type": "ram", "max_episode_steps": 20}
    ref = oracle("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, bound=True, **sticky)
    with make("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, backend, w, **sticky) as vec:
        drive(vec, ref, 45)
    ref.close()


@pytest.mark.timeout(180)
def test_shared_pong_rgb_steps_make_their_rows_on_resident_and_kept_envs() -> None:
    """The adaptive placement on W=2: the first steps try each place, three of them shared. There this process's
    pieces step its resident envs and the worker's chunk its kept envs, and both make the RGB observations
    in the step's lent rows. Every step equals SyncVectorEnv's (sticky actions: envs bound as
    plan_parallel binds them)."""
    rgb = {"max_episode_steps": 10}
    ref = oracle("ALE/Pong-v5", 4, AutoresetMode.NEXT_STEP, bound=True, **rgb)
    with make("ALE/Pong-v5", 4, AutoresetMode.NEXT_STEP, "process", 2, execution=ADAPTIVE, **rgb) as vec:
        drive(vec, ref, 16)
        assert vec.stats["shared_batches"] >= 3 and vec.stats["shared_items"] > 0 and vec.stats["lent_batches"] > 0
    ref.close()


@pytest.mark.timeout(60)
def test_sticky_pong_rgb_stepped_here_makes_its_screens_in_the_rows() -> None:
    """Inline, every sub-env steps here (PlanVectorEnv._step_rows) with its RGB screen made in its row of the
    step's observations: every step equals SyncVectorEnv's (envs bound as plan_parallel binds them)."""
    rgb = {"max_episode_steps": 10}
    ref = oracle("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, bound=True, **rgb)
    with make("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, "inline", 1, **rgb) as vec:
        drive(vec, ref, 16)
    ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend, w, kw", [("inline", 1, {}), ("process", 2, {}), ("process", 2, {"execution": ADAPTIVE})],
                         ids=["inline", "process-W2", "process-W2-adaptive"])
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "no-copy"])
def test_observations_returned_to_the_caller_are_not_the_states_own(backend: str, w: int, kw: dict, copy: bool) -> None:
    """The sub-envs' states keep their observations (on the workers, rows of the step's lent slab): the caller
    writing into the observations it got back (or, without copy, the vector env's own buffer) leaves the
    states as they were, after steps on the workers, here and (the adaptive placement: the tuner tries each
    place in turn, the shared one third) shared. (A version that made the screens in the returned rows here failed this.)"""
    with make("ALE/Pong-v5", 2, AutoresetMode.NEXT_STEP, backend, w, max_episode_steps=10, copy=copy, **kw) as vec:
        vec.reset(seed=SEED)
        for _ in range(3):
            obs = vec.step(np.array([2, 3]))[0]
        kept = [s.obs.copy() for s in vec.get_states()]
        if obs.flags.writeable:
            obs[...] = 0
        for state, before in zip(vec.get_states(), kept):
            np.testing.assert_array_equal(state.obs, before)
        assert kept[0].any()
        if kw:
            assert vec.stats["shared_batches"] >= 1 and vec.stats["inline_batches"] >= 1


@pytest.mark.timeout(60)
@INLINE_AND_W2
def test_any_space_tuple_obs_dict_actions(backend: str, w: int) -> None:
    ref = oracle(SpacesEnv, 3, AutoresetMode.SAME_STEP)
    with make(SpacesEnv, 3, AutoresetMode.SAME_STEP, backend, w) as vec:
        assert vec.observation_space == ref.observation_space
        assert vec.action_space == ref.action_space
        drive(vec, ref, 24)
    ref.close()


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_matches_sync_on_ray() -> None:
    """CartPole, and sticky Pong (RAM), whose sub-envs the actors keep envs for (workers.kept_envs)."""
    pytest.importorskip("ray")
    ref = oracle("CartPole-v1", 4, AutoresetMode.NEXT_STEP)
    with make("CartPole-v1", 4, AutoresetMode.NEXT_STEP, "ray", 2) as vec:
        drive(vec, ref, 60)
    ref.close()
    sticky = {"obs_type": "ram", "max_episode_steps": 20}
    ref = oracle("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, bound=True, **sticky)
    with make("ALE/Pong-v5", 3, AutoresetMode.NEXT_STEP, "ray", 2, **sticky) as vec:
        drive(vec, ref, 45)
        assert vec.stats["inline_batches"] == 0 and vec.stats["items"] > 0  # the actors did the steps
    ref.close()


@pytest.mark.timeout(60)
def test_copy_false_shares_one_buffer_as_sync_does() -> None:
    ref = SyncVectorEnv([EnvFactory("CartPole-v1") for _ in range(3)], copy=False)
    with make("CartPole-v1", 3, AutoresetMode.NEXT_STEP, "inline", 1, copy=False) as vec:
        first, _ = vec.reset(seed=SEED)
        ref.reset(seed=SEED)
        for t in range(40):
            acts = np.array([t % 2, 1, 0])
            got, want = vec.step(acts), ref.step(acts)
            same(got, want, f"step {t}")
            assert got[0] is first  # the same buffer, updated in place
        mask = np.array([False, True, False])
        same(vec.reset(options={"reset_mask": mask}), ref.reset(options={"reset_mask": mask}), "mask")
    ref.close()


@pytest.mark.timeout(60)
def test_first_reset_without_seed_draws_independent_sub_envs() -> None:
    with make("CartPole-v1", 4, AutoresetMode.NEXT_STEP, "process", 2) as vec:
        obs, _ = vec.reset()
        assert len({row.tobytes() for row in obs}) == 4
        states = vec.get_states()
        assert len({repr(s.rng) for s in states}) == 4  # each sub-env has its own RNG stream
        vec.step(np.zeros(4, dtype=np.int64))


# ---------------------------------------------------------------------------- states
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED])
def test_get_set_states_round_trip(mode: AutoresetMode) -> None:
    n = 4
    rng = np.random.default_rng(1)
    actions = rng.integers(0, 2, size=(60, n))
    with make("CartPole-v1", n, mode, "inline", 1) as a, make("CartPole-v1", n, mode, "process", 2) as b:
        a.reset(seed=3)
        for act in actions[:25]:
            if a.autoreset_envs.any() and mode == AutoresetMode.DISABLED:
                a.reset(options={"reset_mask": a.autoreset_envs})
            a.step(act)
        states, flags = a.get_states(), a.autoreset_envs
        assert len(states) == n and all(isinstance(s, pp.State) for s in states)
        assert a.get_states([2, 0]) == [states[2], states[0]]

        def run(v: Any) -> list:
            out = []
            for act in actions[25:]:
                if v.autoreset_envs.any() and mode == AutoresetMode.DISABLED:
                    out.append(v.reset(options={"reset_mask": v.autoreset_envs}))
                out.append(v.step(act))
            return out

        first = run(a)
        a.set_states(states, autoreset=flags)  # back in time
        b.reset(seed=99)
        b.set_states(states, autoreset=flags)  # another vector env, on workers
        for got in (run(a), run(b)):
            for k, (x, y) in enumerate(zip(got, first)):
                same(x, y, f"replay {k}")
        # Two sub-envs jump to one state; their observations follow.
        a.set_states([states[0], states[0]], indices=[1, 3])
        assert a.get_states([3, 1]) == [states[0], states[0]]
        obs, *_ = a.step(np.zeros(n, dtype=np.int64))
        assert_tree_equal(obs[3], obs[1])


@pytest.mark.timeout(60)
def test_states_serve_the_planning_api() -> None:
    """A planner searches from a sub-env's state with step_batch; the same action in the vector env agrees."""
    with make("CartPole-v1", 3, AutoresetMode.NEXT_STEP, "process", 2) as vec:
        vec.reset(seed=0)
        states = vec.get_states()
        batch = vec.plan_env.step_batch([0, 1, 1], states=states)
        obs, rewards, terms, truncs, _ = vec.step(np.array([0, 1, 1]))
        assert_tree_equal(obs, batch.observations)
        assert_tree_equal(rewards, batch.rewards)
        assert vec.get_states() == list(batch.states)


@pytest.mark.timeout(30)
def test_set_states_rejects_bad_states() -> None:
    with make("CartPole-v1", 2, AutoresetMode.NEXT_STEP, "inline", 1) as vec, \
            pp.make("Acrobot-v1", backend="inline") as other:
        vec.reset(seed=0)
        s = vec.get_states()
        with pytest.raises(ValueError, match="expected 2 states"):
            vec.set_states(s[:1])
        with pytest.raises(pp.StateError, match="kind"):
            vec.set_states([other.reset(seed=0)[0]], indices=[0])
        bare = pp.State(s[0].kind, s[0].sim, s[0].extra, s[0].rng, s[0].wrappers, None)
        with pytest.raises(pp.StateError, match="no observation"):
            vec.set_states([bare], indices=[1])
        with pytest.raises(ValueError, match="indices"):
            vec.set_states(s, indices=[0, 0])
        assert vec.get_states() == s  # nothing changed


# ---------------------------------------------------------------------------- recovery
# Sticky Pong (RAM): the workers keep envs for its sub-envs (workers.kept_envs), and a replacement keeps none.
RECOVERY_CASES = {"cartpole": ("CartPole-v1", {}, False),
                  "pong-sticky": ("ALE/Pong-v5", {"obs_type": "ram", "max_episode_steps": 400}, True)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("case", list(RECOVERY_CASES))
def test_recovers_from_a_killed_worker(case: str, mode: AutoresetMode) -> None:
    env, kw, bound = RECOVERY_CASES[case]
    n, steps = 8, 80  # (the lane gives a worker 4 items at least: 8 sub-envs use both workers, and see both deaths)
    ref = oracle(env, n, mode, bound=bound, **kw)
    with make(env, n, mode, "process", 2, **kw) as vec:
        assert vec.recover
        same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        space = batch_space(ref.single_action_space, n)
        space.seed(0)
        for t in range(steps):
            if t in (20, 50):
                os.kill(vec.plan_env.pids[t // 30], signal.SIGKILL)
            actions = space.sample()
            same(vec.step(actions), ref.step(actions), f"step {t}")
        assert vec.stats["restarts"] == 2 and vec.stats["inline_batches"] == 0
    ref.close()


@pytest.mark.timeout(120)
def test_kept_envs_are_built_within_a_quarter_of_the_calls_timeout() -> None:
    """16 sticky Pongs (RAM) on W=2, every step on the workers, calls given 1 s: a call builds its sub-envs'
    kept envs (~150-300 ms each) only in the first quarter of that, so none times out (told nothing of the
    timeout, a worker's first call built envs for its 8 sub-envs for 1 s, and timed out); every step
    equals SyncVectorEnv's."""
    kw = {"obs_type": "ram", "max_episode_steps": 50}
    ref = oracle("ALE/Pong-v5", 16, AutoresetMode.NEXT_STEP, bound=True, **kw)
    with make("ALE/Pong-v5", 16, AutoresetMode.NEXT_STEP, "process", 2, timeout=1.0, **kw) as vec:
        drive(vec, ref, 12)
        assert vec.stats["timeouts"] == 0 and vec.stats["restarts"] == 0
    ref.close()


@pytest.mark.timeout(60)
def test_recover_false_raises_worker_crashed() -> None:
    with make("CartPole-v1", 4, AutoresetMode.NEXT_STEP, "process", 2, recover=False) as vec:
        vec.reset(seed=0)
        vec.step(np.zeros(4, dtype=np.int64))
        before = vec.get_states()
        pid = vec.plan_env.pids[0]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(pp.WorkerCrashedError, match=f"pid {pid}"):
            vec.step(np.ones(4, dtype=np.int64))
        assert vec.get_states() == before  # the failed step changed nothing
    with pytest.raises(ValueError, match="recover=False"):
        pp.make_vec("CartPole-v1", 2, backend="inline", recover=False, max_restarts=2)


@pytest.mark.timeout(60)
def test_env_error_and_worker_timeout_leave_no_stale_results() -> None:
    n = 4
    ref = oracle(SlowActionEnv, n, AutoresetMode.NEXT_STEP, delay=3.0)
    with make(SlowActionEnv, n, AutoresetMode.NEXT_STEP, "process", 2, timeout=0.5, delay=3.0) as vec:
        same(vec.reset(seed=1), ref.reset(seed=1), "reset")
        same(vec.step(np.array([0, 1, 0, 1])), ref.step(np.array([0, 1, 0, 1])), "step 0")
        before = vec.get_states()
        with pytest.raises(pp.WorkerTimeoutError):
            vec.step(np.array([0, 2, 0, 1]))  # sub-env 1 hangs past the timeout: its worker is replaced
        assert vec.get_states() == before
        for t in range(12):  # later steps are this run's, never the timed-out one's
            acts = np.array([t % 2, 1, (t + 1) % 2, 0])
            same(vec.step(acts), ref.step(acts), f"step {t + 1}")
        assert vec.stats["timeouts"] == 1
    ref.close()
    with make(FaultyEnv, 2, AutoresetMode.NEXT_STEP, "process", 2, fault="raise") as vec:
        vec.reset(seed=0)
        before = vec.get_states()
        with pytest.raises(ValueError, match="injected fault"):
            vec.step(np.array([0, 2]))
        assert vec.get_states() == before
        vec.step(np.array([0, 1]))  # usable after an env error


# ---------------------------------------------------------------------------- async
@pytest.mark.timeout(60)
def test_step_async_and_wait_timeout() -> None:
    n = 4
    ref = oracle(SlowActionEnv, n, AutoresetMode.NEXT_STEP, delay=0.4)
    with make(SlowActionEnv, n, AutoresetMode.NEXT_STEP, "process", 2, delay=0.4) as vec:
        same(vec.reset(seed=2), ref.reset(seed=2), "reset")
        with pytest.raises(NoAsyncCallError):
            vec.step_wait()
        acts = np.array([0, 2, 1, 0])
        assert vec.async_state is AsyncState.DEFAULT
        vec.step_async(acts)
        assert vec.async_state is AsyncState.WAITING_STEP
        with pytest.raises(AlreadyPendingCallError):
            vec.step_async(acts)
        with pytest.raises(TimeoutError):
            vec.step_wait(timeout=0.05)  # still running: stays pending
        assert vec.async_state is AsyncState.WAITING_STEP
        same(vec.step_wait(timeout=30), ref.step(acts), "step_wait")
        assert vec.async_state is AsyncState.DEFAULT
        # A pending step dropped by reset is never returned.
        vec.step_async(np.array([2, 2, 2, 2]))
        same(vec.reset(seed=5), ref.reset(seed=5), "reset drops")
        acts = np.array([1, 0, 1, 0])
        same(vec.step(acts), ref.step(acts), "after drop")
    ref.close()


def _collect(vec: Any, rounds: list[tuple[np.ndarray, list[int | None]]]) -> dict[int, list]:
    """Send every sub-env, then recv them in the given chunk sizes; per sub-env, what it received."""
    got: dict[int, list] = {}
    for acts, chunks in rounds:
        vec.send(acts, np.arange(len(acts)))
        for k in chunks:
            r = vec.recv(wait_num=k)
            if k is not None:
                assert len(r.env_ids) == k
            for j, i in enumerate(r.env_ids.tolist()):
                got.setdefault(i, []).append((r.observations[j], r.rewards[j], r.terminations[j],
                                              r.truncations[j], info_row(r.infos, j)))
    return got


def cartpoles(limits: list[int | None]) -> list[EnvFactory]:
    """env_fns of CartPole-v1 with these ``max_episode_steps`` (None: its own): one recipe group per distinct limit."""
    return [EnvFactory("CartPole-v1", {} if m is None else {"max_episode_steps": m}) for m in limits]


@pytest.mark.timeout(60)
@INLINE_AND_W2
@pytest.mark.parametrize("groups", [1, 2])
def test_send_recv_matches_step(backend: str, w: int, groups: int) -> None:
    """With 2 recipe groups (other max_episode_steps), a send is split by group, then by worker."""
    n = 5
    rng = np.random.default_rng(3)
    rounds = [(rng.integers(0, 2, n), [2, None]) for _ in range(30)]
    fns = cartpoles([None, 9, None, 9, None])
    env: Any = "CartPole-v1" if groups == 1 else fns
    ref = oracle("CartPole-v1", n, AutoresetMode.SAME_STEP) if groups == 1 else SyncVectorEnv(
        fns, autoreset_mode=AutoresetMode.SAME_STEP)
    ref.reset(seed=SEED)
    want: dict[int, list] = {}
    for acts, _ in rounds:
        obs, rew, term, trunc, infos = ref.step(acts)
        for i in range(n):
            want.setdefault(i, []).append((obs[i], rew[i], term[i], trunc[i], info_row(infos, i)))
    with make(env, n, AutoresetMode.SAME_STEP, backend, w) as vec:
        assert len(vec.plan_envs) == groups
        vec.reset(seed=SEED)
        got = _collect(vec, rounds)
    assert sorted(got) == list(range(n))
    for i in range(n):
        for t, (g, x) in enumerate(zip(got[i], want[i])):
            same(g, x, f"sub-env {i} step {t}")
    ref.close()


@pytest.mark.timeout(60)
def test_recv_returns_the_first_ready_sub_envs() -> None:
    with make(SlowActionEnv, 4, AutoresetMode.NEXT_STEP, "process", 2, delay=1.0) as vec:
        vec.reset(seed=0)
        vec.send(np.array([0, 1, 2, 2]), [0, 1, 2, 3])  # sub-envs 2 and 3 are slow
        assert vec.async_state is AsyncState.WAITING_RECV
        with pytest.raises(ValueError, match="not yet received"):
            vec.send(np.array([0]), [1])
        with pytest.raises(AlreadyPendingCallError):
            vec.step(np.zeros(4, dtype=np.int64))
        first = vec.recv(wait_num=2, timeout=2.0)  # returns as soon as the fast two are done
        assert sorted(first.env_ids.tolist()) == [0, 1]
        with pytest.raises(TimeoutError):
            vec.recv(wait_num=2, timeout=0.01)
        assert vec.async_state is AsyncState.WAITING_RECV  # two still out
        rest = vec.recv(timeout=30)
        assert vec.async_state is AsyncState.DEFAULT
        assert sorted(rest.env_ids.tolist()) == [2, 3]
        assert rest.observations.shape == (2, 2)
        with pytest.raises(NoAsyncCallError):
            vec.recv()
        # Partly received, then dropped by a reset: nothing stale comes back.
        vec.send(np.array([1, 1]), [0, 1])
        vec.reset(seed=0)
        assert vec.async_state is AsyncState.DEFAULT
        with pytest.raises(NoAsyncCallError):
            vec.recv()


# ---------------------------------------------------------------------------- recipe groups
@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_heterogeneous_sub_envs_match_sync_on_process_workers(mode: AutoresetMode) -> None:
    """env_fns of two envs (max_episode_steps 500 and 5): two recipe groups, each on its own workers,
    equal to SyncVectorEnv over 50 steps crossing many episode ends."""
    fns = cartpoles([None, 5, None, 5])
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with make(fns, 4, mode, "process", 2) as vec:
        assert len(vec.plan_envs) == 2 and vec.plan_env is vec.plan_envs[0]
        assert [e.n_workers for e in vec.plan_envs] == [2, 2]
        drive(vec, ref, 50)
        assert all(e.stats["batches"] > 0 for e in vec.plan_envs)  # both groups stepped on their workers
        assert "groups=2" in repr(vec)
    ref.close()


@pytest.mark.timeout(90)
@INLINE_AND_W2
def test_set_attr_gravity_makes_a_group_per_value(backend: str, w: int) -> None:
    """gravity is outside CartPole's state: 2 distinct values, 2 recipe groups; steps equal SyncVectorEnv's."""
    ref = oracle("CartPole-v1", 4, AutoresetMode.NEXT_STEP)
    with make("CartPole-v1", 4, AutoresetMode.NEXT_STEP, backend, w) as vec:
        same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        for v in (vec, ref):
            v.step(np.array([0, 1, 1, 0]))
            v.set_attr("gravity", [3.72, 1.62, 3.72, 1.62])
        assert len(vec.plan_envs) == 2  # the default-gravity group had no sub-env left: closed
        assert vec.get_attr("gravity") == (3.72, 1.62, 3.72, 1.62)
        acts = np.array([1, 0, 0, 1])
        same(vec.step(acts), ref.step(acts), "step from the states kept")
        drive(vec, ref, 50)  # resets keep each sub-env's gravity
    ref.close()


@pytest.mark.timeout(90)
def test_one_value_everywhere_leaves_one_group_and_closes_the_others() -> None:
    with make("CartPole-v1", 4, AutoresetMode.NEXT_STEP, "process", 2) as vec:
        vec.reset(seed=0)
        first = vec.plan_env
        vec.set_attr("gravity", [9.8, 3.72, 9.8, 3.72])  # 9.8 is CartPole's own: sub-envs 0 and 2 stay
        assert len(vec.plan_envs) == 2 and vec.plan_envs[0] is first
        other = vec.plan_envs[1]
        other_pids = set(other.pids)
        vec.set_attr("gravity", 9.8)
        assert vec.plan_envs == (first,) and other.closed and not first.closed
        assert not other_pids & {pid for pid, _ in live_children()}  # its workers are gone
        vec.set_attr("gravity", 1.62)  # one new value on every sub-env: one new group, not four
        assert len(vec.plan_envs) == 1 and first.closed
        assert vec.get_attr("gravity") == (1.62,) * 4
        vec.step(np.array([0, 1, 0, 1]))


@pytest.mark.timeout(60)
def test_set_attr_refuses_a_setting_that_changes_the_spaces() -> None:
    """A setting outside the state whose env has other spaces is refused; no sub-env moved, the group made is closed."""
    with make("CartPole-v1", 2, AutoresetMode.NEXT_STEP, "process", 2) as vec:
        vec.reset(seed=0)
        first, states = vec.plan_env, vec.get_states()
        with pytest.raises(ValueError, match=r"changes its observation_space: expected Box.*\(no sub-env changed\)"):
            vec.set_attr("observation_space", spaces.Box(-1.0, 1.0, (4,), np.float32), indices=[1])
        assert vec.plan_envs == (first,) and vec.get_states() == states
        vec.step(np.array([0, 1]))


@pytest.mark.timeout(60)
def test_env_error_in_one_group_changes_no_sub_env() -> None:
    """The env's own error in one group's part raises from the step; no sub-env of any group changed."""
    fault = {"fault": "raise", "phase": "step", "trigger_action": 2}
    first = lambda: FaultyEnv(**fault)  # noqa: E731 - two spec-less callables: two recipe groups
    second = lambda: FaultyEnv(**fault)  # noqa: E731
    with make([first, second, first], 3, AutoresetMode.NEXT_STEP, "process", 1) as vec:
        assert len(vec.plan_envs) == 2
        vec.reset(seed=0)
        states = vec.get_states()
        with pytest.raises(ValueError, match="injected fault in step"):
            vec.step(np.array([0, 2, 1]))
        assert vec.get_states() == states
        vec.step(np.array([0, 1, 1]))
        assert vec.get_states() != states


@pytest.mark.timeout(60)
def test_step_wait_timeout_across_groups() -> None:
    """A step of two groups is pending until both parts are done; a timeout leaves it pending."""
    slow = lambda: SlowActionEnv(delay=1.0)  # noqa: E731 - two spec-less callables: two recipe groups
    fast = lambda: SlowActionEnv(delay=0.0)  # noqa: E731
    with make([slow, fast], 2, AutoresetMode.NEXT_STEP, "process", 1) as vec:
        assert len(vec.plan_envs) == 2
        vec.reset(seed=0)
        vec.step_async(np.array([2, 2]))
        with pytest.raises(TimeoutError):
            vec.step_wait(timeout=0.05)
        obs, *_ = vec.step_wait(timeout=30)
        assert obs.shape == (2, 2)


# ---------------------------------------------------------------------------- attributes
@pytest.mark.timeout(60)
@INLINE_AND_W2
def test_call_get_attr_set_attr(backend: str, w: int) -> None:
    ref = oracle(DictObsEnv, 3, AutoresetMode.NEXT_STEP)
    with make(DictObsEnv, 3, AutoresetMode.NEXT_STEP, backend, w) as vec:
        same(vec.reset(seed=4), ref.reset(seed=4), "reset")
        acts = np.full((3, 2), 0.5, dtype=np.float32)
        same(vec.step(acts), ref.step(acts), "step")
        for got, want in zip(vec.call("get_state"), ref.call("get_state")):
            assert_tree_equal(got, want)
        assert vec.get_attr("count", indices=[2]) == (1,)
        assert vec.get_attr("horizon") == (8, 8, 8)
        # An attribute the state holds: the next step starts from it, on any worker.
        vec.set_attr("pos", [np.array([0.25, -0.5], dtype=np.float32)], indices=[1])
        ref.envs[1].unwrapped.pos = np.array([0.25, -0.5], dtype=np.float32)
        same(vec.step(acts), ref.step(acts), "after set_attr")
        # A setting outside the state: those sub-envs move, with their states, to a recipe group that has it.
        before = vec.get_states()
        vec.set_attr("horizon", 3, indices=[0, 2])
        for i in (0, 2):
            ref.envs[i].set_wrapper_attr("horizon", 3)
        assert vec.get_states() == before and vec.get_attr("horizon") == (3, 8, 3)
        assert len(vec.plan_envs) == 2
        for t in range(4):  # sub-envs 0 and 2 end at count 3 and autoreset
            same(vec.step(acts), ref.step(acts), f"after set_attr(horizon) {t}")
        with pytest.raises(ValueError, match="length equal"):
            vec.set_attr("pos", [1, 2])
        with pytest.raises(AttributeError):
            vec.get_attr("no_such_attribute")
    ref.close()


# ---------------------------------------------------------------------------- bad input
@pytest.mark.timeout(60)
def test_bad_input_is_refused_before_anything_is_sent() -> None:
    with make("CartPole-v1", 3, AutoresetMode.NEXT_STEP, "process", 2) as vec:
        with pytest.raises(pp.StateError, match="reset"):
            vec.step(np.zeros(3, dtype=np.int64))
        vec.reset(seed=0)
        batches = vec.stats["batches"]
        states = vec.get_states()
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            vec.step(np.zeros(2, dtype=np.int64))
        with pytest.raises(ValueError, match="outside Discrete"):
            vec.step(np.array([0, 2, 1]))
        with pytest.raises(TypeError, match="integers"):
            vec.step(np.array([0.0, 1.0, 0.0]))
        with pytest.raises(ValueError, match="must have shape"):
            vec.reset(options={"reset_mask": np.ones(2, dtype=bool)})
        with pytest.raises(TypeError, match=r"dtype=np\.bool_"):
            vec.reset(options={"reset_mask": np.ones(3, dtype=int)})
        with pytest.raises(TypeError, match="numpy array"):
            vec.reset(options={"reset_mask": [True, True, True]})
        with pytest.raises(ValueError, match="at least one True"):
            vec.reset(options={"reset_mask": np.zeros(3, dtype=bool)})
        with pytest.raises(ValueError, match="num_envs=3"):
            vec.reset(seed=[1, 2])
        with pytest.raises(TypeError, match="seed"):
            vec.reset(seed=-1)
        with pytest.raises(ValueError, match=r"\[0, 3\)"):
            vec.send(np.zeros(1, dtype=np.int64), [3])
        with pytest.raises(ValueError, match=r"shape \(2,\)"):
            vec.send(np.zeros(3, dtype=np.int64), [0, 1])
        with pytest.raises(ValueError, match="wait_num"):
            vec.send(np.zeros(1, dtype=np.int64), [0])
            vec.recv(wait_num=2)
        vec.recv()
        assert vec.stats["batches"] == batches + 1  # only the one good send reached the workers
        assert vec.get_states()[1:] == states[1:]
    with pytest.raises(ValueError, match="num_envs"):
        pp.make_vec("CartPole-v1", 0, backend="inline")
    with pytest.raises(ValueError, match="autoreset_mode"):
        pp.make_vec("CartPole-v1", 2, backend="inline", autoreset_mode="sometimes")
    with pytest.raises(ValueError, match=r"observation_mode.*'same' or 'different'.*got 'mixed'"):
        pp.make_vec("CartPole-v1", 2, backend="process", observation_mode="mixed")


@pytest.mark.timeout(30)
def test_disabled_mode_requires_a_reset_of_ended_sub_envs() -> None:
    with make(CounterEnv, 2, AutoresetMode.DISABLED, "inline", 1, horizon=2) as vec:
        vec.reset(seed=0)
        vec.step(np.array([0, 0]))
        _, _, terms, _, _ = vec.step(np.array([0, 0]))
        assert terms.all()
        with pytest.raises(ValueError, match="DISABLED"):
            vec.step(np.array([0, 0]))
        vec.reset(options={"reset_mask": np.array([True, True])})
        vec.step(np.array([1, 1]))


@pytest.mark.timeout(30)
def test_closed_vector_env_refuses_calls() -> None:
    vec = make("CartPole-v1", 2, AutoresetMode.NEXT_STEP, "inline", 1)
    vec.reset(seed=0)
    vec.close()
    vec.close()  # idempotent
    with pytest.raises(pp.ClosedError):
        vec.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(pp.ClosedError):
        vec.get_states()
    assert "closed" in repr(vec)
