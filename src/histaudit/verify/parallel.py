"""Full mode's per-entry work on every core: Ed25519 signatures and the canonical form.

The parent process reads, hashes and parses each row once (:mod:`histaudit.verify.scan`)
and queues ``(place, seq, kid, body, sig)`` here; chunks of :data:`CHUNK` go to worker
processes, which verify the signature (``kid`` is None: the key is not trusted, nothing
to verify) and — ``place`` >= 0 — re-check the canonical form, the two costs of full mode
that grow with the entry. A worker loads the trusted keys once, when it starts. At most
``2 × workers`` chunks are in flight, so memory stays constant however long the chain;
results come back in the order the chunks went out, so the findings are in entry order.

One pool can serve many chains, one after another (``verify --all --full``): a chunk
then holds the items of as many small chains as fit, and each chain takes the outcomes
of its own items — those queued between two :attr:`EntryPool.queued` marks — once
:attr:`EntryPool.done` has passed its last one (:meth:`EntryPool.take`).

With one worker everything runs in this process, chunk by chunk: same results. So does
a queue that never fills a chunk (fewer than :data:`CHUNK` entries in all): no pool is
started for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor

from histaudit.ledger.canonical import is_canonical
from histaudit.ledger.keys import TrustStore

from .ed25519 import Ed25519Verifier

CHUNK = 4096
"""Entries per chunk handed to a worker: big enough that shipping costs little per entry."""

Item = tuple[int, int, int, "str | None", bytes, bytes]
"""(number in the queue, place for a canonical-form finding or -1, seq, kid or None,
body, signature)."""
Outcome = tuple[list[tuple[int, int]], list[tuple[int, int, int]]]
"""([(number, seq)] whose signature fails, [(number, place, seq)] of bodies not in
canonical form)."""

_KEYS: dict[str, Ed25519Verifier] = {}


def _load_keys(raw: Mapping[str, bytes]) -> None:
    """Worker initializer: the trusted keys, parsed once per process."""
    _KEYS.clear()
    _KEYS.update(_loaded(raw))


def _loaded(raw: Mapping[str, bytes]) -> dict[str, Ed25519Verifier]:
    return {kid: Ed25519Verifier(key) for kid, key in raw.items()}


def _in_worker(items: list[Item]) -> Outcome:
    return check_chunk(items, _KEYS)


def check_chunk(items: list[Item], keys: Mapping[str, Ed25519Verifier]) -> Outcome:
    """The signature and canonical-form outcome of each item (signatures with OpenSSL's
    verdict, libsodium's speed: :mod:`.ed25519`)."""
    bad: list[tuple[int, int]] = []
    loose: list[tuple[int, int, int]] = []
    for number, place, seq, kid, body, sig in items:
        if kid is not None and not keys[kid].verify(sig, body):
            bad.append((number, seq))
        if place >= 0 and not is_canonical(body):
            loose.append((number, place, seq))
    return bad, loose


class EntryPool:
    """Queues items; hands back every item's outcome in queue order."""

    def __init__(self, trust: TrustStore, workers: int, *, chunk: int | None = None) -> None:
        self._raw = {k.kid: k.raw for k in trust}
        self._workers, self._chunk = workers, CHUNK if chunk is None else max(1, chunk)
        self._pool: Executor | None = None
        self._pending: deque[tuple[Future[Outcome], int]] = deque()  # (chunk, its end)
        self._batch: list[Item] = []
        self._bad: deque[tuple[int, int]] = deque()
        self._loose: deque[tuple[int, int, int]] = deque()
        self._here: dict[str, Ed25519Verifier] | None = None
        self.queued = 0
        """Items queued so far: the next item's number."""
        self.done = 0
        """Items below this number have their outcome in."""

    def add(self, place: int, seq: int, kid: str | None, body: bytes, sig: bytes) -> None:
        batch = self._batch
        batch.append((self.queued, place, seq, kid, body, sig))
        self.queued += 1
        if len(batch) >= self._chunk:
            self._send()

    def _send(self, *, last: bool = False) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._workers <= 1 or (last and self._pool is None):
            # One worker; or all there is fits one chunk, which one process checks while
            # a pool would still be starting.
            if self._here is None:
                self._here = _loaded(self._raw)
            self._put(check_chunk(batch, self._here), self.queued)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self._workers,
                                             initializer=_load_keys, initargs=(self._raw,))
        self._pending.append((self._pool.submit(_in_worker, batch), self.queued))
        while len(self._pending) > 2 * self._workers:
            self._put_next()

    def _put(self, outcome: Outcome, end: int) -> None:
        self._bad += outcome[0]
        self._loose += outcome[1]
        self.done = end

    def _put_next(self) -> None:
        future, end = self._pending.popleft()
        self._put(future.result(), end)

    def poll(self) -> None:
        """Collect the chunks the workers have finished, without waiting."""
        while self._pending and self._pending[0][0].done():
            self._put_next()

    def wait(self, upto: int) -> None:
        """Wait until every item numbered below ``upto`` has its outcome."""
        if self.done >= upto:
            return
        if self._batch and self._batch[0][0] < upto:
            self._send(last=upto >= self.queued)
        while self.done < upto:
            self._put_next()

    def take(self, start: int, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        """(seqs whose signature fails, [(place, seq)] not in canonical form) of the items
        numbered ``start`` to ``end`` - 1, which must be :attr:`done`; outcomes of items
        before ``start`` not taken yet are dropped."""
        if end > self.done:
            raise RuntimeError(f"outcomes of items up to {end} taken, only {self.done} in")
        bad, loose = self._bad, self._loose
        seqs, places = [], []
        while bad and bad[0][0] < end:
            number, seq = bad.popleft()
            if number >= start:
                seqs.append(seq)
        while loose and loose[0][0] < end:
            number, place, seq = loose.popleft()
            if number >= start:
                places.append((place, seq))
        return seqs, places

    def close(self) -> None:
        """Stop the workers (what is still in flight is dropped)."""
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
