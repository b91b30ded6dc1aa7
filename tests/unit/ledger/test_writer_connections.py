"""SQLite writes run on connections held out of the pool, one per thread
(``histaudit.ledger.store.sqlite.WriterConnections``): each write must still get the
durability it asks for, threads must not share one, and a failure, a fork or
``Ledger.close`` must leave the next write on a working connection."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import Ledger
from histaudit.verify.verifier import verify_instance

FULL, NORMAL = 2, 1  # what PRAGMA synchronous reads back


def _ledger(tmp_path: Path) -> Ledger:
    return Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True)


def _clean(ledger: Ledger, signer: Signer, instance: str, entries: int) -> None:
    report = verify_instance(ledger, instance, trust=TrustStore([signer.public]),
                             full=True)
    assert report.entries == entries and report.ok and not report.findings, \
        [f.to_json() for f in report.findings]


def test_each_write_runs_in_the_synchronous_mode_it_asks_for(tmp_path: Path) -> None:
    asked = [True, False, False, True, True, False, True]
    seen = []
    with _ledger(tmp_path) as ledger:
        for durable in asked:
            with ledger.write(durable=durable) as tx:
                # the mode this very transaction commits in (WriteTx's own cursor)
                seen.append(tx._cur.execute("PRAGMA synchronous").fetchone()[0])
    assert seen == [FULL if d else NORMAL for d in asked]


def test_threads_write_on_connections_of_their_own(tmp_path: Path) -> None:
    signer, threads = KeyFileSigner.generate(), 24  # more threads than the pool holds (5 + 10)
    start = threading.Barrier(threads)
    conns: dict[int, int] = {}
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            start.wait(timeout=30)
            for i in range(5):
                chain.append(ledger, f"t-{n}", "step.done", {"i": i}, signer=signer)
            conns[n] = id(ledger.writer_connections.get().conn)  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with _ledger(tmp_path) as ledger:
        pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert not errors, errors
        assert len(set(conns.values())) == threads
        for n in range(threads):
            _clean(ledger, signer, f"t-{n}", 5)


def test_a_failed_write_leaves_the_next_one_a_working_connection(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    with _ledger(tmp_path) as ledger:
        chain.append(ledger, "wf", "step.done", {"i": 1}, signer=signer)
        before = ledger.writer_connections.get()  # type: ignore[union-attr]
        with pytest.raises(StoreError, match="head must match"), ledger.write() as tx:
            # a head naming no stored entry: the schema's trigger refuses it
            tx.put_head(StoredHead("wf", 9, b"{}", b"\x00" * 64), new=False)
        assert ledger.writer_connections.get() is not before  # type: ignore[union-attr]
        chain.append(ledger, "wf", "step.done", {"i": 2}, signer=signer)
        _clean(ledger, signer, "wf", 2)


def test_close_then_write_opens_a_new_connection(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    ledger = _ledger(tmp_path)
    chain.append(ledger, "wf", "step.done", {"i": 1}, signer=signer)
    old = ledger.writer_connections.get().conn  # type: ignore[union-attr]
    ledger.close()
    with pytest.raises(Exception, match="closed"):
        old.execute("SELECT 1")
    chain.append(ledger, "wf", "step.done", {"i": 2}, signer=signer)
    _clean(ledger, signer, "wf", 2)
    ledger.close()


def test_a_forked_child_writes_on_a_connection_of_its_own(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    with _ledger(tmp_path) as ledger:
        chain.append(ledger, "wf", "step.done", {"i": 1}, signer=signer)
        parent = id(ledger.writer_connections.get().conn)  # type: ignore[union-attr]
        pid = os.fork()
        if pid == 0:  # the child: exit status says whether it appended on a new connection
            ok = False
            try:
                chain.append(ledger, "wf", "step.done", {"i": 2}, signer=signer)
                ok = id(ledger.writer_connections.get().conn) != parent  # type: ignore[union-attr]
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        chain.append(ledger, "wf", "step.done", {"i": 3}, signer=signer)
        _clean(ledger, signer, "wf", 3)


def test_following_a_chain_reads_on_the_thread_s_write_connection(tmp_path: Path) -> None:
    """``Ledger.follow`` reads on the connection this thread writes on (no pool checkout);
    a read that fails is a StoreError naming the ledger, the connection is dropped, and
    the thread's next write and read go through on a fresh one."""
    signer = KeyFileSigner.generate()
    with _ledger(tmp_path) as ledger:
        chain.append(ledger, "wf", "step.done", {}, signer=signer)
        held = ledger.writer_connections.get()
        assert [r.seq for r in ledger.follow("wf", 0)] == [1]
        assert ledger.writer_connections.get() is held
        with pytest.raises(StoreError, match=r"^ledger sqlite:///.*l\.db: "):
            list(ledger.follow("wf", 2 ** 70))  # a seq SQLite cannot bind
        assert ledger.writer_connections.get() is not held
        chain.append(ledger, "wf", "step.done", {}, signer=signer)
        assert [r.seq for r in ledger.follow("wf", 1)] == [2]
        _clean(ledger, signer, "wf", 2)
