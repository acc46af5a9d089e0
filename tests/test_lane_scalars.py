"""User states as the lane's rows: a ``get_state`` value that is a tuple of Python floats, ints and bools travels
packed in a row (``wire.lane.scalar_format``), its RNG as words beside it, and comes back as the same tuple.

A state of another form than the call's first (another tuple, a numpy scalar, an int beyond 64 bits) sends the
call pickled, and a result of another form than its input's runs the call again on the general path: every result
equals the inline backend's, item types included. Every call below that could wait has a deadline.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch.batch_env import batch_engine_of
from plan_parallel.wire.lane import MAX_SCALARS, pack_scalars, scalar_format, scalar_struct
from tests.envs import ShiftingStateEnv
from tests.helpers import assert_batches_equal

EDGES = (-0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308)


def test_a_tuple_of_scalars_packs_and_unpacks_as_it_was() -> None:
    sim = (*EDGES, math.nan, (1 << 63) - 1, -(1 << 63), 0, True, False)
    codes = scalar_format(sim)
    assert codes == "d" * 6 + "qqq??"
    packed = pack_scalars([sim, sim], codes)
    assert packed is not None and len(packed) == 2 * scalar_struct(codes).size
    back = list(scalar_struct(codes).iter_unpack(packed))
    for got in back:
        assert [type(v) for v in got] == [type(v) for v in sim]
        assert [math.copysign(1, v) if type(v) is float else v for v in got[:6] if not math.isnan(v)] == [
            math.copysign(1, v) if type(v) is float else v for v in sim[:6] if not math.isnan(v)]
        assert got[:5] == sim[:5] and math.isnan(got[5]) and got[6:] == sim[6:]


@pytest.mark.parametrize("sim", [(), (np.float64(1.0),), (np.int64(1),), [1.0, 2.0], (1.0, None), ((1.0,),),
                                 (1.0,) * (MAX_SCALARS + 1), np.zeros(2), (1.0, "a")], ids=repr)
def test_other_values_have_no_scalar_form(sim: Any) -> None:
    assert scalar_format(sim) is None


@pytest.mark.parametrize("sims", [[(1, 2.0), (1 << 64, 2.0)], [(1, 2.0), (1.0, 2.0)], [(1, 2.0), (1, 2.0, 3.0)],
                                  [(1, 2.0), (True, 2.0)]], ids=["beyond-64-bits", "int-then-float", "longer",
                                                                  "bool-for-int"])
def test_states_of_another_form_than_the_codes_do_not_pack(sims: list) -> None:
    assert pack_scalars(sims, "qd") is None


def states_at(env: Any, counts: list[int]) -> list[Any]:
    """States of ``env`` (reset with seed 0) after each of ``counts`` (>= 1) steps of action 1, one call a count
    (states the workers made: the lane takes them)."""
    s = env.reset(seed=0)[0]
    return [env.step_batch(np.ones(1, np.int64), [s], dt=c).states[0] for c in counts]


def assert_equal_states(got: Any, want: Any) -> None:
    for a, b in zip(got, want):
        assert a.diff(b) == [] and a.rng == b.rng
        assert [type(v) for v in a.sim] == [type(v) for v in b.sim], (a.sim, b.sim)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_workers", [1, 2])
def test_user_states_of_changing_forms_take_rows_pickles_or_the_general_path_and_equal_inline(n_workers: int) -> None:
    """ShiftingStateEnv's tuple is (int, int, float) but at every fourth count. Each call below is of one kind:
    rows kept; results of another form (the general path runs it again); a list mixing forms, or a first state
    that is no row (pickled); states read from results of two forms of one width (pickled: a row of one form is
    never read as the other)."""
    policy = pp.ExecutionPolicy(n_workers=n_workers, placement="workers", max_chunks_per_worker=1)
    with pp.make(ShiftingStateEnv, backend="inline", horizon=100) as ref, \
            pp.make(ShiftingStateEnv, execution=policy, horizon=100) as env:
        lane = batch_engine_of(env).placement.lane

        def call(counts: list[int], dt: int, given: Any = None) -> tuple[bool, bool | None, Any]:
            """Step the states at ``counts`` (or the ``given`` pair of state lists) by ``dt``; whether the lane
            answered, whether it was pickled, and the pair of results."""
            got_in, want_in = given or (states_at(env, counts), states_at(ref, counts))
            before = env.stats["lane_batches"]
            acts = np.arange(len(got_in)) % 3
            got, want = env.step_batch(acts, got_in, dt=dt), ref.step_batch(acts, want_in, dt=dt)
            assert_batches_equal(got, want)
            assert_equal_states(got.states, want.states)
            took = env.stats["lane_batches"] > before
            return took, (lane.layout.pickled if took else None), (got, want)

        assert call([1] * 6, 1)[:2] == (True, False)  # (c, t, n) in and out: rows
        assert lane.layout.scalars == "qqd"
        assert call([1] * 6, 2)[:2] == (False, None)  # count 3: a float total: run again on the general path
        assert call([1, 1, 3, 1], 1)[:2] == (True, True)  # a list of two forms: pickled
        assert call([7, 1, 1], 1)[:2] == (True, True)  # a numpy float first: pickled
        assert call([11] * 5, 4)[:2] == (False, None)  # a bool more, then beyond 64 bits: the general path
        took, pickled, (qdd, qdd_want) = call([3] * 5, 16)  # count 3 to 19: a float total in and out: rows
        assert (took, pickled, lane.layout.scalars) == (True, False, "qdd")
        took, pickled, (qqd, qqd_want) = call([1] * 5, 1)
        assert (took, pickled, lane.layout.scalars) == (True, False, "qqd")
        # Rows of one width and two forms given back in one list: the first's form is the layout's, the others'
        # rows are not copied as its (they are written from their fields, which do not fit: pickled).
        mixed = ([qqd.states[0], *qdd.states[:4]], [qqd_want.states[0], *qdd_want.states[:4]])
        assert call([], 1, mixed)[:2] == (True, True)
