"""EnvFactory: a picklable recipe that builds the same gymnasium env in any process."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["EnvFactory", "check_env_id"]


def _register_third_party_envs(env_id: str) -> None:
    """Make ALE and MiniGrid ids known to gymnasium.make, when those packages are installed."""
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
    elif env_id.startswith(("MiniGrid", "BabyAI")):
        import minigrid  # noqa: F401 - registers its envs on import


def check_env_id(env_id: str) -> Any:
    """Fail now, in this process, on an env id gymnasium does not know (before any worker starts).

    Returns:
        the id's ``EnvSpec``.

    Raises:
        gymnasium.error.UnregisteredEnv: its subclasses name what is unknown, with gymnasium's
            "Did you mean" hint.
    """
    import gymnasium as gym

    _register_third_party_envs(env_id)
    return gym.spec(env_id)


class EnvFactory:
    """A picklable recipe for a gymnasium env: an env id or a callable, plus kwargs.

    Shipped to worker processes with cloudpickle, so lambdas and closures work
    under every start method. Every env built from one factory has the same id
    and kwargs, which state restoring relies on (ALE settings are not in a state).
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
            return gym.make(recipe, **self.env_kwargs)
        env = self.env(**self.env_kwargs)
        if not isinstance(env, gym.Env):
            raise TypeError(f"the env callable {self.name} must return a gymnasium.Env, got {type(env).__name__}")
        return env

    def __repr__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in self.env_kwargs.items())
        return f"EnvFactory({self.name!r}{kw})"
