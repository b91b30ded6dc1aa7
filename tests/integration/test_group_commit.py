"""Batched appends on both stores: ``chain.append_many``, ``GroupWriter``, ``durable=False``.

What must hold: a batch is one atomic transaction whose entries take consecutive leaves
and contiguous seqs and leave one head per instance on its newest entry; concurrent
callers of a GroupWriter share commits yet each gets its own entry (or its own error);
an append that rides on the next durable commit is still there after the appending
process is killed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from histaudit.errors import HistauditError, StoreError
from histaudit.ledger import chain
from histaudit.ledger.chain import Item
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger
from histaudit.ledger.writer import GroupWriter
from support.ledgers import (
    LedgerDb,
    committed,
    read_entries,
    stored_payload,
    verify_url,
    write_lock_held,
)

BAD_ID = "evil\u202eid"  # a bidi override: refused before it reaches SQL


def _data(i: int) -> dict[str, Any]:
    return {"task_id": i, "activity": "step"}


def test_append_many_is_one_chain_step_per_item(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    ref, rows = committed(b'"kept payload"')
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "a", "workflow.started", {}, signer=signer)
        items = [Item("a", "activity.started", _data(1)),
                 Item("b", "workflow.started", {"input": ref}, rows),
                 Item("a", "activity.completed", _data(1)),
                 Item("b", "activity.started", _data(2)),
                 Item("c", "workflow.started", {})]
        made = chain.append_many(ledger, items, signer=signer)
        assert [e.leaf for e in made] == [1, 2, 3, 4, 5]
        assert [(e.instance, e.seq) for e in made] == [("a", 2), ("b", 1), ("a", 3),
                                                         ("b", 2), ("c", 1)]
        heads = {i: ledger.head(i) for i in "abc"}
    assert {i: h.seq for i, h in heads.items() if h} == {"a": 3, "b": 2, "c": 1}
    for instance in "abc":
        report = verify_url(db_url, instance, signer, full=True)
        assert report.ok, (instance, report.findings)
    assert stored_payload(db_url, ref) == b'"kept payload"'
    assert [e.kind for e in read_entries(db_url, "a")] == [
        "workflow.started", "activity.started", "activity.completed"]


def test_append_many_commits_all_or_nothing(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "a", "workflow.started", {}, signer=signer)
        with pytest.raises(HistauditError):
            chain.append_many(ledger, [Item("a", "activity.started", _data(1)),
                                       Item(BAD_ID, "workflow.started", {})], signer=signer)
        assert ledger.leaf_count() == 1
        assert ledger.head("a").seq == 1  # type: ignore[union-attr]


def test_a_batch_is_refused_when_one_instance_ends_in_a_forged_row(db_url: str) -> None:
    """A batch reads every instance's tip at once (on PostgreSQL in one statement); a
    newest row that is no entry still refuses the whole batch, naming the instance."""
    signer = KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        for instance in ("a", "b"):
            chain.append(ledger, instance, "workflow.started", {}, signer=signer)
        with LedgerDb(db_url) as db:  # a row nobody signed, as the newest of "b"
            db.run("INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
                   "VALUES (2, 'b', 2, :h, :body, :sig)",
                   h="0" * 64, body=b"not an entry", sig=b"\x00" * 64)
        with pytest.raises(StoreError, match="newest stored entry of 'b' is not a valid"):
            chain.append_many(ledger, [Item("a", "activity.started", _data(1)),
                                       Item("c", "workflow.started", {}),
                                       Item("b", "activity.started", _data(2))],
                              signer=signer)
        with pytest.raises(StoreError, match="newest stored entry of 'b' is not a valid"):
            chain.append(ledger, "b", "activity.started", _data(3), signer=signer)
        assert ledger.leaf_count() == 3 and ledger.head("c") is None
        assert ledger.head("a").seq == 1  # type: ignore[union-attr]
        made = chain.append_many(ledger, [Item("a", "activity.started", _data(4)),
                                          Item("c", "workflow.started", {})], signer=signer)
        assert [(e.instance, e.seq, e.leaf) for e in made] == [("a", 2, 3), ("c", 1, 4)]


def test_concurrent_callers_share_commits_and_all_verify(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    threads, each = 8, 40
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer)
        made: list[Any] = []

        def work(k: int) -> None:
            for i in range(each):
                made.append(writer.append(f"wf-{k % 3}", "activity.started", _data(i),
                                          durable=i % 2 == 0))

        pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert ledger.leaf_count() == threads * each
    assert sorted(e.leaf for e in made) == list(range(threads * each))
    per_instance = Counter(e.instance for e in made)
    for instance, count in per_instance.items():
        assert sorted(e.seq for e in made if e.instance == instance) == \
            list(range(1, count + 1))
        report = verify_url(db_url, instance, signer, full=True)
        assert report.ok, (instance, report.findings)
    assert writer.batches < threads * each, "no two appends ever shared a commit"


def test_a_bad_request_fails_alone_in_its_batch(db_url: str) -> None:
    """Three callers queue behind a held write lock; the second one's entry is invalid.
    The first commits alone (it led), the other two form one batch that fails and is
    retried one by one: only the bad caller gets an error."""
    signer = KeyFileSigner.generate()
    results: dict[str, Any] = {}
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer)

        def call(name: str, instance: str) -> None:
            try:
                results[name] = writer.append(instance, "workflow.started", {})
            except HistauditError as exc:
                results[name] = exc

        with write_lock_held(db_url):
            first = threading.Thread(target=call, args=("first", "a"))
            first.start()
            _wait_until(lambda: writer._leading and not writer._queue)
            later = [threading.Thread(target=call, args=args)
                     for args in (("bad", BAD_ID), ("good", "b"))]
            for t in later:
                t.start()
            _wait_until(lambda: len(writer._queue) == 2)
        for t in (first, *later):
            t.join(timeout=60)
        assert ledger.leaf_count() == 2
    assert results["first"].instance == "a" and results["good"].instance == "b"
    assert isinstance(results["bad"], HistauditError)
    assert writer.batches == 2  # [first], then [good] after [bad, good] failed


def test_a_deferred_entry_rides_with_the_next_append_in_queue_order(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    settled: list[Any] = []
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer, linger=60)  # only the next append takes it
        writer.append("wf", "workflow.started", {})
        writer.defer("wf", "workflow.scheduled_activity", _data(1),
                     settled=lambda e, err: settled.append((e, err)))
        assert ledger.leaf_count() == 1 and settled == []  # nothing committed yet
        started = writer.append("wf", "activity.started", _data(1))
        assert writer.batches == 2  # the decision and the start: one commit
    (decision, error), = settled
    assert error is None and (decision.seq, decision.leaf) == (2, 1)
    assert (started.seq, started.prev) == (3, decision.hash)
    assert [e.kind for e in read_entries(db_url, "wf")] == [
        "workflow.started", "workflow.scheduled_activity", "activity.started"]
    assert verify_url(db_url, "wf", signer, full=True).ok


def test_a_deferred_entry_nobody_follows_is_committed_within_the_linger(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    done = threading.Event()
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer, linger=0.05)
        writer.defer("wf", "workflow.started", {}, settled=lambda e, err: done.set())
        assert done.wait(30)
        assert ledger.leaf_count() == 1
        writer.defer("wf", "workflow.scheduled_timer", {"task_id": 0},
                     settled=lambda e, err: None)
        writer.flush()  # a clean shutdown does not wait for the linger
        assert ledger.leaf_count() == 2


def test_a_deferred_entry_that_fails_is_settled_with_its_error_alone(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    settled: list[Any] = []
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer, linger=60)
        writer.defer(BAD_ID, "workflow.started", {},
                     settled=lambda e, err: settled.append((e, err)))
        good = writer.append("b", "workflow.started", {})
        assert ledger.leaf_count() == 1
    (entry, error), = settled
    assert entry is None and isinstance(error, HistauditError)
    assert good.instance == "b" and good.leaf == 0


def test_more_deferred_entries_than_a_batch_still_commit_the_caller(db_url: str) -> None:
    signer = KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        writer = GroupWriter(ledger, signer, max_batch=4, linger=60)
        for i in range(10):
            writer.defer("wf", "workflow.scheduled_timer", {"task_id": i},
                         settled=lambda e, err: None)
        last = writer.append("wf", "activity.started", _data(0))
        assert (last.seq, ledger.leaf_count()) == (11, 11)


def _wait_until(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


KILLED_CHILD = """
import os, signal, sys
from histaudit.ledger import chain
from histaudit.ledger.keys import Signer, KeyFileSigner
from histaudit.ledger.store import Ledger
ledger = Ledger.open(sys.argv[1], create=True)
signer = KeyFileSigner.generate()
for i in range(20):
    chain.append(ledger, "wf", "activity.started", {"task_id": i}, signer=signer,
                 durable=False)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_non_durable_appends_survive_the_process_being_killed(db_url: str,
                                                             tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_CHILD, db_url], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == -9, proc.stderr[-2000:]
    entries = read_entries(db_url, "wf")
    assert [e.data["task_id"] for e in entries] == list(range(20))


def _round_trips(trace: str) -> list[list[str]]:
    """The statements the client ran, grouped by where it waited for the server: a libpq
    trace's frontend messages, each Bind named by the statement it binds (a Parse of the
    same name, psycopg's prepared ones included), split after each Sync or Flush."""
    parsed: dict[str, str] = {}
    trips: list[list[str]] = [[]]
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 4 or fields[1] != "F":
            continue
        quoted = fields[4].split('"') if len(fields) > 4 else []
        if fields[3] == "Parse":  # Parse  "name" "statement" …
            parsed[quoted[1]] = quoted[3]
        elif fields[3] == "Bind":  # Bind  "portal" "statement" …
            trips[-1].append(parsed[quoted[3]])
        elif fields[3] in ("Sync", "Flush") and trips[-1]:
            trips.append([])
    return [t for t in trips if t]


@pytest.mark.postgres
@pytest.mark.parametrize("durable", [True, False])
def test_pg_append_holds_the_lock_for_one_round_trip(pg_url: str, tmp_path: Path,
                                                     durable: bool) -> None:
    """Under the append lock a PostgreSQL append waits on the server once: the lock, the
    top leaf and the tips go together, then the entry, the head, the payload and COMMIT
    together (libpq's own trace of the protocol messages is the witness). The COMMIT
    does not wait for the WAL flush, so the lock is not held through it: a durable
    append waits for the flush after, in the same round trip, by a transaction of its
    own (ADR 0005)."""
    import sqlalchemy as sa

    signer = KeyFileSigner.generate()
    ref, rows = committed(b'"input"')
    trace_file = tmp_path / "libpq.trace"
    with Ledger.open(pg_url, create=True) as ledger, trace_file.open("w") as out:
        ledger.db.dispose()  # new connections, traced from their first message

        @sa.event.listens_for(ledger.db, "connect")
        def traced(dbapi: Any, _record: Any) -> None:
            dbapi.pgconn.trace(out.fileno())

        for _ in range(6):  # psycopg prepares a statement on its fifth run
            chain.append(ledger, "a", "workflow.started", {}, signer=signer)
        chain.append(ledger, "a", "activity.started", {"input": ref}, signer=signer,
                     payloads=rows, durable=durable)
        out.flush()
    assert read_entries(pg_url, "a")[-1].seq == 7
    trips = _round_trips(trace_file.read_text())
    locked = max(i for i, t in enumerate(trips) if any("pg_advisory_xact_lock" in s for s in t))
    assert any("max(leaf)" in s for s in trips[locked])
    assert any("unnest" in s for s in trips[locked])  # the tips of the batch's instances
    assert "SET LOCAL synchronous_commit = off" in trips[locked]
    after = trips[locked + 1]
    flush = ["SELECT"] if durable else []
    assert [s.split()[0] for s in after] == ["INSERT", "UPDATE", "INSERT", "COMMIT", *flush]
    assert "histaudit_entries" in after[0] and "histaudit_payloads" in after[2]
    assert durable == any("pg_logical_emit_message" in s for s in after)
