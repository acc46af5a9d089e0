"""EnvFactory: a picklable recipe that builds the same gymnasium env in any process."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["EnvFactory", "check_env_id", "quiet_ale_for_good", "quiet_build"]

_MUJOCO_DEPRECATIONS = ("settotalmass",)  # gymnasium's own XML files use these; nothing the user can fix


def quiet_ale_for_good() -> None:
    """Turn ALE's logger to errors only in this process (a worker: the process is ours).

    Covers envs built by a callable too. Without it every worker prints
    ``A.L.E: Arcade Learning Environment (version ...)``.
    """
    if "ale_py" in sys.modules:
        _set_ale_errors_only()


def _set_ale_errors_only() -> None:
    from ale_py import ALEInterface, LoggerMode

    ALEInterface.setLoggerMode(LoggerMode.Error)


@contextlib.contextmanager
def _quiet_mujoco_deprecations() -> Iterator[None]:
    # MuJoCo's compiler warns through its C warning callback (not Python's warnings),
    # once per model compiled, i.e. once per worker. Drop only the known deprecations
    # of gymnasium's XML files; pass every other message on.
    import mujoco

    previous = mujoco.get_mju_user_warning()

    def handler(msg: str) -> None:
        if any(word in msg for word in _MUJOCO_DEPRECATIONS):
            return
        if previous is not None:
            previous(msg)
        else:  # what MuJoCo's default handler prints
            sys.stderr.write(f"WARNING: {msg}\n\n")

    mujoco.set_mju_user_warning(handler)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def _is_ale_id(env_id: str, spec: Any = None) -> bool:
    """Whether ``env_id`` is an ALE env: by its name (``ALE/...``, ``...NoFrameskip...``) or, for the legacy ids
    (``Pong-v4``, ``Breakout-v0``), by the entry point of its ``spec``."""
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        return True
    entry = getattr(spec, "entry_point", None)
    return isinstance(entry, str) and entry.startswith("ale_py")


def quiet_build(env_id: str, spec: Any = None) -> contextlib.AbstractContextManager[None]:
    """Around building a built-in env: no ALE banner, no MuJoCo deprecations of gymnasium's own models.

    ``spec`` is the id's ``EnvSpec`` when the id may not be registered in this process.
    """
    if _is_ale_id(env_id, spec):
        # ALE's logger mode is process-wide and has no getter. ale_py's AtariEnv sets it to
        # Error itself, just after its ALEInterface printed the banner; setting it a moment
        # earlier drops the banner and leaves the mode exactly as gym.make leaves it.
        _set_ale_errors_only()
        return contextlib.nullcontext()
    import gymnasium as gym

    entry = (spec if spec is not None else gym.spec(env_id)).entry_point
    if isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco"):
        return _quiet_mujoco_deprecations()
    return contextlib.nullcontext()


def _register_third_party_envs(env_id: str) -> None:
    """Make ALE and MiniGrid ids known to gymnasium.make, when those packages are installed."""
    if _is_ale_id(env_id):
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
    elif env_id.startswith(("MiniGrid", "BabyAI")):
        import minigrid  # noqa: F401 - registers its envs on import


def _register_ale_envs() -> bool:
    """Register ale_py's envs (the legacy ids ``Pong-v4``, ``Breakout-v0`` among them); False without ale_py."""
    try:
        import ale_py
    except ImportError:
        return False
    import gymnasium as gym

    gym.register_envs(ale_py)
    return True


def check_env_id(env_id: str) -> Any:
    """Fail now, in this process, on an env id gymnasium does not know (before any worker starts).

    An id unknown to gymnasium is looked up again once ale_py's envs are registered (when ale_py is
    installed): the legacy Atari ids work in a fresh process, and an unknown id is answered in the same
    words whatever this process imported before. An Atari name with a version only ``ALE/`` has
    (``MsPacman-v5``) is answered with the ``ALE/`` id.

    Returns:
        the id's ``EnvSpec``.

    Raises:
        gymnasium.error.UnregisteredEnv: its subclasses name what is unknown, with gymnasium's
            "Did you mean" hint.
    """
    import gymnasium as gym

    _register_third_party_envs(env_id)
    try:
        return gym.spec(env_id)
    except gym.error.UnregisteredEnv:
        if not _register_ale_envs():
            raise
    try:
        return gym.spec(env_id)
    except gym.error.UnregisteredEnv as e:
        ns, name, version = gym.envs.registration.parse_env_id(env_id)
        ale_id = f"ALE/{name}-v{version}" if ns is None and version is not None else None
        if ale_id is not None and ale_id in gym.registry:
            raise type(e)(f"{e} Did you mean `{ale_id}`?") from None
        raise


class EnvFactory:
    """A picklable recipe for a gymnasium env: an env id or a callable, plus kwargs.

    Shipped to worker processes with cloudpickle, so lambdas and closures work
    under every start method. Every env built from one factory has the same id
    and kwargs, which state restoring relies on (ALE settings are not in a state).

    Building an env from an id is quiet: no ALE banner (ALE's process-wide logger
    is set to errors just before building; ale_py's AtariEnv sets it so anyway just
    after printing the banner, so the mode afterwards is what ``gym.make`` leaves),
    and no MuJoCo deprecation warnings about gymnasium's own model files. An env
    from a callable is built as the callable builds it (in a worker, quietly).
    """

    def __init__(self, env: str | Callable[..., Any], env_kwargs: dict[str, Any] | None = None) -> None:
        if not (isinstance(env, str) or callable(env)):
            raise TypeError(f"env must be a gymnasium env id (str) or a callable returning an env, got {env!r:.100}")
        # The id's registration travels with the recipe: an id registered at run time
        # (in main(), a notebook, a fixture) is unknown to a worker that imports afresh.
        self.spec = check_env_id(env) if isinstance(env, str) else None
        self.env = env
        self.env_kwargs = dict(env_kwargs or {})

    @property
    def name(self) -> str:
        if isinstance(self.env, str):
            return self.env
        return getattr(self.env, "__qualname__", type(self.env).__name__)

    def __call__(self) -> Any:
        import gymnasium as gym

        if isinstance(self.env, str):
            _register_third_party_envs(self.env)
            recipe = self.env if self.env in gym.registry or self.spec is None else self.spec
            with quiet_build(self.env, gym.registry.get(self.env, self.spec)):
                return gym.make(recipe, **self.env_kwargs)
        env = self.env(**self.env_kwargs)
        if not isinstance(env, gym.Env):
            raise TypeError(f"the env callable {self.name} must return a gymnasium.Env, got {type(env).__name__}")
        return env

    def build_to_bind(self) -> Any:
        """Build the env for an adapter to bind at once (:class:`~plan_parallel.env.PlanEnv`'s build).

        An ALE env by id loads its ROM once instead of twice (~0.2 s less): its
        sticky actions are drawn in Python from the start (see
        :mod:`plan_parallel.state.families.ale_sticky`). Otherwise as calling the factory.
        """
        if not (isinstance(self.env, str) and _is_ale_id(self.env, self.spec)):
            return self()
        from plan_parallel.state.families.ale_sticky import draw_sticky_in_python, loads_without_stickiness

        with loads_without_stickiness():
            env = self()
        draw_sticky_in_python(env.unwrapped)
        return env

    def __repr__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in self.env_kwargs.items())
        return f"EnvFactory({self.name!r}{kw})"
