"""Copying a MuJoCo state out of and into an ``MjData``: one numpy gather and one scatter where they are exact.

A MuJoCo state here is ``mj_getState(spec)`` followed by ``xpos`` and ``xipos``
(see :class:`~plan_parallel.state.families.MujocoAdapter`). Through the bindings
that is three calls each way: HalfCheetah, 2.4 us to get (``mj_getState`` and a
concatenate) and 2.1 us to set, against a 70 us step. ``mj_getState`` and
``mj_setState`` only copy each component between the state vector and its
``MjData`` array (``eq_active`` converted from bytes), and every array of
``MjData`` but ``time`` lies in one block of memory, its buffer. So when the
model's state has no ``eq_active`` entries and every component is a known
float64 array of that block, a float64 view over the block and the position of
each state entry in it make a capture one gather (0.65 us) and a restore one
scatter (0.94 us), ``time`` read and set on its own.

The positions come from the arrays' own addresses, and are checked once per
``MjData`` against ``mj_getState`` / ``mj_setState`` with distinct values in
every entry; anything unexpected (a component this table does not name, a newer
MuJoCo's layout) keeps the two calls.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["gather_map", "state_copiers"]

# The MjData array of each mjtState component (mjSTATE_TIME is a field of the struct, not in the buffer).
_ARRAYS = {
    "mjSTATE_QPOS": "qpos", "mjSTATE_QVEL": "qvel", "mjSTATE_ACT": "act", "mjSTATE_HISTORY": "history",
    "mjSTATE_WARMSTART": "qacc_warmstart", "mjSTATE_CTRL": "ctrl", "mjSTATE_QFRC_APPLIED": "qfrc_applied",
    "mjSTATE_XFRC_APPLIED": "xfrc_applied", "mjSTATE_MOCAP_POS": "mocap_pos", "mjSTATE_MOCAP_QUAT": "mocap_quat",
    "mjSTATE_USERDATA": "userdata", "mjSTATE_PLUGIN": "plugin_state", "mjSTATE_PLASTIC": "plastic",
}

Copiers = tuple[Callable[[], np.ndarray], Callable[[np.ndarray], None]]


def state_copiers(mujoco: Any, m: Any, d: Any, spec: int) -> Copiers:
    """``(get, put)`` for ``d``: ``get()`` returns a new float64 array, ``mj_getState(spec)`` then ``xpos`` and
    ``xipos`` flattened; ``put(state)`` sets what ``get`` returned. One gather / scatter when :func:`gather_map`
    finds the positions, else ``mj_getState`` / ``mj_setState`` and two copies."""
    found = gather_map(mujoco, m, d, spec)
    if found is not None:
        return _gathering(d, *found)
    return _calling(mujoco, m, d, spec)


def _calling(mujoco: Any, m: Any, d: Any, spec: int) -> Copiers:
    n = int(mujoco.mj_stateSize(m, spec))
    nx = d.xpos.size
    head = np.empty(n)  # mj_getState writes here; get concatenates it with xpos, xipos
    xpos, xipos = d.xpos.ravel(), d.xipos.ravel()  # views of d's memory (C-contiguous)
    get_state, set_state = mujoco.mj_getState, mujoco.mj_setState

    def get() -> np.ndarray:
        get_state(m, d, head, spec)
        return np.concatenate((head, xpos, xipos))

    def put(state: np.ndarray) -> None:
        set_state(m, d, state[:n], spec)
        xpos[:] = state[n : n + nx]
        xipos[:] = state[n + nx :]

    return get, put


def _gathering(d: Any, block: np.ndarray, index: np.ndarray) -> Copiers:
    """Copiers over ``block``, a float64 view of ``d``'s buffer: entry j of a state (j >= 1) is ``block[index[j]]``,
    entry 0 is ``d.time`` (``index[0]`` is any valid position, overwritten)."""
    rest = index[1:]

    def get() -> np.ndarray:
        state = block[index]
        state[0] = d.time
        return state

    def put(state: np.ndarray) -> None:
        d.time = state[0]
        block[rest] = state[1:]

    return get, put


def gather_map(mujoco: Any, m: Any, d: Any, spec: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(block, index)`` for :func:`_gathering`, checked against ``mj_getState`` / ``mj_setState``; or None."""
    arrays = []
    for name, bit in sorted(mujoco.mjtState.__members__.items(), key=lambda kv: int(kv[1])):
        bit = int(bit)
        if bit & (bit - 1) or not bit & spec or name == "mjSTATE_TIME" or not mujoco.mj_stateSize(m, bit):
            continue  # a combination, not asked for, time (apart), or empty in this model
        array = getattr(d, _ARRAYS.get(name, ""), None)
        if array is None:
            return None  # eq_active (bytes) or a component unknown here
        arrays.append(array)
    arrays += [d.xpos, d.xipos]
    if any(a.dtype != np.float64 or not a.flags.c_contiguous for a in arrays):
        return None
    starts = [a.__array_interface__["data"][0] for a in arrays]
    lo = min(starts)
    hi = max(s + a.nbytes for s, a in zip(starts, arrays))
    if hi - lo > getattr(d, "nbuffer", 0) or any((s - lo) % 8 for s in starts):
        return None  # not one block of the buffer
    block = np.ctypeslib.as_array((ctypes.c_double * ((hi - lo) // 8)).from_address(lo))
    index = np.concatenate([[0]] + [np.arange(a.size) + (s - lo) // 8 for s, a in zip(starts, arrays)]).astype(np.intp)
    return (block, index) if _agrees(mujoco, m, d, spec, block, index) else None


def _agrees(mujoco: Any, m: Any, d: Any, spec: int, block: np.ndarray, index: np.ndarray) -> bool:
    """Whether a gather over ``index`` reads what ``mj_getState`` does and a scatter writes what ``mj_setState``
    does, tried with distinct values in every entry; ``d`` is left as it was."""
    n = int(mujoco.mj_stateSize(m, spec))
    saved = np.empty(n)
    mujoco.mj_getState(m, d, saved, spec)
    get, put = _gathering(d, block, index)
    try:
        probe = np.arange(1.0, n + 1.0) + 0.25
        mujoco.mj_setState(m, d, probe, spec)
        if not np.array_equal(get()[:n], probe):
            return False
        put(np.concatenate((-probe, get()[n:])))
        back = np.empty(n)
        mujoco.mj_getState(m, d, back, spec)
        return bool(np.array_equal(back, -probe))
    finally:
        mujoco.mj_setState(m, d, saved, spec)
