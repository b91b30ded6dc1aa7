"""Stored payloads against their signed commitments, and kept payloads that went missing.

Full mode only (the rows are looked up). A stored payload must match its salted
commitment (``payload-mismatch``). A payload row that is gone is an erasure when the
reference does not say the payload was kept (``{"c", "n"}``: never kept, or a ledger
written before the kept flag), or when the same chain holds a signed ``payload.erased``
entry naming the commitment. A reference that signs ``"k": true`` (docs/format.md §8.3)
whose row is gone without such an entry is ``payload-missing``: deleted, not erased.
Erasures are appended after the entry they erase, so missing kept payloads are held until
the chain ends and reported then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry, commitment_matches

from .check import Parsed
from .findings import Finding

PayloadLookup = Callable[[str], "tuple[bytes, bytes] | None"]
"""commitment -> (salt, payload bytes), or None when no payload is stored for it."""


def is_kept(ref: object) -> bool:
    """Whether a payload reference signs that its payload was stored (``"k": true``)."""
    return isinstance(ref, dict) and ref.get("k") is True


class PayloadCheck:
    """Each stored payload matches its commitment; each kept one is stored or erased."""

    def __init__(self, lookup: PayloadLookup) -> None:
        self.lookup = lookup
        self.findings: list[Finding] = []
        self._missing: dict[str, tuple[str, int, str]] = {}  # commitment -> (inst, seq, name)
        self._erased: set[str] = set()

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.observe_valid(row, parsed.instance, parsed.seq, parsed.kind, parsed.kid,
                               parsed.ts, parsed.data)

    def observe_valid(self, row: StoredEntry, instance: str, seq: int, kind: str, kid: str,
                      ts: str, data: Mapping[str, Any]) -> None:
        if kind == Kind.PAYLOAD_ERASED:
            commitment = data.get("commitment")
            if isinstance(commitment, str):
                self._erased.add(commitment)
        for name, ref in data.items():
            if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
                continue
            stored = self.lookup(ref["c"])
            if stored is None:
                if is_kept(ref):
                    self._missing.setdefault(ref["c"], (instance, seq, name))
                continue
            salt, payload = stored
            if not commitment_matches(ref["c"], payload, salt):
                self.findings.append(Finding.make(
                    "payload-mismatch", instance, seq,
                    f"entry {seq}: stored {name} payload does not match its commitment"))

    def finish(self) -> Iterable[Finding]:
        for commitment, (instance, seq, name) in self._missing.items():
            if commitment not in self._erased:
                self.findings.append(Finding.make(
                    "payload-missing", instance, seq,
                    f"entry {seq}: {name} payload was kept but is gone, and no signed "
                    f"payload.erased names {commitment[:12]}… (deleted, not erased)"))
        return self.findings
