"""histaudit.verify.parallel: full mode on worker processes reports what one process does.

Signatures and the canonical form of fast-path rows are checked by the workers, in chunks;
the findings — signature failures, and canonical-form findings put back in the place the
integrity check would have given them — must equal the reference (``run_checks`` in this
process), whatever the chunk size and the number of workers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import orjson
import pytest

from histaudit.ledger.records import StoredEntry
from histaudit.verify import parallel
from histaudit.verify.parallel import EntryPool
from histaudit.verify.verifier import verify_chain
from support.pools import count_pools

from .chains import INSTANCE, SIGNER, STRANGER, TRUST, chain, head_of, reference, stored

STEPS = [("note", {"n": i}) for i in range(1, 30)]


def damaged() -> list[StoredEntry]:
    """Bad signatures, bodies out of canonical form (some fast, some slow rows), a
    stranger's entry and a malformed one, spread over several chunks."""
    rows = chain(STEPS, signers=[STRANGER if i == 11 else SIGNER for i in range(len(STEPS))])
    for i in (2, 9, 10, 25):
        r = rows[i]
        rows[i] = StoredEntry(r.leaf, r.instance, r.seq, r.hash, r.body, b"\x01" * 64)
    for i in (4, 17, 26):  # re-encoded with spaces: same document, new hash, links break
        r = rows[i]
        body = orjson.dumps(orjson.loads(r.body), option=orjson.OPT_INDENT_2)
        rows[i] = stored(body, leaf=r.leaf, seq=r.seq)
    r = rows[20]
    rows[20] = stored(b'{"v":1}', leaf=r.leaf, seq=r.seq)
    return rows


@pytest.mark.parametrize(("workers", "chunk"), [(1, 3), (2, 1), (2, 4), (2, 4096)])
def test_workers_report_what_one_process_reports(workers: int, chunk: int | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "CHUNK", chunk)
    rows = damaged()
    head = head_of(rows)
    count, expected = reference(rows, head, full=True)
    report = verify_chain(INSTANCE, rows, head, trust=TRUST, full=True, workers=workers)
    assert (report.entries, list(report.findings)) == (count, expected)
    codes = [f.code for f in report.findings]
    assert codes.count("signature-invalid") == 4
    assert sum("canonical form" in f.message for f in report.findings) == 3
    assert "key-untrusted" in codes


def test_a_canonical_finding_keeps_its_place_among_the_others() -> None:
    rows = damaged()
    report = verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST, full=True, workers=2)
    at_five = [f.message for f in report.findings if f.seq == 5]
    assert at_five == [f.message for f in reference(rows, head_of(rows), full=True)[1]
                       if f.seq == 5]
    assert at_five[0].endswith("bytes are not in canonical form (docs/format.md "
                               "§Canonical JSON)")


def test_the_pool_keeps_order_and_bounds_what_is_in_flight() -> None:
    items = [(i if i % 3 == 0 else -1, i, SIGNER.kid if i % 2 else None, b"x", b"bad")
             for i in range(200)]
    pool = EntryPool(TRUST, 2, chunk=7)
    in_flight = []
    try:
        for item in items:
            pool.add(*item)
            in_flight.append(len(pool._pending))
        pool.wait(pool.queued)
        assert max(in_flight) <= 5  # 2 x workers, plus the one just sent
        assert pool.take(0, 200) == ([i for i in range(200) if i % 2],
                                     [(i, i) for i in range(0, 200, 3)])
    finally:
        pool.close()


def test_each_chain_of_a_shared_pool_takes_the_outcomes_of_its_own_items() -> None:
    """Items of three chains in chunks that straddle them: each range gets its own, and
    an earlier range left untaken does not leak into the next."""
    pool = EntryPool(TRUST, 2, chunk=4)
    try:
        for i in range(30):
            pool.add(i if i % 5 == 0 else -1, i, SIGNER.kid if i % 3 == 0 else None, b"x",
                     b"bad")
        assert pool.done <= 28  # the last two are still in the batch
        pool.wait(10)
        assert pool.done >= 10
        assert pool.take(0, 10) == ([0, 3, 6, 9], [(0, 0), (5, 5)])
        pool.wait(pool.queued)
        assert pool.done == 30
        assert pool.take(20, 30) == ([21, 24, 27], [(20, 20), (25, 25)])  # 10..19 dropped
        assert pool.take(0, 30) == ([], [])
    finally:
        pool.close()


def test_outcomes_are_not_handed_out_before_they_are_in() -> None:
    pool = EntryPool(TRUST, 1, chunk=4)
    pool.add(0, 1, SIGNER.kid, b"x", b"bad")
    with pytest.raises(RuntimeError, match="up to 1 taken, only 0 in"):
        pool.take(0, 1)


def test_an_error_in_the_loop_leaves_no_worker_behind(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setattr(parallel, "CHUNK", 1)  # the first rows start the workers
    started: list[EntryPool] = []
    in_flight: list[int] = []
    real = EntryPool._send

    def send(self: EntryPool, *, last: bool = False) -> None:
        real(self, last=last)
        started.append(self)
        in_flight.append(len(self._pending))

    monkeypatch.setattr(EntryPool, "_send", send)
    rows = chain([("note", {}), ("note", {}), ("note", {})])

    def stream() -> Iterator[StoredEntry]:  # the store fails mid-stream
        yield from rows[:2]
        raise OSError("disk I/O error")

    with pytest.raises(OSError, match="disk I/O error"):
        verify_chain(INSTANCE, stream(), head_of(rows), trust=TRUST, full=True, workers=2)
    assert started and max(in_flight) > 0  # workers had work when the error came
    assert started[0]._pool is None
    assert multiprocessing.active_children() == []


def test_a_queue_that_fits_one_chunk_starts_no_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify --all --full started a pool of processes per instance, for a chunk one
    process checks before the pool is up (200 instances of 10 entries: 12-15 s, now 2 s);
    a second chunk starts the pool, and both give the same outcomes."""
    started = count_pools(monkeypatch)
    items = [(i, i, SIGNER.kid if i % 2 else None, b"x", b"bad") for i in range(14)]
    outcomes = []
    for chunk in (20, 7):
        pool = EntryPool(TRUST, 2, chunk=chunk)
        for item in items:
            pool.add(*item)
        pool.wait(pool.queued)
        outcomes.append(pool.take(0, pool.queued))
        pool.close()
    assert started == [1]  # only the queue of two chunks started one
    assert outcomes[0] == outcomes[1] == ([i for i in range(14) if i % 2],
                                          [(i, i) for i in range(14)])
