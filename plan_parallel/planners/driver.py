"""Many searches advanced together: each round, one env call per kind of request over all of them.

A *search* is a generator that decides for one root. It yields a
:class:`Request` (some items to step once, or some action sequences to roll
out), is sent back that request's results (:class:`Steps` or
:class:`~plan_parallel.planners.base.Rollouts`), and finally returns its
decision. :func:`drive` runs B searches together: each round it gathers the
step requests of every search still running into **one** ``step_batch``, hands
each search its slice, then gathers the rollout requests (those just made
included) into **one** rollout call. A planner's ``plan`` is its ``plan_many``
of one root, so both run this one code path.

Every item's result is exact whatever batch it travels in (the library's first
invariant), so a search driven with others decides exactly as it does alone.
:class:`Lanes` gives each search its own seeded RNG and memory (search k of a
planner reset with ``seed`` is seeded ``seed + k``), which is what makes root k
of ``plan_many`` decide as ``plan`` of a planner reset with ``seed + k``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import numpy as np

from plan_parallel.planners.base import Meter, Rollouts, check_int
from plan_parallel.results import PlanningEnv
from plan_parallel.state import State

__all__ = ["Lane", "Lanes", "Request", "Search", "SearchPlanner", "Steps", "check_roots", "drive"]


class Request(NamedTuple):
    """Items a search needs from the env.

    Attributes:
        kind: ``"step"``: one ``step_batch`` item per state; ``"rollout"``: one action sequence per state.
        states: the items' start states.
        actions: ``(n, *action_shape)`` for a step, ``(n, T, *action_shape)`` for a rollout.
    """

    kind: Literal["step", "rollout"]
    states: Sequence[State]
    actions: np.ndarray


class Steps(NamedTuple):
    """One step of n items (the part of ``StepBatch`` planners use).

    Attributes:
        states: the state after each item.
        rewards: float64 ``(n,)``, summed over the item's ``dt`` env steps.
        terminations / truncations: bool ``(n,)``.
        n_steps: int64 ``(n,)``: env steps each item ran.
    """

    states: Sequence[State]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    n_steps: np.ndarray


Search = Generator[Request, Any, Any]
"""Yields requests, is sent each one's results (Steps or Rollouts), returns its decision."""

_KINDS: tuple[Literal["step", "rollout"], ...] = ("step", "rollout")


class _Rows(Sequence):
    """Rows ``start:stop`` of a sequence, read through (a ``StateBatch`` makes a row's State only when read)."""

    def __init__(self, rows: Sequence[Any], start: int, stop: int) -> None:
        self.rows, self.start, self.stop = rows, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return self.rows[self.start + int(i) % len(self)]

    def __iter__(self) -> Iterator[Any]:
        return (self.rows[j] for j in range(self.start, self.stop))


def _steps(b: Any) -> Steps:
    n_steps = np.fromiter((info["n_steps"] for info in b.infos), dtype=np.int64, count=len(b.infos))
    return Steps(b.states, np.asarray(b.rewards, dtype=np.float64), np.asarray(b.terminations, dtype=bool),
                 np.asarray(b.truncations, dtype=bool), n_steps)


def _rows(out: Steps | Rollouts, start: int, stop: int) -> Steps | Rollouts:
    states, *arrays = out
    return type(out)(_Rows(states, start, stop), *(a[start:stop] for a in arrays))


def _empty(kind: str, actions: np.ndarray) -> Steps | Rollouts:
    none = np.zeros(0, dtype=bool)
    if kind == "rollout":
        return Rollouts([], np.zeros((0, actions.shape[1]), dtype=np.float64), none, none, np.zeros(0, np.int64))
    return Steps([], np.zeros(0, dtype=np.float64), none, none, np.zeros(0, np.int64))


class _Call(NamedTuple):
    """One env call of a group of searches: which searches' requests it holds, and its result or future."""

    group: int
    kind: str
    ids: list[int]  # every search whose request of this kind the call answers (an empty request included)
    out: Any  # Steps / Rollouts; a future when sent without waiting; None when every request was empty
    sent: bool


def drive(env: PlanningEnv, meter: Meter, searches: Sequence[Search], dt: int, groups: int = 1) -> tuple[list[Any], list[int]]:
    """Run ``searches`` to their decisions, each round one env call per kind of request over all of them.

    ``groups > 1`` (and an env with ``rollout_batch_async``):
    the searches are cut into that many groups of consecutive searches, each with its
    own rounds; a group's rollout calls are sent without waiting (its step calls are
    waited for, so the env may run them in this process), so while the workers run one
    group's rollouts this process advances the searches of another. Every item's
    result is the same in any batch, so the decisions are too.

    Returns:
        Each search's decision, and the env steps its own items took (``transitions``).
    """
    decisions: list[Any] = [None] * len(searches)
    transitions = [0] * len(searches)
    pending: dict[int, Request] = {}
    overlap = groups > 1 and hasattr(env, "rollout_batch_async")
    size = -(-len(searches) // groups) if overlap else len(searches)
    members = [range(g, min(g + size, len(searches))) for g in range(0, len(searches), size)]
    phases = [0] * len(members)

    def advance(i: int, result: Any) -> None:
        try:
            pending[i] = searches[i].send(result)
        except StopIteration as stop:
            decisions[i] = stop.value
            pending.pop(i, None)

    def answer(call: _Call) -> None:
        out = call.out
        if call.sent:  # (only rollouts are sent without waiting)
            out = meter.gather_rollout(out)
        start = 0
        for i in call.ids:
            request = pending[i]
            n = len(request.states)
            part = _empty(call.kind, request.actions) if n == 0 else _rows(out, start, start + n)
            start += n
            transitions[i] += int(part.n_steps.sum())
            advance(i, part)

    def begin(g: int) -> _Call | None:
        """Group ``g``'s next env call (its requests of the next kind that has any); None when it has finished."""
        while any(i in pending for i in members[g]):
            kind = _KINDS[phases[g]]
            phases[g] = (phases[g] + 1) % len(_KINDS)
            ids = [i for i in members[g] if i in pending and pending[i].kind == kind]
            full = [i for i in ids if len(pending[i].states)]
            if not full:
                if ids:
                    answer(_Call(g, kind, ids, None, False))
                continue
            states = [s for i in full for s in pending[i].states]
            actions = np.concatenate([pending[i].actions for i in full])
            if overlap and kind == "rollout":
                return _Call(g, kind, ids, meter.submit_rollout(env, states, actions, dt), True)
            if kind == "rollout":
                return _Call(g, kind, ids, meter.rollout(env, states, actions, dt), False)
            return _Call(g, kind, ids, _steps(meter.step_batch(env, actions, states, dt)), False)
        return None

    for i in range(len(searches)):
        advance(i, None)
    calls = deque(c for c in (begin(g) for g in range(len(members))) if c is not None)
    try:
        while calls:
            call = calls.popleft()
            answer(call)
            nxt = begin(call.group)
            if nxt is not None:
                calls.append(nxt)
    except BaseException:  # the other groups' calls in flight are of no use now
        for call in calls:
            if call.sent:
                call.out.cancel()
        raise
    return decisions, transitions


M = TypeVar("M")


class Lane(Generic[M]):
    """One search's own RNG and the memory it keeps between decisions (a tree to reuse, a warm start)."""

    __slots__ = ("memory", "rng")

    def __init__(self, rng: np.random.Generator, memory: M) -> None:
        self.rng = rng
        self.memory = memory


class Lanes(Generic[M]):
    """The searches of one planner, by number: search k of a planner reset with ``seed`` is seeded ``seed + k``.

    A lane is made when first used, so ``plan_many`` over roots 0..B-1 and B
    planners reset with ``seed + 0`` .. ``seed + B - 1`` draw the same numbers.
    ``seed=None``: every lane gets fresh entropy.
    """

    def __init__(self, seed: int | None, memory: Callable[[], M]) -> None:
        if seed is not None:
            check_int("seed", seed, 0)
        self.seed = seed
        self.memory = memory
        self.lanes: dict[int, Lane[M]] = {}

    def __getitem__(self, k: int) -> Lane[M]:
        lane = self.lanes.get(k)
        if lane is None:
            rng = np.random.default_rng(None if self.seed is None else self.seed + k)
            lane = self.lanes[k] = Lane(rng, self.memory())
        return lane

    def forget(self, k: int) -> None:
        """Drop lane ``k``'s memory (its RNG goes on)."""
        if k in self.lanes:
            self.lanes[k].memory = self.memory()


def check_roots(states: Any, roots: Any) -> list[int]:
    """Check ``plan_many``'s arguments; the lane of each state (default ``0 .. B-1``).

    Raises:
        TypeError: ``states`` is not a non-empty sequence of ``State``, or ``roots`` not integers.
        ValueError: ``states`` is empty; ``roots`` of another length, negative or repeated.
    """
    if not isinstance(states, Sequence) or isinstance(states, (str, bytes)):
        raise TypeError(f"states must be a non-empty sequence of State, got {type(states).__name__}: {states!r:.100}")
    if len(states) == 0:
        raise ValueError("states must be a non-empty sequence of State, got an empty one")
    for i, s in enumerate(states):
        if not isinstance(s, State):
            raise TypeError(f"states[{i}] must be a State, got {type(s).__name__}: {s!r:.100}")
    if roots is None:
        return list(range(len(states)))
    if not isinstance(roots, Sequence) or isinstance(roots, (str, bytes)):
        raise TypeError(f"roots must be a sequence of ints >= 0, one per state, got {type(roots).__name__}")
    if len(roots) != len(states):
        raise ValueError(f"roots must hold one int >= 0 per state ({len(states)}), got {len(roots)}")
    out = [check_int(f"roots[{i}]", k, 0) for i, k in enumerate(roots)]
    if len(set(out)) != len(out):
        raise ValueError(f"roots must be distinct (each is one search), got {list(roots)!r:.100}")
    return out


class SearchPlanner(ABC):
    """``plan``, ``plan_many`` and ``reset`` of a planner whose decision is one :data:`Search` per root.

    A subclass sets ``dt`` and ``meter`` and gives :meth:`searcher` (the search
    of one root on an env) and :meth:`new_memory` (what a root's search keeps
    between decisions). ``plan`` is ``plan_many`` of one root, root 0, so both
    share one search.

    Attributes:
        last_stats: after ``plan``, the decision's statistics (planner-specific keys, and
            ``env_calls``, ``transitions``, ``env_seconds``, ``seconds``); after ``plan_many``,
            ``roots`` and the env figures of the whole call.
        root_stats: one dict per root of the latest call, as ``last_stats`` after ``plan``,
            except ``env_calls``, ``env_seconds`` and ``seconds``, which are the whole call's
            (the roots' items shared its env calls); ``transitions`` are the root's own.
    """

    dt: int
    meter: Meter
    overlap: int = 1
    """Groups of roots whose rollout calls overlap in ``plan_many`` (see :func:`drive`); 1: one call at a time.

    Opt-in (``planner.overlap = 2``): the decisions are the same, only the batches
    differ. On 2 shared cores with 8 roots at W=2 it gained no more than the spread
    of the turns (Pong 1.68x against 1.59x single inline, CartPole 1.10x against 1.06x)
    and lost on CartPole when the cores were busy (smaller calls); see docs/planning.md.
    """

    @abstractmethod
    def searcher(self, env: PlanningEnv) -> Callable[[Lane[Any], State], Search]:
        """Check ``env``'s action space; return the function making one root's search on it."""

    @abstractmethod
    def new_memory(self) -> Any:
        """What a root's search keeps between decisions when it starts (e.g. no tree to reuse)."""

    def reset(self, seed: int | None = None) -> None:
        """Forget every root's memory and reseed: root k's RNG is seeded ``seed + k`` (``None``: fresh entropy).

        Raises:
            TypeError / ValueError: ``seed`` is not None or an int >= 0.
        """
        self.lanes: Lanes[Any] = Lanes(seed, self.new_memory)
        self.last_stats: dict[str, Any] = {}
        self.root_stats: list[dict[str, Any]] = []

    def plan(self, env: PlanningEnv, state: State) -> Any:
        """The action to apply ``dt`` times from ``state``: root 0 of :meth:`plan_many`.

        ``env`` is any env made by :func:`plan_parallel.make`; its current state is
        not changed. ``last_stats`` then holds the search statistics.

        Raises:
            TypeError: ``state`` is not a State, or the env's action space is not one the planner handles.
        """
        if not isinstance(state, State):
            raise TypeError(f"state must be a State, got {type(state).__name__}: {state!r:.100}")
        action = self.plan_many(env, [state])[0]
        self.last_stats = self.root_stats[0]
        return action

    def plan_many(self, env: PlanningEnv, states: Sequence[State], roots: Sequence[int] | None = None) -> list[Any]:
        """One action per state, from independent searches advanced together.

        Each round of the searches is one ``step_batch`` and/or one rollout call over
        every root's items. After ``reset(seed)``, root k decides exactly as a planner
        with the same options reset with ``seed + k`` and asked ``plan(env, state)``,
        its memory (tree reuse, warm start) carried over consecutive calls as there.

        Args:
            env: any env made by :func:`plan_parallel.make`; its current state is not changed.
            states: the roots, one search each.
            roots: which root each state is (default ``0 .. len(states) - 1``); e.g.
                the episodes still running when others have ended.

        Raises:
            TypeError: ``states`` not a non-empty sequence of State; an action space the planner does not handle.
            ValueError: empty ``states``; ``roots`` of another length, negative or repeated.
            WorkerTimeoutError/WorkerCrashedError/ClosedError: from a :class:`~plan_parallel.BatchEnv`'s
                calls; the memory of these roots is then dropped (their RNGs go on).
            Exception: whatever the env's own step raises, with its own type; the memory of these roots
                is then dropped too.
        """
        ks = check_roots(states, roots)
        search = self.searcher(env)
        mark = self.meter.mark()
        searches = [search(self.lanes[k], s) for k, s in zip(ks, states)]
        try:
            decided, transitions = drive(env, self.meter, searches, self.dt, min(self.overlap, len(searches)))
        except BaseException:  # a search stopped half way leaves its memory half updated
            for k in ks:
                self.lanes.forget(k)
            raise
        since = self.meter.since(mark)
        self.root_stats = [{**stats, **since, "transitions": t} for (_, stats), t in zip(decided, transitions)]
        self.last_stats = {"roots": len(ks), **since}
        return [action for action, _ in decided]
