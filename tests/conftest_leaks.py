"""Leak checks for the process-backend suites: no child process, no shared-memory slab left behind.

Loaded by tests/conftest.py and used with
``pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")``.

* ``no_leaks`` (per test): every child process (recursively) that appeared
  during the test is gone after it, within a grace period. Also every
  ``/dev/shm/pp_<this pid>_*`` segment created during the test is unlinked,
  except for tests that use a fixture named ``shared_*`` (envs kept open for
  the whole module keep their slab pool; ``no_leaks_module`` checks those).
  Processes of such long-lived envs are registered with ``keep_processes``
  (the :func:`keep` function) when the env is made, possibly during a test,
  and are not counted by ``no_leaks``.
* ``no_leaks_module`` (per module): once the module's fixtures are torn down,
  no child process and no slab created during the module remains.

multiprocessing's own helpers (the resource tracker and the forkserver, direct
children of this process started once per session) are not leaks; worker
processes forked *by* the forkserver are checked like any other.
Zombies (exited, not yet reaped) hold no resources and are not counted.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

__all__ = ["HELPERS", "keep", "keep_processes", "live_children", "no_leaks", "no_leaks_module", "shm_segments"]

GRACE_SECONDS = 5.0
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
SHM_DIR = "/dev/shm"
_KEPT: set[int] = set()  # pids of processes owned by module-scoped fixtures


def keep(pids: list[int | None]) -> None:
    """Declare processes owned by a module-scoped fixture (not a leak of the test that started them)."""
    _KEPT.update(p for p in pids if p is not None)


def live_children() -> dict[tuple[int, float], str]:
    """This process's living descendants (minus multiprocessing's helpers): ``{(pid, create_time): description}``."""
    me = psutil.Process()
    out: dict[tuple[int, float], str] = {}
    for p in me.children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.cmdline())
            if p.ppid() == me.pid and any(h in cmd for h in HELPERS):
                continue
            if _is_ray(p.name(), cmd):
                continue  # the session's Ray instance and its pooled workers (started once, stopped at exit)
            out[(p.pid, p.create_time())] = f"pid {p.pid} ({p.name()}: {cmd[:120]})"
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return out


def _is_ray(name: str, cmd: str) -> bool:
    """A process of the local Ray instance: its daemons, agents and (pooled or actor) workers."""
    return name in ("raylet", "gcs_server") or cmd.startswith("ray::") or "/site-packages/ray/" in cmd


def shm_segments(pid: int | None = None) -> set[str]:
    """Names of the ``pp_<pid>_*`` shared-memory segments (slabs) created by ``pid`` (default: this process)."""
    prefix = f"pp_{os.getpid() if pid is None else pid}_"
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(prefix)}
    except FileNotFoundError:
        return set()


def _wait_clean(procs0: set, shm0: set[str], check_shm: bool, kept: set[int]) -> tuple[dict, set[str]]:
    deadline = time.monotonic() + GRACE_SECONDS
    while True:
        procs = {k: v for k, v in live_children().items() if k not in procs0 and k[0] not in kept}
        shm = (shm_segments() - shm0) if check_shm else set()
        if (not procs and not shm) or time.monotonic() > deadline:
            return procs, shm
        time.sleep(0.05)


def _report(where: str, procs: dict, shm: set[str]) -> None:
    for pid, _ in procs:  # stop what the test left behind, so one leak does not cascade
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    pytest.fail(
        f"{where} left behind after {GRACE_SECONDS} s: "
        f"processes {sorted(procs.values())}, shared-memory segments {sorted(shm)}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def keep_processes() -> Callable[[list[int | None]], None]:
    """The :func:`keep` function, for module-scoped fixtures that start processes lazily."""
    return keep


@pytest.fixture
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test (at teardown) if it leaves a child process or a slab behind."""
    procs0 = set(live_children())
    shm0 = shm_segments()
    yield
    check_shm = not any(name.startswith("shared_") for name in request.fixturenames)
    procs, shm = _wait_clean(procs0, shm0, check_shm, _KEPT)
    if procs or shm:
        _report(f"test {request.node.nodeid}", procs, shm)


@pytest.fixture(scope="module")
def no_leaks_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the module's last test (at teardown) if the module leaves a child process or a slab behind."""
    procs0 = set(live_children())
    shm0 = shm_segments()
    yield
    procs, shm = _wait_clean(procs0, shm0, True, set())
    _KEPT.clear()
    if procs or shm:
        _report(f"module {request.node.nodeid}", procs, shm)
