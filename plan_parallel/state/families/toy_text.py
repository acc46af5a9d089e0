"""Toy text: every field ``step`` reads, and the RNG (slippery ice, rain, card draws)."""
from __future__ import annotations

from typing import Any

from gymnasium.envs import toy_text as _tt

from plan_parallel.state.core import Adapter, register_adapter

__all__ = ["ToyTextAdapter"]


class ToyTextAdapter(Adapter):
    """Every field the toy-text ``step`` reads, plus the RNG (slippery/rainy/card draws)."""

    name = "toytext"
    FIELDS: dict[str, tuple[str, ...]] = {
        "FrozenLakeEnv": ("s", "lastaction"),
        "TaxiEnv": ("s", "lastaction", "fickle_step", "taxi_orientation"),
        "CliffWalkingEnv": ("s", "lastaction"),
        "BlackjackEnv": ("player", "dealer", "dealer_top_card_suit", "dealer_top_card_value_str"),
    }

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._fields = self.FIELDS[type(self.u).__name__]

    def get_sim(self) -> tuple[Any, Any]:
        u = self.u  # its attributes, not its __dict__ (see ClassicControlAdapter)
        values = (getattr(u, f, None) for f in self._fields)
        # Blackjack appends to its hands in place: copy lists.
        return tuple(list(v) if isinstance(v, list) else v for v in values), None

    def set_sim(self, sim: Any, extra: Any) -> None:
        u = self.u
        for f, v in zip(self._fields, sim):
            setattr(u, f, list(v) if isinstance(v, list) else v)

    def check_sim(self, sim: Any) -> str | None:
        if not isinstance(sim, tuple) or len(sim) != len(self._fields):
            return f"expected a tuple of {len(self._fields)} fields {self._fields}, got {sim!r:.100}"
        return None



for _name in ToyTextAdapter.FIELDS:
    register_adapter(ToyTextAdapter, getattr(_tt, _name))


