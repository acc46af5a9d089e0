"""Actions are checked as Python values in small batches and with numpy in large ones: both answer alike."""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from plan_parallel.action_inputs import check_action, check_action_sequences, check_actions

BOXES = {
    "bounded": spaces.Box(-1.0, 2.0, (3,), dtype=np.float32),
    "unbounded": spaces.Box(-np.inf, np.inf, (3,), dtype=np.float64),
    "matrix": spaces.Box(np.zeros((2, 2), dtype=np.float32), np.ones((2, 2), dtype=np.float32)),
    "per dimension": spaces.Box(np.array([-1.0, 0.0, 5.0]), np.array([1.0, 2.0, 6.0])),  # each column its own bounds
}
BAD = [np.nan, np.inf, -np.inf, 2.5, -1.5]


def _batch(box: spaces.Box, n: int, dtype: type = np.float64) -> np.ndarray:
    """``n`` actions inside ``box``, its bounds included."""
    rng = np.random.default_rng(n)
    out = rng.uniform(np.maximum(box.low, -5.0), np.minimum(box.high, 5.0), size=(n, *box.shape)).astype(dtype)
    out[0] = np.maximum(box.low, -1e30)  # the bounds are inside
    out[-1] = np.minimum(box.high, 1e30)
    return out


@pytest.mark.parametrize("name", list(BOXES))
@pytest.mark.parametrize("n", [1, 4, 2000])  # 2000 actions take numpy's path, the others Python's
def test_good_actions_come_back_as_given(name: str, n: int) -> None:
    box = BOXES[name]
    for dtype in (np.float32, np.float64):
        acts = _batch(box, n, dtype)
        assert check_actions(box, acts, n) is acts  # float32/float64 kept as given


@pytest.mark.parametrize("name, bad", [(name, bad) for name, box in BOXES.items() for bad in BAD
                                       if not (np.isfinite(bad) and np.isinf(box.high).all())])
def test_a_bad_value_is_named_alike_in_small_and_large_batches(name: str, bad: float) -> None:
    box = BOXES[name]
    messages = []
    for n in (4, 2000):
        acts = _batch(box, n)
        acts.reshape(n, -1)[2] = 0.0  # the same row in both batches: the same message
        acts.reshape(n, -1)[2, -1] = bad
        with pytest.raises(ValueError, match=r"actions\[2\] = .* is outside") as err:
            check_actions(box, acts, n)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_huge_values_whose_sum_is_no_float_are_still_inside() -> None:
    """The Python check sums the values first (a NaN or an infinity makes the sum one); a sum that only
    overflows is checked again value by value."""
    box = BOXES["unbounded"]
    acts = np.full((4, 3), 1e308)
    assert check_actions(box, acts, 4) is acts


def test_sequences_and_single_actions_take_the_same_check() -> None:
    box = BOXES["bounded"]
    seqs = np.zeros((3, 5, 3))
    assert check_action_sequences(box, seqs, 3, 5)[1] == 5
    seqs[1, 4, 0] = np.nan
    with pytest.raises(ValueError, match=r"actions\[1, 4\] = \[nan, 0\.0, 0\.0\] is outside"):
        check_action_sequences(box, seqs, 3, 5)
    assert check_action(box, np.array([2.0, -1.0, 0.0], dtype=np.float32)).shape == (3,)
    with pytest.raises(ValueError, match="is outside"):
        check_action(box, np.array([2.0001, 0.0, 0.0]))


def test_integer_actions_are_cast_to_the_space_dtype() -> None:
    out = check_actions(BOXES["bounded"], np.array([[1, 0, -1]]), 1)
    assert out.dtype == np.float32 and out.tolist() == [[1.0, 0.0, -1.0]]
    with pytest.raises(ValueError, match="is outside"):
        check_actions(BOXES["bounded"], np.array([[3, 0, 0]]), 1)


@pytest.mark.parametrize("bad", [-1, 5])
def test_discrete_actions_are_checked_alike_as_a_list_and_with_numpy(bad: int) -> None:
    """Discrete actions are a Python list's min and max up to 65,536 values, numpy's comparisons above."""
    space = spaces.Discrete(5)
    messages = []
    for n in (8, 70_000):
        acts = np.arange(n) % 5
        assert check_actions(space, acts, n).tolist() == acts.tolist()
        acts[3] = bad
        with pytest.raises(ValueError, match=rf"actions\[3\] = {bad} is outside Discrete\(5\)") as err:
            check_actions(space, acts, n)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
