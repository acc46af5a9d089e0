"""Random shooting and CEM-lite model-predictive control, for discrete and continuous actions.

Each decision samples ``budget`` action sequences of ``horizon`` steps (each
applied ``dt`` times), rolls them all out from the current state in batched
calls, and returns the first action of the sequence with the best discounted
return. With ``iterations > 1`` the budget is split over rounds of the cross-
entropy method: each round refits the sampling distribution (a categorical per
step for ``Discrete``, a clipped Gaussian per step for ``Box``) to the elite
sequences. With ``warm_start`` the previous decision's best sequence and
distribution, shifted by one step, seed the next decision (MPC style).
``plan_many`` rolls out every root's sequences of a round in one call.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces

from plan_parallel.planners.base import Meter, check_float, check_int, discounted_returns
from plan_parallel.planners.driver import Lane, Request, Search, SearchPlanner
from plan_parallel.results import PlanningEnv
from plan_parallel.state import State

__all__ = ["RandomShooting"]


class RandomShooting(SearchPlanner):
    """Random shooting / CEM-lite MPC over ``Discrete`` or ``Box`` action spaces.

    Args:
        budget: action sequences rolled out per decision (over all iterations).
        horizon: actions per sequence, each applied ``dt`` times.
        dt: env steps per action (action repeat).
        discount: per action (per ``dt`` env steps), in (0, 1].
        iterations: sampling rounds per decision; 1 is pure random shooting,
            more is the cross-entropy method (``budget // iterations`` sequences each).
        elite_frac: share of each round's sequences the distribution is refit to.
        smoothing: weight of the old distribution in each refit, in [0, 1).
        warm_start: start each decision from the previous one's best sequence
            and distribution, shifted by one step (the distribution moved half
            way back to its initial spread, so it keeps exploring).
        seed: seeds the planner's RNG; root k of ``plan_many`` uses ``seed + k``.

    Raises:
        TypeError / ValueError: a parameter of the wrong type or out of range.
    """

    def __init__(
        self,
        budget: int = 100,
        horizon: int = 20,
        dt: int = 1,
        discount: float = 1.0,
        iterations: int = 1,
        elite_frac: float = 0.1,
        smoothing: float = 0.2,
        warm_start: bool = True,
        seed: int | None = 0,
    ) -> None:
        self.budget = check_int("budget", budget, 1)
        self.horizon = check_int("horizon", horizon, 1)
        self.dt = check_int("dt", dt, 1)
        self.discount = check_float("discount", discount, 0.0, 1.0, low_open=True)
        self.iterations = check_int("iterations", iterations, 1)
        self.elite_frac = check_float("elite_frac", elite_frac, 0.0, 1.0, low_open=True)
        self.smoothing = check_float("smoothing", smoothing, 0.0, 1.0)
        if self.smoothing == 1.0:
            raise ValueError("smoothing must be a finite number in [0.0, 1.0), got 1.0 (the distribution would never move)")
        if self.iterations > 1 and self.budget < 2 * self.iterations:
            raise ValueError(
                f"budget must be >= 2 * iterations ({2 * self.iterations}) so each CEM round has 2 sequences, "
                f"got budget={self.budget}"
            )
        self.warm_start = bool(warm_start)
        self.meter = Meter()
        self.reset(seed)

    def __repr__(self) -> str:
        return (
            f"RandomShooting(budget={self.budget}, horizon={self.horizon}, dt={self.dt}, discount={self.discount}, "
            f"iterations={self.iterations})"
        )

    def new_memory(self) -> _Warm:
        """No warm start yet."""
        return _Warm()

    def searcher(self, env: PlanningEnv) -> Callable[[Lane[Any], State], Search]:
        """The search of one root on ``env``: the first action of the best sampled sequence.

        Returns an ``int`` for ``Discrete`` spaces, an array of the space's dtype for ``Box``.

        Raises:
            TypeError: an action space other than ``Discrete`` or ``Box``.
        """
        space = env.action_space
        if isinstance(space, spaces.Discrete):
            sampler: _Sampler = _Categorical(space, self.horizon)
        elif isinstance(space, spaces.Box):
            sampler = _Gaussian(space, self.horizon)
        else:
            raise TypeError(f"RandomShooting needs a Discrete or Box action space, got {space}")
        return lambda lane, state: self._search(lane, state, sampler)

    def _search(self, lane: Lane[_Warm], state: State, sampler: _Sampler) -> Search:
        """One root's decision; ``last_stats`` keys: sequences, best and mean return, zero_return_share, lookahead, tied."""
        memory, rng = lane.memory, lane.rng
        warm = self.warm_start and memory.plan is not None and memory.plan.shape[1:] == sampler.shape
        dist = sampler.shift(memory.dist) if warm and memory.dist is not None else sampler.initial()
        per_round = self.budget // self.iterations
        n_elite = max(1, round(self.elite_frac * per_round))
        best_seq, best_ret, all_seqs, all_returns, lookahead = None, -math.inf, [], [], 0
        for it in range(self.iterations):
            n = per_round if it < self.iterations - 1 else self.budget - per_round * it
            uniform = it == 0 and not warm
            seqs = sampler.sample(rng, dist, n, uniform)
            if it == 0 and warm:
                seqs[0, :-1] = memory.plan[1:]  # type: ignore[index]  # the previous best plan, shifted
            out = yield Request("rollout", [state] * n, sampler.encode(seqs))
            returns = discounted_returns(out.rewards, self.discount)
            lookahead = max(lookahead, int(out.n_steps.max()))
            all_seqs.append(seqs)
            all_returns.append(returns)
            i = int(np.argmax(returns))  # first index among ties
            if returns[i] > best_ret:
                best_seq, best_ret = seqs[i].copy(), float(returns[i])
            if self.iterations > 1:
                elite = np.argsort(-returns, kind="stable")[:n_elite]
                dist = sampler.fit(dist, seqs[elite], self.smoothing)
        assert best_seq is not None
        memory.plan, memory.dist = best_seq, dist
        returns = np.concatenate(all_returns)
        first, tied = sampler.choose(np.concatenate(all_seqs), returns, best_seq, rng)
        stats = {
            "sequences": int(returns.size),
            "best_return": best_ret,
            "mean_return": float(returns.mean()),
            "zero_return_share": float(np.mean(returns == 0.0)),
            "lookahead": lookahead,
            "tied": tied,
        }
        return sampler.decode(first), stats


class _Warm:
    """What one root's search keeps between decisions: the best sequence and the fitted distribution."""

    __slots__ = ("dist", "plan")

    def __init__(self) -> None:
        self.plan: np.ndarray | None = None  # previous best sequence, (H, *action_shape)
        self.dist: tuple[np.ndarray, ...] | None = None  # previous fitted distribution


class _Sampler(Protocol):
    """Sampling distribution over action sequences of one space: sample, refit, shift, encode."""

    shape: tuple[int, ...]

    def initial(self) -> tuple[np.ndarray, ...]: ...
    def sample(self, rng: np.random.Generator, dist: tuple[np.ndarray, ...], n: int, uniform: bool) -> np.ndarray: ...
    def fit(self, dist: tuple[np.ndarray, ...], elite: np.ndarray, smoothing: float) -> tuple[np.ndarray, ...]: ...
    def shift(self, dist: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]: ...
    def encode(self, seqs: np.ndarray) -> np.ndarray: ...
    def decode(self, action: np.ndarray) -> Any: ...
    def choose(
        self, seqs: np.ndarray, returns: np.ndarray, best: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]: ...


class _Categorical:
    """One categorical per step over ``n`` actions; sequences are action indices (H,)."""

    def __init__(self, space: spaces.Discrete, horizon: int) -> None:
        self.n, self.start, self.horizon = int(space.n), int(space.start), horizon
        self.shape: tuple[int, ...] = ()

    def initial(self) -> tuple[np.ndarray, ...]:
        return (np.full((self.horizon, self.n), 1.0 / self.n),)

    def sample(self, rng: np.random.Generator, dist: tuple[np.ndarray, ...], n: int, uniform: bool) -> np.ndarray:
        if uniform:
            return rng.integers(0, self.n, size=(n, self.horizon))
        cdf = np.cumsum(dist[0], axis=1)
        u = rng.random((n, self.horizon, 1))
        return np.minimum((u > cdf[None]).sum(axis=2), self.n - 1)

    def fit(self, dist: tuple[np.ndarray, ...], elite: np.ndarray, smoothing: float) -> tuple[np.ndarray, ...]:
        freq = (elite[:, :, None] == np.arange(self.n)).mean(axis=0)
        return (smoothing * dist[0] + (1.0 - smoothing) * freq,)

    def shift(self, dist: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        uniform = self.initial()[0]
        return ((np.concatenate([dist[0][1:], uniform[-1:]]) + uniform) / 2,)  # half way back to uniform

    def encode(self, seqs: np.ndarray) -> np.ndarray:
        return (seqs + self.start).astype(np.int64)

    def decode(self, action: np.ndarray) -> int:
        return self.start + int(action)

    def choose(
        self, seqs: np.ndarray, returns: np.ndarray, best: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]:
        """The first action with the best return, and how many tied for it. Ties (common when many
        sequences hit the horizon unharmed) go to the higher mean return of the sequences starting
        with it, then to a draw from ``rng`` (the lowest index would repeat one action whenever no
        sequence found a reward, e.g. never FIRE in Breakout)."""
        keys = {a: (float(r.max()), float(r.mean())) for a in range(self.n) if (r := returns[seqs[:, 0] == a]).size}
        top = max(keys.values())
        tied = [a for a, k in keys.items() if k == top]
        choice = tied[0] if len(tied) == 1 else tied[int(rng.integers(len(tied)))]
        return np.asarray(choice), len(tied)


class _Gaussian:
    """One diagonal Gaussian per step, clipped to the box; unbounded dimensions start at N(0, 1)."""

    def __init__(self, space: spaces.Box, horizon: int) -> None:
        self.space, self.horizon, self.shape = space, horizon, tuple(space.shape)
        low = np.broadcast_to(space.low, space.shape).astype(np.float64)
        high = np.broadcast_to(space.high, space.shape).astype(np.float64)
        self.finite = np.isfinite(low) & np.isfinite(high)
        self.low, self.high = low, high
        lo, hi = np.where(self.finite, low, 0.0), np.where(self.finite, high, 0.0)
        self.mean0 = (lo + hi) / 2
        self.std0 = np.where(self.finite, (hi - lo) / 2, 1.0)

    def initial(self) -> tuple[np.ndarray, ...]:
        reps = (self.horizon,) + (1,) * len(self.shape)
        return np.tile(self.mean0, reps), np.tile(self.std0, reps)

    def sample(self, rng: np.random.Generator, dist: tuple[np.ndarray, ...], n: int, uniform: bool) -> np.ndarray:
        mean, std = dist
        noise = rng.standard_normal((n, *mean.shape))
        if uniform:  # uniform in the finite dimensions, N(0, 1) in the others
            u = rng.uniform(-1.0, 1.0, size=(n, *mean.shape))
            noise = np.where(self.finite, u, noise)
        return np.clip(mean + std * noise, self.low, self.high)

    def fit(self, dist: tuple[np.ndarray, ...], elite: np.ndarray, smoothing: float) -> tuple[np.ndarray, ...]:
        mean, std = dist
        return (
            smoothing * mean + (1.0 - smoothing) * elite.mean(axis=0),
            smoothing * std + (1.0 - smoothing) * elite.std(axis=0),
        )

    def shift(self, dist: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        (mean, std), (mean0, std0) = dist, self.initial()
        mean = np.concatenate([mean[1:], mean0[-1:]])
        std = (np.concatenate([std[1:], std0[-1:]]) + std0) / 2  # half way back to the initial spread
        return mean, std

    def encode(self, seqs: np.ndarray) -> np.ndarray:
        return seqs.astype(self.space.dtype)

    def decode(self, action: np.ndarray) -> np.ndarray:
        return np.asarray(action, dtype=self.space.dtype)

    def choose(
        self, seqs: np.ndarray, returns: np.ndarray, best: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, int]:
        """The first action of the best sequence (continuous actions: no ties to break)."""
        return best[0], 1
