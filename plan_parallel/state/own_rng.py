"""Whether per-item seeds can act on an env: they reseed ``np_random``, and nothing else.

An env that draws from a generator of its own (``self.rng = np.random.default_rng(...)``) would ignore a
seed, and a seed that cannot act must not pass silently: such an env is not
:attr:`~plan_parallel.state.Adapter.reseedable`, and a reseed refuses it.
"""
from __future__ import annotations

import gc
import random
from typing import Any

import numpy as np

__all__ = ["SEEDS_REFUSED", "own_generator_error", "own_generators", "seeds_note"]

_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator, random.Random)

SEEDS_REFUSED = (
    "per-item seeds cannot act on this env (env.reseedable is False): either its state is an action-replay "
    "history, whose RNG is re-derived from the reset seed, or it draws from a generator of its own that "
    "reseeding np_random cannot reach (draw from self.np_random instead); plan_parallel.check_clonable says which"
)


def own_generators(unwrapped: Any) -> list[str]:
    """The type names of the random generators ``unwrapped`` holds as attributes besides its ``np_random``.

    Read from the objects it refers to (not its ``__dict__``, whose reading would slow its attributes down);
    a generator held inside another object is not seen.
    """
    mine = getattr(unwrapped, "_np_random", None)
    return sorted({type(r).__name__ for r in gc.get_referents(unwrapped)
                   if isinstance(r, _GENERATORS) and r is not mine and r is not getattr(mine, "bit_generator", None)})


def own_generator_error(unwrapped: Any) -> str | None:
    """Why a seed cannot act on ``unwrapped`` (it holds a generator of its own), or None."""
    own = own_generators(unwrapped)
    if not own:
        return None
    return (f"a per-item seed cannot act on {type(unwrapped).__name__}: it draws from a {' and a '.join(own)} of "
            "its own, which reseeding np_random does not reach; draw from self.np_random (seeded by reset)")


def seeds_note(adapter: Any) -> str:
    """What per-item seeds do on the env ``adapter`` is bound to (for :func:`~plan_parallel.check_clonable`)."""
    why = own_generator_error(adapter.u)
    if why is not None:
        return f"refused: {why}"
    if adapter.reseedable:
        return "reseed the env's np_random (the env holds no other generator)"
    return "refused: the state is an action-replay history, whose RNG is re-derived from the reset seed"
