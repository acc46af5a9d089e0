"""A researcher's first hour (issue 55): what tripped a newcomer on e06f264, one row each.

The mistakes a user makes from the README and docstrings alone, each answered by a clear error (naming
what was expected and what was given, before anything is sent), or made to work.
"""
from __future__ import annotations

import configparser
import inspect
import os
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest

import plan_parallel as pp

BACKENDS = ["inline", "process"]


def cartpole_with(n_worker: int = 1, timeouts: float = 0.0) -> gym.Env:
    """A user's env factory whose own arguments look like options of ``make``."""
    env = gym.make("CartPole-v1")
    env.unwrapped.n_worker, env.unwrapped.timeouts = n_worker, timeouts  # type: ignore[attr-defined]
    return env


# ---------------------------------------------------------------- point 4: a misspelt option of make
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("kwargs", "says"), [
    ({"n_worker": 2}, "make() got an unexpected keyword argument 'n_worker'; did you mean n_workers=?"),
    ({"timout": 5.0}, "make() got an unexpected keyword argument 'timout'; did you mean timeout=?"),
    ({"max_restart": 1}, "did you mean max_restarts=?"),
    ({"gravity": 1.0}, "CartPole-v1 (CartPoleEnv) got an unexpected keyword argument 'gravity' (it takes: "),
], ids=["n_worker", "timout", "max_restart", "gravity"])
def test_a_misspelt_option_of_make_names_the_nearest_one_before_any_worker_starts(
        backend: str, kwargs: dict, says: str) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError) as info:
        pp.make("CartPole-v1", backend=backend, n_workers=1, **kwargs)
    assert says in str(info.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # nothing was started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_argument_close_to_an_option_of_make_is_the_envs(backend: str) -> None:
    with pp.make(cartpole_with, backend=backend, n_workers=1, n_worker=3, timeouts=2.5) as env:
        env.reset(seed=0)
        assert env.step_batch([0, 1]).observations.shape == (2, 4)
    with pp.make("Pendulum-v1", backend=backend, n_workers=1, g=2.0, max_episode_steps=50) as env:
        assert env.reset(seed=0)[1].shape == (3,)


# ---------------------------------------------------------------- point 3: legacy Atari ids in a fresh process
def in_fresh_process(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported before it); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(300)
def test_legacy_atari_ids_work_in_a_fresh_process() -> None:
    out = in_fresh_process(
        "import plan_parallel as pp\n"
        "for env_id, backend in [('Pong-v4', 'process'), ('Breakout-v0', 'inline'), ('MsPacman-v4', 'inline')]:\n"
        "    with pp.make(env_id, backend=backend, n_workers=1, small_batch_inline=False) as env:\n"
        "        state = env.reset(seed=0)[0]\n"
        "        batch = env.step_batch([0, 1], states=[state, state])\n"
        "        print(env_id, env.kind.split('|')[0], batch.observations.shape)\n"
    )
    assert out.splitlines() == [
        "Pong-v4 ale:AtariEnv (2, 210, 160, 3)",
        "Breakout-v0 ale:AtariEnv (2, 210, 160, 3)",
        "MsPacman-v4 ale:AtariEnv (2, 210, 160, 3)",
    ], out


@pytest.mark.timeout(300)
def test_an_unknown_atari_id_is_answered_alike_whatever_was_imported_and_points_to_its_ale_id() -> None:
    code = ("import plan_parallel as pp\n"
            "try:\n"
            "    pp.make('MsPacman-v5', backend='inline')\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    plain, after_ale = in_fresh_process(code), in_fresh_process("import ale_py\n" + code)
    assert plain == after_ale, (plain, after_ale)
    assert plain.startswith("VersionNotFound ") and plain.strip().endswith("Did you mean `ALE/MsPacman-v5`?"), plain


# ---------------------------------------------------------------- point 2: a state names its configuration
def stacked(size: int) -> gym.Env:
    return gym.wrappers.FrameStackObservation(gym.make("CartPole-v1"), stack_size=size)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("made", "other", "says"), [
    (("Pendulum-v1", {"g": 2.0}), ("Pendulum-v1", {}), "(another configuration: g=2.0 in the state, default in this env)"),
    (("CartPole-v1", {"max_episode_steps": 50}), ("CartPole-v1", {}),
     "(another configuration: max_episode_steps=50 in the state, 500 in this env)"),
    (("FrozenLake-v1", {"is_slippery": False}), ("FrozenLake-v1", {"is_slippery": True}),
     "is_slippery=False in the state, default in this env"),
    ((stacked, {"size": 4}), (stacked, {"size": 2}),
     "FrameStackObservation={'stack_size': 4, 'padding_type': 'reset'} in the state, "
     "{'stack_size': 2, 'padding_type': 'reset'} in this env"),
], ids=["pendulum-g", "cartpole-limit", "frozenlake-slippery", "frame-stack"])
def test_a_state_refuses_an_env_of_another_configuration_naming_the_difference(
        backend: str, made: tuple, other: tuple, says: str) -> None:
    with pp.make(made[0], backend="inline", **made[1]) as source:
        state = source.reset(seed=0)[0]
    with pp.make(other[0], backend=backend, n_workers=1, **other[1]) as env:
        env.reset(seed=0)
        action = env.action_space.sample()
        for call in (lambda: env.set_state(state), lambda: env.step(action, state=state),
                     lambda: env.step_batch([action] * 3, states=[state] * 3)):
            with pytest.raises(pp.StateError, match="cannot restore an env of kind") as info:
                call()
            assert says in str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_configuration_however_spelt_restores(backend: str) -> None:
    with pp.make("Pendulum-v1", backend="inline", g=10, render_mode="rgb_array") as source:
        state = source.reset(seed=0)[0]
        want = source.step([0.5], state=state)[1]
    with pp.make("Pendulum-v1", backend=backend, n_workers=1) as env:
        assert env.kind == source.kind and env.kind.endswith(" {max_episode_steps=200}")
        assert (env.step_batch([[0.5]], states=[state]).observations[0] == want).all()


# ---------------------------------------------------------------- point 7: the public face
def test_make_vec_and_check_clonable_show_their_real_arguments() -> None:
    from plan_parallel.state.check import check_clonable
    from plan_parallel.vector import PlanVectorEnv

    assert pp.check_clonable is check_clonable
    assert {"steps", "budget", "fresh_process"} <= set(inspect.signature(pp.check_clonable).parameters)
    ours = dict(inspect.signature(pp.make_vec).parameters)
    assert ours.pop("env_fns").kind is inspect.Parameter.KEYWORD_ONLY
    theirs = dict(inspect.signature(PlanVectorEnv.__init__).parameters)
    del theirs["self"]
    assert list(ours) == list(theirs)  # every option of the vector env, in its order
    for name, p in theirs.items():
        assert ours[name].kind == p.kind, name
        assert ours[name].default == p.default or name == "env", (name, ours[name].default, p.default)


def test_the_package_cites_no_file_outside_it_and_its_help_starts_with_the_entry_points() -> None:
    root = Path(pp.__file__).parent
    cited = [str(path.relative_to(root)) for path in root.rglob("*.py") if "shared/research" in path.read_text()]
    assert cited == []
    head = pydoc.render_doc(pp, renderer=pydoc.plaintext).split("PACKAGE CONTENTS")[0]
    for name in ("make", "make_vec", "check_clonable", "get_state", "StepBatch", "planners"):
        assert f"{name}" in head, name


# the hooks the backends call on an env object (on its engine: plan_parallel.env.plan_env.engine_of,
# plan_parallel.batch.batch_env.batch_engine_of), which were public names of PlanEnv and BatchEnv on e06f264
PLUMBING = ("run_raw", "rollout_raw", "step_batch_checked", "step_batch_checked_async", "step_from", "validate_all",
            "observation_form", "place_step", "run_placed_here")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_env_objects_show_no_plumbing(backend: str) -> None:
    with pp.make("CartPole-v1", backend=backend, n_workers=1) as env:
        assert [name for name in PLUMBING if hasattr(env, name)] == []
        text = pydoc.render_doc(type(env), renderer=pydoc.plaintext)
        assert [name for name in PLUMBING if re.search(rf"^ \|  {name}\(", text, re.M)] == []  # no entry in help()


@pytest.mark.parametrize("cls", [pp.PlanEnv, pp.BatchEnv])
def test_help_of_the_env_objects_says_what_the_spaces_and_stats_hold(cls: type) -> None:
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    for name in ("action_space", "observation_space", "stats"):
        assert isinstance(inspect.getattr_static(cls, name), property), name
        assert re.search(rf"^ \|  {name}\n \|      \S", text, re.M), name  # listed, with its docstring under it


HELP_LINES = 250  # help(plan_parallel) on e06f264: 1,635 lines, every class in full; now the map and the functions


def test_help_of_the_package_is_short_and_its_map_names_every_class() -> None:
    import ast

    text = pydoc.render_doc(pp, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < HELP_LINES
    head = text.split("PACKAGE CONTENTS")[0]
    classes = sorted(name for name, value in vars(pp).items() if isinstance(value, type) and not name.startswith("_")
                     and value.__module__.startswith("plan_parallel."))
    assert len(classes) >= 15 and [name for name in classes if f":class:`{name}`" not in head] == []
    # each class is re-exported explicitly ("X as X"), so type checkers take it as a name of the package
    tree = ast.parse(Path(pp.__file__).read_text())
    explicit = {a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names if a.asname == a.name}
    assert [name for name in classes if name not in explicit and name not in pp.__all__] == []


# ---------------------------------------------------------------- point 8: smaller things
def test_help_of_make_warns_of_gymnasiums_tuples() -> None:
    text = pydoc.render_doc(pp.make, renderer=pydoc.plaintext)
    assert "state, obs, info = env.reset(seed=0)" in text
    assert "state, obs, reward, terminated, truncated, info = env.step(action)" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_action_outside_the_space_is_named_by_its_index_and_value(backend: str) -> None:
    with pp.make("CartPole-v1", backend=backend, n_workers=1) as env:
        state = env.reset(seed=0)[0]
        with pytest.raises(ValueError) as info:
            env.step_batch([1, 2], states=[state, state])
        assert str(info.value) == "actions[1] = 2 is outside Discrete(2)"
        with pytest.raises(ValueError) as info:
            env.rollout_batch([state, state], actions=[[0, 1], [1, 5]])
        assert str(info.value) == "actions[1, 1] = 5 is outside Discrete(2)"


@pytest.mark.timeout(240)
def test_recording_on_a_headless_machine_prints_no_sdl_error(tmp_path: Path) -> None:
    out = tmp_path / "cartpole.gif"
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY",
                                                             "SDL_VIDEODRIVER")}
    code = "import sys; from plan_parallel.cli.main import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "plan", "CartPole-v1", "--backend", "inline", "--max-steps", "3",
                           "--record", str(out)], capture_output=True, text=True, timeout=200, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.stat().st_size > 0 and "XDG_RUNTIME_DIR" not in done.stderr + done.stdout, done.stderr[-2000:]


def test_an_extra_holds_the_simulators_without_ray_or_jupyter_and_each_extra_is_described() -> None:
    cfg = configparser.ConfigParser()
    setup = Path(pp.__file__).parents[1] / "setup.cfg"
    cfg.read(setup)
    extras = {name: {re.split(r"[<>=\[ ]", line)[0] for line in value.split()}
              for name, value in cfg["options.extras_require"].items()}
    assert {"ale-py", "mujoco", "box2d", "minigrid"} <= extras["envs"]
    assert not extras["envs"] & {"ray", "jupyter", "matplotlib", "nbclient", "ipykernel"}
    described = {m.group(1) for m in re.finditer(r"^#\s+([a-z0-9, ]+?)\s{2,}", setup.read_text(), re.M)}
    described = {name.strip() for group in described for name in group.split(",")}
    assert set(extras) <= described, set(extras) - described


# ---------------------------------------------------------------- point 1: per-item seeds that cannot act
class Walk(gym.Env):
    """A user's env with get_state/set_state, drawing its noise from ``self.np_random``."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.x, self.t = 0.0, 0
        return np.array([self.x], dtype=np.float32), {}

    def noise(self) -> float:
        return float(self.np_random.normal())

    def step(self, action: int) -> tuple:
        self.x += (1.0 if action else -1.0) + self.noise() + 0.001 * self.t
        self.t += 1
        return np.array([self.x], dtype=np.float32), -abs(self.x), False, False, {}

    def get_state(self) -> tuple:
        return self.x, self.t

    def set_state(self, state: tuple) -> None:
        self.x, self.t = state


class OwnRngWalk(Walk):
    """Draws from a generator of its own, made in ``__init__`` and carried in its state."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def noise(self) -> float:
        return float(self.rng.normal())

    def get_state(self) -> tuple:
        return self.x, self.t, self.rng.bit_generator.state

    def set_state(self, state: tuple) -> None:
        self.x, self.t = state[0], state[1]
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state[2]


class RngInResetWalk(OwnRngWalk):
    """Makes its own generator in ``reset``: unseen when the env is bound, seen when a seed would act."""

    def __init__(self) -> None:
        pass

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        self.rng = np.random.default_rng(seed)
        return super().reset(seed=seed)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_seeds_act_on_an_env_drawing_from_np_random(backend: str) -> None:
    with pp.make(Walk, backend=backend, n_workers=1, small_batch_inline=False) as env:
        state = env.reset(seed=0)[0]
        assert env.reseedable
        got = env.step_batch([1] * 4, states=[state] * 4, seeds=[0, 1, 2, 3]).observations.ravel()
        assert len(set(got.tolist())) == 4
    assert pp.check_clonable(Walk, fresh_process=False).seeds == "reseed the env's np_random (the env holds no other generator)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_seeds_that_cannot_act_are_refused(backend: str) -> None:
    from plan_parallel.state.own_rng import SEEDS_REFUSED

    with pp.make(OwnRngWalk, backend=backend, n_workers=1, small_batch_inline=False) as env:
        state = env.reset(seed=0)[0]
        assert not env.reseedable
        with pytest.raises(pp.StateError) as info:
            env.step_batch([1] * 4, states=[state] * 4, seeds=[0, 1, 2, 3])
        assert str(info.value) == SEEDS_REFUSED
        with pytest.raises(pp.StateError, match="cannot act"):
            env.rollout_batch([state] * 2, horizon=3, seeds=[0, 1])
        assert env.step_batch([1] * 2, states=[state] * 2).observations.shape == (2, 1)  # no seeds: fine
    with pp.make(RngInResetWalk, backend=backend, n_workers=1, small_batch_inline=False) as env:
        state = env.reset(seed=0)[0]
        with pytest.raises(pp.StateError) as info:
            env.step_batch([1] * 4, states=[state] * 4, seeds=[0, 1, 2, 3])
        assert str(info.value).startswith("a per-item seed cannot act on RngInResetWalk: it draws from a Generator of its own")
    for cls in (OwnRngWalk, RngInResetWalk):
        report = pp.check_clonable(cls, fresh_process=False)
        assert report.ok and report.seeds.startswith(f"refused: a per-item seed cannot act on {cls.__name__}")
        assert f"per-item seeds: {report.seeds}" in str(report)


# ---------------------------------------------------------------- point 6: the field a state leaves out
class ForgetfulWalk(Walk):
    """Its get_state leaves out ``t``, which its step reads."""

    def get_state(self) -> tuple:
        return (self.x,)

    def set_state(self, state: tuple) -> None:
        (self.x,) = state


def test_check_clonable_names_the_attribute_a_state_leaves_out() -> None:
    report = pp.check_clonable(ForgetfulWalk, fresh_process=False)
    assert not report.ok and report.left_behind == ["t"]
    assert "likely missing: t: attributes of the env that a restore does not put back" in str(report)
    assert pp.check_clonable(Walk, fresh_process=False).left_behind == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_make_checks_one_replayed_step_when_asked(backend: str) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(pp.StateError) as info:
        pp.make(ForgetfulWalk, backend=backend, n_workers=1, check=True)
    assert "the restore left ForgetfulWalk.t as the step had changed it" in str(info.value)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    with pp.make(Walk, backend=backend, n_workers=1, check=True) as env:
        assert env.reset(seed=0)[1].shape == (1,)
    with pytest.raises(TypeError, match="check must be True or False, got 'yes'"):
        pp.make(Walk, backend=backend, check="yes")
