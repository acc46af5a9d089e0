"""Shared fixtures: inline env construction with cleanup, and a fresh spawned process."""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import plan_parallel as pp

pytest_plugins = ["tests.conftest_leaks"]  # the no_leaks fixtures, for the files that use them

settings.register_profile(
    "plan_parallel",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "plan_parallel_thorough",
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("PLAN_PARALLEL_HYPOTHESIS_PROFILE", "plan_parallel"))

# Seconds to wait for the fresh process (spawn + imports + replay); a hang fails, not stalls.
FRESH_PROCESS_TIMEOUT = 90.0


@pytest.fixture
def make_inline() -> Iterator[Callable[..., pp.PlanEnv]]:
    """``make_inline(env, **env_kwargs)``: ``pp.make(env, backend="inline", ...)``, closed at teardown."""
    made: list[Any] = []

    def make(env: Any, **kwargs: Any) -> pp.PlanEnv:
        e = pp.make(env, backend="inline", **kwargs)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture(scope="module")
def cartpole_pair() -> Iterator[tuple[pp.PlanEnv, Any]]:
    """CartPole inline, and on 2 process workers with every batch on them (a module's pair)."""
    inline = pp.make("CartPole-v1", backend="inline")
    process = pp.make("CartPole-v1", backend="process", n_workers=2, small_batch_inline=False)
    yield inline, process
    process.close()
    inline.close()


@pytest.fixture(scope="module")
def cartpole_general_pair() -> Iterator[tuple[pp.PlanEnv, Any]]:
    """As :func:`cartpole_pair`, with the lane off: for tests of the general path's own mechanisms (states
    named by key, held states), which the lane does not use."""
    policy = pp.ExecutionPolicy(n_workers=2, placement="workers", lane=False)
    inline = pp.make("CartPole-v1", backend="inline")
    process = pp.make("CartPole-v1", backend="process", execution=policy)
    yield inline, process
    process.close()
    inline.close()


@pytest.fixture(scope="session")
def fresh_process() -> Iterator[ProcessPoolExecutor]:
    """An executor whose every task runs in a new spawned process (one task per child).

    Submit ``tests.helpers.replay_in_fresh_process`` and wait with
    ``.result(timeout=FRESH_PROCESS_TIMEOUT)``.
    """
    ctx = multiprocessing.get_context("spawn")
    ex = ProcessPoolExecutor(max_workers=1, mp_context=ctx, max_tasks_per_child=1)
    try:
        yield ex
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
