"""States given back to the lane from the columns they were read from (``State.source_row``).

A state read from a lane result's columns is copied back into a call's input rows from those columns,
without reading its fields (:func:`plan_parallel.batch.lane_columns.write_row_states`). These rows hold that
such lists — a subset of one result, states from several results, more results than are copied that way,
mixed with states made elsewhere, or with a field replaced since — step exactly as inline, in the lane.
"""
from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch.lane_columns import MAX_SOURCES
from tests.helpers import assert_batches_equal
from tests.test_lane import on_workers

B = 16


def results(env: Any, ref: Any, calls: int) -> tuple[list[Any], list[Any]]:
    """The states of ``calls`` successive calls of ``env`` and of the same calls inline (``ref``): the first seeded
    (the general path: the lane takes no seeds), the others lane calls."""
    rng = np.random.default_rng(1)
    got, want = [env.reset(seed=0)[0]] * B, [ref.reset(seed=0)[0]] * B
    got_all, want_all = [], []
    for k in range(calls):
        acts = rng.integers(0, 2, B)
        seeds = np.arange(B) if k == 0 else None
        got, want = env.step_batch(acts, got, seeds=seeds).states, ref.step_batch(acts, want, seeds=seeds).states
        got_all.append(got)
        want_all.append(want)
    return got_all, want_all


def pick(batches: list[Any], rng: np.random.Generator) -> list[tuple[int, int]]:
    return [(int(rng.integers(len(batches))), int(rng.integers(B))) for _ in range(B)]


def edit_extra(s: Any, other: Any) -> None:
    s.extra = 3


def edit_rng(s: Any, other: Any) -> None:
    s.rng = other.rng


def edit_wrappers(s: Any, other: Any) -> None:
    s.wrappers = (499,)  # the TimeLimit's counter: this item's step truncates


def edit_sim(s: Any, other: Any) -> None:
    s.sim = other.sim


EDITS: dict[str, Callable[[Any, Any], None] | None] = {
    "unchanged": None, "extra": edit_extra, "rng": edit_rng, "wrappers": edit_wrappers, "sim": edit_sim}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("sources", [1, 3, MAX_SOURCES + 2, "foreign"])
def test_states_read_from_lane_results_step_as_inline(sources: Any, edit: str) -> None:
    rng = np.random.default_rng(7)
    with pp.make("CartPole-v1", execution=on_workers(2)) as env, pp.make("CartPole-v1", backend="inline") as ref:
        n = sources if isinstance(sources, int) else 2
        got_all, want_all = results(env, ref, n + 1)
        # (the first call ran on the general path: its states are made otherwise)
        first, first_want = got_all.pop(0), want_all.pop(0)
        assert first.columns is None and all(b.columns is not None for b in got_all), "the lane made these results"
        where = pick(got_all, rng)
        got = [got_all[i][k] for i, k in where]
        want = [want_all[i][k] for i, k in where]
        if sources == "foreign":  # states the workers made on the general path, in the middle of the list
            got[B // 2:B // 2 + 3], want[B // 2:B // 2 + 3] = first[:3], first_want[:3]
        assert sum(s.source_row is not None for s in got) >= B - 3
        fn = EDITS[edit]
        if fn is not None:
            other = ref.reset(seed=5)[0]
            for s in (got[1], want[1]):
                fn(s, other)
            assert got[1].source_row is None or edit != "sim", "a new simulator value drops its row"
        acts = rng.integers(0, 2, B)
        lane_before = env.stats["lane_batches"]
        out, expected = env.step_batch(acts, got), ref.step_batch(acts, want)
        # (a state given a new simulator value is checked again: on the general path)
        assert env.stats["lane_batches"] == lane_before + (edit != "sim"), "the call ran in the lane"
        assert_batches_equal(out, expected)
        for a, b in zip(out.states, expected.states):
            assert a.diff(b) == [] and a.rng == b.rng and a.extra == b.extra and a.wrappers == b.wrappers


@pytest.mark.timeout(120)
def test_a_state_notes_its_row_only_as_read_from_the_columns() -> None:
    with pp.make("CartPole-v1", execution=on_workers(2)) as env, pp.make("CartPole-v1", backend="inline") as ref:
        got_all, want_all = results(env, ref, 2)
        s = got_all[1][4]
        columns, row = s.source_row[:2]
        assert columns is got_all[1].columns and row == 4
        assert want_all[1][4].source_row is None, "made inline: no row"
        assert pickle.loads(pickle.dumps(s)).source_row is None
        assert copy.copy(s).source_row is None and copy.deepcopy(s).source_row is None
        assert copy.copy(s) == s
