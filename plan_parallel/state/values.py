"""Value semantics of state parts: bitwise equality and a canonical digest that agrees with it."""
from __future__ import annotations

import hashlib
import pickle
from typing import Any

import numpy as np

from plan_parallel.errors import StateError

__all__ = ["Pickled", "value_digest", "values_equal"]


def values_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of plain data: arrays by dtype, shape and bytes; containers recursively."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.hasobject:
            return all(values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(
            values_equal(x, y) for x, y in zip(a, b)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex() if a == a or b == b else True  # NaN equals NaN here
    try:
        return bool(a == b)
    except Exception as exc:
        raise StateError(f"cannot compare state values of type {type(a).__name__}: {exc}") from exc


class Pickled:
    """Pickled bytes of a dict of attributes, compared by content rather than by bytes.

    Two pickles of equal objects can differ in bytes: pickle records which
    objects are shared, and an env built by its constructor shares differently
    from one rebuilt by ``pickle.loads``. Equality therefore falls back to
    comparing every attribute's own pickle.
    """

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pickled):
            return NotImplemented
        if self.data == other.data:
            return True
        a, b = pickle.loads(self.data), pickle.loads(other.data)
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return False
        return all(pickle.dumps(a[k], 4) == pickle.dumps(b[k], 4) for k in a)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple:
        return (Pickled, (self.data,))

    def __len__(self) -> int:
        return len(self.data)


def value_digest(value: Any) -> bytes:
    """A 16-byte BLAKE2b digest of ``value`` such that ``values_equal(a, b)`` implies equal digests.

    Arrays by dtype, shape and bytes; tuples and lists by type and items; dicts by
    their items in key order; numbers by value (``1``, ``1.0`` and ``np.int64(1)``
    alike, as ``==`` has them); objects that carry a digest (``key``) by it;
    :class:`Pickled` attribute by attribute; anything else by its pickle.
    """
    h = hashlib.blake2b(digest_size=16)
    _feed(h, value)
    return h.digest()


def _feed(h: Any, v: Any) -> None:
    if isinstance(v, np.ndarray):
        h.update(f"a{v.dtype.str}{v.shape}".encode())
        if v.dtype.hasobject:
            for x in v.ravel():
                _feed(h, x)
        else:
            h.update(np.ascontiguousarray(v).tobytes())
    elif isinstance(v, (tuple, list)):
        h.update(f"{type(v).__name__}{len(v)}(".encode())
        for x in v:
            _feed(h, x)
        h.update(b")")
    elif isinstance(v, dict):
        h.update(f"d{len(v)}(".encode())
        for k in sorted(v, key=repr):
            _feed(h, k)
            _feed(h, v[k])
        h.update(b")")
    elif isinstance(v, (bool, int, float, np.number, np.bool_)):
        x = v.item() if isinstance(v, (np.number, np.bool_)) else v
        if isinstance(x, float) and x == x and x not in (float("inf"), float("-inf")) and not x.is_integer():
            h.update(f"f{x.hex()};".encode())
        elif isinstance(x, float) and x != x:
            h.update(b"nan;")
        else:  # an integer value: 1, 1.0 and True are equal under ==
            h.update(f"n{int(x) if x == x and abs(x) != float('inf') else x};".encode())
    elif isinstance(v, (str, bytes)) or v is None:
        h.update(f"{type(v).__name__}{len(v) if v is not None else 0}:".encode())
        h.update(v.encode() if isinstance(v, str) else (v or b""))
    elif isinstance(getattr(v, "key", None), bytes):
        h.update(b"k")
        h.update(v.key)
    elif isinstance(v, Pickled):
        _feed(h, {k: pickle.dumps(x, 4) for k, x in pickle.loads(v.data).items()})
    elif hasattr(v, "serialize"):  # ale_py.ALEState and its kind: equal when their bytes are
        h.update(b"s")
        h.update(bytes(v.serialize()))
    else:
        h.update(b"p")
        h.update(pickle.dumps(v, 4))
