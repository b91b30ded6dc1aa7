"""What verification returns: a frozen :class:`Report` with an explicit scope.

One report type for every scope — an instance's chain, the whole ledger (a checkpoint
proof, leaf contiguity), a bundle's own files — so callers render, filter and serialize
them all the same way. ``bool(report)`` is True when no finding is at error severity;
:meth:`Report.raise_for_findings` is the raising variant.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from histaudit.errors import VerificationError

from .findings import Finding, Severity


class Scope(enum.StrEnum):
    INSTANCE = "instance"
    """One instance's chain and head."""
    LEDGER = "ledger"
    """The ledger as a whole: its tree against a kept checkpoint."""
    BUNDLE = "bundle"
    """An export bundle's own files: manifest, checkpoint, keys."""


MODES = ("default", "full", "default+engine", "full+engine", "consistency",
         "consistency+witness-policy", "witness-policy", "leaf-index", "bundle")
"""What a report's JSON ``mode`` can be: its :attr:`Report.mode` without the display
parts (a consistency proof's sizes, which its JSON gives apart; spaces)."""


def mode_json(mode: str) -> str:
    """``mode`` as one of :data:`MODES` (schemas/report.output.schema.json): each
    ``+``-joined part without what follows "consistency" and with "-" for spaces."""
    return "+".join("consistency" if part.startswith("consistency ") else part.replace(" ", "-")
                    for part in mode.split("+"))


def finding_order(f: Finding) -> tuple[int, int]:
    """Report order: by entry (findings about no entry last), worst first."""
    return (f.seq if f.seq is not None else 1 << 62, -f.severity)


@dataclass(frozen=True)
class Report:
    """The outcome of verifying one subject. ``bool(report)`` is True when it is clean."""

    instance_id: str
    """The instance verified; for the ledger and bundle scopes a label in parentheses."""
    entries: int
    mode: str
    """What was checked: ``default``, ``full``, ``default+engine``, ``consistency 4->9`` …"""
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    scope: Scope = Scope.INSTANCE

    @property
    def ok(self) -> bool:
        """No finding at error severity."""
        return not self.failing(Severity.ERROR)

    def __bool__(self) -> bool:
        return self.ok

    def failing(self, threshold: Severity | str) -> list[Finding]:
        """The findings at or above ``threshold`` (a Severity or its name; UsageError for
        anything else, :meth:`Severity.threshold`)."""
        at = Severity.threshold(threshold, name="threshold")
        return [f for f in self.findings if f.severity >= at]

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def with_findings(self, findings: Iterable[Finding], mode: str) -> Report:
        """This report with ``findings`` merged in (in report order) and ``+mode`` added."""
        merged = sorted((*self.findings, *findings), key=finding_order)
        return replace(self, mode=f"{self.mode}+{mode}", findings=tuple(merged))

    def raise_for_findings(self, threshold: Severity | str = Severity.ERROR) -> None:
        threshold = Severity.threshold(threshold, name="threshold")
        bad = self.failing(threshold)
        if bad:
            raise VerificationError(
                f"{self.scope} {self.instance_id}: {len(bad)} finding(s) at or above "
                f"{threshold}, first: {bad[0].code} at entry {bad[0].seq}: {bad[0].message}",
                self)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (``instance``: the ledger format's own name for the field)."""
        return {"instance": self.instance_id, "scope": str(self.scope), "ok": self.ok,
                "entries": self.entries, "mode": mode_json(self.mode),
                "findings": [f.to_json() for f in self.findings]}
