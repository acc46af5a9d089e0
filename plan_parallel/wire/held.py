"""States a worker holds: a state sent to a worker once travels as a key after that.

A planner sends the same states again and again (the roots of its searches, a
batch's start states call after call). Each process worker keeps the states its
chunks brought the second time they were sent, in a table of at most ``cap`` of
them, keyed by numbers the calling process gives out in order (:class:`Table`);
a chunk then lists a state that worker holds by its key (``"refs"`` in
:func:`pack_held`'s remainder) instead of packing and pickling it (CartPole:
~0.7 us of the calling process's CPU a state, and the worker's unpacking). A
state sent once is only noted as such (:data:`SENT_ONCE`): most states are sent
once (a beam's, a search's leaves), and keeping each one, marks and all, cost
more than it saved (CartPole B=512 passing each call's states to the next, paired:
0.935x of the speed without tables when every state was kept).

Nothing here is trusted blindly. A key is only used once the worker answered the
chunk that brought its state (:meth:`Table.confirm`), and only while the state's
fields are the very objects that were sent. A worker that does not hold a key it
is sent (a replacement, one that reset its table) answers :data:`NOT_HELD`, and
the chunk is sent again with every state, under a new table
(:meth:`~plan_parallel.batch.feeder.Feeder.resent`). The worker keeps the ``cap``
latest keys, and the calling process uses no older one, so an evicted key is
never asked for.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from plan_parallel.state import State
from plan_parallel.wire.columns import pack_states, unpack_states
from plan_parallel.wire.slabs import ArrayWriter

__all__ = ["NOT_HELD", "HeldStates", "Table", "pack_held", "unpack_held"]

NOT_HELD = "not held"  # a worker's answer to a chunk that refers to a state it does not hold
SENT_ONCE = "sent once"  # State.held_by of a state sent to a worker once (not kept): kept the next time

# What a worker's table may keep of simulator values, roughly: cap = this ÷ (a state's simulator bytes + 1 KB).
# (A restored ALE state keeps its decoded form as well: a full Pong table took 56 MB of a worker's memory.)
TABLE_BYTES = 32 << 20
MIN_CAP, MAX_CAP = 256, 65536

_table_ids = itertools.count(1)  # process-wide: a state's marks name the table, and a table is one worker's, once


class Table:
    """The calling process's view of one worker's table: its id, the next key, and how many keys it keeps.

    A new worker (or one that missed a key) gets a new table: the marks states carry for the old one
    then match no worker, and its first chunk resets the worker's table.
    """

    __slots__ = ("by_key", "cap", "id", "next_key")

    def __init__(self) -> None:
        self.id = next(_table_ids)
        self.next_key = 0
        self.cap = 0  # set by the first chunk, from its states' size
        self.by_key = 0  # items its chunks named by key so far

    def refs(self, states: Sequence[State]) -> tuple[list[int], list[State], list[int], int]:
        """Each state's reference for the worker: its key where the worker holds it as it is now, else ``~j``
        for the j-th of the states it does not hold (each listed once, in first-seen order); those states;
        which of them the worker is to keep (the ones sent before: see :data:`SENT_ONCE`); and how many
        items are named by key.

        (One loop, no call a state: CartPole B=512, 0.78 -> ~0.2 us a state of the caller's encoding.)
        """
        tid, oldest = self.id, self.next_key - self.cap
        refs: list[int] = []
        fresh: list[State] = []
        kept: list[int] = []
        fresh_at: dict[int, int] = {}
        by_key = 0
        for s in states:
            marks = s.held_by
            if marks is None:
                s.held_by = SENT_ONCE
                keep = False
            elif marks is SENT_ONCE:
                keep = True
            else:
                m = marks.get(tid)
                if m is not None and m[0] >= oldest and m[1] is s.extra and m[2] is s.rng and m[3] is s.wrappers:
                    refs.append(m[0])
                    by_key += 1
                    continue
                keep = True
            j = fresh_at.get(id(s))
            if j is None:
                j = fresh_at[id(s)] = len(fresh)
                fresh.append(s)
                if keep:
                    kept.append(j)
            refs.append(~j)
        return refs, fresh, kept, by_key

    def confirm(self, sent: list[tuple]) -> None:
        """The worker answered the chunk that brought these ``(state, key, extra, rng, wrappers)``: it holds them."""
        tid = self.id
        for s, *mark in sent:
            if type(s.held_by) is not dict:
                s.held_by = {}
            s.held_by[tid] = tuple(mark)


def pack_held(states: Sequence[State], w: ArrayWriter, prefix: str, table: Table | None,
              sim_bytes: int) -> tuple[dict[str, Any], Sequence[State], list[tuple]]:
    """:func:`~plan_parallel.wire.columns.pack_states` of the states ``table``'s worker does not hold, and the
    keys of those it holds; those states (sent whole: the ones to check); and the ``(state, key, extra, rng,
    wrappers)`` it is asked to keep under new keys.

    ``sim_bytes``: a state's simulator bytes (the table's size, on its first chunk). Without a table: as
    ``pack_states``, keeping nothing.
    """
    if table is None:
        return pack_states(states, w, prefix, with_obs=False), states, []
    if not table.cap:
        table.cap = max(MIN_CAP, min(MAX_CAP, TABLE_BYTES // (sim_bytes + 1024)))
    refs, fresh, kept, by_key = table.refs(states)
    table.by_key += by_key
    rest = pack_states(fresh, w, prefix, with_obs=False, unique=True)
    if not kept and not by_key:
        # every state sent whole and none to keep (the first time each is sent): as pack_states sends them
        if len(fresh) < len(refs):
            rest["index"] = [~r for r in refs]
        return rest, fresh, []
    first = table.next_key
    table.next_key += len(kept)
    rest["refs"] = refs
    rest["held"] = (table.id, first, table.cap)
    rest["keep"] = kept
    return rest, fresh, [(s, first + i, s.extra, s.rng, s.wrappers) for i, s in enumerate(fresh[j] for j in kept)]


class HeldStates:
    """A worker's table: the states its chunks brought, by key (the ``cap`` latest keys of one table)."""

    def __init__(self) -> None:
        self.table = 0
        self.states: dict[int, State] = {}  # in key order: keys are given out in order, chunks come in order

    def resolve(self, rest: dict[str, Any], fresh: list[State]) -> list[State] | None:
        """The states of a chunk packed by :func:`pack_held`, item by item: held ones by key, the others from
        ``fresh`` (the packed ones); None when it refers to a state this worker does not hold."""
        table = rest["held"][0]
        if table != self.table:
            self.table, self.states = table, {}
        held = self.states
        out: list[State] = []
        for r in rest["refs"]:
            s = held.get(r) if r >= 0 else fresh[~r]
            if s is None:
                return None
            out.append(s)
        return out

    def keep(self, rest: dict[str, Any], fresh: list[State]) -> None:
        """Hold ``fresh`` (checked already: the chunk's ``rest["keep"]``) under the keys the chunk gave them;
        forget keys beyond the cap."""
        _, first, cap = rest["held"]
        held = self.states
        for j, s in enumerate(fresh):
            held[first + j] = s
        oldest = first + len(fresh) - cap
        for key in list(itertools.takewhile(lambda k: k < oldest, held)):
            del held[key]


def unpack_held(rest: dict[str, Any], cols: dict, prefix: str, n: int,
                table: HeldStates) -> tuple[list[State] | None, list[State]]:
    """The ``n`` states of a chunk (:func:`pack_held`), and those it brought whole (``rest["keep"]`` says which
    to keep once checked); None for the states when the chunk refers to one ``table`` does not hold."""
    if "held" not in rest:
        return unpack_states(rest, cols, prefix, n), []
    fresh = unpack_states(rest, cols, prefix, len(rest["extra"]))
    states = table.resolve(rest, fresh)
    return (None, []) if states is None else (states, fresh)
