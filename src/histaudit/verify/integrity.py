"""Integrity of one chain: bytes, parsing, sequence, links, leaves, and the signed head.

:class:`IntegrityCheck` hashes the exact stored bytes of each row and checks that the
entries form one chain — contiguous ``seq`` from 1, each ``prev`` the hash of the entry
before, increasing ledger-wide ``leaf`` — and (in full mode) that the bytes are in
canonical form. :class:`HeadCheck` then compares the instance's signed head with the
newest entry, so a cut tail or a head left behind is caught.

The canonical-form check of an entry may be done elsewhere (a worker process, see
:mod:`histaudit.verify.parallel`) and its finding handed back later with
:meth:`IntegrityCheck.not_canonical`: it takes the place in the findings it would have
had, so the report does not depend on where the check ran.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from histaudit.errors import FormatError
from histaudit.ledger import records as rec
from histaudit.ledger.canonical import is_canonical
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.records import shown_id

from .check import Parsed
from .ed25519 import Ed25519Verifier
from .findings import Finding
from .signatures import key_findings


class ChainTip:
    """Where one instance's chain stands, and the rule for its next link.

    ``seq``, ``hash`` and ``leaf`` are the newest entry's (what the next entry links to
    and the signed head must name); ``last_leaf`` is the previous row's leaf, which the
    next must exceed. :class:`IntegrityCheck` and the fast path of
    :class:`~histaudit.verify.scan.ChainScan` move one such object: the rule is
    :meth:`advance`, used by both, and how a misplaced entry moves it is :meth:`jump`.
    """

    __slots__ = ("hash", "last_leaf", "leaf", "seq")

    def __init__(self) -> None:
        self.seq, self.hash, self.leaf, self.last_leaf = 0, rec.GENESIS_PREV, -1, -1

    def advance(self, seq: int, prev: object, leaf: int, digest: str) -> bool:
        """If an entry with this ``seq``, ``prev`` and ``leaf`` (ints, as the caller has
        checked) is the next link — seq one past the tip, prev the tip's hash, leaf after
        the previous row's — move to it (``digest``: its hash) and say True; else change
        nothing and say False."""
        if seq == self.seq + 1 and prev == self.hash and leaf > self.last_leaf:
            self.seq, self.hash, self.leaf, self.last_leaf = seq, digest, leaf, leaf
            return True
        return False

    def jump(self, seq: int, digest: str, leaf: int | None) -> None:
        """Move past an entry that is not the next link (``leaf`` None: its body could
        not be read, so its leaf is unknown and the leaves stay). A stray older entry
        (reordered) does not replace the newest: the next entry links to, and the head
        signs, the newest one. Its leaf is the previous row's all the same."""
        if seq >= self.seq:
            self.seq, self.hash = seq, digest
            if leaf is not None:
                self.leaf = leaf
        if leaf is not None:
            self.last_leaf = leaf


class IntegrityCheck:
    """Hashes, parsing, sequence, links and leaves of one instance's rows."""

    def __init__(self, instance: str, *, canonical: bool = False) -> None:
        self.instance = instance
        self.canonical = canonical
        self.findings: list[Finding] = []
        self.tip = ChainTip()
        """Where the chain stands; :class:`~histaudit.verify.scan.ChainScan` moves the
        same object for the rows it checks itself."""
        self._late: list[tuple[int, Finding]] = []  # (place in findings, finding)

    def _add(self, code: str, seq: int | None, message: str) -> None:
        self.findings.append(Finding.make(code, self.instance, seq, message))

    def observe(self, row: rec.StoredEntry, parsed: Parsed) -> None:
        digest = rec.sha256_hex(row.body)
        if digest != row.hash:
            self._add("body-changed", row.seq, f"entry {row.seq}: stored bytes hash to "
                                               f"{digest[:12]}…, recorded {row.hash[:12]}…")
        if not isinstance(parsed, rec.Entry):
            self._add("entry-malformed", row.seq, f"entry {row.seq}: {parsed}")
            self.tip.jump(row.seq, digest, None)
            return
        entry = parsed
        if self.canonical and not is_canonical(entry.body):
            self._add("entry-malformed", entry.seq, _NOT_CANONICAL.format(seq=entry.seq))
        if entry.instance != self.instance:
            self._add("instance-mismatch", entry.seq,
                      f"entry {entry.seq} names instance {shown_id(entry.instance)}")
        if row.seq != entry.seq:
            # The seq column is an unsigned index; what counts is the signed body's seq.
            self._add("entry-malformed", entry.seq,
                      f"entry {entry.seq} is stored with seq column {row.seq}")
        tip = self.tip
        tip_seq, tip_hash, last_leaf = tip.seq, tip.hash, tip.last_leaf
        linked = tip.advance(entry.seq, entry.prev, entry.leaf, digest)
        if not linked:
            self._misplaced(entry, tip_seq, tip_hash)
        if entry.leaf != row.leaf:
            self._add("leaf-mismatch", entry.seq, f"entry {entry.seq} says ledger leaf "
                                                  f"{entry.leaf}, stored as leaf {row.leaf}")
        if not linked:
            if entry.leaf <= last_leaf:
                self._add("seq-reordered", entry.seq,
                          f"entry {entry.seq} has ledger leaf {entry.leaf}, not after the "
                          f"previous entry's leaf {last_leaf}")
            tip.jump(entry.seq, digest, entry.leaf)

    def _misplaced(self, entry: rec.Entry, tip_seq: int, tip_hash: str) -> None:
        """The finding for an entry that is not the next link, if its seq or prev say
        why (a leaf out of order alone is reported by the caller)."""
        expected = tip_seq + 1
        if entry.seq == expected:
            if entry.prev != tip_hash:
                self._add("link-broken", entry.seq,
                          f"entry {entry.seq}: previous-hash mismatch (entry says "
                          f"{entry.prev[:12]}…, entry {tip_seq} hashes to "
                          f"{tip_hash[:12]}…)")
        elif entry.seq > expected:
            self._add("seq-gap", entry.seq, f"entries {expected}..{entry.seq - 1} are missing")
        elif entry.seq == tip_seq:
            self._add("seq-duplicate", entry.seq,
                      f"entry {entry.seq} appears twice (chain forked)")
        else:
            self._add("seq-reordered", entry.seq,
                      f"entry {entry.seq} stored after entry {tip_seq}")

    def not_canonical(self, place: int, seq: int) -> None:
        """An entry checked elsewhere is not in canonical form; ``place`` is how many
        findings this check held when the entry was observed (the entry had none)."""
        self._late.append((place, Finding.make("entry-malformed", self.instance, seq,
                                               _NOT_CANONICAL.format(seq=seq))))

    def finish(self) -> Iterable[Finding]:
        if not self._late:
            return self.findings
        out: list[Finding] = []
        done = 0
        for place, finding in sorted(self._late, key=lambda late: late[0]):
            out += self.findings[done:place]
            out.append(finding)
            done = place
        return out + self.findings[done:]


_NOT_CANONICAL = "entry {seq}: bytes are not in canonical form (docs/format.md §Canonical JSON)"


class HeadCheck:
    """The signed head must name the newest entry: its seq, hash and leaf."""

    def __init__(self, instance: str, head: rec.StoredHead | None, chain: IntegrityCheck,
                 trust: TrustStore) -> None:
        self.instance, self.head, self.chain, self.trust = instance, head, chain, trust
        self.rows = 0
        """Rows observed (a loop that does not call ``observe`` for each adds its count)."""

    def observe(self, row: rec.StoredEntry, parsed: Parsed) -> None:
        self.rows += 1

    def finish(self) -> Iterable[Finding]:
        instance, head = self.instance, self.head
        if self.rows == 0 and head is None:
            return [Finding.make("instance-missing", instance, None,
                                 f"no entries and no head stored for {shown_id(instance)}")]
        tip = self.chain.tip
        last_seq, last_hash, last_leaf = tip.seq, tip.hash, tip.leaf
        if head is None:
            return [Finding.make("head-missing", instance, last_seq,
                                 f"{last_seq} entries stored but no signed head")]
        try:
            parsed = rec.parse_head(head.body)
        except FormatError as exc:
            return [Finding.make("head-invalid", instance, None, f"signed head: {exc}")]
        key = self.trust.get(parsed.kid)
        if key is None:
            return [Finding.make("key-untrusted", instance, parsed.seq,
                                 f"head signed by key {parsed.kid}, not in the trust store")]
        if not _verifier(key.raw).verify(head.sig, head.body):
            return [Finding.make("head-invalid", instance, parsed.seq,
                                 "signed head: Ed25519 signature does not verify")]
        out = key_findings(parsed.kid, parsed.ts, parsed.seq, instance, self.trust,
                           "head at entry")
        if head.seq != parsed.seq:
            # The seq column is unsigned: what counts is the body, but a column that
            # disagrees with it was edited (and would misdirect a reader that trusted it).
            out.append(Finding.make("head-mismatch", instance, parsed.seq,
                                    f"signed head is at entry {parsed.seq}, stored with seq "
                                    f"column {head.seq}"))
        if parsed.instance != instance:
            out.append(Finding.make("head-mismatch", instance, parsed.seq,
                                    f"signed head belongs to instance "
                                    f"{shown_id(parsed.instance)}"))
        elif parsed.seq > last_seq:
            out.append(Finding.make(
                "tail-truncated", instance, parsed.seq,
                f"signed head is at entry {parsed.seq}, only {last_seq} stored: entries "
                f"{last_seq + 1}..{parsed.seq} were cut"))
        elif parsed.seq < last_seq:
            out.append(Finding.make(
                "head-mismatch", instance, last_seq,
                f"signed head is at entry {parsed.seq} but {last_seq} are stored: entries "
                f"after the head were never signed into it"))
        elif parsed.hash != last_hash:
            out.append(Finding.make(
                "head-mismatch", instance, parsed.seq,
                f"signed head hash {parsed.hash[:12]}… differs from entry {parsed.seq} "
                f"({last_hash[:12]}…)"))
        elif parsed.leaf != last_leaf:
            out.append(Finding.make(
                "head-mismatch", instance, parsed.seq,
                f"signed head names leaf {parsed.leaf}, entry {parsed.seq} is leaf "
                f"{last_leaf}"))
        return out


@functools.lru_cache(maxsize=64)
def _verifier(raw: bytes) -> Ed25519Verifier:
    """One verifier per trusted key, reused for every head (``verify --all`` checks one
    head per instance: the key was parsed again each time, and OpenSSL is the slower
    library; :mod:`.ed25519` keeps its verdict)."""
    return Ed25519Verifier(raw)
