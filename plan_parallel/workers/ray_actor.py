"""RayWorker: one Ray actor hosting one PlanEnv, behind the same interface as ExternalProcess.

Imported only for ``backend="ray"``: importing plan_parallel never imports ray.

The actor builds its env from the cloudpickled factory (as a worker process
does) and answers pickled :class:`Call` messages with :class:`Reply` messages
(the ops of :mod:`plan_parallel.workers.process`), so env errors come back with
their own type and remote traceback. A reply travels as a pickle plus its
arrays out-of-band (:func:`_pack`), which Ray moves without pickling them.
Ray's own restarts and task retries are off (``max_restarts=0,
max_task_retries=0``): a restarted actor would re-run calls against a fresh
env. plan_parallel replaces dead actors itself and resends their chunks, which
carry their states.

No shared-memory slab: the actor may be on another machine.
"""
from __future__ import annotations

import atexit
import logging
import os
import pickle
import re
import socket
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from plan_parallel.errors import WorkerCrashedError, WorkerTimeoutError
from plan_parallel.transport import PROTOCOL
from plan_parallel.workers.base import Call, Reply, remote_error, reraise

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
    except ImportError as e:  # tested by test_ray_backend_without_ray_says_how_to_install_it
        raise ImportError(
            'backend="ray" needs Ray: install it with pip install -e ".[ray]" (or pip install ray)'
        ) from e
    return ray


def connect(address: str | None) -> bool:
    """Make sure this process is connected to Ray; True when plan_parallel made the connection.

    * Already connected (the user called ``ray.init``): that connection is used
      as it is, and plan_parallel never shuts it down. A process holds one Ray
      connection: asking for a cluster while plan_parallel's own private instance
      is the connection raises ``ConnectionError`` rather than silently running there.
    * ``address`` given (``"auto"``, ``"host:port"``, ``"ray://..."``): join that cluster.
      A ``host:port`` where nothing listens fails within seconds (Ray itself
      retries for minutes).
    * Neither (or ``address="local"``): start a private local instance (never attach
      to a cluster found through ``RAY_ADDRESS``) with no dashboard, no usage
      stats, worker logs kept out of the driver, and actors at normal priority
      (Ray's default is nice 15). It is shut down when the
      interpreter exits, so several envs share one instance.

    Raises:
        ConnectionError: no Ray cluster answers at ``address``, or this process is
            already connected to plan_parallel's private instance.
        ValueError: ``address`` is malformed (Ray's own message, naming the address).
        ImportError: Ray is not installed.
    """
    global _PRIVATE
    ray = _ray()
    if address == "local":
        address = None
    if ray.is_initialized():
        if address is not None and _PRIVATE:
            raise ConnectionError(
                f'backend="ray" with address={address!r}: this process is already connected to the private '
                "local Ray instance plan_parallel started for an earlier env (address=None), and a process "
                "holds one Ray connection. Use address=None here, or join the cluster from a fresh process."
            )
        return False
    for k, v in _QUIET_ENV.items():
        os.environ.setdefault(k, v)
    if address is not None:
        _probe(address)
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, ValueError) as e:
            raise type(e)(f'backend="ray" could not join the Ray cluster at address={address!r}: {e}') from e
    else:
        temp_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: socket paths < 107 bytes
        atexit.register(shutil.rmtree, temp_dir, ignore_errors=True)  # runs after _shutdown (LIFO)
        ray.init(
            address="local", num_cpus=os.cpu_count() or 1, num_gpus=0, include_dashboard=False, log_to_driver=False,
            logging_level="ERROR", object_store_memory=256 * 2**20,
            _temp_dir=temp_dir,
            # Ray runs workers at nice 15; the actors are the compute here (as process
            # workers, which run at nice 0), and on a shared machine nice 15 starves them.
            _system_config={"worker_niceness": 0},
        )
        _PRIVATE = True
    atexit.register(_shutdown)
    return True


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing listens at a ``host:port`` address (Ray would retry for minutes)."""
    if "://" in address or address == "auto":
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return  # Ray names the malformed address itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(
            f'backend="ray" could not join the Ray cluster at address={address!r}: nothing answers there '
            f"({e}). Start a head with `ray start --head --port={port}`, or pass address=None for a "
            "private local instance."
        ) from e


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

    def call(self, data: bytes, *shared: Any) -> tuple[bytes, list]:
        from plan_parallel.workers.process import answer

        call: Call = pickle.loads(data)
        if shared:
            call.args = tuple(shared[a.index] if isinstance(a, SharedArg) else a for a in call.args)
        return _pack(answer(self.server, call, "actor"))


def _pack(reply: Reply) -> tuple[bytes, list]:
    """A reply as (pickle, its arrays' buffers out-of-band), the buffers as uint8 ndarrays.

    Ray moves ndarrays through its object store without pickling them, so a
    chunk's observations (Pong: 100 KB an item) cost one copy in the actor and
    one in the driver, instead of a pickle, a bytes copy each way and an unpickle.
    An unpicklable result becomes an error reply, as in a worker process.
    """
    import numpy as np

    buffers: list = []
    try:
        meta = pickle.dumps(reply, 5, buffer_callback=buffers.append)
    except Exception as e:  # noqa: BLE001 - an unpicklable result is reported, not fatal
        return pickle.dumps(Reply(reply.id, error=remote_error(e)), PROTOCOL), []
    return meta, [np.frombuffer(b.raw(), dtype=np.uint8) for b in buffers]


def _unpack(packed: tuple[bytes, list]) -> Reply:
    """The reply of :func:`_pack`, its arrays copied out of Ray's read-only object store.

    The copies let results be written to and kept (states keep their
    observations) without pinning the actor's reply in the object store.
    """
    meta, buffers = packed
    return pickle.loads(meta, buffers=[b.copy() for b in buffers])


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
            return _unpack(ray.get(ref))
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
    """How an actor died, for messages: the error type and Ray's reason.

    ``"ActorDiedError (its worker process has died)"``, ``"... (it was killed by `ray.kill`)"``;
    else the first line of the message (a lost node: ``"ActorDiedError (the actor died
    unexpectedly before finishing this task)"``).
    """
    text = str(e)
    m = re.search(r"The actor is dead because (.+?)\.(\s|$)", text)
    if m:
        return f"{type(e).__name__} ({m.group(1)})"
    lines = text.strip().splitlines()
    first = lines[0].strip().rstrip(".") if lines else ""
    return f"{type(e).__name__} ({first[:1].lower() + first[1:]})" if first else type(e).__name__


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
