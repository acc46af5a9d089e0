"""The execution policy (issue 51): one printable object decides where and how fast batches run.

Rows: bad options are refused before anything starts, naming what was expected and what was given, on every
backend; make's shorthands apply to the policy and a contradiction names both; the repr says what it does;
the "rule" placement is a pure function of the workers' reported step time (a batch runs here when the time
the workers would save it is under ``here_below``; never before they reported, nor for workers elsewhere, nor
for a future no caller waits for); on a real env the first batch goes to the workers and the next ones follow
the rule, and every placement gives inline's results.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import plan_parallel as pp
from plan_parallel.batch import Tuner
from tests.helpers import assert_batches_equal

pytestmark = [pytest.mark.timeout(120)]


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"n_workers": 0}, ValueError, "n_workers must be an integer >= 1 or None, got 0"),
    ({"placement": "shared"}, ValueError, "placement must be one of ('rule', 'workers', 'here', 'adaptive'), "
                                          "got 'shared'"),
    ({"here_below": -1}, ValueError, "here_below must be a number of seconds >= 0, got -1"),
    ({"pin_workers": 1}, TypeError, "pin_workers must be True or False, got 1"),
    ({"batch_scheduling": "yes"}, TypeError, "batch_scheduling must be True or False, got 'yes'"),
    ({"max_chunks_per_worker": 0}, ValueError, "max_chunks_per_worker must be an integer >= 1, got 0"),
    ({"move_caller": True}, ValueError, "move_caller moves the calling thread off pinned workers' cores: it "
                                        "needs pin_workers=True"),
])
def test_bad_options_name_what_was_expected(options: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        pp.ExecutionPolicy(**options)


@pytest.mark.parametrize("backend", ["inline", "process", "ray"])
def test_an_execution_that_is_not_a_policy_is_refused_before_anything_starts(backend: str) -> None:
    with pytest.raises(TypeError, match=r"^execution must be an ExecutionPolicy or None, got dict$"):
        pp.make("CartPole-v1", backend=backend, execution={"n_workers": 2})  # type: ignore[call-overload]


@pytest.mark.parametrize(("policy", "options", "message"), [
    (pp.ExecutionPolicy(n_workers=3), {"n_workers": 2}, "n_workers=2 contradicts the execution policy's n_workers=3"),
    (pp.ExecutionPolicy(placement="adaptive"), {"small_batch_inline": False},
     "small_batch_inline=False contradicts the execution policy's placement='adaptive'"),
    (pp.ExecutionPolicy(placement="workers"), {"small_batch_inline": True},
     "small_batch_inline=True contradicts the execution policy's placement='workers'"),
    (pp.ExecutionPolicy(placement="here"), {"timeout": 1.0},
     "a timeout cannot act on items run in this process: give timeout=None with placement='here'"),
])
def test_a_shorthand_that_contradicts_the_policy_names_both(policy: Any, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        pp.make("CartPole-v1", execution=policy, **options)


def test_the_shorthands_set_the_policy_and_the_worker_count_is_filled_in() -> None:
    with pp.make("CartPole-v1", n_workers=2, small_batch_inline=False, pin_workers=True) as env:
        assert env.execution == pp.ExecutionPolicy(n_workers=2, placement="workers", pin_workers=True)
        assert not env.small_batch_inline
    with pp.make("CartPole-v1", n_workers=1, timeout=5.0) as env:
        assert env.execution.placement == "workers"  # where the timeout can act
    tuned = pp.ExecutionPolicy.tuned(n_workers=2)
    assert (tuned.placement, tuned.pin_workers, tuned.batch_scheduling, tuned.move_caller) == (
        "adaptive", True, True, True)


def test_the_repr_says_what_the_policy_does() -> None:
    assert repr(pp.ExecutionPolicy()) == (
        "ExecutionPolicy(n_workers=the CPUs this process may use; placement='rule': here when the workers would "
        "save a batch under 1 ms (its env time by their step time, x (1 - 1/W)), else on the workers; up to 3 "
        "chunks a worker; lane; host settings: none)")
    assert repr(pp.ExecutionPolicy(n_workers=4, placement="workers", pin_workers=True, lane=False)) == (
        "ExecutionPolicy(n_workers=4; placement='workers': every batch on the workers; up to 3 chunks a worker; "
        "no lane; host settings: pin_workers)")


def test_the_rule_is_a_function_of_the_workers_reported_step_time() -> None:
    t = Tuner(2, "rule", here_below=1e-3)
    assert t.by_rule(1) == "workers"  # nothing reported yet
    t.learn_step(1e-4)
    assert t.by_rule(19) == "here" and t.by_rule(20) == "workers"  # saves 0.95 ms / 1.0 ms of 1.9 / 2.0 ms
    assert Tuner(4, "rule", here_below=1e-3).by_rule(13) == "workers"  # 4 workers save 3/4 of a batch
    one = Tuner(1, "rule")
    one.learn_step(1.0)
    assert one.by_rule(10**6) == "here"  # one worker saves nothing
    elsewhere = Tuner(2, "rule", workers_here=False)
    elsewhere.learn_step(1e-9)
    assert elsewhere.by_rule(1) == "workers"  # a cluster's env is never built in this process


def test_the_chunks_a_worker_at_most() -> None:
    for at_most, chunks in ((1, 2), (2, 4), (3, 6)):
        tuner = Tuner(2, "rule", max_chunks=at_most)
        tuner.learn_step(1e-3)  # 1 ms a step: 512 steps are 256 ms a worker
        assert tuner.n_chunks(512, 512) == chunks
    with pp.make("CartPole-v1", execution=pp.ExecutionPolicy(n_workers=2, max_chunks_per_worker=1)) as env:
        assert env.execution.max_chunks_per_worker == 1


@pytest.mark.parametrize("placement", ["rule", "workers", "here", "adaptive"])
def test_every_placement_equals_inline(placement: str) -> None:
    # the rule's threshold at 1 s: 16 CartPole steps run here once the workers' step time is known, under any load
    below = {"here_below": 1.0} if placement == "rule" else {}
    policy = pp.ExecutionPolicy(n_workers=2, placement=placement, **below)
    with pp.make("CartPole-v1", backend="inline") as inline, pp.make("CartPole-v1", execution=policy) as env:
        state, _, _ = inline.reset(seed=3)
        actions = np.arange(16) % 2
        for _ in range(4):
            assert_batches_equal(env.step_batch(actions, [state] * 16), inline.step_batch(actions, [state] * 16))
        if placement == "rule":  # the first batch measured the workers' step time; 16 CartPole steps then run here
            assert env.stats["inline_batches"] == 3 and env.stats["batches"] == 4
            fut = env.step_batch_async(actions, [state] * 16)
            assert_batches_equal(fut.result(), inline.step_batch(actions, [state] * 16))
            assert env.stats["batches"] - env.stats["inline_batches"] >= 2  # a future runs on the workers
