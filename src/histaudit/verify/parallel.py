"""Full mode's per-entry work on every core: Ed25519 signatures and the canonical form.

The parent process reads, hashes and parses each row once (:mod:`histaudit.verify.scan`)
and queues ``(place, seq, kid, body, sig)`` here; chunks of :data:`CHUNK` go to worker
processes, which verify the signature (``kid`` is None: the key is not trusted, nothing
to verify) and — ``place`` >= 0 — re-check the canonical form, the two costs of full mode
that grow with the entry. A worker loads the trusted keys once, when it starts. At most
``2 × workers`` chunks are in flight, so memory stays constant however long the chain;
results come back in the order the chunks went out, so the findings are in entry order.

With one worker everything runs in this process, chunk by chunk: same results. So does
a queue that never fills a chunk (an instance of fewer than :data:`CHUNK` entries): no
pool is started for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor

from histaudit.ledger.keys import TrustStore

from .ed25519 import Ed25519Verifier
from .integrity import is_canonical

CHUNK = 4096
"""Entries per chunk handed to a worker: big enough that shipping costs little per entry."""

Item = tuple[int, int, "str | None", bytes, bytes]
"""(place for a canonical-form finding or -1, seq, kid or None, body, signature)."""
Outcome = tuple[list[int], list[tuple[int, int]]]
"""(seqs whose signature fails, [(place, seq)] of bodies not in canonical form)."""

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
    bad: list[int] = []
    loose: list[tuple[int, int]] = []
    for place, seq, kid, body, sig in items:
        if kid is not None and not keys[kid].verify(sig, body):
            bad.append(seq)
        if place >= 0 and not is_canonical(body):
            loose.append((place, seq))
    return bad, loose


class EntryPool:
    """Queues items; :meth:`finish` returns every item's outcome, in queue order."""

    def __init__(self, trust: TrustStore, workers: int, *, chunk: int | None = None) -> None:
        self._raw = {k.kid: k.raw for k in trust}
        self._workers, self._chunk = workers, CHUNK if chunk is None else max(1, chunk)
        self._pool: Executor | None = None
        self._pending: list[Future[Outcome]] = []
        self._batch: list[Item] = []
        self.bad: list[int] = []
        self.loose: list[tuple[int, int]] = []
        self._here: dict[str, Ed25519Verifier] | None = None

    def add(self, item: Item) -> None:
        batch = self._batch
        batch.append(item)
        if len(batch) >= self._chunk:
            self._send()

    def _send(self, *, last: bool = False) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._workers <= 1 or (last and self._pool is None):
            # One worker; or all there is fits one chunk, which one process checks while
            # a pool would still be starting (verify --all --full started one per
            # instance).
            if self._here is None:
                self._here = _loaded(self._raw)
            self._take(check_chunk(batch, self._here))
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self._workers,
                                             initializer=_load_keys, initargs=(self._raw,))
        self._pending.append(self._pool.submit(_in_worker, batch))
        while len(self._pending) > 2 * self._workers:
            self._take(self._pending.pop(0).result())

    def _take(self, outcome: Outcome) -> None:
        self.bad += outcome[0]
        self.loose += outcome[1]

    def finish(self) -> None:
        """Wait for every queued item; their outcomes are then in ``bad`` and ``loose``."""
        self._send(last=True)
        try:
            for fut in self._pending:
                self._take(fut.result())
        finally:
            self._pending.clear()
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
