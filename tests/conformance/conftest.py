"""Fixtures of the conformance suite: the backend parameter and a factory that closes what it made."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import plan_parallel as pp

__all__ = ["BACKENDS"]

BACKENDS = ["inline", "process"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_pp(backend: str) -> Iterator[Callable[..., Any]]:
    """``make_pp(env, num_envs, **kw)``: ``pp.make_vec`` on the test's backend with 2 workers; closed after the test."""
    made: list[Any] = []

    def make(env: Any = None, num_envs: int | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("backend", backend)
        if kwargs["backend"] != "inline":
            kwargs.setdefault("n_workers", 2)
        envs = pp.make_vec(env, num_envs, **kwargs)
        made.append(envs)
        return envs

    yield make
    for envs in made:
        envs.close()
