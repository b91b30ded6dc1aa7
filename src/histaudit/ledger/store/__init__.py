"""The ledger store: the only code that knows SQL, one driver per database.

It stores and returns rows — schema, triggers, locks, rows in and out — and nothing else:
it neither builds, hashes nor signs a record. What goes into a row is decided by
:mod:`histaudit.ledger.chain`, inside a :class:`WriteTx` this module hands it.

Write transactions are serialized ledger-wide (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a
transaction-scoped advisory lock), so the per-instance ``seq`` and the ledger-wide
``leaf`` index the chain assigns are both contiguous however many threads and processes
append. The database enforces append-only too: triggers refuse UPDATE and DELETE of
entries, and a head may only move forward. Rows keep the exact signed bytes.

Reads go through a :class:`Snapshot` (:meth:`Ledger.snapshot`): one read transaction —
REPEATABLE READ on PostgreSQL, one deferred transaction on SQLite WAL — so a signed head
and the entries it must match come from the same committed state while writers append
(otherwise a head read before an append and entries read after it look like an unsigned
tail). Rows stream through one cursor in constant memory. Every column value is read
whatever the database holds there (SQLite keeps any storage class in any column) and
handed over in a form the verifier reports, never one that crashes the reader.

``rows``     :class:`Ledger`: open, snapshot, write (durable or riding on the next
             commit); no dialect of its own: it asks its driver
``driver``   the :class:`~.driver.Driver` contract and the registry by URL backend name
``sqlite``   the SQLite driver: a file (read-write, read-only, immutable), WAL, one held
             write connection per thread (:class:`~.sqlite.WriterConnections`)
``postgres`` the PostgreSQL driver: pool pings, advisory append lock, pipelined writes,
             the WAL flush of a durable write
``pg_session`` PostgreSQL sessions that search pg_catalog first (the driver's, and a
             reader's of Dapr's state store)
``snapshot`` :class:`Snapshot`: one consistent read, rows streamed through the driver
``writetx``  :class:`WriteTx`: the row operations of one write transaction
``sql``      the hot paths' statements in both placeholder styles
``schema``   tables, the head triggers' message, the writer role's grants (each
             driver holds its own triggers' DDL)
``outage``   riding out a database server that went away
``columns``  column values in a form the verifier reports, whatever storage class
"""

from .driver import OnLockWait
from .rows import (
    DEFAULT_URL,
    SCHEMA_VERSION,
    SQLITE_BUSY_SECONDS,
    Ledger,
    resolve_url,
)
from .schema import (
    HEAD_MISMATCH,
    checkpoints,
    entries,
    heads,
    meta_table,
    metadata,
    payloads,
    writer_role_sql,
)
from .snapshot import Snapshot
from .writetx import WriteTx

__all__ = ["DEFAULT_URL", "HEAD_MISMATCH", "SCHEMA_VERSION", "SQLITE_BUSY_SECONDS", "Ledger",
           "OnLockWait", "Snapshot", "WriteTx", "checkpoints", "entries", "heads",
           "meta_table", "metadata", "payloads", "resolve_url", "writer_role_sql"]
