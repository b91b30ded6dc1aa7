"""Group commit: appends from many threads share one transaction and one fsync.

An append's cost on a real disk is its commit's flush (≈ 1 ms here), and the ledger-wide
append lock is held through it, so threads appending one at a time queue behind each
other's flushes. :class:`GroupWriter` lets them queue *into* the next commit instead:
the first caller to find nobody committing becomes the leader, takes everything queued
(up to ``max_batch``), appends it with :func:`~histaudit.ledger.chain.append_many` and
wakes the callers; whoever arrived meanwhile forms the next batch, led by its oldest
caller. A lone caller commits at once, and under load a batch is whatever arrived during
one flush — the classic leader/follower group commit (as in PostgreSQL's WAL flush or
MySQL's binlog group commit). An entry whose loss only means appending it again later
(a workflow decision) can be queued without waiting at all (:meth:`GroupWriter.defer`):
it rides in the next batch, and a thread of the writer's own commits one that nothing
picks up within ``linger`` seconds.

One refinement: the callers a batch wakes usually come straight back, but one at a time,
so the first of them would find nobody queued and commit alone while the rest queue
behind it (batches of 1, n−1, 1, n−1, … — measured: half the batching lost). So a leader
that follows a batch of k > 1 callers waits until k are queued again, at most
``gather`` seconds (0.5 ms: a fraction of one flush); a lone caller never waits.

Each caller returns only once *its* batch is committed, durable if any entry in it asked
to be (the others ride along for free). A batch that fails is retried one entry per
transaction, so one bad request (an invalid instance id, a huge value) fails alone with
its own error and the others still commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from histaudit.errors import StoreUnavailableError

from . import records as rec
from .canonical import canonical_bytes
from .chain import Item, PayloadRows, append_many
from .keys import Signer
from .store import Ledger

__all__ = ["GroupWriter"]


Settled = Callable[[rec.Entry | None, BaseException | None], None]
"""Told how a deferred entry ended: (its entry, None) once committed, (None, the error)."""


class _Request:
    __slots__ = ("done", "durable", "entry", "error", "item", "lead", "settled")

    def __init__(self, item: Item, durable: bool, settled: Settled | None = None) -> None:
        self.item = item
        self.durable = durable
        self.settled = settled
        """Set for a deferred entry (:meth:`GroupWriter.defer`): nobody waits for it."""
        self.done: threading.Event | None = None
        """Made, under the writer's lock, for a caller that waits for another's batch (a
        lone caller leads its own and waits for nothing)."""
        self.lead = False
        self.entry: rec.Entry | None = None
        self.error: BaseException | None = None


class GroupWriter:
    """Appends to one ledger with one key from any number of threads, batched."""

    def __init__(self, ledger: Ledger, signer: Signer, *, max_batch: int = 256,
                 gather: float = 0.0005, linger: float = 0.05) -> None:
        self.ledger = ledger
        self.signer = signer
        self.max_batch = max_batch
        self.gather = gather
        self.linger = linger
        """Longest a deferred entry waits for another append to ride with (seconds)."""
        self._lock = threading.Condition()
        self._queue: list[_Request] = []
        self._leading = False
        self._last_batch = 0
        self._orphans = threading.Event()
        """Set when deferred entries may be queued with nobody leading."""
        self._flusher: threading.Thread | None = None
        self.batches = 0
        """Transactions committed so far (for tests and benchmarks: appends ÷ batches is
        the batching factor)."""

    def append(self, instance: str, kind: str, data: Mapping[str, Any],
               payloads: PayloadRows | None = None, *, durable: bool = True) -> rec.Entry:
        """Append one entry (see :func:`~histaudit.ledger.chain.append`); returns once it
        is committed — on stable storage when ``durable``."""
        req = _Request(Item(instance, kind, data, payloads), durable)
        with self._lock:
            self._queue.append(req)
            lead = not self._leading
            self._leading = True
            if not lead:
                req.done = threading.Event()
            self._lock.notify()
        if req.done is not None:
            req.done.wait()  # woken with its result, or to lead the next batch (which holds req)
        if lead or req.lead:
            self._lead(req)  # req is in the batch it commits: its result is set when this returns
        if req.error is not None:
            raise req.error
        assert req.entry is not None
        return req.entry

    def defer(self, instance: str, kind: str, data: Mapping[str, Any],
              payloads: PayloadRows | None = None, *, settled: Settled) -> None:
        """Queue one entry to ride with the next commit, and return at once.

        For an entry whose loss costs nothing but a later append of the same record (a
        workflow decision: the replay that follows a crash appends a missing one again):
        its own commit would be one more transaction on the caller's path. It joins the
        next batch any caller leads, in queue order, so it lands in the chain where it
        would have; one no caller picks up within ``linger`` seconds is committed by a
        thread of the writer's own. Not durable, and a SIGKILL before that commit loses
        it. ``settled`` is called, on the committing thread, when it commits or fails.
        """
        req = _Request(Item(instance, kind, data, payloads), False, settled)
        with self._lock:
            self._queue.append(req)
            self._lock.notify()
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_orphans, daemon=True,
                                                 name="histaudit-group-writer")
                self._flusher.start()
            self._orphans.set()

    def flush(self) -> None:
        """Commit whatever deferred entries are queued, now (a clean shutdown)."""
        with self._lock:
            lead = bool(self._queue) and not self._leading
            if lead:
                self._leading = True
        if lead:
            self._lead(None)

    def _flush_orphans(self) -> None:
        while True:
            self._orphans.wait()
            time.sleep(self.linger)
            with self._lock:
                self._orphans.clear()
            self.flush()

    def _lead(self, own: _Request | None) -> None:
        """Commit one batch (holding ``own``, the leader's request, if it has one), then
        hand the lead to the oldest waiting caller (or drop it)."""
        with self._lock:
            want = min(self._last_batch, self.max_batch)
            deadline = time.monotonic() + self.gather
            while _callers(self._queue) < want and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            size = self.max_batch
            if own is not None:  # deferred entries queued before it may outnumber a batch
                size = max(size, self._queue.index(own) + 1)
            batch = self._queue[:size]
            del self._queue[:size]
            self._last_batch = _callers(batch)
        try:
            self._commit(batch)
        finally:
            with self._lock:
                # the lead goes to the oldest caller waiting; deferred entries before it
                # ride in its batch, and with nobody waiting they are the flusher's
                nxt = next((r for r in self._queue if r.settled is None), None)
                if nxt is not None:
                    nxt.lead = True
                    assert nxt.done is not None  # a waiting caller's
                    nxt.done.set()
                else:
                    self._leading = False
                    if self._queue:
                        self._orphans.set()
            for req in batch:
                if req.settled is not None:
                    req.settled(req.entry, req.error)
                if req.done is not None:
                    req.done.set()

    def _commit(self, batch: list[_Request]) -> None:
        durable = any(r.durable for r in batch)
        items = [r.item for r in batch]
        try:
            # A database server away for a moment is waited for (outage.py); a try whose
            # connection dropped is made again only if it did not commit after all.
            entries = self.ledger.ride_out(
                lambda: append_many(self.ledger, items, signer=self.signer, durable=durable),
                landed=lambda: _landed(self.ledger, items))
        except StoreUnavailableError as exc:  # away for longer than the wait: all fail
            for req in batch:
                req.error = exc
            return
        except Exception as exc:  # noqa: BLE001 - retried one by one below
            if len(batch) == 1:
                batch[0].error = exc
                return
            for req in batch:
                self._commit([req])
            return
        self.batches += 1
        for req, entry in zip(batch, entries, strict=True):
            req.entry = entry


def _callers(requests: list[_Request]) -> int:
    """How many of ``requests`` have a caller waiting (deferred entries have none)."""
    return sum(1 for r in requests if r.settled is None)


def _landed(ledger: Ledger, items: list[Item]) -> list[rec.Entry] | None:
    """The entries ``items`` were stored as, when the try whose connection dropped did
    commit; None when it did not. A batch commits whole and nothing is appended to an
    instance between its entries, so it landed exactly when each instance's newest
    entries are its items, kind and data (canonical bytes) alike. (An identical record
    already at the tip would be taken for it: storing it again would only repeat it.)"""
    by_instance: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        by_instance.setdefault(item.instance, []).append(n)
    found: dict[int, rec.Entry] = {}
    for instance, ns in by_instance.items():
        head = ledger.head(instance)
        if head is None:
            return None
        first = head.seq - len(ns) + 1
        for seq, n in zip(range(first, head.seq + 1), ns, strict=True):
            row = ledger.entry_at(instance, seq) if seq >= 1 else None
            entry = rec.parse_entry(row.body) if row is not None else None
            if entry is None or entry.kind != items[n].kind or canonical_bytes(
                    dict(entry.data)) != canonical_bytes(dict(items[n].data)):
                return None
            found[n] = entry
    return [found[n] for n in range(len(items))]
