"""StateBatch: the N states of a batch's result, each made when it is first asked for.

A batch that ran on the workers comes back as columns (simulator arrays or
bytes, RNG dicts, wrapper entries: see :mod:`plan_parallel.wire.columns`). A
planner often reads only a few of its states (the best of a beam, the first
step of each shooting sequence), and a caller that builds N :class:`State`
objects it never reads spends ~1-5 us an item on it (CartPole B=512 on 2
workers: 6.47 us an item of the calling process's CPU when it did, 4.92 now). A
:class:`StateBatch` is a ``Sequence[State]`` that keeps those columns and makes
item i's state on the first ``batch[i]``, the same object every time after.
A state made this way equals, field for field, the one made at once.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

from plan_parallel.state.state_value import State

__all__ = ["StateBatch", "StateColumns"]

Part = tuple[int, int, "Sequence[State] | Callable[[int], State]"]


class StateColumns(NamedTuple):
    """The fields of a batch's N states as columns, when every state has a fixed row (the lane's:
    :mod:`plan_parallel.wire.lane`), so that a call given the batch back reads them without making a state.

    ``fields``: N rows a column, by the lane's name of it (``"sim"``: N x k float64, ``"extra"``: N int64, the
    lane's encoding of ``extra``, ``"wrappers"``: N x m int64; and, for the layouts that have them, ``"blob"``,
    ``"extra_f"``, ``"rng"``, ``"scalars"``), read-only; ``rngs``: the N RNG values (None for a layout whose rows
    hold them), all of one ``kind``; ``token``: the check they pass
    (:func:`~plan_parallel.state.state_value.validate_each`); ``scalars``: the form of their tuples of scalars
    (:func:`~plan_parallel.wire.lane.scalar_format`; empty for other layouts); ``place``: where the rows lie when
    the columns are a slab lent to the lane call that made them (:class:`~plan_parallel.wire.lane.StatePlace`: a
    later call of the same workers has them read there, not copied), else None.
    """

    kind: str
    fields: dict[str, np.ndarray]
    rngs: list | None
    token: Any
    scalars: str = ""
    place: Any = None


class StateBatch(Sequence[State]):
    """N states in input order, from parts: states made already, or a function that makes the k-th of its part.

    Args:
        n: the number of states.
        parts: ``(lo, hi, source)`` covering ``0..n`` in order; ``source`` is a
            sequence of the part's states or ``make(k)``, the state of item ``lo + k``.
        observations: the batch's observations (an array of N rows): a state made
            here gets its row as its ``obs``. None: ``make`` gives the observation.
        columns: the states' fields as columns (:class:`StateColumns`), when the parts' states are made of them.

    It compares equal to any sequence of equal states in the same order (a list
    included), pickles as its states, and is safe to read from several threads
    (two threads asking for one state at once may each make it: equal objects).
    """

    __slots__ = ("_made", "_n", "_observations", "_parts", "_starts", "_whole", "columns")

    def __init__(self, n: int, parts: Sequence[Part], observations: np.ndarray | None = None,
                 columns: StateColumns | None = None) -> None:
        #: The states' fields as columns (None: not known as columns).
        self.columns = columns
        self._n = n
        self._parts = list(parts)
        self._starts = [lo for lo, _, _ in self._parts]
        self._observations = observations
        self._made: list[State | None] = [None] * n
        self._whole = False  # every state made at construction

    @classmethod
    def of(cls, states: Sequence[State]) -> StateBatch:
        """A StateBatch of states made already."""
        batch = cls(len(states), [(0, len(states), states)])
        batch._made = list(states)
        batch._whole = True
        return batch

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> State: ...

    @overload
    def __getitem__(self, i: slice) -> list[State]: ...

    def __getitem__(self, i: int | slice) -> State | list[State]:
        if isinstance(i, slice):
            if self._whole:
                return self._made[i]  # type: ignore[return-value]  # no None left
            return [self[k] for k in range(*i.indices(self._n))]
        k = i.__index__()
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(f"StateBatch index {i} out of range for {self._n} states")
        state = self._made[k]
        if state is None:
            state = self._made[k] = self._make(k)
        return state

    def _make(self, i: int) -> State:
        lo, _, source = self._parts[bisect_right(self._starts, i) - 1]
        if not callable(source):
            return source[i - lo]
        state = source(i - lo)
        if self._observations is not None:
            state.obs = self._observations[i]
        return state

    def _make_all(self) -> list[State]:
        """Every state, those not made yet made now, part by part (an iteration reads them all: one pass, no
        lookup of the part an item is in)."""
        made, rows = self._made, self._observations
        for lo, hi, source in self._parts:
            if not callable(source):
                made[lo:hi] = source
                continue
            fresh = [k for k in range(lo, hi) if made[k] is None]
            for k in fresh:
                made[k] = source(k - lo)
            if rows is not None and len(fresh) == hi - lo:
                State.share_rows(made[lo:hi], rows[lo:hi])  # type: ignore[arg-type]
            elif rows is not None:
                for k in fresh:
                    made[k].obs = rows[k]  # type: ignore[union-attr]
        self._whole = True
        return made  # type: ignore[return-value]  # no None left

    def __iter__(self) -> Iterator[State]:
        if self._whole:  # every state made: the list's own iterator
            return iter(self._made)  # type: ignore[arg-type]  # no None left
        return iter(self._make_all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (StateBatch, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # compares by value, as a list does

    def __reduce__(self) -> tuple[Any, ...]:
        return (StateBatch.of, (list(self),))

    def __repr__(self) -> str:
        return f"StateBatch({list(self)!r})"
