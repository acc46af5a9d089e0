"""What ``check_clonable`` reports: one line per check, the state's size and costs."""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CheckResult", "CloneReport"]


@dataclass
class CheckResult:
    """The outcome of one check of the protocol."""

    name: str
    ok: bool | None  # None: skipped
    steps: int = 0
    step: int | None = None  # first divergent step (0-based), when not ok
    field: str | None = None  # first divergent field
    detail: str = ""

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        parts = []
        if self.ok is False and self.step is not None:
            parts.append(f"diverged at step {self.step} in {self.field}")
        elif self.ok:
            parts.append(f"{self.steps} step{'s' if self.steps != 1 else ''} identical")
        if self.detail:
            parts.append(self.detail)
        return f"  [{mark}] {self.name:<31} " + "; ".join(parts)


@dataclass
class CloneReport:
    """What :func:`check_clonable` found. ``ok`` is True only when every check that ran passed."""

    env: str
    kind: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    state_bytes: int = 0
    get_us: float = 0.0
    set_us: float = 0.0
    step_us: float = 0.0
    hint: str = ""
    error: str = ""
    set_note: str = ""  # what the set cost depends on (an action replay's depth)
    seeds: str = ""  # what per-item seeds do on this env
    left_behind: list[str] = field(default_factory=list)  # the env's attributes a restore did not put back

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok is not False for c in self.checks)

    @property
    def first_failure(self) -> CheckResult | None:
        return next((c for c in self.checks if c.ok is False), None)

    def __bool__(self) -> bool:
        return self.ok

    def likely_missing(self) -> str:
        """What the state likely misses, from the first failed check (and the attributes a restore left behind)."""
        fail = self.first_failure
        if fail is None:
            return ""
        by_name = {c.name: c for c in self.checks}
        if fail.field == "state" and fail.detail:
            parts = fail.detail.split(": ", 1)[-1]
            if "rng" in parts:
                return "the RNG (np_random or a simulator RNG) is not captured or not restored"
            if "wrappers" in parts:
                return "a wrapper's state (a counter, a buffer) is not captured"
        if self.left_behind:
            return (f"{', '.join(self.left_behind)}: attributes of the env that a restore does not put back "
                    "(add them to the state: get_state / set_state)")
        if fail.field == "state" and fail.detail:
            return f"a simulator field ({fail.detail.split(': ', 1)[-1]}) is not captured or restored exactly"
        if fail.name == "restore":
            return "restoring does not put the simulator back: a field the step reads is not in the state"
        if fail.name == "perturbed restore" and by_name.get("restore", fail).ok:
            return (
                "a hidden field survives restore: the perturbation changed something the state does not "
                "hold (a counter, a previous action, a cached derived quantity)"
            )
        if fail.name.startswith("fresh process"):
            return (
                "something process-local: a global RNG, a module-level cache, or a C object the pickle "
                "does not carry"
            )
        if fail.name == "time limit":
            return "TimeLimit's elapsed-step counter is not captured"
        if fail.name == "termination":
            return "a termination counter or flag (e.g. steps_beyond_terminated) is not captured"
        return ""

    def __str__(self) -> str:
        head = f"{self.env}: {'CLONABLE' if self.ok else 'NOT CLONABLE'}"
        lines = [head]
        if self.kind:
            lines.append(f"  state kind: {self.kind}")
        if self.seeds:
            lines.append(f"  per-item seeds: {self.seeds}")
        if self.error:
            lines.append(f"  error: {self.error}")
        lines += [c.line() for c in self.checks]
        if self.step_us:
            lines.append(
                f"  state: {self.state_bytes:,} bytes pickled; get {self.get_us:.1f} us, "
                f"set {self.set_us:.1f} us, step {self.step_us:.1f} us "
                f"(get+set = {(self.get_us + self.set_us) / self.step_us:.2f} steps)"
            )
            if self.set_note:
                lines.append(f"  {self.set_note}")
        if self.hint:
            lines.append(f"  likely missing: {self.hint}")
        return "\n".join(lines)
