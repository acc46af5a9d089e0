"""``check_clonable``: prove or refute bit-identical replay from captured states.

The protocol:

1. **live**: reset with a seed, walk a few random steps, capture state S, then
   record the *truth*: the live env stepping a fixed action sequence from S.
2. **restore**: restore S into the same env and replay; must equal the truth.
3. **perturbed restore**: play other random actions (and a reset with another
   seed) to disturb every hidden field, restore S again and replay.
4. **copies, one step each**: a new env's episode from reset, against the same
   steps each taken from an unpickled copy of the state before it, on another
   new env (how a parallel backend expands a chain).
5. **fresh process**: pickle S, restore it in a new process (spawn) into a
   never-reset env and into an env reset with another seed, replay both.
6. **time limit**: when the env has a TimeLimit, reach the step before the limit,
   capture, and check the truncation replays.
7. **termination**: walk randomly until terminated, capture a few steps before
   and check the replay through termination.

Every comparison is bitwise: observations, rewards, terminated, truncated and
the state after each step. The report names the first divergent step and field
and what part of the state looks missing.
"""
from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from plan_parallel.errors import StateError
from plan_parallel.state.core import Adapter, State, bind
from plan_parallel.state.families.replay import ActionReplayAdapter
from plan_parallel.state.own_rng import seeds_note
from plan_parallel.state.report import CheckResult, CloneReport
from plan_parallel.state.restore_probe import attribute_snapshot, differing_attributes
from plan_parallel.state.values import values_equal

__all__ = ["CheckResult", "CloneReport", "check_clonable", "run_checks"]

_FIELDS = ("observation", "reward", "terminated", "truncated", "state")


# ------------------------------------------------------------------ trajectories
class _Runner:
    """One env + its adapter, able to restore a state and replay actions."""

    def __init__(self, factory: Callable[[], Any], adapter: type[Adapter] | None) -> None:
        self.env = factory()
        self.adapter = bind(self.env, adapter)
        self.step = self.adapter.make_step()

    def reset(self, seed: int) -> tuple[State, Any]:
        obs, _ = self.adapter.reset(seed, None)
        return self.adapter.capture(None, obs), obs

    def replay(self, state: State | None, actions: list) -> list[tuple]:
        """Restore ``state`` (None: continue live), apply ``actions``; one record per step.

        Raises:
            StateError: restoring raised (an attribute that pickles but does not
                unpickle, a simulator that refuses the data); the report names it.
        """
        if state is not None:
            try:
                self.adapter.restore(state)
            except StateError:
                raise
            except Exception as e:
                raise StateError(f"restoring a state raised {type(e).__name__}: {e}") from e
        out = []
        for a in actions:
            obs, r, term, trunc, _ = self.step(a)
            s = self.adapter.capture(None, obs)
            out.append((obs, float(r), bool(term), bool(trunc), s))
            if term or trunc:
                break
        return out

    def walk(self, actions: list) -> tuple[State, Any, bool]:
        """Step live through ``actions`` (stopping at episode end); returns (state, obs, ended)."""
        obs, ended = None, False
        for a in actions:
            obs, _, term, trunc, _ = self.step(a)
            if term or trunc:
                ended = True
                break
        return self.adapter.capture(None, obs), obs, ended

    def close(self) -> None:
        self.env.close()


def _check_copies_one_step_each(factory: Callable[[], Any], adapter: Any, seed: int, actions: list) -> CheckResult:
    """A new env's episode from reset, against the same steps each from an unpickled copy of the state before it.

    How a parallel backend steps a chain: every state arrives as a copy, into an env
    that ran the items before (for action replay, a reset and a replay every time;
    a Box2D world that kept bodies across resets diverged at the third).
    """
    truth_env, env = _Runner(factory, adapter), _Runner(factory, adapter)
    try:
        state, _ = truth_env.reset(seed)
        truth = truth_env.replay(None, actions)
        got: list[tuple] = []
        for t, a in enumerate(actions[: len(truth)]):
            try:
                got += env.replay(pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)), [a])
            except Exception as e:  # e.g. a wrapper left unrestored refuses to step
                return CheckResult("copies, one step each", False, len(truth), t, "step",
                                   f"{type(e).__name__}: {e}")
            state = truth[t][4]
    finally:
        truth_env.close()
        env.close()
    return _compare("copies, one step each", truth, got)


def _compare(name: str, truth: list[tuple], got: list[tuple]) -> CheckResult:
    for t, (a, b) in enumerate(zip(truth, got)):
        for k, fname in enumerate(_FIELDS):
            if not values_equal(a[k], b[k]):
                detail = ""
                if fname == "state":
                    detail = f"state parts differing: {', '.join(a[k].diff(b[k]))}"
                return CheckResult(name, False, len(truth), t, fname, detail)
    if len(truth) != len(got):
        return CheckResult(
            name, False, len(truth), min(len(truth), len(got)), "episode end",
            f"truth ran {len(truth)} steps, replay {len(got)}",
        )
    ended = bool(truth) and (truth[-1][2] or truth[-1][3])
    return CheckResult(name, True, len(truth), detail="the episode ended there" if ended else "")


def _sample_actions(space: Any, n: int, seed: int) -> list:
    space = copy.deepcopy(space)  # the env's own space (and its RNG) stays untouched
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _fresh_process_replay(factory: Callable[[], Any], adapter: Any, blob: bytes, actions: list, seed: int) -> bytes:
    """Runs in a spawned process: restore a pickled state into a never-reset env and a reset env."""
    state = pickle.loads(blob)
    never = _Runner(factory, adapter)
    a = never.replay(state, actions)
    reset = _Runner(factory, adapter)
    reset.reset(seed)
    reset.walk(_sample_actions(reset.env.action_space, 3, seed))
    b = reset.replay(state, actions)
    never.close()
    reset.close()
    return pickle.dumps((a, b))


def _time_limit(env: Any) -> Any:
    """The outermost TimeLimit wrapper on the stack, or None."""
    e = env
    while hasattr(e, "env"):
        if type(e).__name__ == "TimeLimit":
            return e
        e = e.env
    return None


def _siblings(runner: _Runner, state: State, actions: list) -> tuple[State, State]:
    """Unpickled copies of two states one step after ``state`` by different actions (as states arrive on a worker).

    Both are copies of the same state when every action in ``actions`` is equal.
    """
    first = runner.replay(state, actions[:1])[0][4]
    other = next((x for x in actions[1:] if not values_equal(x, actions[0])), None)
    second = first if other is None else runner.replay(state, [other])[0][4]
    return tuple(pickle.loads(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)) for s in (first, second))  # type: ignore[return-value]


def _measure(runner: _Runner, state: State, actions: list, repeats: int = 200) -> tuple[float, float, float, int]:
    """Microseconds per capture, restore and step, and the state's pickled bytes.

    Restores alternate between copies of two siblings (one step after ``state``,
    different actions), as states arrive on a worker: neither holds the other's
    history, so an adapter that shortcuts restoring a history its env holds or
    extends (action replay) pays its real cost, a reset and a replay of the whole
    history; an RNG is set on every restore, as for a copy.
    """
    ad = runner.adapter
    first, second = _siblings(runner, state, actions)
    ad.restore(second)
    t0 = time.perf_counter()
    for k in range(repeats):
        ad.restore(second if k % 2 else first)
    set_us = (time.perf_counter() - t0) / repeats * 1e6
    ad.forget_rng()
    t0 = time.perf_counter()
    for _ in range(repeats):
        ad.capture(None, None)
    get_us = (time.perf_counter() - t0) / repeats * 1e6
    step = runner.step
    ad.restore(state)
    n = 0
    t0 = time.perf_counter()
    for _ in range(repeats):
        _, _, term, trunc, _ = step(actions[0])
        n += 1
        if term or trunc:
            ad.restore(state)
    step_us = (time.perf_counter() - t0) / n * 1e6
    return get_us, set_us, step_us, len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


def run_checks(
    factory: Callable[[], Any],
    name: str,
    *,
    adapter: type[Adapter] | None = None,
    seed: int = 0,
    steps: int = 32,
    warmup: int = 10,
    fresh_process: bool = True,
    budget: int = 2000,
    timeout: float = 120.0,
) -> CloneReport:
    """Run the protocol on envs built by ``factory``; see :func:`check_clonable`."""
    report = CloneReport(name)
    try:
        runner = _Runner(factory, adapter)
    except StateError as e:
        report.error = str(e)
        return report
    try:
        _run_protocol(report, runner, factory, adapter, seed, steps, warmup, fresh_process, budget, timeout)
    except StateError as e:
        report.error = str(e)
    finally:
        runner.close()
    report.hint = report.likely_missing()
    return report


def _run_protocol(
    report: CloneReport,
    runner: _Runner,
    factory: Callable[[], Any],
    adapter: Any,
    seed: int,
    steps: int,
    warmup: int,
    fresh_process: bool,
    budget: int,
    timeout: float,
) -> None:
    space = runner.env.action_space
    report.kind = runner.adapter.kind
    runner.reset(seed)
    report.seeds = seeds_note(runner.adapter)  # after a reset: a generator made there counts
    start, _, ended = runner.walk(_sample_actions(space, warmup, seed + 1))
    if ended:  # the warm-up ended the episode: start from the reset state
        start, _ = runner.reset(seed)
    before = attribute_snapshot(runner.env.unwrapped)
    actions = _sample_actions(space, steps, seed + 2)
    truth = runner.replay(None, actions)
    report.checks.append(_compare("restore", truth, runner.replay(start, actions)))
    runner.walk(_sample_actions(space, 7, seed + 3))
    runner.reset(seed + 1000)
    runner.walk(_sample_actions(space, 5, seed + 4))
    report.checks.append(_compare("perturbed restore", truth, runner.replay(start, actions)))
    if not all(c.ok for c in report.checks):  # name what the restore leaves as the perturbation left it
        runner.adapter.restore(start)
        report.left_behind = differing_attributes(before, attribute_snapshot(runner.env.unwrapped))
    report.checks.append(_check_copies_one_step_each(factory, adapter, seed, actions))

    if fresh_process:
        report.checks += _check_fresh_process(factory, adapter, start, actions, truth, seed, timeout)
    report.checks.append(_check_time_limit(runner, space, seed, budget))
    report.checks.append(_check_termination(runner, space, seed, budget))
    report.get_us, report.set_us, report.step_us, report.state_bytes = _measure(runner, start, actions)
    if isinstance(runner.adapter, ActionReplayAdapter):
        depth = len(start.sim[2] or ()) + 1  # _measure restores states one step after start
        report.set_note = (f"set is a reset and a replay of the history: {depth} steps here, growing with depth "
                           "(less when the env holds a prefix of it)")


def _check_fresh_process(
    factory: Any, adapter: Any, start: State, actions: list, truth: list, seed: int, timeout: float
) -> list[CheckResult]:
    """Replay in a new interpreter (``python -c``): nothing inherited, the state only through pickle."""
    import cloudpickle

    name = "fresh process"
    try:
        blob = pickle.dumps(start, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        return [CheckResult(name, False, detail=f"the state does not pickle: {type(e).__name__}: {e}")]
    job = cloudpickle.dumps((factory, adapter, blob, actions, seed))
    code = "import sys; from plan_parallel.state.check import _child_main; _child_main()"
    # The factory may live in a module found only through this process's sys.path
    # (a test file, a notebook's folder): hand the path on, as multiprocessing's spawn does.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], input=job, capture_output=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired:
        return [CheckResult(name, False, detail=f"no answer from the fresh process in {timeout:.0f} s")]
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip().splitlines()
        return [CheckResult(name, False, detail=f"the fresh process failed: {err[-1] if err else done.returncode}")]
    a, b = pickle.loads(done.stdout)
    return [_compare(f"{name}, never-reset env", truth, a), _compare(f"{name}, reset env", truth, b)]


def _child_main() -> None:
    """Entry point of the fresh process: read a job from stdin, write the two replays to stdout."""
    factory, adapter, blob, actions, seed = pickle.loads(sys.stdin.buffer.read())
    out = _fresh_process_replay(factory, adapter, blob, actions, seed)
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()


def _check_time_limit(runner: _Runner, space: Any, seed: int, budget: int) -> CheckResult:
    """Bring the live env two steps short of its TimeLimit, capture, replay the truncation.

    The wrapper's counter is moved forward directly (random play rarely survives
    to the limit); what is checked is that the state carries the counter.
    """
    name = "time limit"
    wrapper = _time_limit(runner.env)
    if wrapper is None:
        return CheckResult(name, None, detail="no TimeLimit wrapper")
    limit = int(wrapper._max_episode_steps)
    # An action-replay state re-derives the counter from its action log, so the
    # counter cannot be moved by hand: walk there honestly, when affordable.
    honest = runner.adapter.includes_wrappers
    if honest and limit > budget:
        return CheckResult(name, None, detail=f"limit {limit} steps is beyond the budget of {budget}")
    for attempt in range(10):
        runner.reset(seed + 10 + attempt)
        if not honest:
            wrapper._elapsed_steps = limit - 2
        _, _, ended = runner.walk(_sample_actions(space, limit - 1 if honest else 1, seed + 20 + attempt))
        if ended:
            continue
        before = runner.adapter.capture(None, None)
        acts = _sample_actions(space, 1, seed + 30 + attempt)
        truth = runner.replay(None, acts)
        if truth[-1][2]:  # terminated on the last step: try another start
            continue
        if not truth[-1][3]:
            return CheckResult(name, False, 1, 0, "truncated", f"the live env did not truncate at step {limit}")
        res = _compare(name, truth, runner.replay(before, acts))
        if res.ok:
            res.detail = f"truncation at step {limit} reproduced"
        return res
    return CheckResult(name, None, detail="every try terminated before the limit")


def _check_termination(runner: _Runner, space: Any, seed: int, budget: int, keep: int = 4) -> CheckResult:
    """Walk randomly until terminated; replay the last ``keep`` steps from the state before them."""
    from collections import deque

    name = "termination"
    ad, step = runner.adapter, runner.step
    for attempt in range(3):
        runner.reset(seed + 40 + attempt)
        last: deque = deque(maxlen=keep)  # (state before, action, live record)
        before = ad.capture(None, None)
        for a in _sample_actions(space, budget, seed + 50 + attempt):
            obs, r, term, trunc, _ = step(a)
            after = ad.capture(None, obs)
            last.append((before, a, (obs, float(r), bool(term), bool(trunc), after)))
            before = after
            if term:
                truth = [rec for _, _, rec in last]
                res = _compare(name, truth, runner.replay(last[0][0], [a for _, a, _ in last]))
                if res.ok:
                    res.detail = f"replayed the last {len(truth)} steps through termination"
                return res
            if trunc:
                break
    return CheckResult(name, None, detail=f"random play did not terminate within {budget} steps")


def check_clonable(
    env: str | Callable[..., Any],
    *,
    adapter: type[Adapter] | None = None,
    seed: int = 0,
    steps: int = 32,
    fresh_process: bool = True,
    budget: int = 2000,
    timeout: float = 120.0,
    **env_kwargs: Any,
) -> CloneReport:
    """Prove or refute that states of ``env`` replay bit-identically.

    Runs the protocol in this module's docstring and returns a :class:`CloneReport`
    (``report.ok``, ``print(report)`` for a readable summary). Nothing is raised
    for an env that fails the checks: the report says what diverged.

    Args:
        env: a gymnasium env id or a callable returning an env (called with ``env_kwargs``).
        adapter: an Adapter class to check instead of the registered one.
        seed: seed of the resets and of the random actions.
        steps: length of the replayed action sequence.
        fresh_process: also restore a pickled state in a new (spawned) process.
        budget: the most steps spent looking for a time limit or a termination.
        timeout: seconds to wait for the fresh process.
    """
    from plan_parallel.factory import EnvFactory

    factory = EnvFactory(env, env_kwargs)
    return run_checks(
        factory, factory.name, adapter=adapter, seed=seed, steps=steps,
        fresh_process=fresh_process, budget=budget, timeout=timeout,
    )
