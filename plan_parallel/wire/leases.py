"""Result arrays lent out of shared memory: written once by a worker, handed to the caller without a copy.

A batch's observations are its largest result (100 KB per Pong item; the lane lends its results' state columns
too when they are as large: an ALE state is 7.7 KB). Copying
them out of a worker's slab cost the calling process more CPU than the rest of
the batch's handling together, and the caller's CPU is what a small machine's
workers run short of. So a batch of large observations gets a :class:`Lease`:
one slab of its own, into which every worker writes its chunk's rows at their
place in the batch, and whose memory *is* the batch's ``observations`` array
(and each result state's ``obs`` row).

Workers without shared memory (Ray's actors) send their rows in the message; they are
copied into the lease on arrival all the same. A reused lease is memory already
touched: a new array as large (51 MB for 512 Pong rows) costs its first write a
page fault per page, ~17 ms of the caller's CPU a call there.

A leased slab goes back to its :class:`LeasePool` for another batch only when
both hold:

* no array viewing it is alive: numpy's arrays keep the object that exports
  their memory alive, and a finalizer on that object (one per lease) says when
  the last of them is gone, whatever views, slices or copies of references the
  caller made;
* no worker may still write into it: every chunk told to write there was
  answered, or its worker killed (then the slab is never reused, only freed).

Either can happen last and in any thread (the finalizer runs where the last
array is freed); the slab is handed back once.
"""
from __future__ import annotations

import ctypes
import math
import weakref
from collections import deque
from typing import Any

import numpy as np

from plan_parallel.interrupts import ctrl_c_deferred
from plan_parallel.wire.slabs import Slab

__all__ = ["LEND_MIN_BYTES", "Lease", "LeasePool", "row_layout"]

# Smaller observations are copied: a lease costs ~20 us a batch, the copy of 128 KB written by
# another core about as much.
LEND_MIN_BYTES = 128 * 1024
PAGE = 4096
MAX_FREE = 4  # free slabs kept for the next batches; more are unmapped


class Lease:
    """One slab lent to one batch's results. See the module docstring for when it returns."""

    def __init__(self, pool: LeasePool, slab: Slab) -> None:
        self.slab = slab
        self.writers = 0  # chunks sent with an order to write here and not yet answered (or killed)
        self.viewed = False
        self.tainted = False  # a worker writing here was killed: the slab is freed, never reused
        self._pool = pool
        self._token = [slab]  # popped by whoever returns the slab: once, even when two threads race

    def array(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The start of the slab as a writable ``shape`` array; the slab stays lent while any view of it lives."""
        return self.view(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)

    def view(self, nbytes: int) -> np.ndarray:
        """The slab's first ``nbytes`` as a writable uint8 array, once a lease (the arrays a batch's results take of
        it are views of this one); the slab stays lent while any view of it lives."""
        assert self.slab.mapping is not None, "a lent slab is open"
        assert not self.viewed, "a lease is viewed once"
        exporter = (ctypes.c_char * nbytes).from_buffer(self.slab.mapping)  # numpy keeps it alive with every view
        self.viewed = True
        weakref.finalize(exporter, self._unviewed)
        return np.frombuffer(exporter, dtype=np.uint8)  # type: ignore[call-overload]

    def add_writer(self) -> None:
        self.writers += 1

    def writer_done(self, killed: bool) -> None:
        """A chunk that was to write here was answered (or its worker killed: ``killed``)."""
        self.tainted = self.tainted or killed
        self.writers -= 1
        self._maybe_return()

    def abandon(self) -> None:
        """The call that lent it ended with writers unanswered, whose workers are killed before anything else is
        sent: the slab is freed once unviewed, never lent again."""
        self.tainted = True
        self.writers = 0
        self._maybe_return()

    def _unviewed(self) -> None:
        self.viewed = False
        self._maybe_return()

    def _maybe_return(self) -> None:
        # Each side sets its own flag before reading the other's, so the last one sees both clear.
        if not self.viewed and self.writers == 0:
            try:
                slab = self._token.pop()
            except IndexError:
                return  # returned already
            self._pool.returned.append((slab, self.tainted))


class LeasePool:
    """The parent's slabs for lent results: reused once returned, created to size otherwise."""

    def __init__(self) -> None:
        self.returned: deque[tuple[Slab, bool]] = deque()  # appended from finalizers, in any thread
        self._free: list[Slab] = []
        self._all: list[Slab] = []

    def lease(self, nbytes: int) -> Lease:
        """A slab of at least ``nbytes`` (reused when one of at most twice that size is free)."""
        self._take_returned()
        for i, slab in enumerate(self._free):
            if nbytes <= slab.size <= 2 * nbytes:
                return Lease(self, self._free.pop(i))
        with ctrl_c_deferred():  # a segment created is a segment tracked, or it outlives the env
            slab = Slab.create(-(-nbytes // PAGE) * PAGE)
            self._all.append(slab)
        return Lease(self, slab)

    def _take_returned(self) -> None:
        while self.returned:
            slab, tainted = self.returned.popleft()
            if slab not in self._all:
                continue  # the pool was closed since
            if tainted:
                self._forget(slab)
            else:
                self._free.append(slab)
        while len(self._free) > MAX_FREE:
            self._forget(self._free.pop(0))

    def _forget(self, slab: Slab) -> None:
        slab.close()
        self._all.remove(slab)

    @property
    def slabs(self) -> list[Slab]:
        """Every slab this pool created and has not freed (lent or free)."""
        return list(self._all)

    def close(self) -> None:
        """Unlink every slab; those still lent stay mapped until their arrays are freed."""
        for slab in self._all:
            slab.close()
        self._all.clear()
        self._free.clear()

    def __repr__(self) -> str:
        return f"LeasePool({len(self._all)} slabs, {len(self._free)} free)"


def row_layout(space: Any, n: int) -> tuple[np.dtype, tuple[int, ...]] | None:
    """The dtype and ``(n, ...)`` shape of ``n`` observations of ``space`` worth lending, or None."""
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if not isinstance(shape, tuple) or dtype is None:
        return None
    dt = np.dtype(dtype)
    if dt.hasobject or math.prod(shape) * dt.itemsize * n < LEND_MIN_BYTES:
        return None
    return dt, (n, *shape)
