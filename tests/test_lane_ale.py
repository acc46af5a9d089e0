"""ALE in the lane: a state's bytes form, its sticky pair and its RNG as words in the rows; screens lent.

An ALE state is a row of fixed width (its ``cloneState`` bytes, one length a game), the sticky (action, strength)
pair in two columns and the env's PCG64 state as six words (sticky actions draw every frame, so each result has
its own); a screen (100 KB) goes to a slab lent to the call's result, not through the segment. These rows hold
those forms exact against the inline backend, lists of states given back with a field replaced included; lent
screens unchanged while the caller holds them and a worker's death mid-call harmless; and the states made of
rows alike to any other (pickled, copied, digested). ``tests/test_lane.py``'s tables run Pong RAM and Pong RGB
through every call form, worker count and interruption too.
"""
from __future__ import annotations

import copy
import gc
import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.wire.lane import RNG_WORDS, rng_of_words, rng_words, write_blobs
from tests.conftest_leaks import shm_segments
from tests.deadline import call_with_deadline
from tests.helpers import assert_batches_equal
from tests.test_lane import on_workers

pytestmark = pytest.mark.usefixtures("no_leaks_module", "no_leaks")  # (no worker, segment or lent slab left behind)

B = 12


def pong(obs_type: str, **kw: Any) -> Any:
    return pp.make("ALE/Pong-v5", obs_type=obs_type, frameskip=1, **kw)


def assert_states_equal(got: Any, want: Any) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.diff(b) == [] and a.rng == b.rng and a.extra == b.extra and type(a.extra[0]) is type(b.extra[0])


def results(env: Any, ref: Any, calls: int) -> tuple[list[Any], list[Any]]:
    """The states of ``calls`` successive calls of ``env`` (on the workers) and of ``ref`` (inline)."""
    return results_of(env, ref, calls, 6)


def results_of(env: Any, ref: Any, calls: int, n_actions: int) -> tuple[list[Any], list[Any]]:
    """:func:`results` of an env of ``n_actions`` discrete actions."""
    rng = np.random.default_rng(2)
    got, want = [env.reset(seed=0)[0]] * B, [ref.reset(seed=0)[0]] * B
    got_all, want_all = [], []
    for _ in range(calls):
        acts = rng.integers(0, n_actions, B)
        got, want = env.step_batch(acts, got).states, ref.step_batch(acts, want).states
        got_all.append(got)
        want_all.append(want)
    return got_all, want_all


def edit_extra(s: Any, other: Any) -> None:
    s.extra = (3, 1.0)  # the sticky action a repeated frame takes


def edit_rng(s: Any, other: Any) -> None:
    s.rng = other.rng


def edit_sim(s: Any, other: Any) -> None:
    s.sim = other.sim


EDITS: dict[str, Callable[[Any, Any], None] | None] = {
    "unchanged": None, "extra": edit_extra, "rng": edit_rng, "sim": edit_sim}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("obs_type", ["ram", "rgb"])
def test_lists_of_ale_states_from_lane_results_step_as_inline(obs_type: str, edit: str) -> None:
    """States picked from three lane results (copied back by their rows), one of them with a field replaced
    (written from its fields instead), step as inline: states, sticky pairs, RNGs and outcomes; in the lane (but
    a state given a new simulator value, checked again on the general path)."""
    rng = np.random.default_rng(len(edit))
    with pong(obs_type, backend="inline") as ref, pong(obs_type, execution=on_workers(2)) as env:
        got_all, want_all = results(env, ref, 3)
        picks = [(int(rng.integers(3)), int(rng.integers(B))) for _ in range(B)]
        got = [got_all[i][k] for i, k in picks]
        want = [want_all[i][k] for i, k in picks]
        change = EDITS[edit]
        if change is not None:
            change(got[0], got[5])
            change(want[0], want[5])
        lanes = env.stats["lane_batches"]
        for _ in range(2):
            acts = rng.integers(0, 6, B)
            a, b = env.step_batch(acts, got), ref.step_batch(acts, want)
            assert_batches_equal(a, b)
            assert_states_equal(a.states, b.states)
            got, want = list(a.states), list(b.states)
        assert env.stats["lane_batches"] == lanes + 2 - (edit == "sim"), "the calls took the lane"


@pytest.mark.timeout(120)
def test_a_state_made_of_a_lane_row_pickles_copies_and_digests_as_any_other() -> None:
    """Its bytes stay a row of the result's column until needed: pickled, copied, digested, decoded and sent
    back through the general path, it equals the inline state."""
    with pong("ram", backend="inline") as ref, pong("ram", execution=on_workers(2)) as env:
        got_all, want_all = results(env, ref, 2)
        for got, want in zip(got_all[-1], want_all[-1]):
            assert got.key() == want.key() and hash(got) == hash(want)
            for twin in (pickle.loads(pickle.dumps(got)), copy.copy(got), copy.deepcopy(got)):
                assert twin == want and twin.sim_blob() == want.sim_blob()
        state = got_all[-1][3]
        assert state.sim_blob() == want_all[-1][3].sim_blob()
        assert type(state.sim).__name__ == "ALEState"  # decoded from the row
        acts = np.array([1])
        assert_batches_equal(env.step_batch(acts, [state]), ref.step_batch(acts, [want_all[-1][3]]))


@pytest.mark.timeout(120)
def test_lent_screens_never_change_while_held_and_equal_inline() -> None:
    """A lane call's screens are a slab lent to its result: a result kept stays as it was through later calls,
    results held together never share memory, every one equals inline, and slabs nobody holds are reused."""
    rng = np.random.default_rng(4)
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env:
        got_all, want_all = results(env, ref, 2)
        starts, starts_ref = list(got_all[-1]), list(want_all[-1])

        def call() -> tuple[Any, Any]:
            pick = rng.integers(0, B, int(rng.integers(4, 2 * B)))
            acts = rng.integers(0, 6, len(pick))
            return (env.step_batch(acts, [starts[k] for k in pick]),
                    ref.step_batch(acts, [starts_ref[k] for k in pick]))

        kept, kept_want = call()
        kept_copy = kept.observations.copy()
        lent = env.stats["lent_batches"]
        for _ in range(4):
            call()
        gc.collect()
        segments = len(shm_segments())
        for _ in range(12):
            got, want = call()
            assert_batches_equal(got, want)
        assert len(shm_segments()) <= segments + 1, "a slab nobody holds was not reused"
        np.testing.assert_array_equal(kept.observations, kept_copy)
        assert_batches_equal(kept, kept_want)
        held = [call()[0] for _ in range(4)]
        for i in range(4):
            for j in range(i):
                assert not np.shares_memory(held[i].observations, held[j].observations), "a held slab was reused"
        assert env.stats["lent_batches"] >= lent + 20 and not kept.observations.flags.writeable


@pytest.mark.timeout(120)
def test_a_worker_killed_during_a_lent_lane_call_is_replaced_and_the_call_is_exact() -> None:
    with pong("rgb", backend="inline") as ref, pong("rgb", execution=on_workers(2)) as env:
        s = env.reset(seed=1)[0]
        s_ref = ref.reset(seed=1)[0]
        acts = np.arange(192) % 6
        env.step_batch(acts, [s] * 192, dt=8)  # (the workers check the reset's state: the next call takes the lane)
        lanes, victim = env.stats["lane_batches"], env.pids[0]
        killer = threading.Timer(0.05, lambda: os.kill(victim, signal.SIGKILL))
        killer.start()
        # (a call of ~200 ms here, so the kill at 50 ms falls inside it: 192 items of dt 8 took 53-66 ms)
        got = call_with_deadline(lambda: env.step_batch(acts, [s] * 192, dt=32), 60.0, "the call a worker died in")
        killer.join()
        want = ref.step_batch(acts, [s_ref] * 192, dt=32)
        assert_batches_equal(got, want)
        assert env.stats["restarts"] == 1 and env.stats["lane_batches"] == lanes + 1
        assert_batches_equal(env.step_batch(acts[:16], list(got.states)[:16]),
                             ref.step_batch(acts[:16], list(want.states)[:16]))


@pytest.mark.timeout(120)
def test_a_state_with_another_bit_generators_rng_fails_as_inline() -> None:
    """An RNG value the rows cannot hold (an MT19937 state, here) sends the call the general path's way, which
    raises what inline raises."""
    other = dict(np.random.Generator(np.random.MT19937(0)).bit_generator.state)
    with pong("ram", backend="inline") as ref, pong("ram", execution=on_workers(2)) as env:
        got_all, want_all = results(env, ref, 1)
        bad, bad_ref = copy.copy(got_all[0][1]), copy.copy(want_all[0][1])
        bad.rng, bad_ref.rng = other, other
        acts = np.zeros(5, dtype=np.int64)
        with pytest.raises(Exception) as inline:
            ref.step_batch(acts, [*want_all[0][:4], bad_ref])
        with pytest.raises(type(inline.value)) as lane:
            call_with_deadline(lambda: env.step_batch(acts, [*got_all[0][:4], bad]), 60.0, "a call that fails")
        assert str(lane.value) == str(inline.value)
        assert_batches_equal(env.step_batch(acts, got_all[0][:5]), ref.step_batch(acts, want_all[0][:5]))


def test_rng_words_round_trip_pcg64_and_refuse_anything_else() -> None:
    for seed in range(20):
        g = np.random.default_rng(seed)
        g.integers(0, 1 << 30, int(seed), dtype=np.uint32)  # (odd counts leave a 32-bit half: has_uint32 1)
        state = dict(g.bit_generator.state)
        words = rng_words(state)
        assert words is not None and len(words) == RNG_WORDS
        assert rng_of_words(np.array(words, np.uint64).tolist()) == state
    good = dict(np.random.default_rng(0).bit_generator.state)
    refused = [None, {}, dict(np.random.Generator(np.random.MT19937(0)).bit_generator.state), {**good, "x": 1},
               {**good, "has_uint32": 2}, {**good, "uinteger": -1}, {**good, "state": {"state": -1, "inc": 1}},
               {**good, "state": {"state": 1 << 128, "inc": 1}}, {**good, "state": {"state": 1.0, "inc": 1}}]
    for value in refused:
        assert rng_words(value) is None, value


def test_blobs_written_into_rows_keep_every_byte() -> None:
    """A row's bytes item would drop trailing zeros when read as one: written, every byte stays, zeros at either
    end or throughout included, and the rows around are untouched."""
    rng = np.random.default_rng(5)
    blobs = [bytes(16), b"\x00" * 8 + b"ab" + b"\x00" * 6, b"ab" + bytes(14), bytes(rng.integers(0, 256, 16, np.uint8))]
    col = np.full((8, 16), 7, np.uint8)
    write_blobs(col, 2, blobs)
    assert [col[2 + k].tobytes() for k in range(4)] == blobs
    assert (col[:2] == 7).all() and (col[6:] == 7).all()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id,options,extra", [
    ("ALE/Pong-v5", {"obs_type": "ram", "frameskip": 1}, (1 << 70, 1.0)),
    ("ALE/Pong-v5", {"frameskip": 1}, (1 << 70, 1.0)),
    ("CartPole-v1", {}, 1 << 70)], ids=["pong-ram", "pong-rgb", "cartpole"])
def test_an_extra_too_large_for_a_row_fails_as_inline(env_id: str, options: dict, extra: Any) -> None:
    """An int of more than 64 bits in a state's extra does not fit a row: the call goes the way that raises (or
    answers) what inline does, not an overflow of the lane's columns; the env stays exact."""
    with pp.make(env_id, backend="inline", **options) as ref, pp.make(env_id, execution=on_workers(2), **options) as env:
        got_all, want_all = results_of(env, ref, 2, env.action_space.n)
        bad, bad_ref = got_all[-1][2], want_all[-1][2]
        bad.extra, bad_ref.extra = extra, extra
        acts = np.zeros(6, dtype=np.int64)
        try:
            want: Any = ref.step_batch(acts, list(want_all[-1][:6]))
        except Exception as e:  # (whatever inline raises, the lane must raise alike)
            with pytest.raises(type(e)) as lane:
                call_with_deadline(lambda: env.step_batch(acts, list(got_all[-1][:6])), 60.0, "a call that fails")
            assert str(lane.value) == str(e)
        else:
            assert_batches_equal(call_with_deadline(lambda: env.step_batch(acts, list(got_all[-1][:6])), 60.0,
                                                    "a call with a large extra"), want)
        good = [got_all[-1][k] for k in (0, 1, 3, 4)]
        good_ref = [want_all[-1][k] for k in (0, 1, 3, 4)]
        assert_batches_equal(env.step_batch(acts[:4], good), ref.step_batch(acts[:4], good_ref))
