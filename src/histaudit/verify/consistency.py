"""Is the ledger today an append-only extension of what a kept checkpoint saw?

:class:`ConsistencyCheck` is fed every leaf of the ledger in leaf order (the rows'
exact bytes), rebuilds the RFC 9162 tree and proves the kept checkpoint's tree is a
prefix of it. A restored older copy (fewer leaves), a rewritten or forked history (the
first leaves hash differently) and deleted instances (a gap in the leaf indices) are
findings about the ledger, not about any one instance. :func:`signed_tree_extends` asks
the same of a newer signed checkpoint, given the first leaves of its tree (a bundle's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from histaudit.ledger import merkle
from histaudit.ledger.checkpoint import Checkpoint, origin_of
from histaudit.ledger.records import StoredEntry

from .check import Parsed, run_checks
from .findings import Finding
from .report import Report, Scope

if TYPE_CHECKING:
    from histaudit.ledger.store import Ledger

LEDGER = "ledger"
"""The instance name ledger-wide findings carry."""


@dataclass(frozen=True)
class ConsistencyResult:
    """The checkpoint's size, the ledger's size now, the proof between them, findings.

    ``proof`` is empty when the old tree was recomputed from its leaves instead
    (:func:`signed_tree_extends`), and after a rollback.
    """

    old_size: int
    size: int
    proof: tuple[bytes, ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def report(self) -> Report:
        return Report(instance_id=f"({LEDGER})", entries=self.size,
                      mode=f"consistency {self.old_size}->{self.size}",
                      findings=self.findings, scope=Scope.LEDGER)


class LeafIndexCheck:
    """Fed every row in leaf order: the leaf index must be exactly 0, 1, … N−1.

    A gap (a deleted entry or instance) is ``leaves-missing``; a leaf stored twice, a
    negative leaf or one that is not an integer (the store hands those over as -1) is
    ``leaf-mismatch``. ``placed`` tells a caller whether the row took the next position.
    """

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.size = 0
        """One past the highest well-placed leaf seen."""
        self.placed = False

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        leaf, self.placed = row.leaf, False
        if leaf < 0:
            self.findings.append(Finding.make(
                "leaf-mismatch", LEDGER, None,
                f"a stored row has ledger leaf {leaf} (negative or not an integer)"))
        elif leaf < self.size:
            self.findings.append(Finding.make(
                "leaf-mismatch", LEDGER, None, f"ledger leaf {leaf} is stored twice"))
        else:
            if leaf > self.size:
                self.findings.append(Finding.make(
                    "leaves-missing", LEDGER, None,
                    f"ledger leaves {self.size}..{leaf - 1} are gone (a deleted instance or "
                    f"entries)"))
            self.size, self.placed = leaf + 1, True

    def finish(self) -> Iterable[Finding]:
        return self.findings


def _leaf_rows_of(leaves: Iterable[tuple[int, bytes]]) -> Iterator[StoredEntry]:
    for leaf, body in leaves:
        yield StoredEntry(leaf, "", 0, "", body, b"")


def leaf_index_report(leaves: Iterable[tuple[int, bytes]]) -> Report:
    """The ledger-wide leaf-index check over (leaf, body) in leaf order, as a report."""
    check = LeafIndexCheck()
    count, findings = run_checks(_leaf_rows_of(leaves), [check], parse=False)
    return Report(instance_id=f"({LEDGER})", entries=count, mode="leaf index",
                  findings=tuple(findings), scope=Scope.LEDGER)


class ConsistencyCheck:
    """Fed the ledger's leaves in order; ``result`` holds the proof once finished."""

    def __init__(self, old: Checkpoint) -> None:
        self.old = old
        self._index = LeafIndexCheck()
        self.findings = self._index.findings
        self._hashes: list[bytes] = []
        self.result: ConsistencyResult | None = None

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        self._index.observe(row, parsed)
        if not self._index.placed:
            return  # reported; it has no position of its own in the tree
        hashes = self._hashes
        hashes.extend([b""] * (row.leaf - len(hashes)))  # keep positions; roots differ
        hashes.append(merkle.leaf_hash(row.body))

    def finish(self) -> Iterable[Finding]:
        old, tree = self.old, merkle.Tree(self._hashes)
        proof: list[bytes] = []
        if tree.size < old.size:
            self.findings.append(Finding.make(
                "checkpoint-rollback", LEDGER, None,
                f"ledger holds {tree.size} leaves, the checkpoint saw {old.size}: restored "
                f"from an older copy or cut"))
        else:
            proof = tree.consistency_proof(old.size)
            if not merkle.verify_consistency(old.size, tree.size, old.root, tree.root(),
                                             proof):
                self.findings.append(Finding.make(
                    "checkpoint-inconsistent", LEDGER, None,
                    f"the first {old.size} leaves no longer hash to the checkpoint's root: "
                    f"the ledger was rewritten, forked or rolled back"))
        self.result = ConsistencyResult(old.size, tree.size, tuple(proof),
                                        tuple(self.findings))
        return self.findings


def check_consistency(ledger: Ledger, old: Checkpoint) -> ConsistencyResult:
    """Prove (RFC 9162 consistency proof) that ``ledger`` extends the checkpoint ``old``.

    The ledger id (``histaudit_meta``) is not signed, so it never decides the outcome: the
    kept checkpoint is checked against the content whatever the id says, and an id other
    than the checkpoint's origin is itself a finding (docs/format.md §11.1). A ledger
    rolled back and renamed still gives ``checkpoint-rollback``.
    """
    check = ConsistencyCheck(old)
    run_checks(_leaf_rows_of(ledger.leaves()), [check], parse=False)
    result = check.result
    assert result is not None
    origin = origin_of(ledger)
    if old.origin == origin:
        return result
    why = ("the content extends that checkpoint, so this ledger's unsigned id was changed"
           if result.ok else "the checkpoint is of another ledger, or this ledger was "
           "changed (the findings below) and its unsigned id edited")
    renamed = Finding.make("ledger-id-mismatch", LEDGER, None,
                           f"the checkpoint names {old.origin}, histaudit_meta says {origin}: "
                           f"{why}")
    return dataclasses.replace(result, findings=(renamed, *result.findings))


def signed_tree_extends(old: Checkpoint, new: Checkpoint,
                        leaf_hashes: Mapping[int, bytes]) -> ConsistencyResult:
    """Is the signed tree ``new`` an append-only extension of the kept checkpoint ``old``?

    ``leaf_hashes`` maps leaf index to leaf hash for (at least) leaves 0 … old.size − 1 of
    ``new``'s tree, each already proven to be that leaf of ``new`` by an inclusion proof
    (a bundle's entries): the root of the first old.size of them is then the root of
    ``new``'s first old.size leaves, and must be ``old``'s root (docs/bundle.md §5.1). A
    larger ``old`` needs no leaves: ``checkpoint-rollback``. Both origins are signed, so
    a different origin names another ledger (or an id edited before the export).
    """
    findings: list[Finding] = []
    if old.origin != new.origin:
        findings.append(Finding.make(
            "ledger-id-mismatch", LEDGER, None,
            f"the kept checkpoint names {old.origin}, the newer one {new.origin}: a "
            f"checkpoint of another ledger, or this ledger's unsigned id was changed"))
    if new.size < old.size:
        findings.append(Finding.make(
            "checkpoint-rollback", LEDGER, None,
            f"the newer checkpoint has {new.size} leaves, the kept one {old.size}: the "
            f"ledger was restored from an older copy or cut"))
    else:
        missing = [i for i in range(old.size) if i not in leaf_hashes]
        if missing:
            raise ValueError(f"{len(missing)} of the first {old.size} leaves are not given")
        _, root = merkle.root_of(leaf_hashes[i] for i in range(old.size))
        if root != old.root:
            findings.append(Finding.make(
                "checkpoint-inconsistent", LEDGER, None,
                f"the first {old.size} leaves of the newer checkpoint's tree do not hash to "
                f"the kept checkpoint's root: the ledger was rewritten, forked or rolled "
                f"back"))
    return ConsistencyResult(old.size, new.size, (), tuple(findings))
