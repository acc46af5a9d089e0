"""What the pool keeps per worker (:class:`Slot`) and per message (:class:`Part`)."""
from __future__ import annotations

import enum
import pickle
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from plan_parallel.errors import StateError
from plan_parallel.state import State
from plan_parallel.wire.held import Table
from plan_parallel.wire.messages import Call, Op, call_wire
from plan_parallel.wire.slabs import PROTOCOL, Slab
from plan_parallel.workers.base import Worker

if TYPE_CHECKING:
    from plan_parallel.batch.future import BatchFuture

__all__ = ["START_TIMEOUT", "Part", "Slot", "SlotState", "dumps"]

START_TIMEOUT = 120.0  # seconds a worker may take to build its env


def dumps(obj: Any) -> bytes:
    """Pickle a call; an unpicklable argument is the caller's error (StateError), raised before sending."""
    try:
        return pickle.dumps(obj, PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise StateError(f"cannot send to a worker: the input does not pickle ({type(e).__name__}: {e})") from e


class SlotState(enum.Enum):
    STARTING = "starting"  # started; its READY reply has not arrived
    READY = "ready"  # idle when its queue is empty, else busy with the queue's head
    DEAD = "dead"  # gone (died, killed, timed out); refilled by the next call
    CLOSED = "closed"


@dataclass(eq=False)
class Part:
    """One message to one worker, kept until answered so that it can be sent again."""

    call: Call
    future: BatchFuture
    lo: int = 0
    hi: int = 0
    slab: Slab | None = None
    lease: Any = None  # the batch's Lease this part's worker writes observations into (wire.leases)
    cost: int = 0  # env steps at most, for chunk sizing
    needs: State | None = None  # the held state this part starts from (states=None)
    table: Table | None = None  # the table of the worker it was encoded for (wire.held)
    keeps: list = field(default_factory=list)  # what the worker is to hold once it answers (Table.confirm)
    holds: State | None = None  # the state a set_state part leaves the worker holding
    shared: tuple = ()  # values sent once for many workers (Ray's object store)
    data: bytes = b""
    written: bool = False
    sent_at: float = 0.0
    answered: bool = False
    env_seconds: float = 0.0

    def describe(self) -> str:
        return f"{self.call.op.value} ({self.hi - self.lo} items)" if self.hi else self.call.op.value


@dataclass(eq=False)
class Slot:
    """One worker's place in the pool: the worker (replaced when it dies), its state and its queue."""

    current: Worker | None = None  # the slot's worker; None until the pool starts the first one (see worker)
    state: SlotState = SlotState.DEAD
    queue: deque = field(default_factory=deque)  # parts sent (or about to be), unanswered, in order
    held: State | None = None  # the state this worker holds, as far as what was sent says
    table: Table | None = None  # the states it holds for the chunks (wire.held); None: it holds none
    started_at: float = 0.0
    build_seconds: float = 0.0  # how long this slot's last worker took to build its env (0: none has yet)
    lane_due: tuple[int, int, int, str] | None = None  # a lane header it has not answered: (call id, lo, n, op)
    awaited: bool = False  # a lane call waits for this worker (a replacement) to build its env

    @property
    def worker(self) -> Worker:
        """The slot's worker (the pool starts one in every slot before it sends anything)."""
        assert self.current is not None, "a slot's worker is started before it is used"
        return self.current

    @property
    def active(self) -> bool:
        """Something is due from this worker: its READY reply, or an answer to its queue's head."""
        return self.state is SlotState.STARTING or (self.state is SlotState.READY and bool(self.queue))

    def doing(self) -> str:
        """What the worker was doing, for its death's message: the parts it had, a lane call's header it had not
        answered, or nothing ("while idle", "while building its env")."""
        doing = ", ".join(p.describe() for p in self.queue)
        if not doing and self.lane_due is not None:
            doing = f"{self.lane_due[3]} ({self.lane_due[2]} items)"
        return f"during {doing}" if doing else "while idle" if self.state is SlotState.READY else \
            "while building its env"

    def start_limit(self, timeout: float | None) -> float:
        """Seconds this worker may take to build its env: :data:`START_TIMEOUT`; or, when the env has a
        ``timeout`` and a call waits for this worker (a replacement), the longer of that timeout and twice
        the time the slot's last worker took to build it (a replacement that cannot start fails the call
        within its timeout; one as slow to build as the first did is waited for)."""
        if timeout is None or not (self.queue or self.awaited):
            return START_TIMEOUT
        return min(START_TIMEOUT, max(timeout, 2 * self.build_seconds))

    def due(self, timeout: float | None) -> float | None:
        """When this worker is overdue (``time.monotonic()`` time), or None when it has no deadline."""
        if self.state is SlotState.STARTING:
            return self.started_at + self.start_limit(timeout)
        if self.state is SlotState.READY and self.queue and timeout is not None and self.queue[0].written:
            return self.queue[0].sent_at + timeout
        return None

    def reply_due_in(self, seconds_per_step: float, now: float) -> float | None:
        """Seconds until the head's reply is expected (None: nothing running, or still starting)."""
        if self.state is not SlotState.READY or not self.queue or not self.queue[0].written:
            return None
        head = self.queue[0]
        return head.sent_at + head.cost * seconds_per_step - now

    def push(self, part: Part) -> None:
        """Queue ``part`` (pickled once) and note the state the worker will hold after it."""
        if part.data == b"":
            part.data = dumps(call_wire(part.call))
        part.written = False
        part.answered = False
        if part.holds is not None:
            self.held = part.holds  # optimistic; undone if the worker rejects it
        elif part.call.op is Op.RESET:
            self.held = None
        self.queue.append(part)

    def send(self, part: Part) -> None:
        """Queue ``part`` (it joins its batch's parts) and write what can be written."""
        self.push(part)
        if part not in part.future.parts:
            part.future.parts.append(part)
        self.write()

    def ensure_holds(self, state: State, fut: BatchFuture, call_id: int) -> None:
        """Send a set_state (call ``call_id``) unless what was sent leaves the worker holding ``state``."""
        if self.held is not state:
            self.send(Part(Call(call_id, Op.SET_STATE, (dumps(state),)), fut, holds=state))

    def write(self) -> None:
        """Write the queued parts, in order, as far as that cannot block.

        The worker reads a whole call before running it and the parent reads
        replies only between writes, so a call goes to a busy (or starting)
        worker only while what waits unread stays within the worker's
        ``max_queued_bytes``; a larger one waits until the worker is idle.
        """
        if self.state not in (SlotState.READY, SlotState.STARTING):
            return
        limit = self.worker.max_queued_bytes
        queued = 0
        for k, part in enumerate(self.queue):
            idle = k == 0 and self.state is SlotState.READY
            if part.written:
                queued += 0 if idle else len(part.data)
                continue
            if not idle and limit is not None and queued + len(part.data) > limit:
                return
            part.sent_at = time.monotonic()
            part.written = True
            try:
                self.worker.send(part.data, part.shared)
            except OSError:
                return  # gone: the next wait sees its sentinel and sends these parts again
            queued += 0 if idle else len(part.data)

    def again(self, part: Part) -> None:
        """Send ``part``, answered by the worker without running it, again after the parts queued behind it."""
        self.queue.append(part)  # first: an interruption in between leaves it queued twice, sent once (pool._revive)
        self.queue.remove(part)  # (the first occurrence: where it was)
        part.written = False
        self._head_starts()
        self.write()

    def ready(self) -> None:
        """The worker built its env: it starts on its queue now; write what can be written."""
        self.build_seconds = time.monotonic() - self.started_at
        self.state = SlotState.READY
        self._head_starts()
        self.write()

    def answered(self, part: Part) -> None:
        """``part`` was answered: the next one starts now; write what can be written."""
        self.queue.remove(part)
        self._head_starts()
        self.write()

    def _head_starts(self) -> None:
        """The head of the queue starts running now: its deadline counts from here, not from its writing
        (a call written to a worker still building its env, or busy with the one before it)."""
        if self.queue:
            self.queue[0].sent_at = max(self.queue[0].sent_at, time.monotonic())

    def retire(self) -> None:
        """The worker is gone: forget its queue (the caller has queued those parts elsewhere first)."""
        self.queue.clear()
        self.lane_due = None
        self.state = SlotState.DEAD
