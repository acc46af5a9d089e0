"""RayWorker: one Ray actor hosting one env, behind the Worker Protocol.

Imported only for ``backend="ray"``: importing plan_parallel never imports ray.

The actor builds its env from the cloudpickled factory (as a worker process
does) and answers pickled calls with replies carrying the call id (the ops of
:mod:`plan_parallel.workers.server`), so env errors come back with their own
type and remote traceback. A reply travels as a pickle plus its arrays
out-of-band (:func:`_pack`), which Ray moves without pickling them. Ray's own
restarts and task retries are off (``max_restarts=0, max_task_retries=0``): a
restarted actor would re-run calls against a fresh env. The pool replaces dead
actors itself and resends their chunks, which carry their states.

No shared-memory slab: the actor may be on another machine.
"""
from __future__ import annotations

import logging
import pickle
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from plan_parallel.wire.messages import (
    READY,
    ChunkReply,
    Op,
    Reply,
    call_from_wire,
    remote_error,
    reply_from_wire,
    reply_wire,
)
from plan_parallel.wire.slabs import PROTOCOL
from plan_parallel.workers.ray_connect import import_ray, is_private

__all__ = ["RayWorker", "SharedArg"]

log = logging.getLogger("plan_parallel")
WAKE_SLICE_SECONDS = 0.1  # ray.wait cannot watch a file descriptor: waits are cut in slices this long


@dataclass(frozen=True)
class SharedArg:
    """A call argument sent once for many actors (``ray.put``): index into the call's shared values."""

    index: int


class _Actor:
    """The remote side: one env, the same server a worker process runs."""

    def __init__(self, blob: bytes) -> None:
        from plan_parallel.workers.server import ready_reply

        self.server, self.ready_reply = ready_reply(blob)

    def ready(self) -> Packed:
        return _pack(self.ready_reply)

    def call(self, data: bytes, *shared: Any) -> Packed:
        from plan_parallel.workers.server import answer

        call = call_from_wire(pickle.loads(data))
        if shared:
            call = replace(call, args=tuple(shared[a.index] if isinstance(a, SharedArg) else a for a in call.args))
        assert self.server is not None, "an actor whose env failed to build answers no calls"
        reply = answer(self.server, call)
        value = reply.value
        if call.op is Op.STEP_BATCH and type(value) is ChunkReply and type(value.obs) is np.ndarray:
            # The driver copies a step chunk's stacked observations into the batch's array (StepGather):
            # they travel apart, to be read there in place instead of copied out first.
            return _pack(replace(reply, value=replace(value, obs=None)), value.obs)
        return _pack(reply)


Packed = tuple[bytes, list, Any]  # what an actor answers: see _pack


def _pack(reply: Reply, step_obs: Any = None) -> Packed:
    """A reply as (pickle, its arrays' buffers out-of-band as uint8 ndarrays, a step chunk's observations).

    Ray moves ndarrays through its object store without pickling them, so a
    chunk's observations (Pong: 100 KB an item) cost one copy in the actor and
    one in the driver, instead of a pickle, a bytes copy each way and an unpickle.
    ``step_obs``: a step chunk's stacked observations, taken out of the reply
    (None: none). An unpicklable result becomes an error reply, as in a worker process.
    """
    buffers: list = []
    try:
        meta = pickle.dumps(reply_wire(reply), 5, buffer_callback=buffers.append)
    except Exception as e:
        return pickle.dumps(reply_wire(Reply(reply.id, error=remote_error(e))), PROTOCOL), [], None
    return meta, [np.frombuffer(b.raw(), dtype=np.uint8) for b in buffers], step_obs


def _unpack(packed: Packed) -> Reply:
    """The reply of :func:`_pack`, its arrays copied out of Ray's read-only object store.

    The copies let results be written to and kept (states keep their
    observations) without pinning the actor's reply in the object store. A step
    chunk's observations are put back in the reply uncopied (read-only, in the
    object store): the step's gatherer copies them into its batch's array, and
    keeps nothing of them (Pong B=512 dt=4 on 2 actors: copying them out was ~16 ms
    of the driver's ~57 ms of CPU a call).
    """
    meta, buffers, step_obs = packed
    reply = reply_from_wire(pickle.loads(meta, buffers=[b.copy() for b in buffers]))
    if step_obs is not None:
        reply = replace(reply, value=replace(reply.value, obs=step_obs))
    return reply


_REMOTE: Any = None


def _remote_class() -> Any:
    global _REMOTE
    if _REMOTE is None:
        _REMOTE = import_ray().remote(max_restarts=0, max_task_retries=0)(_Actor)
    return _REMOTE


class RayWorker:
    """Driver-side proxy of one actor (a :class:`~plan_parallel.workers.base.Worker`).

    Args:
        index: the worker's index in its pool (for messages).
        blob: cloudpickled ``(factory, adapter)``.
        options: Ray actor options (``num_cpus``, ``resources``, ``scheduling_strategy`` ...).
    """

    uses_shared_memory = False
    keeps_states = False  # (an actor could; its chunks' states travel through Ray's store, not measured)
    takes_lane = False  # (the lane's rows are shared memory on this machine)
    core: int | None = None  # Ray places its actors
    bootstrap_hint = ""
    max_queued_bytes: int | None = None
    # A chunk costs the driver 2.2-3.2 ms of CPU here, besides the actor's and Ray's daemons' (a process
    # worker's: ~0.6-0.9 ms), and splitting did not pay on 2 cores (docs/measurements.md, *Action checks and
    # Ray chunks*). A share is split only when each chunk still holds this much env time.
    chunk_seconds: float | None = 0.25
    _put_cache: tuple[int, Any, Any] | None = None  # (id of the value, the value, its ObjectRef)

    def __init__(self, index: int, blob: bytes, options: dict | None = None) -> None:
        opts = {"num_cpus": 0 if is_private() else 1, **(options or {})}
        self.index = index
        self.handle = _remote_class().options(**opts).remote(blob)
        self._refs: deque = deque([self.handle.ready.remote()])  # answered in order by the actor
        self._dead: str | None = None
        self._pid: int | None = None

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def name(self) -> str:
        """With its pid once the actor said it is ready; an actor that died before that has none known."""
        return f"worker {self.index} (pid {self._pid})" if self._pid is not None else f"worker {self.index} (Ray actor)"

    def send(self, data: bytes, shared: tuple = ()) -> None:
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
        ref = import_ray().put(value)
        cls._put_cache = (id(value), value, ref)
        return ref

    def head(self) -> Any:
        """The ObjectRef of the oldest unanswered call (None when idle or dead)."""
        return self._refs[0] if self._refs and self._dead is None else None

    def receive(self) -> bytes | None:
        raise NotImplementedError("a Ray actor takes no lane headers (takes_lane is False)")

    def poll(self) -> list[Reply]:
        out: list[Reply] = []
        ray = import_ray()
        while self._refs and self._dead is None:
            ready, _ = ray.wait([self._refs[0]], num_returns=1, timeout=0)
            if not ready:
                break
            ref = self._refs.popleft()
            try:
                reply = _unpack(ray.get(ref))
            except ray.exceptions.RayError as e:  # the actor died, or the object was lost with its node
                self._dead = _first_line(e)
                break
            if reply.id == READY and reply.error is None:
                self._pid = reply.value.pid
            out.append(reply)
        return out

    def dead(self) -> str | None:
        return self._dead

    def kill(self) -> None:
        try:
            import_ray().kill(self.handle, no_restart=True)
        except Exception:
            log.debug("plan_parallel: ray.kill failed", exc_info=True)
        self._dead = self._dead or "killed"

    def close(self, timeout: float) -> None:
        # An actor holds nothing to flush: killing it is the bounded way to stop it.
        self.kill()
        self._refs.clear()

    @classmethod
    def broadcast_args(cls, blob: bytes) -> tuple[tuple, tuple]:
        """``blob`` is put in the object store once; each call names it as its first shared value."""
        return (blob,), (SharedArg(0),)

    @classmethod
    def wait_any(cls, workers: Sequence[RayWorker], timeout: float | None, wake: int | None,
                 due_in: float | None = None) -> list[int]:
        """Wait until the head call of some worker is answered (or its actor died); their positions."""
        ray = import_ray()
        heads = {}
        for k, w in enumerate(workers):
            h = w.head()
            if h is not None:
                heads[h] = k
        if not heads:
            return []
        limit = WAKE_SLICE_SECONDS if timeout is None else min(timeout, WAKE_SLICE_SECONDS)
        ready, _ = ray.wait(list(heads), num_returns=1, timeout=limit)
        if ready:  # gather whatever else is ready now, too
            more, _ = ray.wait(list(heads), num_returns=len(heads), timeout=0)
            ready = more or ready
        return sorted({heads[r] for r in ready})


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
