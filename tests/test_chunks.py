"""The batch codec's pure parts: how a batch is split into chunks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plan_parallel.wire.codec import split_by_cost

DTS = st.one_of(st.integers(1, 8), st.lists(st.integers(1, 50), min_size=0, max_size=60))


def split_checked(dt: object, w: int, funnel: bool) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The items' costs and ``split_by_cost``'s chunks, checked to cover the batch in order, none empty."""
    n = 37 if isinstance(dt, int) else len(dt)  # type: ignore[arg-type]
    costs = np.full(n, dt) if isinstance(dt, int) else np.array(dt, dtype=np.int64)
    chunks = split_by_cost(dt if isinstance(dt, int) else costs, n, w, funnel=funnel)
    assert len(chunks) == min(n, w)
    if chunks:
        assert [lo for lo, _ in chunks] == [0] + [hi for _, hi in chunks[:-1]]  # contiguous, in order
        assert all(hi > lo for lo, hi in chunks)
        assert chunks[-1][1] == n
    return costs, chunks


@pytest.mark.timeout(60)
@given(dt=DTS, w=st.integers(1, 9))
def test_split_by_cost_covers_the_batch_in_order_with_non_empty_balanced_chunks(dt: object, w: int) -> None:
    costs, chunks = split_checked(dt, w, funnel=False)
    if chunks:
        # Balanced: no chunk costs more than a fair share plus one item's cost.
        fair = costs.sum() / len(chunks)
        assert max(costs[lo:hi].sum() for lo, hi in chunks) <= fair + costs.max()
    if isinstance(dt, int) and chunks:
        # Items of one cost: sizes differ by one at most, the larger first (taken first by the workers).
        sizes = [hi - lo for lo, hi in chunks]
        assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1, sizes


@pytest.mark.timeout(60)
@given(dt=DTS, w=st.integers(1, 9))
def test_a_shared_batchs_funnel_split_covers_it_with_chunk_costs_halving_towards_the_middle(dt: object, w: int) -> None:
    costs, chunks = split_checked(dt, w, funnel=True)
    k = len(chunks)
    if chunks:
        # Each boundary falls within an item's cost of where the shares put it (halving from either end
        # towards the middle), unless a chunk beside it was kept to one item so that none is empty.
        shares = np.array([0.5 ** min(j, k - 1 - j) for j in range(k)])
        targets = costs.sum() * np.cumsum(shares)[:-1] / shares.sum()
        cum = np.concatenate([[0], np.cumsum(costs)])
        for j, (lo, hi) in enumerate(chunks[:-1]):
            kept_non_empty = hi - lo == 1 or chunks[j + 1][1] - chunks[j + 1][0] == 1
            assert abs(cum[hi] - targets[j]) <= costs.max() or kept_non_empty
