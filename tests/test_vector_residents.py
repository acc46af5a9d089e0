"""make_vec's resident envs (one per sub-env, for the steps run in this process) never change a result.

Rows of the invariant tables for the vector face:

* **exact**: steps that move between this process and the workers, states set
  back to earlier ones (as objects and as copies), a recipe change by
  ``set_attr``: every step equals SyncVectorEnv's (or the same vector env's first
  run from those states);
* **never the wrong data**: an env error in the middle of a step, and a Ctrl-C
  at sampled lines of a step, leave every sub-env as it was or as the whole step
  left it, never a mix, and the next steps are exact.

The claims are about the machinery, so the envs are the tiny deterministic
test envs (their RNG drawn at every step, so a sub-env stepped from a wrong
state shows), plus CartPole where the claim is about a real env.
"""
from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.error import NoAsyncCallError
from gymnasium.vector import SyncVectorEnv

import plan_parallel as pp
from plan_parallel.factory import EnvFactory
from tests.envs import CounterEnv, FaultyEnv
from tests.helpers import assert_tree_equal
from tests.test_interrupts import Interrupt, ctrl_c_raises, sample  # noqa: F401 - ctrl_c_raises: a fixture

pytestmark = pytest.mark.usefixtures("no_leaks")

N = 5
SEED = 3


def _same(got: tuple, want: tuple, where: str) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_tree_equal(g, w, f"{where}[{k}]")


def _actions(steps: int, n: int = N, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 3, n) for _ in range(steps)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_steps_moving_between_places_and_states_set_back_are_exact(backend: str) -> None:
    """Default options on W=2 (the tuner tries this process, the workers and a shared batch in turn),
    with states set back to earlier ones mid-run: every step equals SyncVectorEnv's from the same states."""
    ref = SyncVectorEnv([EnvFactory(CounterEnv, {"horizon": 10**6}) for _ in range(N)])
    acts = _actions(40)
    with pp.make_vec(CounterEnv, N, n_workers=2, backend=backend, horizon=10**6) as vec:
        _same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        saved: list = []
        for t, a in enumerate(acts[:20]):
            _same(vec.step(a), ref.step(a), f"step {t}")
            if t == 5:
                saved = vec.get_states()
        # Back to step 5's states: the resident envs hold later ones and must restore them.
        for copies in (False, True):
            vec.set_states([pickle.loads(pickle.dumps(s)) for s in saved] if copies else saved)
            replay = pp.make_vec(CounterEnv, N, backend="inline", horizon=10**6)
            with replay:
                replay.set_states(saved)
                for t, a in enumerate(acts[20:]):
                    _same(vec.step(a), replay.step(a), f"after set_states (copies={copies}), step {t}")


@pytest.mark.timeout(120)
def test_steps_the_tuner_places_here_run_on_the_resident_envs_timed_for_it() -> None:
    """W=2, default options: the tuner tries each place for the first steps, and a step it places here runs
    on the resident envs (as a batch here in the stats, timed for the tuner); every step equals
    SyncVectorEnv's, wherever it ran, autoresets included."""
    ref = SyncVectorEnv([EnvFactory("CartPole-v1", {}) for _ in range(16)])
    with pp.make_vec("CartPole-v1", 16, n_workers=2) as vec:
        _same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        for t, a in enumerate(_actions(60, 16)):
            a = a % 2
            _same(vec.step(a), ref.step(a), f"step {t}")
        stats = vec.stats
        assert 0 < stats["inline_batches"] < stats["batches"], stats  # here, and on the workers too


class BuildCountingEnv(CounterEnv):
    """A CounterEnv that counts the instances built in this process."""

    built = 0

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        BuildCountingEnv.built += 1


@pytest.mark.timeout(120)
def test_resets_build_no_resident_env_and_stay_exact() -> None:
    """Every step on the workers, resets with and without seeds (and autoresets) in between: each equals
    SyncVectorEnv's, and none builds an env in this process (a resident env is for steps run here)."""
    ref = SyncVectorEnv([EnvFactory(CounterEnv, {"horizon": 7}) for _ in range(N)])
    with pp.make_vec(BuildCountingEnv, N, n_workers=2, small_batch_inline=False, horizon=7) as vec:
        built = BuildCountingEnv.built
        for k, seed in enumerate((SEED, None, SEED + 1, None)):
            _same(vec.reset(seed=seed), ref.reset(seed=seed), f"reset {k}")
            for t, a in enumerate(_actions(9, seed=k)):  # past the horizon: autoresets too
                _same(vec.step(a), ref.step(a), f"reset {k}, step {t}")
        assert BuildCountingEnv.built == built, f"{BuildCountingEnv.built - built} envs built by resets"


@pytest.mark.timeout(120)
def test_a_recipe_change_rebuilds_the_resident_env() -> None:
    """set_attr of CartPole's gravity (outside the state) on some sub-envs: their steps use the new value."""
    fns = [EnvFactory("CartPole-v1", {}) for _ in range(4)]
    ref = SyncVectorEnv(fns)
    with pp.make_vec("CartPole-v1", 4, backend="inline") as vec:
        _same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        for t in range(3):
            a = np.array([t % 2, 1, 0, 1])
            _same(vec.step(a), ref.step(a), f"step {t}")
        vec.set_attr("gravity", [9.8, 30.0, 9.8, 1.0])
        ref.set_attr("gravity", [9.8, 30.0, 9.8, 1.0])
        for t in range(6):
            a = np.array([1, t % 2, 0, 1])
            _same(vec.step(a), ref.step(a), f"after set_attr, step {t}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_an_env_error_mid_step_changes_no_sub_env(backend: str) -> None:
    """Sub-env 0 steps on its resident env, sub-env 1 raises: nothing changed, and the next step is exact."""
    kw = {"fault": "raise", "phase": "step", "trigger_action": 2, "horizon": 10**6}
    with pp.make_vec(FaultyEnv, 3, n_workers=1, backend=backend, **kw) as vec, \
            pp.make_vec(FaultyEnv, 3, backend="inline", **kw) as ref:
        _same(vec.reset(seed=SEED), ref.reset(seed=SEED), "reset")
        _same(vec.step(np.array([1, 0, 1])), ref.step(np.array([1, 0, 1])), "step 0")
        before = vec.get_states()
        with pytest.raises(ValueError, match="injected fault in step"):
            vec.step(np.array([0, 2, 1]))
        assert vec.get_states() == before
        for t in range(3):
            a = np.array([t % 2, 1, 0])
            _same(vec.step(a), ref.step(a), f"step {t + 1}")


@pytest.fixture
def reference_run() -> Iterator[tuple[list, list]]:
    """An uninterrupted inline run: the step outcomes and the states after each of the steps."""
    outs, states = [], []
    with pp.make_vec(CounterEnv, N, backend="inline", horizon=4) as ref:
        ref.reset(seed=SEED)
        states.append((ref.get_states(), ref.autoreset_envs))
        for a in _actions(4):
            outs.append(ref.step(a))
            states.append((ref.get_states(), ref.autoreset_envs))
    yield outs, states


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["inline", "process"])
def test_a_ctrl_c_in_a_step_leaves_all_or_nothing_and_the_next_steps_exact(
        backend: str, reference_run: tuple[list, list], ctrl_c_raises: None) -> None:  # noqa: F811
    """Ctrl-C at sampled lines of a step, on one vector env: its sub-envs are as before the step or as
    after it (all of them), nothing is left pending, and the steps after it equal the reference run's
    (from wherever the step left them)."""
    outs, states = reference_run
    acts = _actions(4)
    with pp.make_vec(CounterEnv, N, n_workers=2, backend=backend, horizon=4) as vec:
        vec.reset(seed=SEED)
        for a in acts[:2]:
            vec.step(a)
        vec.step(acts[2])  # the first step of each place builds what it needs (resident envs): not counted
        vec.set_states(states[2][0], autoreset=states[2][1])
        counter = Interrupt()
        counter.run(lambda: vec.step(acts[2]))
        # Every line of the inline step (~500, fast); a sample of the process backend's.
        points = list(range(1, counter.lines + 1)) if backend == "inline" else sample(counter.lines, 24)
        interrupted = 0
        for at in points:
            vec.set_states(states[2][0], autoreset=states[2][1])  # back to before the step
            hit, _ = Interrupt(at).run(lambda: vec.step(acts[2]))
            interrupted += hit
            with pytest.raises(NoAsyncCallError):
                vec.step_wait()  # step() leaves nothing pending, interrupted or not
            now = vec.get_states()
            if now == states[3][0]:  # the step was committed in full
                assert np.array_equal(vec.autoreset_envs, states[3][1]), at
            else:
                assert now == states[2][0], f"a mix of before and after the step, interrupted at line event {at}"
                assert np.array_equal(vec.autoreset_envs, states[2][1]), at
                _same(vec.step(acts[2]), outs[2], f"step 2 again after line event {at}")
            _same(vec.step(acts[3]), outs[3], f"step 3 after line event {at}")
        assert interrupted >= len(points) // 4  # the place (so the lines) of a process step varies: most land in it


@pytest.mark.timeout(30)
def test_ctrl_c_deferred_holds_a_real_sigint_until_the_block_ends(ctrl_c_raises: None) -> None:  # noqa: F811
    """The guard of every commit: a SIGINT inside the block is raised right after it, the handler is restored,
    and off the main thread the block changes nothing."""
    import os
    import signal
    import threading

    from plan_parallel.interrupts import ctrl_c_deferred

    before = signal.getsignal(signal.SIGINT)
    reached_end = False
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # handlers run between bytecodes: plenty of chances to raise too early
                pass
            reached_end = True
    assert reached_end
    assert signal.getsignal(signal.SIGINT) is before
    with ctrl_c_deferred():
        pass  # nothing came: nothing raised
    seen: list = []
    worker = threading.Thread(target=lambda: seen.append(ctrl_c_deferred().__enter__()))
    worker.start()
    worker.join(5)
    assert seen == [None] and signal.getsignal(signal.SIGINT) is before
