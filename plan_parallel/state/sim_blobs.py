"""Simulator values that travel as bytes: a family's own serialization instead of pickle."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["SimBlobs", "register_sim_blobs", "sim_blobs"]


class SimBlobs(NamedTuple):
    """How a family's simulator values become bytes and back (for the trip to a worker)."""

    to_bytes: Callable[[Any], bytes]
    from_bytes: Callable[[bytes], Any]


_SIM_BLOBS: dict[str, SimBlobs] = {}


def register_sim_blobs(family: str, to_bytes: Callable[[Any], bytes], from_bytes: Callable[[bytes], Any]) -> None:
    """Let ``family``'s simulator values (``State.sim``) travel as bytes rather than be pickled.

    For simulator objects whose pickle costs more than their serialization
    (``ale_py.ALEState``): the bytes go through shared memory end to end.
    """
    _SIM_BLOBS[family] = SimBlobs(to_bytes, from_bytes)


def sim_blobs(kind: str) -> SimBlobs | None:
    """The bytes form registered for the family of states of ``kind``, if any."""
    return _SIM_BLOBS.get(kind.split(":", 1)[0])
