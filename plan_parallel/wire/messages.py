"""The typed messages between the calling process and a worker.

Every :class:`Call` carries an id, and the :class:`Reply` to it carries the same
id back: the pool hands a reply only to the call with that id, never by its
position in a pipe. A worker's first message is its :class:`Reply` to call
:data:`READY` (its :class:`WorkerInfo`, or the error that building the env raised).

A chunk of a batch travels as a :class:`ChunkRequest` (arrays in a shared-memory
slab where there is one, the rest inside the request) and comes back as a
:class:`ChunkReply`. The ops a worker accepts are the :class:`Op` members.
"""
from __future__ import annotations

import enum
import pickle
import traceback
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from plan_parallel.errors import RemoteError, RemoteTraceback, mark_failed_item

__all__ = [
    "READY",
    "Call",
    "ChunkReply",
    "ChunkRequest",
    "Op",
    "Reply",
    "RolloutSpec",
    "WorkerInfo",
    "call_from_wire",
    "call_wire",
    "remote_error",
    "reply_from_wire",
    "reply_wire",
    "reraise",
]

READY = 0  # the call id of a worker's first reply: its env is built (or failed to build)


class Op(enum.Enum):
    """What a :class:`Call` asks a worker to do."""

    RESET = "reset"  # args: (seed, options) -> (state, obs, info)
    STEP_BATCH = "step_batch"  # args: (ChunkRequest,) -> ChunkReply
    ROLLOUT_BATCH = "rollout_batch"  # args: (ChunkRequest,) -> ChunkReply
    SET_STATE = "set_state"  # args: (pickled state,) -> None
    CLOSE = "close"  # no reply: the worker exits


@dataclass(frozen=True)
class Call:
    """One request to a worker; ``id`` is what its :class:`Reply` carries back."""

    id: int
    op: Op
    args: tuple = ()


@dataclass(frozen=True)
class Reply:
    """The answer to the :class:`Call` with this ``id``: a value, or an error raised by env code."""

    id: int
    value: Any = None
    error: bytes | None = None  # a pickled (exception, remote traceback text, item index)
    env_seconds: float = 0.0


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker reports once its env is built."""

    observation_space: Any
    action_space: Any
    kind: str
    reseedable: bool
    pid: int
    spec: Any  # the env's EnvSpec, or None when it does not pickle (a wrapper holding a lambda)
    row_extra: str | None = None  # its states fit the lane's rows (Adapter.row_extra)
    row_rng: bool = False  # their rows hold their RNG states (Adapter.row_rng)


@dataclass(frozen=True)
class RolloutSpec:
    """The fields a rollout chunk adds to a step chunk."""

    horizon: int
    policy: bytes | None  # cloudpickled policy; None: given actions, or uniform random actions
    return_all: bool


@dataclass(frozen=True)
class ChunkRequest:
    """Items ``first_index .. first_index + n`` of a batch, for one worker.

    Arrays (actions, dt, seeds, the states' simulator arrays, with a policy the
    start observations) are columns of the slab named ``slab`` at the offsets of
    ``layout``; what is not in the slab travels in the fields here. The worker
    writes its outputs from ``out_offset`` on.
    """

    n: int
    first_index: int  # the chunk's first item in the caller's batch (item RNGs depend on it)
    slab: str | None  # None: no shared memory (Ray); everything travels in the message
    slab_size: int
    layout: dict
    out_offset: int
    actions: Any  # None when the slab column "actions" holds them, or a policy acts
    dt: Any  # an int for every item, None (the slab column "dt"), or n ints
    seeds: Any  # None (the column "seeds", or no seeds: see has_seeds) or n ints
    has_seeds: bool
    states: dict | None  # columns.pack_states' remainder; None: every item starts from the held state
    rollout: RolloutSpec | None = None  # None: a step_batch chunk
    index_errors: bool = True  # a malformed state's error names its index (as check_states does); not for step()
    # Where the final observations go when they are lent to the caller (see wire.leases): the batch's own
    # slab (name, size), the byte offset of this chunk's first row, the rows' dtype (str) and shape.
    obs_out: tuple[str, int, int, str, tuple[int, ...]] | None = None
    # Each item's key (a vector env's sub-env index): the worker steps it on an env it keeps for that key
    # (see workers.kept_envs). None: on the worker's env.
    kept: list[int] | None = None
    # The seconds the caller gives a call (None: no limit): the kept envs a call builds stay well within them.
    timeout: float | None = None
    # The states passed the workers' check before, or the workers made them (Feeder.trust): not checked again.
    validated: bool = False


@dataclass(frozen=True)
class ChunkReply:
    """The results of one :class:`ChunkRequest` (arrays in the slab where they fit)."""

    rewards: Any  # float64 (n,) for step_batch, (n, T) for rollout_batch
    terminations: Any
    truncations: Any
    n_steps: Any  # int64 (n,)
    states: dict  # columns.pack_states' remainder of the final states (no observations)
    obs: Any  # the final observations when not the slab column "obs": an ndarray or a list (columns.stack_rows), or None
    infos: Any  # columns.pack_infos
    layout: dict  # the output columns in the slab
    needed: int  # output bytes, fitting in the slab or not (learned for the next chunks)
    all_states: dict | None = None  # with return_all: the n*T states, item-major
    checked: int = 0  # the request's states the worker checked (none when it said they were validated)
    all_obs: Any = None  # with return_all: their observations when not the column "all_obs" (as obs)
    obs_written: bool = False  # the final observations are in the batch's slab (ChunkRequest.obs_out)


# ------------------------------------------------------------------ the wire
# Calls and replies are pickled as tuples of builtins. Unpickling a dataclass or an Enum member
# looks its class up by module and name every time (3-5 us for each of the four a chunk's call
# and reply name); the tuples need no lookup.
_OPS = {op.value: op for op in Op}
_REQUEST_FIELDS = tuple(f.name for f in fields(ChunkRequest))
_CHUNK_REPLY_FIELDS = tuple(f.name for f in fields(ChunkReply))
_CALL_FIELDS = tuple(f.name for f in fields(Call))
_REPLY_FIELDS = tuple(f.name for f in fields(Reply))
_ROLLOUT_AT = _REQUEST_FIELDS.index("rollout")
_request_values = attrgetter(*_REQUEST_FIELDS)
_chunk_reply_values = attrgetter(*_CHUNK_REPLY_FIELDS)


def _rebuilt(cls: type, names: tuple[str, ...], values: tuple) -> Any:
    """A frozen dataclass of ``values`` (every field, in order) without its ``__init__`` (one setattr a field)."""
    obj: Any = object.__new__(cls)
    obj.__dict__.update(zip(names, values))
    return obj


def call_wire(call: Call) -> tuple:
    """``call`` as the tuple that is pickled for a worker (:func:`call_from_wire` rebuilds it)."""
    args = call.args
    if len(args) == 1 and type(args[0]) is ChunkRequest:
        values = _request_values(args[0])
        spec = values[_ROLLOUT_AT]
        if spec is not None:
            values = (*values[:_ROLLOUT_AT], (spec.horizon, spec.policy, spec.return_all), *values[_ROLLOUT_AT + 1:])
        return call.id, call.op.value, True, values
    return call.id, call.op.value, False, args


def call_from_wire(wire: tuple) -> Call:
    call_id, op, is_chunk, payload = wire
    if is_chunk:
        spec = payload[_ROLLOUT_AT]
        if spec is not None:
            payload = (*payload[:_ROLLOUT_AT], RolloutSpec(*spec), *payload[_ROLLOUT_AT + 1:])
        payload = (_rebuilt(ChunkRequest, _REQUEST_FIELDS, payload),)
    return _rebuilt(Call, _CALL_FIELDS, (call_id, _OPS[op], payload))


def reply_wire(reply: Reply) -> tuple:
    """``reply`` as the tuple that is pickled for the parent (:func:`reply_from_wire` rebuilds it)."""
    value = reply.value
    if type(value) is ChunkReply:
        return reply.id, True, _chunk_reply_values(value), reply.error, reply.env_seconds
    return reply.id, False, value, reply.error, reply.env_seconds


def reply_from_wire(wire: tuple) -> Reply:
    reply_id, is_chunk, value, error, env_seconds = wire
    value = _rebuilt(ChunkReply, _CHUNK_REPLY_FIELDS, value) if is_chunk else value
    return _rebuilt(Reply, _REPLY_FIELDS, (reply_id, value, error, env_seconds))


def remote_error(exc: BaseException, item: int | None = None) -> bytes:
    """Pickle ``exc`` with its traceback text for the parent; unpicklable ones become RemoteError."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
        payload: Any = exc
    except Exception:
        payload = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return pickle.dumps((payload, tb, item))


def reraise(blob: bytes, where: str, first_item: int = 0) -> BaseException:
    """The exception from :func:`remote_error`, with its traceback as ``__cause__`` and a note.

    ``first_item`` is the batch index of the chunk's first item, so the note
    names the item's index in the caller's batch, and so does :func:`~plan_parallel.errors.failed_item` (when an item failed).
    """
    exc, tb, item = pickle.loads(blob)
    note = where + (f", at item {first_item + item} of the batch" if item is not None else "")
    if item is not None:
        mark_failed_item(exc, first_item + item)
    exc.__cause__ = RemoteTraceback(tb)
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(note)
    return exc
