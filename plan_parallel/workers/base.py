"""The Worker Protocol: what the pool calls, whatever the backend.

A worker hosts one env (built from a cloudpickled factory) and answers pickled
:class:`~plan_parallel.wire.messages.Call` messages with
:class:`~plan_parallel.wire.messages.Reply` messages carrying the call's id. Its
first reply answers call :data:`~plan_parallel.wire.messages.READY`. Starting a
worker never blocks on its env being built: the pool reads that first reply
like any other, so an interruption while a replacement starts loses nothing.

Backend differences live behind this protocol (the pool has no ``backend ==``
branch): each worker class says whether it reads a shared-memory slab, how many
bytes may wait unread for it, and how to wait for several workers at once.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from plan_parallel.wire.messages import Reply

__all__ = ["Worker"]


class Worker(Protocol):
    """One worker, seen from the calling process."""

    index: int
    #: Whether the worker reads chunks from shared-memory slabs (False: arrays travel in the messages).
    uses_shared_memory: bool
    #: Whether the worker keeps the states chunks bring, for later chunks to name by key (wire.held).
    keeps_states: bool
    #: Whether the worker serves the lane's headers (:mod:`plan_parallel.wire.lane`; it reads shared memory).
    takes_lane: bool
    #: Bytes that may wait unread for a busy worker without a write blocking (None: no limit).
    max_queued_bytes: int | None

    #: The env time a chunk holds at least when a worker's share of a batch is split in several (None:
    #: the tuner's default, for workers whose chunk costs the calling process under a millisecond).
    chunk_seconds: float | None

    #: The core the worker is kept on (None: wherever its OS or cluster puts it).
    core: int | None

    #: What to do when the worker dies before building its env ("" when there is nothing to say).
    bootstrap_hint: str

    @property
    def pid(self) -> int | None:
        """The worker's process id, once known (a Ray actor reports it when ready)."""

    @property
    def name(self) -> str:
        """The worker in messages: ``"worker 1 (pid 4242)"``."""

    def send(self, data: bytes, shared: tuple = ()) -> None:
        """Queue one pickled call. ``shared``: values sent once for many workers (Ray's object store).

        Raises:
            OSError: the worker is gone (the pool then sees it dead).
        """

    def receive(self) -> bytes | None:
        """The next message as the worker wrote it (a lane reply), waiting for it; None once the worker is
        gone. Only for a worker that ``takes_lane``."""

    def poll(self) -> list[Reply]:
        """The replies ready now, in arrival order; never blocks. A worker found gone is marked dead."""

    def dead(self) -> str | None:
        """None while alive; else how it ended (``"signal SIGKILL"``, ``"exit code 3"``)."""

    def kill(self) -> None:
        """Stop the worker at once (SIGKILL or equivalent); bounded."""

    def close(self, timeout: float) -> None:
        """Ask the worker to exit; kill it if it has not within ``timeout``; free its handles."""

    @classmethod
    def broadcast_args(cls, blob: bytes) -> tuple[tuple, tuple]:
        """``(shared, args)`` of a call whose one argument ``blob`` goes to every worker (sent or stored once)."""

    @classmethod
    def wait_any(cls, workers: Sequence[Any], timeout: float | None, wake: int | None,
                 due_in: float | None = None) -> list[int]:
        """Wait up to ``timeout`` until some of ``workers`` have a reply or died; their positions.

        ``wake`` is a file descriptor that ends the wait when readable (another
        thread closing the env); a backend that cannot watch it waits in short slices.
        ``due_in`` is when the first reply is expected, in seconds (None: unknown):
        a backend that can poll instead of sleeping does so only when it is soon.
        """
