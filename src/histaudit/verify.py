"""Verification of one instance's chain: integrity first, then behaviour across crashes.

The verifier streams the stored rows once, in constant memory. For each row it hashes
the exact stored bytes, parses them, and checks sequence, link, key and (with
``full=True``) the Ed25519 signature — in parallel across cores. At the end it checks the
signed head, so a cut tail is caught. Behaviour analysis (re-execution, side effects)
reads the same parsed entries; see :mod:`histaudit.behaviour`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import format as fmt
from .canonical import canonical_bytes
from .behaviour import BehaviourAnalyzer
from .errors import FormatError, VerificationError
from .findings import Finding, Severity
from .keys import TrustStore
from .store import Ledger, StoredEntry, StoredHead

SIG_CHUNK = 2048


@dataclass(frozen=True)
class Report:
    """The outcome of verifying one instance. ``bool(report)`` is True when it is clean."""

    instance_id: str
    entries: int
    mode: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """No finding at error severity."""
        return not self.failing(Severity.ERROR)

    def __bool__(self) -> bool:
        return self.ok

    def failing(self, threshold: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= threshold]

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def raise_for_findings(self, threshold: Severity = Severity.ERROR) -> None:
        bad = self.failing(threshold)
        if bad:
            raise VerificationError(
                f"instance {self.instance_id}: {len(bad)} finding(s) at or above {threshold}, "
                f"first: {bad[0].code} at entry {bad[0].seq}: {bad[0].message}", self)

    def to_json(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "ok": self.ok, "entries": self.entries,
                "mode": self.mode, "findings": [f.to_json() for f in self.findings]}


def _verify_chunk(keys: dict[str, bytes], items: list[tuple[int, str, bytes, bytes]]
                  ) -> list[int]:
    """Worker: Ed25519-verify (seq, kid, body, sig) items; return the seqs that fail."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    loaded = {kid: Ed25519PublicKey.from_public_bytes(raw) for kid, raw in keys.items()}
    bad = []
    for seq, kid, body, sig in items:
        try:
            loaded[kid].verify(sig, body)
        except InvalidSignature:
            bad.append(seq)
    return bad


class _SignatureChecker:
    """Checks signatures in chunks, on a process pool when there is more than one core."""

    def __init__(self, trust: TrustStore, workers: int) -> None:
        self._keys = {k.kid: k.raw for k in trust}
        self._workers = workers
        self._pool: Executor | None = None
        self._pending: list[Future[list[int]]] = []
        self._batch: list[tuple[int, str, bytes, bytes]] = []
        self.bad: list[int] = []

    def add(self, seq: int, kid: str, body: bytes, sig: bytes) -> None:
        self._batch.append((seq, kid, body, sig))
        if len(self._batch) >= SIG_CHUNK:
            self._flush()

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._workers <= 1:
            self.bad.extend(_verify_chunk(self._keys, batch))
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self._workers)
        self._pending.append(self._pool.submit(_verify_chunk, self._keys, batch))
        # Bounded in-flight work keeps memory constant on very large instances.
        while len(self._pending) > 2 * self._workers:
            self.bad.extend(self._pending.pop(0).result())

    def finish(self) -> list[int]:
        self._flush()
        for fut in self._pending:
            self.bad.extend(fut.result())
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown()
        return self.bad


def verify_chain(instance: str, rows: Iterable[StoredEntry], head: StoredHead | None, *,
                 trust: TrustStore, full: bool = False, workers: int | None = None,
                 payload_lookup: Any = None) -> Report:
    """Verify one instance from its stored rows (in stored order) and its signed head.

    ``payload_lookup(commitment) -> (salt, bytes) | None`` enables payload checks.
    Shared by database verification and (later) bundle verification.
    """
    findings: list[Finding] = []
    add = findings.append
    behaviour = BehaviourAnalyzer(instance)
    sigs = _SignatureChecker(trust, workers or os.cpu_count() or 1) if full else None
    last_seq, last_hash, count = 0, fmt.GENESIS_PREV, 0
    last_leaf = tip_leaf = -1  # leaf of the previous row; leaf of entry last_seq

    for row in rows:
        count += 1
        digest = fmt.sha256_hex(row.body)
        if digest != row.hash:
            add(Finding.make("body-changed", instance, row.seq,
                             f"entry {row.seq}: stored bytes hash to {digest[:12]}…, "
                             f"recorded {row.hash[:12]}…"))
        try:
            entry = fmt.parse_entry(row.body)
        except FormatError as exc:
            add(Finding.make("entry-malformed", instance, row.seq, f"entry {row.seq}: {exc}"))
            if row.seq >= last_seq:
                last_seq, last_hash = row.seq, digest
            continue
        if full and not _is_canonical(entry):
            add(Finding.make("entry-malformed", instance, entry.seq,
                             f"entry {entry.seq}: bytes are not in canonical form "
                             f"(docs/format.md §Canonical JSON)"))
        if entry.instance != instance:
            add(Finding.make("instance-mismatch", instance, entry.seq,
                             f"entry {entry.seq} names instance {entry.instance!r}"))
        expected = last_seq + 1
        if entry.seq == expected:
            if entry.prev != last_hash:
                add(Finding.make("link-broken", instance, entry.seq,
                                 f"entry {entry.seq}: previous-hash mismatch (entry says "
                                 f"{entry.prev[:12]}…, entry {last_seq} hashes to "
                                 f"{last_hash[:12]}…)"))
        elif entry.seq > expected:
            add(Finding.make("seq-gap", instance, entry.seq,
                             f"entries {expected}..{entry.seq - 1} are missing"))
        elif entry.seq == last_seq:
            add(Finding.make("seq-duplicate", instance, entry.seq,
                             f"entry {entry.seq} appears twice (chain forked)"))
        else:
            add(Finding.make("seq-reordered", instance, entry.seq,
                             f"entry {entry.seq} stored after entry {last_seq}"))
        if entry.leaf != row.leaf:
            add(Finding.make("leaf-mismatch", instance, entry.seq,
                             f"entry {entry.seq} says ledger leaf {entry.leaf}, stored as leaf "
                             f"{row.leaf}"))
        if entry.leaf <= last_leaf:
            add(Finding.make("seq-reordered", instance, entry.seq,
                             f"entry {entry.seq} has ledger leaf {entry.leaf}, not after the "
                             f"previous entry's leaf {last_leaf}"))
        _check_key(entry.kid, entry.ts, entry.seq, instance, trust, add, "entry")
        if sigs is not None and entry.kid in trust:
            sigs.add(entry.seq, entry.kid, row.body, row.sig)
        if payload_lookup is not None:
            _check_payloads(entry, payload_lookup, add)
        behaviour.observe(entry)
        # A stray older entry (reordered) must not replace the hash of entry last_seq:
        # the next entry links to, and the head signs, the newest one.
        if entry.seq >= last_seq:
            last_seq, last_hash, tip_leaf = entry.seq, digest, entry.leaf
        last_leaf = entry.leaf

    if sigs is not None:
        for seq in sigs.finish():
            add(Finding.make("signature-invalid", instance, seq,
                             f"entry {seq}: Ed25519 signature does not verify"))
    if count == 0 and head is None:
        add(Finding.make("instance-missing", instance, None,
                         f"no entries and no head stored for {instance!r}"))
    else:
        _check_head(instance, head, last_seq, last_hash, tip_leaf, trust, add)
    findings.extend(behaviour.finish())
    findings.sort(key=lambda f: (f.seq if f.seq is not None else 1 << 62, -f.severity))
    return Report(instance_id=instance, entries=count, mode="full" if full else "default",
                  findings=tuple(findings))


def _is_canonical(entry: fmt.Entry) -> bool:
    """Do the stored bytes equal the canonical form of what they parse to?

    Signatures hold over any bytes; this catches bodies that two parsers could read
    differently (duplicate keys, whitespace, ``-0``). Checked in ``--full`` mode.
    """
    try:
        return canonical_bytes(orjson.loads(entry.body)) == entry.body
    except (FormatError, orjson.JSONDecodeError):
        return False


def _check_key(kid: str, ts: str, seq: int | None, instance: str, trust: TrustStore,
               add: Any, what: str) -> None:
    key = trust.get(kid)
    if key is None:
        add(Finding.make("key-untrusted", instance, seq,
                         f"{what} {seq} signed by key {kid}, not in the trust store"))
        return
    try:
        inside = key.valid_at(ts)
    except ValueError:
        add(Finding.make("entry-malformed", instance, seq, f"{what} {seq}: bad timestamp {ts!r}"))
        return
    if not inside:
        add(Finding.make("key-outside-window", instance, seq,
                         f"{what} {seq} at {ts} signed by key {kid}, valid "
                         f"{key.not_before or '-∞'} .. {key.not_after or '+∞'}"))


def _check_payloads(entry: fmt.Entry, lookup: Any, add: Any) -> None:
    for name, ref in entry.data.items():
        if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
            continue
        stored = lookup(ref["c"])
        if stored is None:
            continue  # erased, or never kept: the commitment alone still verifies
        salt, data = stored
        if not fmt.commitment_matches(ref["c"], data, salt):
            add(Finding.make("payload-mismatch", entry.instance, entry.seq,
                             f"entry {entry.seq}: stored {name} payload does not match its "
                             f"commitment"))


def _check_head(instance: str, head: StoredHead | None, last_seq: int, last_hash: str,
                last_leaf: int, trust: TrustStore, add: Any) -> None:
    if head is None:
        add(Finding.make("head-missing", instance, last_seq,
                         f"{last_seq} entries stored but no signed head"))
        return
    try:
        parsed = fmt.parse_head(head.body)
    except FormatError as exc:
        add(Finding.make("head-invalid", instance, None, f"signed head: {exc}"))
        return
    key = trust.get(parsed.kid)
    if key is None:
        add(Finding.make("key-untrusted", instance, parsed.seq,
                         f"head signed by key {parsed.kid}, not in the trust store"))
        return
    if not key.verify(head.sig, head.body):
        add(Finding.make("head-invalid", instance, parsed.seq,
                         "signed head: Ed25519 signature does not verify"))
        return
    _check_key(parsed.kid, parsed.ts, parsed.seq, instance, trust, add, "head at entry")
    if parsed.instance != instance:
        add(Finding.make("head-mismatch", instance, parsed.seq,
                         f"signed head belongs to instance {parsed.instance!r}"))
    elif parsed.seq > last_seq:
        add(Finding.make("tail-truncated", instance, parsed.seq,
                         f"signed head is at entry {parsed.seq}, only {last_seq} stored: "
                         f"entries {last_seq + 1}..{parsed.seq} were cut"))
    elif parsed.seq < last_seq:
        add(Finding.make("head-mismatch", instance, last_seq,
                         f"signed head is at entry {parsed.seq} but {last_seq} are stored: "
                         f"entries after the head were never signed into it"))
    elif parsed.hash != last_hash:
        add(Finding.make("head-mismatch", instance, parsed.seq,
                         f"signed head hash {parsed.hash[:12]}… differs from entry "
                         f"{parsed.seq} ({last_hash[:12]}…)"))
    elif parsed.leaf != last_leaf:
        add(Finding.make("head-mismatch", instance, parsed.seq,
                         f"signed head names leaf {parsed.leaf}, entry {parsed.seq} is leaf "
                         f"{last_leaf}"))


def verify_instance(ledger: Ledger, instance: str, *, trust: TrustStore, full: bool = False,
                    workers: int | None = None) -> Report:
    """Verify one instance stored in ``ledger``."""
    return verify_chain(instance, ledger.entries(instance), ledger.head(instance), trust=trust,
                        full=full, workers=workers,
                        payload_lookup=ledger.payload if full else None)


def verify_all(ledger: Ledger, *, trust: TrustStore, full: bool = False,
               workers: int | None = None) -> Iterator[Report]:
    for instance in ledger.instance_ids():
        yield verify_instance(ledger, instance, trust=trust, full=full, workers=workers)
