"""Verification of one instance's chain: integrity first, then behaviour across crashes.

:func:`verify_chain` streams the stored rows once, in constant memory, through the
checks (:mod:`histaudit.verify.check`, fed by the loop of :mod:`histaudit.verify.scan`):
integrity (hash of the exact stored bytes,
parse, sequence, links, leaves), keys, payloads and Ed25519 signatures (``full=True``,
in parallel across cores), the signed head (so a cut tail is caught), behaviour across
crashes, and — when the engine's history is given — the engine cross-check.

This module reads rows it is given. :func:`verify_instance` and :func:`verify_all` take
an open ledger (:class:`histaudit.ledger.store.Ledger`) and only read one consistent
snapshot of it (``ledger.snapshot()``), so nothing here imports the store.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from histaudit.ledger.keys import TrustStore
from histaudit.ledger.records import StoredEntry, StoredHead

from .behaviour import BehaviourCheck
from .check import ChainCheck
from .consistency import leaf_index_report
from .crosscheck import EngineCrossCheck
from .integrity import HeadCheck, IntegrityCheck
from .payloads import PayloadBatchLookup, PayloadCheck, PayloadLookup
from .progress import Progress, Tally
from .report import Report, finding_order
from .scan import ChainScan
from .signatures import KeyCheck, SignatureCheck

if TYPE_CHECKING:
    from histaudit.ledger.store import Ledger, Snapshot

__all__ = ["verify_all", "verify_chain", "verify_in", "verify_instance"]


def verify_chain(instance: str, rows: Iterable[StoredEntry], head: StoredHead | None, *,
                 trust: TrustStore, full: bool = False, workers: int | None = None,
                 payload_lookup: PayloadLookup | None = None,
                 payloads_lookup: PayloadBatchLookup | None = None,
                 engine_history: Iterable[Any] | None = None,
                 engine_lookup: PayloadLookup | None = None) -> Report:
    """Verify one instance from its stored rows (in stored order) and its signed head.

    ``payload_lookup(commitment) -> (salt, bytes) | None`` enables payload checks
    (``payloads_lookup``, many commitments at once, makes them cheaper);
    ``engine_history`` (the engine's HistoryEvents of the instance) the engine
    cross-check, which compares results through ``engine_lookup`` (stored payloads).
    """
    integrity = IntegrityCheck(instance, canonical=full)
    keys = KeyCheck(instance, trust)
    checks: list[ChainCheck] = [integrity, keys]
    if payload_lookup is not None:
        checks.append(PayloadCheck(payload_lookup, payloads_lookup))
    signatures = None
    if full:
        signatures = SignatureCheck(instance, trust, workers or os.cpu_count() or 1,
                                    canonical=integrity)
        checks.append(signatures)
    head_check, behaviour = HeadCheck(instance, head, integrity, trust), BehaviourCheck(instance)
    checks += [head_check, behaviour]
    mode = "full" if full else "default"
    if engine_history is not None:
        checks.append(EngineCrossCheck(instance, engine_history,
                                       engine_lookup or (lambda _c: None)))
        mode += "+engine"
    scan = ChainScan(instance, trust, integrity=integrity, keys=keys, head=head_check,
                     behaviour=behaviour, checks=checks)
    try:
        count = scan.run(rows)
        if signatures is not None:
            signatures.drain()
        findings = [f for check in checks for f in check.finish()]
    finally:
        behaviour.close()
        if signatures is not None:
            signatures.close()
    findings.sort(key=finding_order)
    return Report(instance_id=instance, entries=count, mode=mode, findings=tuple(findings))


def verify_instance(ledger: Ledger, instance: str, *, trust: TrustStore, full: bool = False,
                    workers: int | None = None,
                    engine_history: Iterable[Any] | None = None,
                    progress: Progress | None = None, total: int | None = None) -> Report:
    """Verify one instance stored in ``ledger`` (with the engine's history: cross-check).

    The head, the entries and the payloads come from one consistent snapshot of the
    ledger (:meth:`~histaudit.ledger.store.Ledger.snapshot`), so writers appending
    meanwhile cannot make the head look behind its entries. ``progress(done, total)``
    hears how many entries were read, every few hundred (``total``: the caller's
    estimate, passed through).
    """
    with ledger.snapshot() as snap:
        return verify_in(snap, instance, trust=trust, full=full, workers=workers,
                          engine_history=engine_history, tally=Tally(progress, total))


def verify_in(snap: Snapshot, instance: str, *, trust: TrustStore, full: bool = False,
              workers: int | None = None, engine_history: Iterable[Any] | None = None,
              tally: Tally | None = None) -> Report:
    """:func:`verify_instance` inside a snapshot the caller holds (``list`` verifies every
    instance it lists in the one snapshot it lists them from)."""
    rows = snap.entries(instance)
    report = verify_chain(instance, rows if tally is None else tally.count(rows),
                          snap.head(instance), trust=trust, full=full, workers=workers,
                          payload_lookup=snap.payload if full else None,
                          payloads_lookup=snap.payloads if full else None,
                          engine_history=engine_history, engine_lookup=snap.payload)
    if tally is not None:
        tally.tell()  # the last few rows
    return report


def verify_all(ledger: Ledger, *, trust: TrustStore, full: bool = False,
               workers: int | None = None) -> Iterator[Report]:
    """Verify every instance, then the ledger-wide leaf index, from one snapshot.

    The leaf index must be 0..N-1 without a gap or a duplicate (docs/format.md §11): a
    ledger-wide report (scope ``ledger``) follows the instances' reports when it is not.
    """
    with ledger.snapshot() as snap:
        for instance in snap.instance_ids():
            yield verify_in(snap, instance, trust=trust, full=full, workers=workers)
        leaves = leaf_index_report(snap.leaves())
        if not leaves.ok:
            yield leaves
