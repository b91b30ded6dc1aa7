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

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry, commitment_matches

from .check import Parsed
from .findings import Finding

PayloadLookup = Callable[[str], "tuple[bytes, bytes] | None"]
"""commitment -> (salt, payload bytes), or None when no payload is stored for it."""
PayloadBatchLookup = Callable[[Sequence[str]], "Mapping[str, tuple[bytes, bytes]]"]
"""commitments -> {commitment: (salt, payload bytes)} of those stored (the others absent)."""


SAME, DIFFERENT, UNKNOWN = "same", "different", "unknown"


def compare_committed(ref: object, raw: bytes | None, lookup: PayloadLookup) -> str:
    """Whether ``raw`` (None: no payload) is what the payload reference ``ref`` commits to:
    :data:`SAME` or :data:`DIFFERENT` by the salted commitment while the payload is stored
    (its salt beside it); once erased, only a different committed size can prove a
    difference, and an equal one is :data:`UNKNOWN`. A value that is no reference commits
    to no payload."""
    if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
        return SAME if raw is None else DIFFERENT
    if raw is None:
        return DIFFERENT
    stored = lookup(ref["c"])
    if stored is not None:
        return SAME if commitment_matches(ref["c"], raw, stored[0]) else DIFFERENT
    size = ref.get("n")
    return DIFFERENT if isinstance(size, int) and size != len(raw) else UNKNOWN


def is_kept(ref: object) -> bool:
    """Whether a payload reference signs that its payload was stored (``"k": true``)."""
    return isinstance(ref, dict) and ref.get("k") is True


class PayloadCheck:
    """Each stored payload matches its commitment; each kept one is stored or erased.

    With ``lookup_many`` the references are looked up :data:`BATCH` at a time, one
    statement each, instead of one lookup per reference: the same answers, judged in entry
    order when a batch is full and at :meth:`finish`.
    """

    BATCH = 256

    def __init__(self, lookup: PayloadLookup, lookup_many: PayloadBatchLookup | None = None
                 ) -> None:
        self.lookup = lookup
        self.lookup_many = lookup_many
        self.findings: list[Finding] = []
        self._missing: dict[str, tuple[str, int, str]] = {}  # commitment -> (inst, seq, name)
        self._erased: set[str] = set()
        self._queued: list[tuple[str, int, str, dict[str, Any]]] = []  # instance, seq, name, ref

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
            if self.lookup_many is None:
                self._judge(instance, seq, name, ref, self.lookup(ref["c"]))
                continue
            self._queued.append((instance, seq, name, ref))
            if len(self._queued) >= self.BATCH:
                self._flush()

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if not queued or self.lookup_many is None:
            return
        stored = self.lookup_many([ref["c"] for _, _, _, ref in queued])
        for instance, seq, name, ref in queued:
            self._judge(instance, seq, name, ref, stored.get(ref["c"]))

    def _judge(self, instance: str, seq: int, name: str, ref: Mapping[str, Any],
               stored: tuple[bytes, bytes] | None) -> None:
        if stored is None:
            if is_kept(ref):
                self._missing.setdefault(ref["c"], (instance, seq, name))
            return
        salt, payload = stored
        if not commitment_matches(ref["c"], payload, salt):
            self.findings.append(Finding.make(
                "payload-mismatch", instance, seq,
                f"entry {seq}: stored {name} payload does not match its commitment"))

    def finish(self) -> Iterable[Finding]:
        self._flush()
        for commitment, (instance, seq, name) in self._missing.items():
            if commitment not in self._erased:
                self.findings.append(Finding.make(
                    "payload-missing", instance, seq,
                    f"entry {seq}: {name} payload was kept but is gone, and no signed "
                    f"payload.erased names {commitment[:12]}… (deleted, not erased)"))
        return self.findings
