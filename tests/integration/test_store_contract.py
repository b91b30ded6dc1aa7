"""The store driver contract (ledger/store/driver.py), the same tests over every driver:
a new database is one module, one line in ``DRIVERS`` and one more entry in ``STORES``
here (the fixture that makes a fresh URL of it).
Cost: ≈ 2 s of CPU (SQLite and the run's PostgreSQL).

What every driver must do, seen from the ledger: open and create a ledger at its URL;
stream an instance's rows back in leaf order inside one snapshot; keep payloads and heads;
enforce the append-only rule in the database itself (an UPDATE or DELETE of an entry is
refused, whoever sends it); report no stored table as anything else; tell a write that
another opener holds the append lock; and say one line for what it cannot open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger
from histaudit.ledger.store.driver import DRIVERS, Driver, driver_for
from histaudit.ledger.store.schema import not_stored_tables

STORES = [pytest.param("sqlite_url", id="sqlite"),
          pytest.param("pg_url", id="postgres", marks=pytest.mark.postgres)]
"""One parameter per driver: the fixture that makes a fresh ledger URL for it."""


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    """A fresh ledger URL of each driver in turn."""
    return str(request.getfixturevalue(request.param))


@contextlib.contextmanager
def another_writer(url: str) -> Iterator[None]:
    """Another opener of the ledger, inside its write transaction: it holds the append
    lock, however the driver takes it (a bounded ``lock_wait`` takes it on entering the
    transaction, not with the first statement)."""
    with Ledger.open(url, lock_wait=5.0) as other, \
            other.write("hold the append lock", durable=False):
        yield


def test_every_registered_driver_is_a_whole_driver() -> None:
    """Each registry entry imports, instantiates (no abstract method left) and serves the
    backend it is registered for."""
    for backend in DRIVERS:
        driver = driver_for(sa.engine.make_url(f"{backend}://"), backend)
        assert isinstance(driver, Driver) and driver.name == backend
        assert driver.statements.entries_of.count(driver.placeholder) == 1


@pytest.mark.parametrize("url", ["mysql://u@h/db", "sqlite+aiosqlite:///x.db",
                                 "postgresql+asyncpg://u@h/db", "oracle://h/db"])
def test_a_database_without_a_driver_is_one_line(url: str) -> None:
    with pytest.raises(StoreError, match=r"^ledger URL .*(no store driver for '\w+' \(there "
                                         r"are: |is not supported \(use )") as info:
        Ledger.open(url)
    assert "\n" not in str(info.value)


def test_a_driver_opens_writes_streams_and_guards(store_url: str) -> None:
    signer = KeyFileSigner.generate()
    with Ledger.open(store_url, create=True) as ledger:
        assert ledger.driver.name == ledger.dialect == store_url.split(":")[0].split("+")[0]
        for i in range(5):
            chain.append(ledger, "wf-a" if i % 2 else "wf-b", "step.done", {"i": i},
                         signer=signer)
        with ledger.snapshot() as snap:
            rows = list(snap.entries("wf-b"))
            assert [r.seq for r in rows] == [1, 2, 3]
            assert [r.leaf for r in rows] == sorted(r.leaf for r in rows)
            head = snap.head("wf-b")
            assert head is not None and head.seq == 3
        assert ledger.leaf_count() == 5
        with ledger.db.connect() as conn:
            assert not_stored_tables(conn, ledger.driver) == []
        # the append-only rule is the database's own: a direct UPDATE or DELETE fails
        for stmt in ("UPDATE histaudit_entries SET body = body WHERE seq = 1",
                     "DELETE FROM histaudit_entries WHERE seq = 1"):
            with pytest.raises(sa.exc.DBAPIError), ledger.db.begin() as conn:
                conn.exec_driver_sql(stmt)
    with Ledger.open(store_url) as again:  # opened again, nothing lost
        assert [r.seq for r in again.entries("wf-a")] == [1, 2]


def test_a_driver_tells_a_write_that_the_append_lock_is_held(store_url: str) -> None:
    Ledger.open(store_url, create=True).close()
    told: list[str] = []
    with Ledger.open(store_url, lock_wait=0.2, on_lock_wait=lambda: told.append("wait")) \
            as ledger, another_writer(store_url), \
            pytest.raises(StoreError, match="waiting for the write lock"):
        chain.append(ledger, "wf", "step.done", {}, signer=KeyFileSigner.generate())
    assert told == ["wait"]


def test_following_a_chain_sees_every_writer_s_rows_after_a_seq(store_url: str) -> None:
    """``Ledger.follow`` (the recorder's folds keeping up with a chain) returns the rows
    after a seq in leaf order, those another opener committed since included; on SQLite
    it reads on the thread's own write connection, also right after that connection's
    own write and after a read left unfinished."""
    signer = KeyFileSigner.generate()
    with Ledger.open(store_url, create=True) as ledger, Ledger.open(store_url) as other:
        for i in range(3):
            chain.append(ledger, "wf", "step.done", {"i": i}, signer=signer)
        assert [r.seq for r in ledger.follow("wf", 0)] == [1, 2, 3]
        assert list(ledger.follow("wf", 3)) == []
        chain.append(other, "wf", "step.done", {"i": 3}, signer=signer)
        chain.append(other, "wf-other", "step.done", {}, signer=signer)
        rows = list(ledger.follow("wf", 2))
        assert [(r.instance, r.seq) for r in rows] == [("wf", 3), ("wf", 4)]
        assert rows == list(ledger.entries("wf", after_seq=2))
        chain.append(ledger, "wf", "step.done", {"i": 4}, signer=signer)
        assert [r.seq for r in ledger.follow("wf", 4)] == [5]
        half = ledger.follow("wf", 0)
        assert next(iter(half)).seq == 1
        del half  # left unfinished: the next write on this thread still goes through
        chain.append(ledger, "wf", "step.done", {"i": 5}, signer=signer)
        assert [r.seq for r in ledger.follow("wf", 5)] == [6]
