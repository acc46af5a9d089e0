"""merge_rows: sub-envs' infos merged in one pass equal gymnasium's VectorEnv._add_info merging them row by row."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.vector import VectorEnv

from plan_parallel.vector.infos import merge_rows


def _gymnasium_merge(rows: list[dict]) -> dict:
    ref = VectorEnv()
    ref.num_envs = len(rows)
    infos: dict = {}
    for i, info in enumerate(rows):
        if info:
            infos = ref._add_info(infos, info, i)
    return infos


def _assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    if isinstance(want, dict):
        assert list(got) == list(want)  # the same keys, in the same order
        for k in want:
            _assert_same(got[k], want[k])
    else:
        assert got.dtype == want.dtype and got.shape == want.shape
        for a, b in zip(got.tolist(), want.tolist()):  # element by element: each value's type too
            assert type(a) is type(b)
            assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b


ROWS = {
    "ints (ALE)": [{"lives": 3 - i % 2, "frame_number": 10 * i} for i in range(8)],
    "numpy floats (MuJoCo)": [{"x_position": np.float64(i / 3), "reward_ctrl": np.float64(-i)} for i in range(4)],
    "bools and float32": [{"ok": bool(i % 2), "v": np.float32(i)} for i in range(3)],
    "one row": [{"a": 1}],
    "empty rows": [{}, {}],
    "an empty row among others": [{"a": 1}, {}, {"a": 2}],
    "a row of None among others": [{"a": 1}, None, {"a": 2}],
    "a key missing": [{"a": 1, "b": 2.0}, {"a": 2}],
    "keys in another order": [{"a": 1, "b": 2}, {"b": 3, "a": 4}],
    "types mixed in a key": [{"a": 1}, {"a": 2.5}, {"a": np.int64(3)}],
    "arrays": [{"a": np.arange(3) + i} for i in range(2)],
    "objects": [{"a": "text"}, {"a": (1, 2)}],
    "nested dicts": [{"episode": {"r": 1.0, "l": 3}}, {"episode": {"r": 2.0, "l": 4}}],
    "a key and its mask's name": [{"a": 1, "_a": 2.5}, {"a": 3, "_a": 0.5}],
    "final_obs": [{"final_obs": np.zeros(2), "final_info": {}}, {"final_obs": np.ones(2), "final_info": {}}],
}


@pytest.mark.parametrize("case", list(ROWS))
def test_merge_rows_equals_gymnasiums_add_info(case: str) -> None:
    rows = ROWS[case]
    ref = VectorEnv()
    ref.num_envs = len(rows)
    _assert_same(merge_rows(rows, ref._add_info), _gymnasium_merge(rows))
