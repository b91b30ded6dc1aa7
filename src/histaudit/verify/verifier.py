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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from histaudit.errors import FormatError
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.records import Entry, StoredEntry, StoredHead, parse_entry

from .behaviour import BehaviourCheck
from .check import ChainCheck
from .consistency import leaf_index_report
from .crosscheck import EngineCrossCheck, Lineage
from .findings import Finding
from .integrity import HeadCheck, IntegrityCheck
from .parallel import EntryPool
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
    chain = _Chain(instance, head, trust=trust, full=full, workers=workers,
                   payload_lookup=payload_lookup, payloads_lookup=payloads_lookup,
                   engine_history=engine_history, engine_lookup=engine_lookup)
    try:
        chain.scan((rows,))
        return chain.report()
    finally:
        chain.close()


class _Chain:
    """The checks of one chain. After :meth:`scan` every check has its findings but, in
    full mode, the two that wait for the signature pool (signatures and the canonical
    form): :meth:`report` waits for those. With a shared ``pool`` (``verify --all
    --full``) the caller asks :meth:`ready` first, and meanwhile scans the next chains."""

    def __init__(self, instance: str, head: StoredHead | None, *, trust: TrustStore,
                 full: bool, workers: int | None, payload_lookup: PayloadLookup | None,
                 payloads_lookup: PayloadBatchLookup | None,
                 engine_history: Iterable[Any] | None, engine_lookup: PayloadLookup | None,
                 pool: EntryPool | None = None, lineage: Lineage | None = None) -> None:
        self.instance, self.count = instance, 0
        self.integrity = IntegrityCheck(instance, canonical=full)
        keys = KeyCheck(instance, trust)
        self.checks: list[ChainCheck] = [self.integrity, keys]
        if payload_lookup is not None:
            self.checks.append(PayloadCheck(payload_lookup, payloads_lookup))
        self.signatures = None
        if full:
            self.signatures = SignatureCheck(instance, trust, _processes(workers),
                                             canonical=self.integrity, pool=pool)
            self.checks.append(self.signatures)
        head_check = HeadCheck(instance, head, self.integrity, trust)
        # a failure's message is quoted from whichever stored payloads the chain is given
        # (verify_in hands every chain the snapshot's: one read per failed instance)
        self.behaviour = BehaviourCheck(instance, payloads=payload_lookup or engine_lookup)
        self.checks += [head_check, self.behaviour]
        self.mode = "full" if full else "default"
        if engine_history is not None:
            self.checks.append(EngineCrossCheck(instance, engine_history,
                                                engine_lookup or (lambda _c: None),
                                                lineage=lineage))
            self.mode += "+engine"
        self._scan = ChainScan(instance, trust, integrity=self.integrity, keys=keys,
                               head=head_check, behaviour=self.behaviour, checks=self.checks)
        self._found: list[Iterable[Finding] | None] = []

    def scan(self, chunks: Iterable[Iterable[Any]],
             as_entry: Callable[[Any], StoredEntry] | None = None) -> None:
        """Feed the rows, in chunks (StoredEntry values, or a snapshot's raw
        ``entry_chunks`` with its ``as_entry``: see :meth:`ChainScan.run`); finish every
        check that does not wait for the signature pool."""
        self.count = self._scan.run(chunks, as_entry)
        waits = {id(self.integrity), id(self.signatures)} if self.signatures else set()
        self._found = [None if id(c) in waits else list(c.finish()) for c in self.checks]
        self.behaviour.close()
        if self.signatures is not None:
            self.signatures.seal()

    def ready(self) -> bool:
        """Whether :meth:`report` would not wait."""
        return self.signatures is None or self.signatures.ready()

    def report(self) -> Report:
        if self.signatures is not None:
            self.signatures.drain()
        found = [f for check, done in zip(self.checks, self._found, strict=True)
                 for f in (check.finish() if done is None else done)]
        found.sort(key=finding_order)
        return Report(instance_id=self.instance, entries=self.count, mode=self.mode,
                      findings=tuple(found))

    def close(self) -> None:
        self.behaviour.close()
        if self.signatures is not None:
            self.signatures.close()


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
    chain = _chain_in(snap, instance, trust=trust, full=full, workers=workers,
                      engine_history=engine_history)
    try:
        chunks, as_entry = snap.entry_chunks(instance)
        chain.scan(chunks if tally is None else tally.count_chunks(chunks), as_entry)
        if tally is not None:
            tally.tell()  # the last few rows
        return chain.report()
    finally:
        chain.close()


def _chain_in(snap: Snapshot, instance: str, *, trust: TrustStore, full: bool,
              workers: int | None, engine_history: Iterable[Any] | None = None,
              pool: EntryPool | None = None) -> _Chain:
    return _Chain(instance, snap.head(instance), trust=trust, full=full, workers=workers,
                  payload_lookup=snap.payload if full else None,
                  payloads_lookup=snap.payloads if full else None,
                  engine_history=engine_history, engine_lookup=snap.payload, pool=pool,
                  lineage=lambda source: _parsed(snap.entries(source)))


def _parsed(rows: Iterable[StoredEntry]) -> Iterator[Entry]:
    """The rows' entries that parse (the source's own verification reports the others)."""
    for row in rows:
        try:
            yield parse_entry(row.body)
        except FormatError:
            continue


def _processes(workers: int | None) -> int:
    """Signature-checking processes: ``workers``, by default one per core."""
    return workers or os.cpu_count() or 1


WAITING = 4096
"""Chains ``verify --all --full`` keeps scanned ahead of the signature pool at most."""


def verify_all(ledger: Ledger, *, trust: TrustStore, full: bool = False,
               workers: int | None = None) -> Iterator[Report]:
    """Verify every instance, then the ledger-wide leaf index, from one snapshot.

    In full mode one pool of worker processes checks the signatures of every instance:
    a chunk holds the entries of as many small instances as fit, and an instance's report
    follows once its chunks are back (reports stay in instance order), while the next
    instances are read. The leaf index must be 0..N-1 without a gap or a duplicate
    (docs/format.md §11): a ledger-wide report (scope ``ledger``) follows the instances'
    reports when it is not.
    """
    with ledger.snapshot() as snap:
        pool = EntryPool(trust, _processes(workers)) if full else None
        waiting: deque[_Chain] = deque()
        try:
            for instance in snap.instance_ids():
                chain = _chain_in(snap, instance, trust=trust, full=full, workers=workers,
                                  pool=pool)
                waiting.append(chain)
                chain.scan(*snap.entry_chunks(instance))
                if pool is not None:
                    pool.poll()
                    if len(waiting) > WAITING:
                        pool.wait(pool.queued)
                while waiting and waiting[0].ready():
                    yield waiting.popleft().report()
            if pool is not None:
                pool.wait(pool.queued)
            while waiting:
                yield waiting.popleft().report()
        finally:
            for chain in waiting:
                chain.close()
            if pool is not None:
                pool.close()
        leaves = leaf_index_report(snap.leaves())
        if not leaves.ok:
            yield leaves
