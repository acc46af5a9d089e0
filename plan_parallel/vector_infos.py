"""Infos of several sub-envs merged into one dict of arrays, as gymnasium's vector envs return them."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["add_info"]


def add_info(infos: dict[str, Any], info: dict[str, Any], index: int, n: int) -> dict[str, Any]:
    """Merge sub-env ``index``'s ``info`` into ``infos``, the merged infos of ``n`` rows; returns ``infos``.

    The layout of gymnasium's ``VectorEnv._add_info`` (for a row count other
    than the env's own: ``recv`` returns k of N sub-envs): each key holds an
    array of ``n`` values (numbers in an array of their type, arrays stacked,
    anything else in an object array; ``final_obs`` always an object array;
    dicts merged recursively) and ``_key`` a bool mask of the rows that have it.
    """
    for key, value in info.items():
        if key == "final_obs":
            column = infos.get(key)
            if column is None:
                column = np.full(n, None, dtype=object)
            column[index] = value
        elif isinstance(value, dict):
            column = add_info(infos.get(key, {}), value, index, n)
        else:
            column = infos.get(key)
            if column is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    column = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    column = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    column = np.full(n, None, dtype=object)
            column[index] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[index] = True
        infos[key], infos[f"_{key}"] = column, mask
    return infos
