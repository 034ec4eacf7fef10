"""What doctor concluded: one :class:`Check` per question, and the verdict over all of them.

A ``fail`` means multiattach cannot work on this host; ``warn`` means something works less well
than it could (no KVM, no initiator for a protocol, shares that would not reach guests, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

Status = Literal["ok", "warn", "fail"]
STATUSES: Final = ("ok", "warn", "fail")


@dataclass(frozen=True)
class Check:
    """One answered question: ``area`` and ``name`` say what, ``detail`` says why in one line."""

    area: str
    name: str
    status: Status
    detail: str


@dataclass
class DoctorReport:
    uri: str
    checks: list[Check]
    facts: dict[str, Any]

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def multiattach_ok(self) -> bool:
        """True when nothing stops multiattach from working on this host."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "multiattach": self.multiattach_ok,
                "problems": [f"{c.name}: {c.detail}" for c in self.failures],
                "checks": [asdict(c) for c in self.checks],
                "facts": self.facts}
