"""Is the ledger today an append-only extension of what a kept checkpoint saw?

:class:`ConsistencyCheck` is fed every leaf of the ledger in leaf order (the rows'
exact bytes), rebuilds the RFC 9162 tree and proves the kept checkpoint's tree is a
prefix of it. A restored older copy (fewer leaves), a rewritten or forked history (the
first leaves hash differently) and deleted instances (a gap in the leaf indices) are
findings about the ledger, not about any one instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from histaudit.errors import InputError
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
    """The checkpoint's size, the ledger's size now, the proof between them, findings."""

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


class ConsistencyCheck:
    """Fed the ledger's leaves in order; ``result`` holds the proof once finished."""

    def __init__(self, old: Checkpoint) -> None:
        self.old = old
        self.findings: list[Finding] = []
        self._hashes: list[bytes] = []
        self.result: ConsistencyResult | None = None

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        hashes = self._hashes
        if row.leaf != len(hashes):
            self.findings.append(Finding.make(
                "leaves-missing", LEDGER, None,
                f"ledger leaves {len(hashes)}..{row.leaf - 1} are gone (a deleted instance or "
                f"entries)"))
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


def _leaf_rows(ledger: Ledger) -> Iterator[StoredEntry]:
    for leaf, body in ledger.leaves():
        yield StoredEntry(leaf, "", 0, "", body, b"")


def check_consistency(ledger: Ledger, old: Checkpoint) -> ConsistencyResult:
    """Prove (RFC 9162 consistency proof) that ``ledger`` extends the checkpoint ``old``."""
    if old.origin != origin_of(ledger):
        raise InputError(f"checkpoint is from another ledger ({old.origin}, this is "
                         f"{origin_of(ledger)})")
    check = ConsistencyCheck(old)
    run_checks(_leaf_rows(ledger), [check], parse=False)
    assert check.result is not None
    return check.result
