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

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok is not False for c in self.checks)

    @property
    def first_failure(self) -> CheckResult | None:
        return next((c for c in self.checks if c.ok is False), None)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        head = f"{self.env}: {'CLONABLE' if self.ok else 'NOT CLONABLE'}"
        lines = [head]
        if self.kind:
            lines.append(f"  state kind: {self.kind}")
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
