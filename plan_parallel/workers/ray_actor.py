"""RayWorker: one Ray actor hosting one PlanEnv, behind the same interface as ExternalProcess.

Imported only for ``backend="ray"``: importing plan_parallel never imports ray.

The actor builds its env from the cloudpickled factory (as a worker process
does) and answers pickled :class:`Call` messages with pickled :class:`Reply`
messages through :func:`~plan_parallel.workers.process.serve`, so env errors
come back with their own type and remote traceback. Ray's own restarts and
task retries are off (``max_restarts=0, max_task_retries=0``): a restarted actor
would re-run calls against a fresh env. plan_parallel replaces dead actors
itself and resends their chunks, which carry their states.

Arrays travel inside the pickled reply (no shared-memory slab: the actor may be
on another machine).
"""
from __future__ import annotations

import atexit
import logging
import os
import pickle
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from plan_parallel.errors import WorkerCrashedError, WorkerTimeoutError
from plan_parallel.transport import PROTOCOL
from plan_parallel.workers.base import Call, Reply, reraise

__all__ = ["RayWorker", "SharedArg", "connect", "ray_wait"]

log = logging.getLogger("plan_parallel")

# True once plan_parallel started a private local instance: its actors then ask for
# no CPU (the instance is ours; how many run is n_workers' business), where on a
# cluster each asks for one, so Ray spreads them over the nodes.
_PRIVATE = False
# Quiet, CI-friendly settings for an instance plan_parallel starts itself.
_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError(
            'backend="ray" needs Ray: install it with pip install -e ".[ray]" (or pip install ray)'
        ) from e
    return ray


def connect(address: str | None) -> bool:
    """Make sure this process is connected to Ray; True when plan_parallel made the connection.

    * Already connected (the user called ``ray.init``): that connection is used
      as it is, and plan_parallel never shuts it down.
    * ``address`` given (``"auto"``, ``"host:port"``, ``"ray://..."``): join that cluster.
    * Neither: start a private local instance (``address="local"``: never attach to
      a cluster found through ``RAY_ADDRESS``) with no dashboard, no usage stats
      and worker logs kept out of the driver. It is shut down when the
      interpreter exits, so several envs share one instance.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    for k, v in _QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if address is not None:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    else:
        global _PRIVATE
        _PRIVATE = True
        ray.init(
            address="local", num_cpus=os.cpu_count() or 1, num_gpus=0, include_dashboard=False, log_to_driver=False,
            logging_level="ERROR", object_store_memory=256 * 2**20,
            _temp_dir=tempfile.mkdtemp(prefix="rt-", dir="/tmp"),  # short: socket paths < 107 bytes
        )
    atexit.register(_shutdown)
    return True


def _shutdown() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


@dataclass(frozen=True)
class SharedArg:
    """A call argument sent once for many actors (``ray.put``): index into the call's shared values."""

    index: int


class _Actor:
    """The remote side: one env, the same server a worker process runs."""

    def __init__(self, blob: bytes) -> None:
        from plan_parallel.workers.base import remote_error
        from plan_parallel.workers.process import build_server

        self.error: bytes | None = None
        try:
            self.server, self.info = build_server(blob)
        except BaseException as e:  # noqa: BLE001 - reported by ready(), with its own type
            self.error = remote_error(e)

    def ready(self) -> bytes:
        if self.error is not None:
            return pickle.dumps(Reply(0, error=self.error), PROTOCOL)
        return pickle.dumps(Reply(0, self.info), PROTOCOL)

    def call(self, data: bytes, *shared: Any) -> bytes:
        from plan_parallel.workers.process import serve

        call: Call = pickle.loads(data)
        if shared:
            call.args = tuple(shared[a.index] if isinstance(a, SharedArg) else a for a in call.args)
        return serve(self.server, call)


_REMOTE: Any = None


def _remote_class() -> Any:
    global _REMOTE
    if _REMOTE is None:
        ray = _ray()
        _REMOTE = ray.remote(max_restarts=0, max_task_retries=0)(_Actor)
    return _REMOTE


class RayWorker:
    """Driver-side proxy of one actor (the :class:`~plan_parallel.workers.base.Worker` interface).

    Args:
        index: the worker's index in its BatchEnv (for messages).
        blob: cloudpickled ``(factory, adapter)``.
        options: Ray actor options (``num_cpus``, ``resources``, ``scheduling_strategy`` ...).
        start_timeout: seconds to wait for the env to be built.
    """

    _put_cache: tuple[int, Any, Any] | None = None  # (id of the value, the value, its ObjectRef)

    def __init__(self, index: int, blob: bytes, options: dict | None = None, start_timeout: float = 120.0) -> None:
        opts = {"num_cpus": 0 if _PRIVATE else 1, **(options or {})}
        self.index = index
        self.handle = _remote_class().options(**opts).remote(blob)
        self._ready_ref = self.handle.ready.remote()
        self._refs: deque = deque()
        self._dead: str | None = None
        self._pid: int | None = None
        self._start_timeout = start_timeout
        self.ready: dict = {}

    def wait_ready(self) -> dict:
        """Block until the actor has built its env; returns its spaces and kind."""
        ray = _ray()
        try:
            reply: Reply = pickle.loads(ray.get(self._ready_ref, timeout=self._start_timeout))
        except ray.exceptions.GetTimeoutError:
            self.kill()
            raise WorkerTimeoutError(
                f"worker {self.index} (Ray actor) did not build its env within {self._start_timeout:.0f} s "
                "(not enough free CPUs or resources in the cluster?)"
            ) from None
        except ray.exceptions.RayActorError as e:
            raise WorkerCrashedError(f"worker {self.index} (Ray actor) died while building its env: {e}") from e
        if reply.error is not None:
            self.kill()
            raise reraise(reply.error, f"worker {self.index} (Ray actor) building the env")
        self.ready = reply.value
        self._pid = self.ready.get("pid")
        return self.ready

    @property
    def pid(self) -> int | None:
        return self._pid

    def send(self, call: Call) -> None:
        self.send_bytes(pickle.dumps(call, PROTOCOL))

    def send_bytes(self, data: bytes, shared: tuple = ()) -> None:
        if self._dead is not None:
            raise OSError(f"actor is dead: {self._dead}")
        refs = [self._put(v) for v in shared]
        self._refs.append(self.handle.call.remote(data, *refs))

    @classmethod
    def _put(cls, value: Any) -> Any:
        """``ray.put`` once per value, whatever the number of actors it goes to."""
        c = cls._put_cache
        if c is not None and c[0] == id(value) and c[1] is value:
            return c[2]
        ref = _ray().put(value)
        cls._put_cache = (id(value), value, ref)
        return ref

    def head(self) -> Any:
        """The ObjectRef of the oldest unanswered call (None when idle)."""
        return self._refs[0] if self._refs else None

    def poll(self) -> Reply | None:
        """The next reply if it is ready; a dead actor is recorded (see :meth:`dead`)."""
        if not self._refs or self._dead is not None:
            return None
        ray = _ray()
        ready, _ = ray.wait([self._refs[0]], num_returns=1, timeout=0)
        if not ready:
            return None
        ref = self._refs.popleft()
        try:
            return pickle.loads(ray.get(ref))
        except ray.exceptions.RayActorError as e:
            self._dead = _first_line(e)
        except ray.exceptions.RayError as e:  # e.g. the object was lost with its node
            self._dead = _first_line(e)
        return None

    def dead(self) -> str | None:
        return self._dead

    def kill(self) -> None:
        try:
            _ray().kill(self.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            log.debug("plan_parallel: ray.kill failed", exc_info=True)
        self._dead = self._dead or "killed"

    def close(self, timeout: float) -> None:
        # An actor holds nothing to flush: killing it is the bounded way to stop it.
        self.kill()
        self._refs.clear()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def ray_wait(workers: list[RayWorker], busy: list[int], timeout: float | None) -> list[int]:
    """Wait until the head call of some busy worker is answered (or its actor died); their indices."""
    ray = _ray()
    heads = {}
    for i in busy:
        h = workers[i].head()
        if h is not None:
            heads[h] = i
    if not heads:
        return []
    t0 = time.monotonic()
    ready, _ = ray.wait(list(heads), num_returns=1, timeout=timeout)
    if ready:  # gather whatever else is ready now, too
        more, _ = ray.wait(list(heads), num_returns=len(heads), timeout=0)
        ready = more or ready
    log.debug("plan_parallel: ray_wait %.1f ms", (time.monotonic() - t0) * 1e3)
    return sorted({heads[r] for r in ready})
