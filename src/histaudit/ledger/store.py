"""The ledger store: the only module that knows SQL dialects (SQLite and PostgreSQL).

It stores and returns rows — schema, triggers, locks, rows in and out — and nothing else:
it neither builds, hashes nor signs a record. What goes into a row is decided by
:mod:`histaudit.ledger.chain`, inside a :class:`WriteTx` this module hands it.

Write transactions are serialized ledger-wide (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a
transaction-scoped advisory lock), so the per-instance ``seq`` and the ledger-wide
``leaf`` index the chain assigns are both contiguous however many threads and processes
append. The database enforces append-only too: triggers refuse UPDATE and DELETE of
entries, and a head may only move forward. Rows keep the exact signed bytes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from histaudit.errors import StoreError

from .records import InstanceSummary, StoredEntry, StoredHead

DEFAULT_URL = "sqlite:///histaudit.db"
# How long a SQLite append waits for the write lock. Appends are short, but on a shared
# disk with many writers each holds the lock for an fsync; failing after a minute turned
# slow into broken (an activity fails, then retries into the same queue).
SQLITE_BUSY_SECONDS = 300
# The drivers histaudit installs; any other (asyncpg, psycopg2, ...) is refused up front.
_DRIVERS = {"sqlite": ("sqlite", "sqlite+pysqlite"),
            "postgresql": ("postgresql", "postgresql+psycopg")}
SCHEMA_VERSION = "1"
# Any 64-bit constant: the key of the PostgreSQL advisory lock that orders appends.
_PG_APPEND_LOCK = 0x6869_7374_6175_6474  # "histaudt"

metadata = sa.MetaData()
meta_table = sa.Table(
    "histaudit_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
entries = sa.Table(
    "histaudit_entries", metadata,
    sa.Column("leaf", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("instance", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("sig", sa.LargeBinary, nullable=False),
    sa.UniqueConstraint("instance", "seq", name="histaudit_entries_instance_seq"),
    # Streaming one instance pages through it in leaf order; without this index every
    # page re-scans and re-sorts the instance (benchmarks/results/2026-11-29.json, stream:
    # 80 µs per entry at 1,000,000 entries without it, 7.5 with it).
    sa.Index("histaudit_entries_instance_leaf", "instance", "leaf"),
)
heads = sa.Table(
    "histaudit_heads", metadata,
    sa.Column("instance", sa.Text, primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("sig", sa.LargeBinary, nullable=False),
)
payloads = sa.Table(
    "histaudit_payloads", metadata,
    sa.Column("commitment", sa.String(64), primary_key=True),
    sa.Column("salt", sa.LargeBinary, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
checkpoints = sa.Table(
    "histaudit_checkpoints", metadata,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("root", sa.String(64), nullable=False),
    sa.Column("note", sa.LargeBinary, nullable=False),
)

_SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_update BEFORE UPDATE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_delete BEFORE DELETE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_forward BEFORE UPDATE
       ON histaudit_heads WHEN NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance
       BEGIN SELECT RAISE(ABORT, 'histaudit head may only move forward'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_update BEFORE UPDATE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_delete BEFORE DELETE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_payloads_no_update BEFORE UPDATE
       ON histaudit_payloads
       BEGIN SELECT RAISE(ABORT, 'payloads can be erased, not changed'); END""",
    # INSERT OR REPLACE deletes the conflicting row without firing DELETE triggers (unless
    # recursive_triggers is on), so an insert that would replace a row is refused up front.
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_replace BEFORE INSERT
       ON histaudit_entries
       WHEN EXISTS (SELECT 1 FROM histaudit_entries WHERE leaf = NEW.leaf)
         OR EXISTS (SELECT 1 FROM histaudit_entries
                    WHERE instance = NEW.instance AND seq = NEW.seq)
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_no_replace BEFORE INSERT
       ON histaudit_heads
       WHEN EXISTS (SELECT 1 FROM histaudit_heads WHERE instance = NEW.instance)
       BEGIN SELECT RAISE(ABORT, 'histaudit head may only move forward'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_payloads_no_replace BEFORE INSERT
       ON histaudit_payloads
       WHEN EXISTS (SELECT 1 FROM histaudit_payloads WHERE commitment = NEW.commitment)
       BEGIN SELECT RAISE(ABORT, 'payloads can be erased, not changed'); END""",
]

_PG_TRIGGERS = [
    """CREATE OR REPLACE FUNCTION histaudit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'histaudit ledger is append-only (% on %)', TG_OP, TG_TABLE_NAME;
       END $$""",
    """CREATE OR REPLACE FUNCTION histaudit_head_forward() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance THEN
           RAISE EXCEPTION 'histaudit head may only move forward';
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_append_only BEFORE UPDATE OR DELETE
       ON histaudit_entries FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_no_truncate BEFORE TRUNCATE
       ON histaudit_entries FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_forward BEFORE UPDATE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_head_forward()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_truncate BEFORE TRUNCATE
       ON histaudit_heads FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_append_only BEFORE UPDATE OR DELETE
       ON histaudit_checkpoints FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_no_truncate BEFORE TRUNCATE
       ON histaudit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_payloads_no_update BEFORE UPDATE
       ON histaudit_payloads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
]


# The append path's statements, built once: constructing and cache-keying SQLAlchemy
# statements anew for every append cost as much CPU as everything else an append does.
_APPEND_LOCK = sa.text("SELECT pg_advisory_xact_lock(:k)")
_LAST_OF_INSTANCE = (sa.select(entries.c.seq, entries.c.hash)
                     .where(entries.c.instance == sa.bindparam("instance"))
                     .order_by(entries.c.seq.desc()).limit(1))
_TOP_LEAF = sa.select(sa.func.max(entries.c.leaf))
_INSERT_ENTRY = entries.insert()
_INSERT_HEAD = heads.insert()
# (An UPDATE's parameters may not be named after its columns.)
_MOVE_HEAD = (heads.update().where(heads.c.instance == sa.bindparam("h_instance"))
              .values(seq=sa.bindparam("h_seq"), body=sa.bindparam("h_body"),
                      sig=sa.bindparam("h_sig")))
_INSERT_PAYLOAD = payloads.insert()


def writer_role_sql(role: str = "histaudit_writer") -> list[str]:
    """SQL (run by the owner) for a PostgreSQL role that can append and read, nothing else.

    The role may INSERT entries and payloads, INSERT and UPDATE heads (a trigger lets a
    head only move forward), and SELECT; it has no UPDATE, DELETE or TRUNCATE on entries.
    """
    return [
        f"GRANT SELECT, INSERT ON histaudit_entries, histaudit_payloads, histaudit_checkpoints "
        f"TO {role}",
        f"GRANT SELECT, INSERT, UPDATE ON histaudit_heads TO {role}",
        f"GRANT SELECT ON histaudit_meta TO {role}",
        f"REVOKE UPDATE, DELETE, TRUNCATE ON histaudit_entries FROM {role}",
    ]


def resolve_url(url: str | None) -> str:
    return url or os.environ.get("HISTAUDIT_DB") or DEFAULT_URL


def _redact_url(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


class Ledger:
    """A histaudit ledger in one SQLite file or one PostgreSQL database.

    ``Ledger.open(url)`` opens an existing ledger (a missing or foreign database is an
    error); ``Ledger.open(url, create=True)`` creates the schema when absent.
    """

    def __init__(self, db: Engine, url: str) -> None:
        self.db = db
        """The SQLAlchemy engine (connection pool) of the database."""
        self.url = url
        self.dialect = db.dialect.name
        self.ledger_id = ""

    # -- opening ----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = False) -> Ledger:
        url = resolve_url(url)
        shown = _redact_url(url)
        try:
            parsed = sa.engine.make_url(url)
        except (ArgumentError, ValueError):
            raise StoreError(f"ledger URL {url!r} is not a database URL") from None
        backend = parsed.get_backend_name()
        if backend not in _DRIVERS:
            raise StoreError(f"ledger URL {shown}: only sqlite and postgresql are supported")
        if parsed.drivername not in _DRIVERS[backend]:
            raise StoreError(f"ledger URL {shown}: driver {parsed.drivername!r} is not "
                             f"supported (use {' or '.join(_DRIVERS[backend])})")
        try:
            if backend == "sqlite":
                db = _sqlite_engine(parsed, create=create, shown=shown)
            else:
                db = sa.create_engine(parsed.set(drivername="postgresql+psycopg"),
                                      pool_pre_ping=True)
        except (NoSuchModuleError, ArgumentError, ValueError, TypeError) as exc:
            raise StoreError(f"ledger {shown}: {_one_line(exc)}") from None
        ledger = cls(db, url)
        try:
            ledger._prepare(create=create)
        except SQLAlchemyError as exc:
            db.dispose()
            raise StoreError(f"ledger {shown}: {_one_line(exc)}") from None
        return ledger

    def _prepare(self, *, create: bool) -> None:
        with self.db.connect() as conn:
            present = sa.inspect(conn).has_table(meta_table.name)
        if not present:
            if not create:
                raise StoreError(f"ledger {_redact_url(self.url)} holds no histaudit ledger")
            self._create_schema()
        with self.db.connect() as conn:
            rows: dict[str, str] = {
                str(k): str(v) for k, v in
                conn.execute(sa.select(meta_table.c.key, meta_table.c.value)).all()}
        if rows.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"ledger {_redact_url(self.url)} has unknown schema version "
                             f"{rows.get('schema_version')!r} (this histaudit reads "
                             f"{SCHEMA_VERSION})")
        self.ledger_id = rows.get("ledger_id", "")

    def _create_schema(self) -> None:
        with self._write() as conn:
            if self.dialect == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_APPEND_LOCK})
            metadata.create_all(conn)
            for stmt in (_PG_TRIGGERS if self.dialect == "postgresql" else _SQLITE_TRIGGERS):
                # text() escapes the '%' in the PL/pgSQL RAISE format for psycopg's
                # pyformat paramstyle; exec_driver_sql would hand it over unescaped.
                conn.execute(sa.text(stmt))
            have = conn.execute(sa.select(meta_table.c.key)).scalars().all()
            if "schema_version" not in have:
                conn.execute(meta_table.insert(), [
                    {"key": "schema_version", "value": SCHEMA_VERSION},
                    {"key": "ledger_id", "value": str(uuid.uuid4())},
                ])

    def close(self) -> None:
        self.db.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read connection; a database failure (corrupt file, missing table) is a StoreError."""
        try:
            with self.db.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"ledger {_redact_url(self.url)}: {_one_line(exc)}") from None

    # -- writing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction (on SQLite it holds the database write lock from BEGIN)."""
        with self.db.connect() as conn:
            conn = conn.execution_options(histaudit_write=True)
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def write(self, what: str = "write") -> Iterator[WriteTx]:
        """One write transaction holding the ledger-wide append lock, as a :class:`WriteTx`.

        Everything done through it commits together or not at all. A database failure
        is a :class:`StoreError` naming ``what`` was being done.
        """
        try:
            with self._write() as conn:
                if self.dialect == "postgresql":
                    conn.execute(_APPEND_LOCK, {"k": _PG_APPEND_LOCK})
                yield WriteTx(conn)
        except SQLAlchemyError as exc:
            raise StoreError(f"{what} failed: {_one_line(exc)}") from None

    # -- reading ----------------------------------------------------------------------

    def entries(self, instance: str, *, chunk: int = 5000,
                after_seq: int = 0) -> Iterator[StoredEntry]:
        """Stream ``instance``'s rows in insertion (leaf) order, in constant memory.

        ``after_seq`` skips the rows up to that seq (an index range on (instance, seq)),
        so a reader that keeps up with a chain reads only what was appended since.
        """
        query = sa.select(entries).where(entries.c.instance == instance)
        if after_seq:
            query = query.where(entries.c.seq > after_seq)
        return self._stream(query.order_by(entries.c.leaf), chunk)

    def all_entries(self, *, chunk: int = 5000) -> Iterator[StoredEntry]:
        return self._stream(sa.select(entries).order_by(entries.c.leaf), chunk)

    def _stream(self, query: sa.Select[Any], chunk: int) -> Iterator[StoredEntry]:
        # Keyset pagination on leaf: constant memory on both drivers, no long-lived cursor.
        after = -1
        while True:
            with self._read() as conn:
                rows = conn.execute(query.where(entries.c.leaf > after).limit(chunk)).all()
            for r in rows:
                yield StoredEntry(r.leaf, r.instance, r.seq, r.hash, bytes(r.body), bytes(r.sig))
            if len(rows) < chunk:
                return
            after = rows[-1].leaf

    def entry_at(self, instance: str, seq: int) -> StoredEntry | None:
        """The stored row of ``instance``'s entry ``seq`` (by its seq column), if any."""
        with self._read() as conn:
            r = conn.execute(sa.select(entries).where(entries.c.instance == instance,
                                                      entries.c.seq == seq)).first()
        return None if r is None else StoredEntry(r.leaf, r.instance, r.seq, r.hash,
                                                  bytes(r.body), bytes(r.sig))

    def head(self, instance: str) -> StoredHead | None:
        with self._read() as conn:
            r = conn.execute(sa.select(heads).where(heads.c.instance == instance)).first()
        return None if r is None else StoredHead(r.instance, r.seq, bytes(r.body), bytes(r.sig))

    def leaf_count(self) -> int:
        """Number of leaves in the ledger-wide tree: max(leaf) + 1 (leaves are contiguous)."""
        with self._read() as conn:
            top = conn.execute(sa.select(sa.func.max(entries.c.leaf))).scalar()
        return 0 if top is None else top + 1

    def leaves(self, *, below: int | None = None, chunk: int = 5000
               ) -> Iterator[tuple[int, bytes]]:
        """(leaf index, exact body bytes) in leaf order, optionally only leaves < ``below``."""
        query = sa.select(entries.c.leaf, entries.c.body).order_by(entries.c.leaf)
        if below is not None:
            query = query.where(entries.c.leaf < below)
        after = -1
        while True:
            with self._read() as conn:
                rows = conn.execute(query.where(entries.c.leaf > after).limit(chunk)).all()
            for leaf, body in rows:
                yield leaf, bytes(body)
            if len(rows) < chunk:
                return
            after = rows[-1].leaf

    def checkpoint_notes(self) -> list[tuple[int, bytes]]:
        """Every stored checkpoint as (size, signed note), oldest first."""
        with self._read() as conn:
            rows = conn.execute(sa.select(checkpoints.c.size, checkpoints.c.note)
                                .order_by(checkpoints.c.size)).all()
        return [(r.size, bytes(r.note)) for r in rows]

    def instances(self) -> list[InstanceSummary]:
        """Every instance that has entries or a head, with entry counts."""
        q = (sa.select(entries.c.instance, sa.func.count(), sa.func.max(entries.c.seq),
                       sa.func.min(entries.c.leaf), sa.func.max(entries.c.leaf))
             .group_by(entries.c.instance).order_by(sa.func.max(entries.c.leaf).desc()))
        with self._read() as conn:
            found = {r[0]: InstanceSummary(*r) for r in conn.execute(q)}
            for (name,) in conn.execute(sa.select(heads.c.instance)):
                found.setdefault(name, InstanceSummary(name, 0, 0, -1, -1))
        return list(found.values())

    def instance_ids(self) -> list[str]:
        return [s.instance for s in self.instances()]

    def payload(self, commitment: str) -> tuple[bytes, bytes] | None:
        """The (salt, bytes) stored for a commitment, or None once erased."""
        with self._read() as conn:
            r = conn.execute(sa.select(payloads.c.salt, payloads.c.data)
                             .where(payloads.c.commitment == commitment)).first()
        return None if r is None else (bytes(r.salt), bytes(r.data))


class WriteTx:
    """The row operations of one write transaction (see :meth:`Ledger.write`).

    The ledger-wide append lock is held for its whole life, so what :meth:`tip` and
    :meth:`next_leaf` return stays true until it commits.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def tip(self, instance: str) -> tuple[int, str] | None:
        """(seq, hash) of ``instance``'s newest stored entry, or None for a new instance."""
        last = self._conn.execute(_LAST_OF_INSTANCE, {"instance": instance}).first()
        return None if last is None else (int(last.seq), str(last.hash))

    def next_leaf(self) -> int:
        """The ledger-wide index the next entry gets: max(leaf) + 1."""
        top = self._conn.execute(_TOP_LEAF).scalar()
        return 0 if top is None else int(top) + 1

    def insert_entry(self, row: StoredEntry) -> None:
        self._conn.execute(_INSERT_ENTRY, {"leaf": row.leaf, "instance": row.instance,
                                           "seq": row.seq, "hash": row.hash,
                                           "body": row.body, "sig": row.sig})

    def put_head(self, head: StoredHead, *, new: bool) -> None:
        """Store ``instance``'s first head (``new``) or move it forward."""
        if new:
            self._conn.execute(_INSERT_HEAD, {"instance": head.instance, "seq": head.seq,
                                              "body": head.body, "sig": head.sig})
        else:
            self._conn.execute(_MOVE_HEAD, {"h_instance": head.instance, "h_seq": head.seq,
                                            "h_body": head.body, "h_sig": head.sig})

    def insert_payloads(self, rows: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Store (commitment, salt, bytes) payload rows beside the chain."""
        if rows:
            self._conn.execute(_INSERT_PAYLOAD, [
                {"commitment": c, "salt": salt, "data": data} for c, salt, data in rows])

    def delete_payload(self, commitment: str) -> bool:
        """Delete one payload row; True when there was one."""
        result = self._conn.execute(payloads.delete().where(payloads.c.commitment == commitment))
        return bool(result.rowcount)

    def add_checkpoint(self, size: int, root_hex: str, note: bytes) -> None:
        """Store a signed checkpoint unless one of that size is stored (append-only)."""
        have = self._conn.execute(sa.select(checkpoints.c.note)
                                  .where(checkpoints.c.size == size)).scalar()
        if have is None:
            self._conn.execute(checkpoints.insert().values(size=size, root=root_hex, note=note))


def _sqlite_engine(parsed: sa.URL, *, create: bool, shown: str) -> Engine:
    path = parsed.database
    if path and path != ":memory:":
        p = Path(path)
        if not p.exists():
            if not create:
                raise StoreError(f"ledger {shown}: database file {path} does not exist")
            if not p.parent.exists():
                raise StoreError(f"ledger {shown}: directory {p.parent} does not exist")
        elif p.is_dir():
            raise StoreError(f"ledger {shown}: {path} is a directory")
        else:
            with p.open("rb") as fh:
                magic = fh.read(16)
            if magic and magic != b"SQLite format 3\x00":
                raise StoreError(f"ledger {shown}: {path} is not a SQLite database")
    engine = sa.create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_SECONDS})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN IMMEDIATE is ours.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_SECONDS * 1000}")
        if create:
            cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = FULL")
        # An erased payload must not survive in a freed page, whatever SQLite's build default.
        cur.execute("PRAGMA secure_delete = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Appends take the write lock up front, so read-then-append never interleaves;
        # readers use a plain deferred transaction and never block writers (WAL).
        write = conn.get_execution_options().get("histaudit_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
