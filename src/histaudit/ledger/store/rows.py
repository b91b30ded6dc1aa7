"""Rows in and out: :class:`Ledger` (open, snapshot, write), :class:`Snapshot`, :class:`WriteTx`.

See :mod:`histaudit.ledger.store` for what the store promises.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from histaudit.config import DEFAULT_OUTAGE_WAIT_SECONDS, LOCK_WAIT_ENV
from histaudit.errors import StoreError, StoreUnavailableError
from histaudit.ledger.records import InstanceSummary, StoredEntry, StoredHead
from histaudit.urls import shown_url

from .columns import _text
from .driver import Driver, OnLockWait, driver_for
from .outage import Outage
from .schema import _guards_outdated, _install_guards, meta_table, metadata, not_stored_tables
from .snapshot import Snapshot
from .writetx import TipMemo, WriteTx

_log = logging.getLogger("histaudit.ledger")
DEFAULT_URL = "sqlite:///histaudit.db"
# How long a SQLite append waits for the write lock. Appends are short, but on a shared
# disk with many writers each holds the lock for an fsync; failing after a minute turned
# slow into broken (an activity fails, then retries into the same queue).
SQLITE_BUSY_SECONDS = 300
# A person running a writing command (redact, checkpoint, export) is told at once that
# another process holds the write lock, and the command gives up after
# DEFAULT_LOCK_WAIT_SECONDS instead of the interceptor's five minutes; $HISTAUDIT_LOCK_WAIT
# (histaudit.config) overrides it.
SCHEMA_VERSION = "1"


def resolve_url(url: str | None) -> str:
    """``url``, or :data:`DEFAULT_URL` (the edges pass ``$HISTAUDIT_DB`` as ``url``)."""
    return url or DEFAULT_URL


def _redact_url(url: str) -> str:
    return shown_url(url)


T = TypeVar("T")


class Ledger:
    """A histaudit ledger in one SQLite file or one PostgreSQL database.

    ``Ledger.open(url)`` opens an existing ledger (a missing or foreign database is an
    error); ``Ledger.open(url, create=True)`` creates the schema when absent.
    """

    def __init__(self, db: Engine, url: str, driver: Driver) -> None:
        self.db = db
        """The SQLAlchemy engine (connection pool) of the database."""
        self.url = url
        self.driver = driver
        """Everything that differs between databases (:mod:`.driver`)."""
        self.ledger_id = ""
        self.read_only = ""
        """Why this ledger cannot be written ('' when it can): a read-only URL, or a
        file or directory that does not allow writing (it was opened for reading)."""
        self.lock_wait: float | None = None
        self.on_lock_wait: OnLockWait | None = None
        self.file: Path | None = None
        """The database file (None: a server, or an in-memory database)."""
        self._guards_checked = False
        self.writer_connections = driver.writers(db)
        """Per-thread write connections the driver keeps (None: the pool's)."""
        self.tips = TipMemo()  # the bodies this ledger wrote last: WriteTx.tips
        self.outage = Outage(_redact_url(url), 0.0)
        """How calls wait through a moment when the database server is away
        (:meth:`ride_out`); :meth:`open` sets the wait."""

    def ride_out(self, fn: Callable[[], T], *, landed: Callable[[], T | None] | None = None
                 ) -> T:
        """``fn()``, made again while the database server is unreachable, for up to
        ``outage.wait`` seconds (see :mod:`histaudit.ledger.store.outage`; ``landed`` is
        for a write that may have committed before its connection dropped)."""
        return self.outage.call(fn, landed=landed)

    # -- opening ----------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = False,
             lock_wait: float | None = None, on_lock_wait: OnLockWait | None = None,
             outage_wait: float = DEFAULT_OUTAGE_WAIT_SECONDS) -> Ledger:
        """Open (or ``create``) the ledger at ``url``.

        ``lock_wait`` bounds how long a write waits for the write lock another process
        holds (default: :data:`SQLITE_BUSY_SECONDS` on SQLite, unbounded on PostgreSQL);
        ``on_lock_wait()`` is called at once when a write finds the lock held;
        ``outage_wait`` is how long a PostgreSQL that went away is waited for
        (:meth:`ride_out`; ``$HISTAUDIT_STORE_OUTAGE_WAIT`` at the edges). A SQLite
        ledger that cannot be written (``?mode=ro``, a read-only file or directory) still
        opens for reading; a write then fails naming why.
        """
        url = resolve_url(url)
        shown = _redact_url(url)
        try:
            parsed = sa.engine.make_url(url)
        except (ArgumentError, ValueError):
            raise StoreError(f"ledger URL {shown!r} is not a database URL") from None
        driver = driver_for(parsed, shown)
        parsed, modes, read_only = driver.targets(parsed, create=create, shown=shown)
        last = ""
        for mode in modes:
            try:
                db = driver.engine(parsed, mode, create=create,
                                   busy=SQLITE_BUSY_SECONDS if lock_wait is None else lock_wait)
            except (NoSuchModuleError, ArgumentError, ValueError, TypeError) as exc:
                raise StoreError(f"ledger {shown}: {_one_line(exc)}") from None
            ledger = cls(db, url, driver)
            ledger.lock_wait, ledger.on_lock_wait = lock_wait, on_lock_wait
            ledger.outage = Outage(shown, outage_wait)
            try:
                ledger._prepare(create=create)
            except (SQLAlchemyError, OverflowError) as exc:
                db.dispose()
                reason = driver.open_failed(_one_line(exc), parsed, mode, modes)
                if reason is None:
                    continue
                raise StoreError(f"ledger {shown}: {reason}") from None
            driver.opened(ledger, parsed, mode, read_only)
            return ledger
        raise StoreError(f"ledger {shown}: {last}")  # pragma: no cover - loop always returns

    def _prepare(self, *, create: bool) -> None:
        with self.db.connect() as conn:
            present = sa.inspect(conn).has_table(meta_table.name)
        if not present:
            if not create:
                raise StoreError(f"ledger {_redact_url(self.url)} holds no histaudit ledger")
            self._create_schema()
        with self.db.connect() as conn:
            bad = not_stored_tables(conn, self.driver)
            if bad:
                raise StoreError(f"ledger {_redact_url(self.url)} is not a plain histaudit "
                                 f"ledger: {'; '.join(bad)} (its rows must be stored in "
                                 f"tables)")
            rows: dict[str, str] = {
                _text(k): _text(v) for k, v in
                conn.execute(sa.select(meta_table.c.key, meta_table.c.value)).all()}
        if rows.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"ledger {_redact_url(self.url)} has unknown schema version "
                             f"{rows.get('schema_version')!r} (this histaudit reads "
                             f"{SCHEMA_VERSION})")
        self.ledger_id = rows.get("ledger_id", "")

    def _create_schema(self) -> None:
        with self._write() as conn:
            self.driver.schema_lock(conn)
            metadata.create_all(conn)
            _install_guards(conn, self.driver)
            have = conn.execute(sa.select(meta_table.c.key)).scalars().all()
            if "schema_version" not in have:
                conn.execute(meta_table.insert(), [
                    {"key": "schema_version", "value": SCHEMA_VERSION},
                    {"key": "ledger_id", "value": str(uuid.uuid4())},
                ])

    def close(self) -> None:
        if self.writer_connections is not None:
            self.writer_connections.close()
        self.db.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ----------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self, *, chunk: int = 5000) -> Iterator[Snapshot]:
        """One consistent read of the ledger (see :class:`Snapshot`).

        One transaction spans every read made through it — PostgreSQL REPEATABLE READ
        (READ ONLY), SQLite a deferred transaction whose WAL snapshot is fixed by its
        first read. Chosen over "read the head, verify only up to its seq": that would
        never look at rows stored after the head, and rows nobody signed into a head are
        exactly what a verifier must report. A database failure is a StoreError.
        """
        with self.connection(lambda exc: f"ledger {_redact_url(self.url)}: {_one_line(exc)}"
                             ) as raw:
            cur = raw.cursor()
            cur.execute(self.driver.begin_snapshot())
            cur.close()
            yield Snapshot(raw, self.driver, chunk)

    @contextlib.contextmanager
    def connection(self, failed: Callable[[BaseException], str]) -> Iterator[Any]:
        """The driver's own connection from the pool, for one transaction.

        Any database failure becomes a StoreError whose message ``failed(exc)`` writes;
        whatever the transaction left open is rolled back before the connection goes
        back to the pool (after a commit, or a read, that is nothing).
        """
        errors = self.db_errors()
        try:
            raw = self.db.raw_connection()
        except errors as exc:  # the pool's own reconnect raises the driver's error as is
            gone = self.driver.connect_lost(exc, self.db)
            raise (StoreUnavailableError if gone else StoreError)(failed(exc)) from None
        try:
            yield raw
        except errors as exc:
            raise (StoreUnavailableError if self.driver.dropped(raw) else StoreError)(
                failed(exc)) from None
        finally:
            # A connection that cannot roll back is broken: it is dropped here, never put
            # back into the pool, whose own reset would fail again and log a traceback
            # (the server can go away after the failure, or after a success).
            if self.driver.dropped(raw) or not self._rolled_back(raw):
                raw.invalidate()
            raw.close()

    def _rolled_back(self, raw: Any) -> bool:
        """Whether whatever transaction ``raw`` had open is now rolled back."""
        try:
            self.driver.rollback(raw)
        except Exception:  # noqa: BLE001 - any failure means the connection is unusable
            return False
        return True

    def db_errors(self) -> tuple[type[BaseException], ...]:
        """What a failing database operation raises: the driver's errors, SQLAlchemy's,
        and OverflowError (an integer the driver cannot bind)."""
        return (self.db.dialect.loaded_dbapi.Error, SQLAlchemyError, OverflowError)

    def entries(self, instance: str, *, chunk: int = 5000,
                after_seq: int = 0) -> Iterator[StoredEntry]:
        """Stream ``instance``'s rows in insertion (leaf) order, in constant memory."""
        with self.snapshot(chunk=chunk) as snap:
            yield from snap.entries(instance, after_seq=after_seq)

    def follow(self, instance: str, after_seq: int) -> Iterator[StoredEntry]:
        """``instance``'s rows after ``after_seq``, in leaf order, for a reader that keeps
        up with a chain (the recorder's folds, asked before every activity): nearly always
        nothing new, so the read's setup is its cost. On SQLite it is one statement on the
        thread's own write connection, with no pool checkout and no explicit transaction
        (figure 7: a quarter of a snapshot's setup); elsewhere a snapshot, as
        :meth:`entries`. Database failures are StoreErrors."""
        rows = self.driver.follow(
            self, lambda exc: f"ledger {_redact_url(self.url)}: {_one_line(exc)}",
            instance, after_seq)
        return self.entries(instance, after_seq=after_seq) if rows is None else rows

    def all_entries(self, *, chunk: int = 5000) -> Iterator[StoredEntry]:
        with self.snapshot(chunk=chunk) as snap:
            yield from snap.all_entries()

    def leaves(self, *, below: int | None = None, chunk: int = 5000
               ) -> Iterator[tuple[int, bytes]]:
        """(leaf index, exact body bytes) in leaf order, optionally only leaves < ``below``."""
        with self.snapshot(chunk=chunk) as snap:
            yield from snap.leaves(below=below)

    def entry_at(self, instance: str, seq: int) -> StoredEntry | None:
        """The stored row of ``instance``'s entry ``seq`` (by its seq column), if any."""
        with self.snapshot() as snap:
            return snap.entry_at(instance, seq)

    def head(self, instance: str) -> StoredHead | None:
        with self.snapshot() as snap:
            return snap.head(instance)

    def leaf_count(self) -> int:
        """Number of leaves in the ledger-wide tree: max(leaf) + 1 (leaves are contiguous)."""
        with self.snapshot() as snap:
            return snap.leaf_count()

    def checkpoint_notes(self) -> list[tuple[int, bytes]]:
        """Every stored checkpoint as (size, signed note), oldest first."""
        with self.snapshot() as snap:
            return snap.checkpoint_notes()

    def cosignatures(self) -> list[tuple[int, str, str, bytes]]:
        """Every stored witness cosignature as (size, witness, key hash hex, line), by
        size; none for a ledger made before cosignatures (its table is created by the
        first write)."""
        with self.db.connect() as conn:
            if not sa.inspect(conn).has_table("histaudit_cosignatures"):
                return []
        with self.snapshot() as snap:
            return snap.cosignatures()

    def instances(self) -> list[InstanceSummary]:
        """Every instance that has entries or a head, with entry counts."""
        with self.snapshot() as snap:
            return snap.instances()

    def instance_ids(self) -> list[str]:
        return [s.instance for s in self.instances()]

    def payload(self, commitment: str) -> tuple[bytes, bytes] | None:
        """The (salt, bytes) stored for a commitment, or None once erased."""
        with self.snapshot() as snap:
            return snap.payload(commitment)

    # -- writing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction (on SQLite it holds the database write lock from BEGIN)."""
        with self.db.connect() as conn:
            raw: Any = conn.connection.dbapi_connection
            if self.on_lock_wait is not None and self.driver.lock_held(raw, self.busy_ms()):
                self.on_lock_wait()
            conn = conn.execution_options(histaudit_write=True)
            with conn.begin():
                yield conn

    def busy_ms(self) -> int:
        return int(1000 * (SQLITE_BUSY_SECONDS if self.lock_wait is None else self.lock_wait))

    @contextlib.contextmanager
    def write(self, what: str = "write", *, durable: bool = True) -> Iterator[WriteTx]:
        """One write transaction holding the ledger-wide append lock, as a :class:`WriteTx`.

        Everything done through it commits together or not at all. ``durable`` (the
        default) returns only once the commit is on stable storage; ``durable=False`` is
        for records nothing outside the process depends on yet: the commit survives the
        process being killed (the OS holds it) and becomes durable with the next durable
        commit — SQLite WAL ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit=off``,
        both of which flush every earlier commit with a later synchronous one. (On
        PostgreSQL every write commits that way, releasing the append lock before the
        flush, and a durable one then waits for the flush: ``_PG_FLUSH``, ADR 0005.)

        A database failure is a :class:`StoreError` naming ``what`` was being done; so is
        a write lock held by another process for longer than ``lock_wait``, and a ledger
        that cannot be written (naming why).
        """
        if self.read_only:
            raise StoreError(f"{what} failed: ledger {_redact_url(self.url)} cannot be "
                             f"written: {self.read_only}")
        if not self._guards_checked:
            self._upgrade_guards()

        def failed(exc: BaseException) -> str:
            return f"{what} failed: {self._explain(exc)}"

        with self.driver.write(self, failed, durable=durable) as tx:
            yield tx

    def _explain(self, exc: BaseException) -> str:
        text = _one_line(exc)
        if self.driver.lock_timed_out(text):
            wait = SQLITE_BUSY_SECONDS if self.lock_wait is None else self.lock_wait
            return (f"gave up after {wait:g} s waiting for the write lock held by "
                    f"another process (set {LOCK_WAIT_ENV} to wait longer)")
        return self.driver.explain(text, self.url)

    def _upgrade_guards(self) -> None:
        """Bring the append-only triggers of a ledger made by an older histaudit up to date.

        Ledgers created before the head triggers checked the signed body still have the
        old ones, which let a writer rewrite heads. The first write through this object
        (not opening: read-only commands and read-only files must keep working) looks at
        the head trigger's definition; when it is the old one it reinstalls every guard,
        idempotently, in its own transaction under the append lock (re-checked there, so
        concurrent openers upgrade once). A trigger that is missing altogether was dropped
        on purpose by whoever owns the file or database, and is left as it is. A role that
        may not replace them (the PostgreSQL writer role is not the owner) keeps appending
        under the old triggers, and a warning says to open the ledger for writing once as
        the owner (e.g. ``histaudit checkpoint`` with the owner's URL).
        """
        self._guards_checked = True
        try:
            with self.db.connect() as conn:
                if not _guards_outdated(conn, self.driver):
                    return
            with self._write() as conn:
                self.driver.schema_lock(conn)
                if _guards_outdated(conn, self.driver):
                    _install_guards(conn, self.driver, upgrade=True)
        except SQLAlchemyError as exc:
            _log.warning("histaudit: ledger %s has the append-only triggers of an older "
                         "histaudit, which do not check a head against its signed body, and "
                         "they could not be upgraded (%s); open it for writing once as its "
                         "owner to upgrade them", _redact_url(self.url), _one_line(exc))

    @property
    def dialect(self) -> str:
        """The database's name (``sqlite``, ``postgresql``): the driver's."""
        return self.driver.name


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
