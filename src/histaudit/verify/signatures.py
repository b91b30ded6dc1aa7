"""Keys and signatures: who signed each entry, when, and whether the signature holds.

:class:`KeyCheck` reports an entry signed by a key outside the trust store or outside
that key's validity window; :class:`SignatureCheck` (full mode) verifies every entry's
Ed25519 signature over exactly its stored bytes, on every core
(:class:`histaudit.verify.parallel.EntryPool`), and — given the integrity check — has the
same workers re-check the canonical form of the entries the fast loop passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from histaudit.errors import FormatError
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.records import Entry, StoredEntry

from .check import Parsed
from .findings import Finding
from .parallel import EntryPool


class CanonicalFindings(Protocol):
    """Where the workers' canonical-form outcomes go (the chain's
    :class:`~histaudit.verify.integrity.IntegrityCheck`): its findings so far, and the
    entry at ``place`` among them found not canonical."""

    findings: list[Finding]

    def not_canonical(self, place: int, seq: int) -> None: ...


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


def never_findings(kid: str, trust: TrustStore) -> bool:
    """Whether :func:`key_findings` is empty for ``kid`` whatever the timestamp: a trusted
    key without a validity window never looks at it."""
    key = trust.get(kid)
    return key is not None and key.not_before is None and key.not_after is None


class KeyCheck:
    """Every entry's key is trusted and was valid when the entry was made."""

    def __init__(self, instance: str, trust: TrustStore) -> None:
        self.instance, self.trust = instance, trust
        self.findings: list[Finding] = []

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.observe_valid(row, parsed.instance, parsed.seq, parsed.kind, parsed.kid,
                               parsed.ts, parsed.data)

    def observe_valid(self, row: StoredEntry, instance: str, seq: int, kind: str, kid: str,
                      ts: str, data: Mapping[str, Any]) -> None:
        self.findings += key_findings(kid, ts, seq, self.instance, self.trust, "entry")

    def finish(self) -> Iterable[Finding]:
        return self.findings


class SignatureCheck:
    """Every entry signed by a trusted key carries a valid signature over its bytes.

    ``pool``: the :class:`~histaudit.verify.parallel.EntryPool` of a run over many chains
    (``verify --all --full``), which this check then neither waits for nor closes — its
    owner does, and calls :meth:`drain` once the pool is :meth:`ready` for this chain;
    without one the check has a pool of its own.
    """

    def __init__(self, instance: str, trust: TrustStore, workers: int, *,
                 canonical: CanonicalFindings | None = None, pool: EntryPool | None = None
                 ) -> None:
        self.instance = instance
        self._trusted = frozenset(k.kid for k in trust)
        self._own = pool is None
        self._pool = EntryPool(trust, workers) if pool is None else pool
        self._start = self._pool.queued
        self._end: int | None = None
        self._drained = False
        self._canonical = canonical
        self._bad: list[int] = []

    @property
    def checks_canonical(self) -> bool:
        """Whether entries passed by the fast loop get their canonical form checked here."""
        return self._canonical is not None

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        """A row the fast loop did not pass: its canonical form was checked already."""
        if isinstance(parsed, Entry) and parsed.kid in self._trusted:
            self._pool.add(-1, parsed.seq, parsed.kid, row.body, row.sig)

    def observe_valid(self, row: StoredEntry, instance: str, seq: int, kind: str, kid: str,
                      ts: str, data: Mapping[str, Any]) -> None:
        """A row the fast loop passed (so it has no integrity finding of its own)."""
        canonical = self._canonical
        place = -1 if canonical is None else len(canonical.findings)
        trusted = kid in self._trusted
        if trusted or place >= 0:
            self._pool.add(place, seq, kid if trusted else None, row.body, row.sig)

    def seal(self) -> int:
        """The chain's rows have ended: nothing more is queued for it. Returns the number
        its items end before in the pool's queue."""
        if self._end is None:
            self._end = self._pool.queued
        return self._end

    def ready(self) -> bool:
        """Whether every item of this chain has its outcome (it is sealed if not yet)."""
        return self._pool.done >= self.seal()

    def drain(self) -> None:
        """Wait for this chain's outcomes; hand canonical-form findings to the integrity
        check. Must run before that check's ``finish`` (``finish`` here runs it if not)."""
        if self._drained:
            return
        self._drained = True
        end = self.seal()
        if self._own:
            self._pool.wait(end)
            self._pool.close()
        self._bad, loose = self._pool.take(self._start, end)
        if self._canonical is not None:
            for place, seq in loose:
                self._canonical.not_canonical(place, seq)

    def close(self) -> None:
        if self._own:
            self._pool.close()

    def finish(self) -> Iterable[Finding]:
        self.drain()
        return [Finding.make("signature-invalid", self.instance, seq,
                             f"entry {seq}: Ed25519 signature does not verify")
                for seq in self._bad]
