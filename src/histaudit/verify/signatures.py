"""Keys and signatures: who signed each entry, when, and whether the signature holds.

:class:`KeyCheck` reports an entry signed by a key outside the trust store or outside
that key's validity window; :class:`SignatureCheck` (full mode) verifies every entry's
Ed25519 signature over exactly its stored bytes, in parallel
(:class:`histaudit.ledger.keys.BatchVerifier`).
"""

from __future__ import annotations

from collections.abc import Iterable

from histaudit.errors import FormatError
from histaudit.ledger.keys import BatchVerifier, TrustStore
from histaudit.ledger.records import Entry, StoredEntry

from .check import Parsed
from .findings import Finding


def key_findings(kid: str, ts: str, seq: int | None, instance: str, trust: TrustStore,
                 what: str) -> list[Finding]:
    """Is ``kid`` trusted, and was ``ts`` inside its window? (``what``: "entry", …)."""
    key = trust.get(kid)
    if key is None:
        return [Finding.make("key-untrusted", instance, seq,
                             f"{what} {seq} signed by key {kid}, not in the trust store")]
    try:
        inside = key.valid_at(ts)
    except FormatError:
        return [Finding.make("entry-malformed", instance, seq,
                             f"{what} {seq}: bad timestamp {ts!r}")]
    if inside:
        return []
    return [Finding.make("key-outside-window", instance, seq,
                         f"{what} {seq} at {ts} signed by key {kid}, valid "
                         f"{key.not_before or '-∞'} .. {key.not_after or '+∞'}")]


class KeyCheck:
    """Every entry's key is trusted and was valid when the entry was made."""

    def __init__(self, instance: str, trust: TrustStore) -> None:
        self.instance, self.trust = instance, trust
        self.findings: list[Finding] = []

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.findings += key_findings(parsed.kid, parsed.ts, parsed.seq, self.instance,
                                          self.trust, "entry")

    def finish(self) -> Iterable[Finding]:
        return self.findings


class SignatureCheck:
    """Every entry signed by a trusted key carries a valid signature over its bytes."""

    def __init__(self, instance: str, trust: TrustStore, workers: int) -> None:
        self.instance, self.trust = instance, trust
        self._batch = BatchVerifier(trust, workers)

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry) and parsed.kid in self.trust:
            self._batch.add(parsed.seq, parsed.kid, row.body, row.sig)

    def finish(self) -> Iterable[Finding]:
        return [Finding.make("signature-invalid", self.instance, seq,
                             f"entry {seq}: Ed25519 signature does not verify")
                for seq in self._batch.finish()]
