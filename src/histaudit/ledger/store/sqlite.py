"""SQLite: opening a ledger file (read-write, read-only, immutable), its connections, and
the store driver (:class:`SqliteDriver`)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from histaudit.errors import StoreError
from histaudit.ledger.records import StoredEntry

from .columns import _sqlite_text
from .driver import Driver, DriverContext
from .schema import HEAD_MISMATCH, cosignatures
from .sql import QMARK, instance_rows
from .writetx import WriteTx

# --- the append-only guards (installed by SqliteDriver.install_guards) ----------------

# True when NEW (a head row) is what chain.append stores: a BLOB body that is JSON whose
# integer seq, instance, leaf and hash are NEW's and those of the instance's newest entry.
# CASE guards json_extract against a body that is not JSON; coalesce turns NULL into "no".
_SQLITE_HEAD_BODY = "CAST(NEW.body AS TEXT)"
_SQLITE_HEAD_MATCHES = f"""coalesce(typeof(NEW.body) = 'blob' AND typeof(NEW.seq) = 'integer'
         AND CASE WHEN json_valid({_SQLITE_HEAD_BODY}) THEN
           json_type({_SQLITE_HEAD_BODY}, '$.seq') = 'integer'
           AND json_extract({_SQLITE_HEAD_BODY}, '$.seq') = NEW.seq
           AND json_extract({_SQLITE_HEAD_BODY}, '$.instance') = NEW.instance
           AND EXISTS (SELECT 1 FROM histaudit_entries e
                       WHERE e.instance = NEW.instance AND e.seq = NEW.seq
                         AND e.hash = json_extract({_SQLITE_HEAD_BODY}, '$.hash')
                         AND e.leaf = json_extract({_SQLITE_HEAD_BODY}, '$.leaf'))
           AND NOT EXISTS (SELECT 1 FROM histaudit_entries e
                           WHERE e.instance = NEW.instance AND e.seq > NEW.seq)
         ELSE 0 END, 0)"""

SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_update BEFORE UPDATE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_delete BEFORE DELETE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    # A head moves forward only, and only onto what its own body says: the seq, instance,
    # leaf and hash inside the (signed) body must be those of the instance's newest stored
    # entry. Checking the columns alone let a writer put back an older genuine body with a
    # bumped seq column, or bump the column a million so that every later append failed.
    f"""CREATE TRIGGER IF NOT EXISTS histaudit_heads_forward BEFORE UPDATE ON histaudit_heads
       BEGIN
         SELECT RAISE(ABORT, 'histaudit head may only move forward')
           WHERE NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance;
         SELECT RAISE(ABORT, '{HEAD_MISMATCH}') WHERE NOT {_SQLITE_HEAD_MATCHES};
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS histaudit_heads_checked_insert BEFORE INSERT
       ON histaudit_heads WHEN NOT {_SQLITE_HEAD_MATCHES}
       BEGIN SELECT RAISE(ABORT, '{HEAD_MISMATCH}'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_update BEFORE UPDATE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_delete BEFORE DELETE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_update BEFORE UPDATE
       ON histaudit_cosignatures
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_delete BEFORE DELETE
       ON histaudit_cosignatures
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_replace BEFORE INSERT
       ON histaudit_cosignatures
       WHEN EXISTS (SELECT 1 FROM histaudit_cosignatures WHERE size = NEW.size
                    AND witness = NEW.witness AND key_hash = NEW.key_hash
                    AND line = NEW.line)
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


_URI_KEYS = ("uri", "mode", "immutable", "cache", "nolock", "vfs")


def _sqlite_path(parsed: sa.URL) -> Path | None:
    path = parsed.database or ""
    if path.startswith("file:"):
        path = path[5:].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def _sqlite_target(parsed: sa.URL, *, create: bool, shown: str
                   ) -> tuple[sa.URL, list[str], str]:
    """Check the file a SQLite URL names; return (URL, open modes to try, why read-only).

    ``?mode=ro`` / ``?immutable=1`` (with or without ``uri=true``) open the file for
    reading only. Without them the file is opened read-write, and — when that is
    impossible because the directory does not let SQLite create its -wal/-shm files —
    read-only, then immutable (only if no -wal file holds commits the main file lacks).
    """
    query = dict(parsed.query)
    mode = str(query.get("mode", ""))
    immutable = str(query.get("immutable", "")) in ("1", "true")
    if mode not in ("", "ro", "rw", "rwc"):
        raise StoreError(f"ledger {shown}: SQLite mode={mode!r} is not ro, rw or rwc")
    path = _sqlite_path(parsed)
    if path is not None:
        if not path.exists():
            if not create:
                raise StoreError(f"ledger {shown}: database file {path} does not exist")
            if not path.parent.exists():
                raise StoreError(f"ledger {shown}: directory {path.parent} does not exist")
        elif path.is_dir():
            raise StoreError(f"ledger {shown}: {path} is a directory")
        else:
            try:
                with path.open("rb") as fh:
                    magic = fh.read(16)
            except OSError as exc:
                raise StoreError(f"ledger {shown}: cannot read {path}: {exc.strerror}") from None
            if magic and magic != b"SQLite format 3\x00":
                raise StoreError(f"ledger {shown}: {path} is not a SQLite database")
    if path is None:
        return parsed, ["rw"], ""
    rest = {k: v for k, v in query.items() if k not in _URI_KEYS}
    parsed = parsed.set(database=str(path), query=rest)
    if immutable:
        return parsed, ["immutable"], "the URL opens it immutable (immutable=1)"
    if mode == "ro":
        return parsed, ["ro"], "the URL opens it read-only (mode=ro)"
    wal = Path(f"{path}-wal")
    fallbacks = ["ro"] if wal.exists() and wal.stat().st_size else ["ro", "immutable"]
    return parsed, ["rw", *fallbacks] if not create else ["rw"], ""


def _why_unwritable(path: Path | None) -> str:
    """Why SQLite cannot write ``path``: the file itself, or its directory."""
    if path is None:
        return "the database cannot be written"
    try:
        with path.open("r+b"):
            pass
    except OSError as exc:
        return f"the file {path} is read-only ({exc.strerror})"
    return (f"the directory {path.parent} does not let SQLite create {path.name}-wal and "
            f"{path.name}-shm (read-only or immutable)")


def unwritable_files(path: Path) -> str:
    """Why SQLite could not write the database file ``path`` or its ``-wal`` and ``-shm``
    files (those that exist); '' when it can.

    Asked before every write. SQLite maps the ``-shm`` file into memory; when the database
    file cannot be written, no checkpoint empties the WAL, and once the WAL outgrows what
    the mapped index holds, SQLite touches pages an immutable ``-shm`` could not grow to
    and the process dies of SIGBUS (measured: an appender killed after ≈ 4,000 commits
    with ``chattr +i`` on the database and its ``-shm``). Refused first, the write fails
    with a StoreError instead, and nothing is written.
    """
    files = _with_companions(path)
    for file in files:  # plain strings: this runs before every write (figure 7)
        if not os.access(file, os.W_OK) and (file is files[0] or os.path.exists(file)):
            return f"the file {file} cannot be written (read-only or immutable)"
    return ""


@functools.lru_cache(maxsize=64)
def _with_companions(path: Path) -> tuple[str, str, str]:
    """The database file's path and its ``-wal`` and ``-shm`` files', as strings."""
    file = os.fspath(path)
    return file, file + "-wal", file + "-shm"


def _sqlite_lock_held(raw: Any, busy_ms: int) -> bool:
    """Does another connection hold the SQLite write lock right now? (Asks without waiting.)

    ``raw`` is the driver's connection, outside any transaction."""
    cur = raw.cursor()
    try:
        cur.execute("PRAGMA busy_timeout = 0")
        try:
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            return "locked" in str(exc) or "busy" in str(exc)
        cur.execute("ROLLBACK")
        return False
    finally:
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cur.close()


class _GuardedConnection(sqlite3.Connection):
    """A pysqlite connection that is left open, for the life of the process, when its
    database's ``-shm`` file can no longer be written.

    Closing a WAL connection writes to the mapped ``-shm``; on a file made immutable
    meanwhile the kernel answers that write with SIGBUS (a shared mapping's write fault on
    an immutable file), and the process dies inside SQLite. Such a connection is not
    closed, and not freed either (its reference count is raised for good, so neither the
    garbage collector nor interpreter shutdown runs SQLite's close on it): the operating
    system releases it when the process ends. Writes are refused before they reach it
    (:func:`unwritable_files`)."""

    shm: Path | None = None
    # Bound now: a connection freed at interpreter shutdown may outlive the modules.
    _incref = staticmethod(ctypes.pythonapi.Py_IncRef)
    _py_object = ctypes.py_object
    _access, _writable = staticmethod(os.access), os.W_OK

    def _kept_open(self) -> bool:
        """Pin this connection when its -shm cannot be written (True: it stays open)."""
        shm = self.shm
        if shm is None or self._access(shm, self._writable) or not shm.exists():
            return False
        self._incref(self._py_object(self))
        return True

    def close(self) -> None:
        if not self._kept_open():
            super().close()

    def __del__(self) -> None:
        # Freed without close() (a pool dropped, the interpreter exiting): raising the
        # count here keeps the object, so SQLite's close never runs on it.
        self._kept_open()


def _sqlite_engine(parsed: sa.URL, mode: str, *, create: bool, busy: float) -> Engine:
    path = parsed.database or ""
    file = _sqlite_path(parsed)
    factory = type("_GuardedConnection", (_GuardedConnection,),
                   {"shm": file.with_name(file.name + "-shm") if file is not None else None})
    if mode != "rw":
        # SQLite's own URI form (SQLAlchemy passes "file:..." with uri=True through).
        flag = "immutable=1" if mode == "immutable" else "mode=ro"
        parsed = parsed.set(database=f"file:{quote(path)}?{flag}",
                            query={**parsed.query, "uri": "true"})
    engine = sa.create_engine(parsed, connect_args={"timeout": busy, "factory": factory})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN IMMEDIATE is ours.
        dbapi_conn.isolation_level = None
        dbapi_conn.text_factory = _sqlite_text
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy * 1000)}")
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


class _Held:
    """One thread's write connection and the ``synchronous`` mode it is set to."""

    __slots__ = ("__weakref__", "conn", "generation", "pid", "synchronous")

    def __init__(self, conn: sqlite3.Connection, generation: int) -> None:
        self.conn, self.generation, self.pid = conn, generation, os.getpid()
        self.synchronous = "FULL"  # what the engine's connect event set


class WriterConnections:
    """SQLite write connections held out of the pool, one per thread.

    Every append is one short transaction, so what surrounds it counts: a held
    connection is reached in well under a microsecond where a pool checkout and return
    cost several, and it stays in the ``synchronous`` mode of its last write, so the
    PRAGMA runs only when a write asks for the other mode (benchmarks/README.md,
    figure 1). Each is made by the engine (the connect event's pragmas apply) and then
    detached from its pool, so held connections never use up the pool readers share. A
    connection that saw an error is closed and the thread's next write opens a fresh
    one; so does a forked child (a connection must not cross a fork). A thread's
    connection closes when the thread ends, every one at :meth:`close`.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._local = threading.local()
        self._held: weakref.WeakSet[_Held] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._generation = 0

    def get(self) -> _Held:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.pid == os.getpid() and held.generation == self._generation:
            return held
        fairy = self._engine.raw_connection()
        conn = fairy.dbapi_connection
        fairy.detach()
        held = _Held(conn, self._generation)  # type: ignore[arg-type]
        self._local.held = held
        with self._lock:
            self._held.add(held)
        return held

    def drop(self, held: _Held) -> None:
        """Close ``held`` (it saw an error); the thread's next write opens another."""
        if getattr(self._local, "held", None) is held:
            self._local.held = None
        with self._lock:
            self._held.discard(held)
        _close_quietly(held.conn)

    def close(self) -> None:
        """Close every held connection; writes after this open new ones."""
        with self._lock:
            self._generation += 1
            held, self._held = list(self._held), weakref.WeakSet()
        for h in held:
            if h.pid == os.getpid():
                _close_quietly(h.conn)


def _close_quietly(conn: sqlite3.Connection) -> None:
    try:
        conn.close()
    except sqlite3.Error:
        pass


# --- the driver --------------------------------------------------------------------------

_FETCH = 256
"""Rows a SQLite snapshot hands the verifier's scan per fetch (it steps its statement;
there is no round trip to save)."""
_VIRTUAL = re.compile(r"\s*CREATE\s+VIRTUAL\b", re.IGNORECASE)


class SqliteDriver(Driver):
    """A ledger in one SQLite file: WAL, one held write connection per thread, the write
    lock taken at ``BEGIN IMMEDIATE``, triggers for the append-only rule."""

    name = "sqlite"
    drivernames: ClassVar[tuple[str, ...]] = ("sqlite", "sqlite+pysqlite")
    statements = QMARK
    placeholder = "?"

    def targets(self, parsed: sa.URL, *, create: bool, shown: str
                ) -> tuple[sa.URL, list[str], str]:
        return _sqlite_target(parsed, create=create, shown=shown)

    def engine(self, parsed: sa.URL, mode: str, *, create: bool, busy: float) -> Engine:
        return _sqlite_engine(parsed, mode, create=create, busy=busy)

    def opened(self, ledger: DriverContext, parsed: sa.URL, mode: str, read_only: str) -> None:
        ledger.file = _sqlite_path(parsed)
        ledger.read_only = read_only if mode == "rw" else (
            read_only or _why_unwritable(_sqlite_path(parsed)))

    def open_failed(self, message: str, parsed: sa.URL, mode: str, modes: list[str]
                    ) -> str | None:
        if "unable to open database file" in message and mode != modes[-1]:
            return None  # a read-only directory: try to open for reading only
        if "unable to open database file" in message and parsed.database:
            message += f" ({_why_unwritable(_sqlite_path(parsed))})"
        return message

    def file(self, parsed: sa.URL) -> Path | None:
        return _sqlite_path(parsed)

    # --- the guards ---

    def install_guards(self, conn: Connection, *, upgrade: bool) -> None:
        if upgrade:
            conn.exec_driver_sql("DROP TRIGGER IF EXISTS histaudit_heads_forward")
        for stmt in SQLITE_TRIGGERS:
            conn.execute(sa.text(stmt))

    def guards_outdated(self, conn: Connection) -> bool:
        sql = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                                   "AND name = 'histaudit_heads_forward'")).scalar()
        return sql is not None and HEAD_MISMATCH not in str(sql)

    def rekey_cosignatures(self, conn: Connection) -> None:
        # SQLite cannot alter a key: the table is copied into a new one, whose triggers
        # install_guards then creates (the old ones go with the old table).
        conn.exec_driver_sql("ALTER TABLE histaudit_cosignatures "
                             "RENAME TO histaudit_cosignatures_rekeyed")
        cosignatures.create(conn)
        conn.exec_driver_sql("INSERT INTO histaudit_cosignatures (size, witness, key_hash, "
                             "line) SELECT size, witness, key_hash, line "
                             "FROM histaudit_cosignatures_rekeyed")
        conn.exec_driver_sql("DROP TABLE histaudit_cosignatures_rekeyed")

    def not_stored_tables(self, conn: Connection, names: list[str]) -> list[str]:
        problems: list[str] = []
        for name, kind, sql, hidden in conn.execute(sa.text(
                "SELECT m.name, m.type, m.sql, (SELECT count(*) FROM "
                "  pragma_table_xinfo(m.name) WHERE hidden <> 0) "
                # SQLite matches names without regard to ASCII case, as lower() folds them
                "FROM sqlite_master m WHERE m.type IN ('table', 'view') "
                f"AND lower(m.name) IN ({', '.join(f':n{i}' for i in range(len(names)))})"),
                {f"n{i}": n for i, n in enumerate(names)}):
            if kind != "table":
                problems.append(f"{name} is a {kind}")
            elif _VIRTUAL.match(str(sql or "")):
                problems.append(f"{name} is a virtual table")
            elif hidden:
                problems.append(f"{name} has a generated column")
        return problems

    def schema_lock(self, conn: Connection) -> None:
        """Nothing more: a SQLite write transaction holds the database's write lock."""

    # --- reading ---

    def begin_snapshot(self) -> str:
        return "BEGIN"  # deferred: the WAL snapshot is fixed by its first read

    def fetch_size(self, chunk: int) -> int:
        return _FETCH

    def follow(self, ledger: DriverContext, failed: Callable[[BaseException], str],
               instance: str, after_seq: int) -> Iterator[StoredEntry] | None:
        """One statement on this thread's held write connection, outside any transaction:
        SQLite reads one committed state for as long as the statement steps, and the
        connection needs no checkout from the pool nor an explicit transaction."""
        writers = ledger.writer_connections
        if writers is None or ledger.read_only:
            return None
        return self._follow(writers, failed, ledger.db_errors(), instance, after_seq)

    def _follow(self, writers: WriterConnections, failed: Callable[[BaseException], str],
                errors: tuple[type[BaseException], ...], instance: str, after_seq: int
                ) -> Iterator[StoredEntry]:
        try:
            held = writers.get()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(failed(exc)) from None
        try:
            cur = held.conn.cursor()
            try:
                cur.execute(self.statements.entries_of_after, (instance, after_seq))
                while rows := cur.fetchmany(_FETCH):
                    yield from instance_rows(instance, rows)
            finally:
                cur.close()
        except errors as exc:
            writers.drop(held)
            raise StoreError(failed(exc)) from None

    # --- writing and errors ---

    def writers(self, db: Engine) -> WriterConnections:
        return WriterConnections(db)

    @contextlib.contextmanager
    def write(self, ledger: DriverContext, failed: Callable[[BaseException], str], *,
              durable: bool) -> Iterator[WriteTx]:
        """A write transaction on this thread's held connection: the database write lock
        is taken at BEGIN IMMEDIATE; ``synchronous`` is FULL for a durable write, NORMAL
        for one that rides on the next durable commit (set only when the connection's
        last write used the other)."""
        writers = ledger.writer_connections
        assert writers is not None
        if ledger.file is not None and (why := unwritable_files(ledger.file)):
            raise StoreError(failed(StoreError(why)))
        errors = ledger.db_errors()
        try:
            held = writers.get()
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(failed(exc)) from None
        raw = held.conn
        try:
            cur = raw.cursor()
            try:
                if ledger.on_lock_wait is not None and _sqlite_lock_held(raw,
                                                                         ledger.busy_ms()):
                    ledger.on_lock_wait()
                mode = "FULL" if durable else "NORMAL"
                if held.synchronous != mode:
                    cur.execute(f"PRAGMA synchronous = {mode}")
                    held.synchronous = mode
                cur.execute("BEGIN IMMEDIATE")
                yield WriteTx(cur, self.statements, tips=ledger.tips)
                cur.execute("COMMIT")
            finally:
                cur.close()
                self.rollback(raw)
        except errors as exc:
            writers.drop(held)  # the thread's next write starts on a fresh connection
            raise StoreError(failed(exc)) from None

    def lock_held(self, raw: Any, busy_ms: int) -> bool:
        return _sqlite_lock_held(raw, busy_ms)

    def lock_timed_out(self, text: str) -> bool:
        return "database is locked" in text

    def rollback(self, raw: Any) -> None:
        if raw.in_transaction:
            raw.execute("ROLLBACK")

    def explain(self, text: str, url: str) -> str:
        if "readonly database" in text or "unable to open database file" in text:
            path = _sqlite_path(sa.engine.make_url(url))
            text += f" ({_why_unwritable(path)})" if path else ""
        return text

