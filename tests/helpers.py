"""Helpers shared by the test modules: bitwise comparisons and the fresh-process replay.

``replay_in_fresh_process`` runs in a spawned child (see the ``fresh_process``
fixture in conftest.py), so it lives in an importable module and takes only
pickled bytes.
"""
from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "assert_batches_equal",
    "assert_fails_as_inline",
    "assert_tree_equal",
    "batch_payload",
    "replay_in_fresh_process",
    "sample_actions",
    "take",
]


def assert_fails_as_inline(inline: Callable[[], Any], parallel: Callable[[], Any], item: int, times: int = 3) -> None:
    """``parallel()`` raises, ``times`` times in a row, what ``inline()`` raises (same type and message),
    with a note naming item ``item`` of the batch: the first failing item, wherever each item ran."""
    try:
        inline()
    except Exception as exc:
        want = exc
    else:
        raise AssertionError("the inline call did not raise")
    for _ in range(times):
        try:
            parallel()
        except Exception as exc:
            assert type(exc) is type(want) and str(exc) == str(want), (exc, want)
            notes = getattr(exc, "__notes__", [])
            assert any(f"item {item} of the batch" in note for note in notes), notes
        else:
            raise AssertionError("the parallel call did not raise")


def assert_tree_equal(a: Any, b: Any, path: str = "obs") -> None:
    """Bitwise equality of observations: arrays by dtype, shape and bytes; dicts key by key."""
    if isinstance(a, dict) or isinstance(b, dict):
        assert isinstance(a, dict) and isinstance(b, dict), f"{path}: {type(a).__name__} vs {type(b).__name__}"
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_tree_equal(a[k], b[k], f"{path}[{k!r}]")
        return
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        assert len(a) == len(b), f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_tree_equal(x, y, f"{path}[{i}]")
        return
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a_, b_ = np.asarray(a), np.asarray(b)
        assert a_.dtype == b_.dtype, f"{path}: dtype {a_.dtype} vs {b_.dtype}"
        assert a_.shape == b_.shape, f"{path}: shape {a_.shape} vs {b_.shape}"
        if a_.dtype.hasobject:
            for i, (x, y) in enumerate(zip(a_.ravel(), b_.ravel())):
                assert_tree_equal(x, y, f"{path}.flat[{i}]")
        else:
            assert a_.tobytes() == b_.tobytes(), f"{path}: values differ\n{a_!r}\nvs\n{b_!r}"
        return
    if isinstance(a, float) and isinstance(b, float):  # (numpy's float64 is a float: its type is compared too)
        assert type(a) is type(b) and a.hex() == b.hex(), f"{path}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
        return
    assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def take(batch: Any, order: Any) -> dict:
    """The items of a StepBatch (or of a payload dict) in ``order``, as a payload dict."""
    p = batch if isinstance(batch, dict) else batch_payload(batch)
    order = list(order)
    obs = p["observations"]

    def pick(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: pick(v) for k, v in x.items()}
        if isinstance(x, tuple):
            if x and isinstance(x[0], np.ndarray):  # Tuple space: a tuple of batched arrays
                return tuple(pick(v) for v in x)
            return tuple(x[i] for i in order)  # e.g. Text spaces: a tuple of N strings
        return np.asarray(x)[order]

    return {
        "states": [p["states"][i] for i in order],
        "observations": pick(obs),
        "rewards": p["rewards"][order],
        "terminations": p["terminations"][order],
        "truncations": p["truncations"][order],
        "n_steps": [p["n_steps"][i] for i in order],
        "infos": [p["infos"][i] for i in order],
    }


def batch_payload(batch: Any) -> dict:
    """The comparable, picklable part of a StepBatch (infos reduced to n_steps)."""
    return {
        "states": list(batch.states),
        "observations": batch.observations,
        "rewards": batch.rewards,
        "terminations": batch.terminations,
        "truncations": batch.truncations,
        "n_steps": [info["n_steps"] for info in batch.infos],
        "infos": list(batch.infos),
    }


def assert_batches_equal(a: Any, b: Any) -> None:
    """Two StepBatch results (or payloads) are bitwise equal, states included."""
    a = a if isinstance(a, dict) else batch_payload(a)
    b = b if isinstance(b, dict) else batch_payload(b)
    for name in ("rewards", "terminations", "truncations"):
        assert a[name].dtype == b[name].dtype, f"{name}: dtype {a[name].dtype} vs {b[name].dtype}"
        assert np.array_equal(a[name], b[name]), f"{name} differ:\n{a[name]}\nvs\n{b[name]}"
        assert a[name].tobytes() == b[name].tobytes(), f"{name} differ bitwise"
    assert a["n_steps"] == b["n_steps"], f"n_steps differ: {a['n_steps']} vs {b['n_steps']}"
    if "infos" in a and "infos" in b:
        assert_tree_equal(a["infos"], b["infos"], "infos")
    assert_tree_equal(a["observations"], b["observations"])
    assert len(a["states"]) == len(b["states"])
    for i, (x, y) in enumerate(zip(a["states"], b["states"])):
        assert x == y, f"state {i} differs in {x.diff(y)}"


def sample_actions(space: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """N random valid actions for a Discrete or Box action space, from ``rng``."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, size=n).astype(np.int64)
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, space.shape)
        high = np.broadcast_to(space.high, space.shape)
        return rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)
    raise NotImplementedError(f"no sampler for {space}")


def replay_in_fresh_process(factory_bytes: bytes, items_bytes: bytes, reset_seed: int) -> bytes:
    """Run one step_batch in this (fresh) process, twice: on a never-reset env and on one reset with another seed.

    Args:
        factory_bytes: a cloudpickled ``plan_parallel.EnvFactory``.
        items_bytes: ``pickle.dumps((states, actions, dt))``.
        reset_seed: the seed for the second env's reset.

    Returns:
        ``pickle.dumps((pid, payload_never_reset, payload_reset))``.
    """
    import os

    import cloudpickle

    import plan_parallel as pp

    factory = cloudpickle.loads(factory_bytes)
    states, actions, dt = pickle.loads(items_bytes)
    out: list = [os.getpid()]
    for seed in (None, reset_seed):
        env = pp.PlanEnv(factory)
        try:
            if seed is not None:
                env.reset(seed=seed)
            out.append(batch_payload(env.step_batch(actions, states=states, dt=dt)))
        finally:
            env.close()
    return pickle.dumps(tuple(out), protocol=pickle.HIGHEST_PROTOCOL)
