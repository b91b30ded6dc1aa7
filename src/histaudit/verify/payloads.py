"""Stored payloads against their signed commitments (full mode).

A payload row that is gone is not a finding here: it was erased (``payload.erased``)
or never kept, and the commitment alone still verifies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from histaudit.ledger.records import Entry, StoredEntry, commitment_matches

from .check import Parsed
from .findings import Finding

PayloadLookup = Callable[[str], "tuple[bytes, bytes] | None"]
"""commitment -> (salt, payload bytes), or None when no payload is stored for it."""


class PayloadCheck:
    """Each stored payload an entry commits to matches its salted commitment."""

    def __init__(self, lookup: PayloadLookup) -> None:
        self.lookup = lookup
        self.findings: list[Finding] = []

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if not isinstance(parsed, Entry):
            return
        for name, ref in parsed.data.items():
            if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
                continue
            stored = self.lookup(ref["c"])
            if stored is None:
                continue
            salt, data = stored
            if not commitment_matches(ref["c"], data, salt):
                self.findings.append(Finding.make(
                    "payload-mismatch", parsed.instance, parsed.seq,
                    f"entry {parsed.seq}: stored {name} payload does not match its "
                    f"commitment"))

    def finish(self) -> Iterable[Finding]:
        return self.findings
