"""Batched UCT (Monte Carlo tree search) for discrete action spaces.

Each iteration selects up to ``leaves_per_batch`` leaves at once (a *virtual
loss* on every node of a pending path steers later selections elsewhere),
expands them with **one** ``step_batch``, evaluates the new nodes with **one**
batched random rollout, and backs the returns up. Edges are actions applied
``dt`` times (action repeat). Q values are normalized to [0, 1] by the min and
max seen in the tree, so one exploration constant works across reward scales.
The subtree under the chosen action is kept for the next decision when the
next state equals its state (tree reuse). ``plan_many`` runs one tree per root,
every iteration's leaves of all trees in one ``step_batch`` and one rollout call.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from plan_parallel.planners.base import Meter, check_float, check_int, discounted_returns
from plan_parallel.planners.driver import Lane, Request, Search, SearchPlanner
from plan_parallel.results import PlanningEnv
from plan_parallel.state import State

__all__ = ["MCTS"]


class _Node:
    """A tree node: the state after its incoming edge, that edge's reward, and visit statistics."""

    __slots__ = ("children", "done", "n", "reward", "state", "untried", "vl", "w")

    def __init__(self, state: State, reward: float, done: bool, untried: list[int]) -> None:
        self.state = state
        self.reward = reward  # reward of the edge into this node (dt env steps, summed)
        self.done = done  # terminated or truncated: no value beyond this node
        self.n = 0  # completed simulations through this node
        self.w = 0.0  # sum of their returns from this node on
        self.vl = 0  # simulations in flight through this node (virtual loss)
        self.children: list[_Node | None] = []
        self.untried = untried  # actions not expanded nor pending, popped from the end


class _Tree:
    """What one root's search keeps between decisions: the subtree to reuse and the Q range seen."""

    __slots__ = ("hi", "lo", "next_root")

    def __init__(self) -> None:
        self.next_root: _Node | None = None
        self.lo = math.inf  # min / max Q seen, for normalization
        self.hi = -math.inf


class MCTS(SearchPlanner):
    """UCT with batched leaf selection, expansion and rollouts (discrete actions).

    Args:
        budget: simulations per decision (each: one new node, or a revisit of a
            terminal one, and one rollout from it).
        leaves_per_batch: leaves selected, expanded and rolled out together per
            iteration (one ``step_batch`` and one rollout call each). A batch stops
            early when every action of a node on the way is already pending, so the
            first batch from a fresh root holds at most one leaf per action.
        exploration: the UCT constant ``c`` in ``q + c * sqrt(ln N / n)`` on
            normalized Q values (0: greedy).
        rollout_depth: random actions per rollout, each applied ``dt`` times
            (0: no rollout, the value of a new node is 0).
        dt: env steps per tree edge and per rollout action (action repeat);
            the chosen action is meant to be applied ``dt`` times too.
        discount: per edge (per ``dt`` env steps), in (0, 1].
        reuse_tree: keep the subtree of the chosen action for the next decision.
        seed: seeds the planner's RNG (rollout actions, expansion order); root k
            of ``plan_many`` uses ``seed + k``.

    Raises:
        TypeError / ValueError: a parameter of the wrong type or out of range.
    """

    def __init__(
        self,
        budget: int = 100,
        leaves_per_batch: int = 16,
        exploration: float = 1.0,
        rollout_depth: int = 20,
        dt: int = 1,
        discount: float = 0.99,
        reuse_tree: bool = True,
        seed: int | None = 0,
    ) -> None:
        self.budget = check_int("budget", budget, 1)
        self.leaves_per_batch = check_int("leaves_per_batch", leaves_per_batch, 1)
        self.exploration = check_float("exploration", exploration, 0.0, math.inf)
        self.rollout_depth = check_int("rollout_depth", rollout_depth, 0)
        self.dt = check_int("dt", dt, 1)
        self.discount = check_float("discount", discount, 0.0, 1.0, low_open=True)
        self.reuse_tree = bool(reuse_tree)
        self.meter = Meter()
        self.reset(seed)

    def __repr__(self) -> str:
        return (
            f"MCTS(budget={self.budget}, leaves_per_batch={self.leaves_per_batch}, exploration={self.exploration}, "
            f"rollout_depth={self.rollout_depth}, dt={self.dt}, discount={self.discount})"
        )

    def new_memory(self) -> _Tree:
        """No tree to reuse yet."""
        return _Tree()

    def searcher(self, env: PlanningEnv) -> Callable[[Lane[Any], State], Search]:
        """The search of one root on ``env``: ``budget`` simulations, then the most visited root action.

        Raises:
            TypeError: the env's action space is not ``Discrete``.
        """
        space = env.action_space
        if not isinstance(space, spaces.Discrete):
            raise TypeError(f"MCTS needs a Discrete action space, got {space}")
        n_actions, start = int(space.n), int(space.start)
        return lambda lane, state: self._search(lane, state, n_actions, start)

    # ------------------------------------------------------------------ search
    def _search(self, lane: Lane[_Tree], state: State, n_actions: int, start: int) -> Search:
        """One root's decision; ``last_stats`` keys: simulations, batches, reuse, root visits and Q, value, depth."""
        tree, rng = lane.memory, lane.rng
        root = tree.next_root
        reused = root is not None and root.state == state
        if not reused:
            root = _Node(state, 0.0, False, _order(rng, n_actions))
            tree.lo, tree.hi = math.inf, -math.inf
        assert root is not None
        reused_visits = root.n
        sims = batches = max_depth = 0
        seen = _Seen()
        while sims < self.budget:
            leaves, depth = self._select(tree, root, min(self.leaves_per_batch, self.budget - sims))
            max_depth = max(max_depth, depth)
            yield from self._evaluate(tree, rng, leaves, n_actions, start, seen)
            sims += len(leaves)
            batches += 1
        action, tied = self._best(root, rng)
        tree.next_root = root.children[action] if self.reuse_tree else None
        visits = [c.n if c is not None else 0 for c in root.children]
        stats = {
            "simulations": sims,
            "batches": batches,
            "reused": reused,
            "reused_visits": reused_visits,
            "root_visits": visits,
            "root_q": [self._q(c) if c is not None and c.n else float("nan") for c in root.children],
            "value": root.w / root.n if root.n else float("nan"),
            "max_depth": max_depth,
            "lookahead": seen.lookahead,
            "zero_return_share": seen.zeros / sims,
            "tied": tied,
        }
        return start + action, stats

    def _q(self, child: _Node) -> float:
        return child.reward + self.discount * (child.w / child.n)

    def _select(self, tree: _Tree, root: _Node, k: int) -> tuple[list[tuple[list[_Node], int | None]], int]:
        """Up to ``k`` leaves: (path from the root, action to expand or None for a terminal node)."""
        leaves: list[tuple[list[_Node], int | None]] = []
        max_depth = 0
        span = tree.hi - tree.lo
        for _ in range(k):
            node, path = root, [root]
            while True:
                if node.done:
                    leaf: tuple[list[_Node], int | None] | None = (path, None)
                    break
                if node.untried:
                    leaf = (path, node.untried.pop())
                    break
                child = self._uct_child(tree, node, span)
                if child is None:  # every action of this node is pending: no leaf left this batch
                    leaf = None
                    break
                node = child
                path.append(node)
            if leaf is None:
                break
            for p in path:
                p.vl += 1
            leaves.append(leaf)
            max_depth = max(max_depth, len(path) - (1 if leaf[1] is None else 0))
        return leaves, max_depth

    def _uct_child(self, tree: _Tree, node: _Node, span: float) -> _Node | None:
        """The expanded child with the best UCT score (virtual loss counted as a zero-value visit)."""
        best, best_score = None, -math.inf
        log_n = math.log(max(1, node.n + node.vl))
        lo, discount, c, sqrt = tree.lo, self.discount, self.exploration, math.sqrt  # the loop is the hot spot
        for child in node.children:
            if child is None:  # pending expansion
                continue
            n = child.n
            visits = n + child.vl  # n >= 1: a child exists once its first simulation is backed up
            q = (child.reward + discount * (child.w / n) - lo) / span if span > 0 else 0.5  # _q(child), inlined
            score = q * n / visits + c * sqrt(log_n / visits)
            if score > best_score:
                best, best_score = child, score
        return best

    def _evaluate(
        self, tree: _Tree, rng: np.random.Generator, leaves: list[tuple[list[_Node], int | None]], n_actions: int,
        start: int, seen: _Seen,
    ) -> Search:
        """Expand the pending leaves with one step request, roll out the new nodes in one request, back up."""
        expand = [(path, a) for path, a in leaves if a is not None]
        expand_index = [i for i, (_, a) in enumerate(leaves) if a is not None]
        values = [0.0] * len(leaves)  # terminal leaves: nothing beyond them
        new: list[_Node] = []
        if expand:
            parents = [path[-1] for path, _ in expand]
            for p in parents:  # children slots exist once a node is first expanded
                if not p.children:
                    p.children = [None] * n_actions
            steps = yield Request(
                "step", [p.state for p in parents], np.array([start + a for _, a in expand], dtype=np.int64)
            )
            for j, ((path, a), parent) in enumerate(zip(expand, parents)):
                done = bool(steps.terminations[j] or steps.truncations[j])
                child = _Node(steps.states[j], float(steps.rewards[j]), done, [] if done else _order(rng, n_actions))
                parent.children[a] = child
                child.vl = 1
                path.append(child)
                new.append(child)
            live = [i for i, c in enumerate(new) if not c.done]
            if live and self.rollout_depth:
                actions = rng.integers(start, start + n_actions, size=(len(live), self.rollout_depth))
                out = yield Request("rollout", [new[i].state for i in live], actions)
                returns = discounted_returns(out.rewards, self.discount)
                for i, g, n in zip(live, returns, out.n_steps):
                    values[expand_index[i]] = float(g)
                    seen.lookahead = max(seen.lookahead, (len(expand[i][0]) - 2) * self.dt + int(n))
        for (path, _), g in zip(leaves, values):
            seen.zeros += self._backup(tree, path, g) == 0.0

    def _backup(self, tree: _Tree, path: list[_Node], g: float) -> float:
        """Add return ``g`` (from the last node of ``path`` on) to every node of the path; lift virtual loss.

        Returns the simulation's return from the root.
        """
        discount, lo, hi = self.discount, tree.lo, tree.hi
        for i in range(len(path) - 1, -1, -1):
            node = path[i]
            node.vl -= 1
            node.n += 1
            node.w += g
            if i:
                q = node.reward + discount * (node.w / node.n)  # _q(node), inlined: tree.see(q)
                if q < lo:
                    lo = q
                if q > hi:
                    hi = q
                g = node.reward + discount * g
        tree.lo, tree.hi = lo, hi
        return g

    def _best(self, root: _Node, rng: np.random.Generator) -> tuple[int, int]:
        """The most visited root action, ties to the higher Q, then drawn at random; and how many tied.

        A random draw, not the lowest index: when no simulation saw a reward (every Q
        equal), the lowest index would play the same action forever (e.g. NOOP in
        Breakout, never launching the ball); the draw comes from the root's seeded RNG,
        only when there is a tie.
        """
        keys = {a: (c.n, self._q(c)) for a, c in enumerate(root.children) if c is not None and c.n}
        if not keys:
            return 0, 0
        top = max(keys.values())
        tied = [a for a, k in keys.items() if k == top]
        return (tied[0] if len(tied) == 1 else int(tied[rng.integers(len(tied))])), len(tied)


class _Seen:
    """What one decision's simulations saw: how many returned 0, and the farthest env step ahead of the root."""

    __slots__ = ("lookahead", "zeros")

    def __init__(self) -> None:
        self.zeros = 0
        self.lookahead = 0


def _order(rng: np.random.Generator, n_actions: int) -> list[int]:
    """The order in which a new node's actions get expanded (popped from the end): random, seeded."""
    return rng.permutation(n_actions).tolist()  # Python ints
