"""The seam between the ledger and a database: what a store driver provides.

:class:`~histaudit.ledger.store.rows.Ledger` holds no dialect of its own. Everything that
differs between databases is a :class:`Driver` method, and :func:`driver_for` chooses the
driver by the URL's backend name from :data:`DRIVERS` — an unknown backend is a one-line
error, never an ``else`` branch that would give it another database's behaviour. A new
database is one module with one ``Driver`` subclass, one entry in :data:`DRIVERS`, and
one more parameter of ``tests/integration/test_store_contract.py``.

What a driver decides:

* **opening**: which drivernames it accepts, how a URL is opened (modes to try, the
  SQLAlchemy engine, what makes the ledger unwritable) — :meth:`Driver.targets`,
  :meth:`Driver.engine`, :meth:`Driver.opened`;
* **statements**: the raw SQL in its placeholder style (:attr:`Driver.statements`);
* **the append-only guards**: installing them, telling outdated ones, the one schema
  migration that needs DDL (:meth:`Driver.install_guards`, :meth:`Driver.guards_outdated`,
  :meth:`Driver.rekey_cosignatures`), and refusing tables that are not stored
  (:meth:`Driver.not_stored_tables`);
* **reading**: a snapshot's first statement and its streaming cursor
  (:meth:`Driver.begin_snapshot`, :meth:`Driver.stream_cursor`, :meth:`Driver.fetch_size`),
  and a cheaper read for a reader that keeps up with a chain (:meth:`Driver.follow`);
* **writing**: the write transaction with its lock, pipelining and flush
  (:meth:`Driver.write`), the lock a schema change takes (:meth:`Driver.schema_lock`);
* **errors**: a connection the server dropped (:meth:`Driver.connect_lost`), what a
  failure means in words (:meth:`Driver.explain`), how a transaction is undone
  (:meth:`Driver.rollback`).
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from histaudit.errors import StoreError

from .sql import Statements

if TYPE_CHECKING:
    from histaudit.ledger.records import StoredEntry

    from .writetx import TipMemo, WriteTx

__all__ = ["DRIVERS", "Driver", "DriverContext", "OnLockWait", "driver_for"]

OnLockWait = Callable[[], None]


class DriverContext(Protocol):
    """What a driver sees of the ledger it serves (:class:`~.rows.Ledger` is one): the
    state of one open ledger that opening it and writing to it need, and its pooled
    connection; never the ledger's records or its other operations."""

    read_only: str
    """Why the ledger cannot be written ('' when it can): set by :meth:`Driver.opened`."""
    file: Path | None
    """The database file (set by :meth:`Driver.opened`; None: a server)."""
    lock_wait: float | None
    on_lock_wait: OnLockWait | None
    tips: TipMemo
    """The bodies this ledger wrote last (:class:`~.writetx.WriteTx`'s tips)."""
    writer_connections: Any
    """What :meth:`Driver.writers` made for this ledger."""

    def busy_ms(self) -> int:
        """How long a write waits for the database's write lock, in milliseconds."""
        ...

    def db_errors(self) -> tuple[type[BaseException], ...]:
        """What a failing database operation raises."""
        ...

    def connection(self, failed: Callable[[BaseException], str]
                   ) -> contextlib.AbstractContextManager[Any]:
        """A pooled connection for one transaction, failures as StoreError."""
        ...


class Driver(ABC):
    """One database's behaviour under the ledger (module docstring)."""

    name: ClassVar[str]
    """The URL backend name it serves (``sqlite``, ``postgresql``)."""
    drivernames: ClassVar[tuple[str, ...]]
    """The SQLAlchemy drivernames it accepts; any other (asyncpg, …) is refused."""
    statements: ClassVar[Statements]
    placeholder: ClassVar[str]

    # --- opening --------------------------------------------------------------------

    def targets(self, parsed: sa.URL, *, create: bool, shown: str
                ) -> tuple[sa.URL, list[str], str]:
        """The URL to open, the modes to try in order, and why it cannot be written
        ('' when it can)."""
        return parsed, ["rw"], ""

    @abstractmethod
    def engine(self, parsed: sa.URL, mode: str, *, create: bool, busy: float) -> Engine:
        """The SQLAlchemy engine for ``parsed`` opened in ``mode``."""

    def opened(self, ledger: DriverContext, parsed: sa.URL, mode: str, read_only: str) -> None:
        """Note what the open found on ``ledger`` (its file, why it is read-only)."""
        ledger.read_only = read_only

    def open_failed(self, message: str, parsed: sa.URL, mode: str, modes: list[str]
                    ) -> str | None:
        """None to try the next mode; else the one-line reason the open failed."""
        return message

    # --- the guards -----------------------------------------------------------------

    @abstractmethod
    def install_guards(self, conn: Connection, *, upgrade: bool) -> None:
        """Create the append-only triggers (``upgrade``: replace outdated ones first)."""

    @abstractmethod
    def guards_outdated(self, conn: Connection) -> bool:
        """True when the head trigger exists but is an older histaudit's."""

    @abstractmethod
    def rekey_cosignatures(self, conn: Connection) -> None:
        """Key the cosignatures table by its line too, rows kept."""

    @abstractmethod
    def not_stored_tables(self, conn: Connection, names: list[str]) -> list[str]:
        """One phrase per ledger table that is not a plain stored table."""

    @abstractmethod
    def schema_lock(self, conn: Connection) -> None:
        """Serialize a schema change with every other opener."""

    # --- reading --------------------------------------------------------------------

    @abstractmethod
    def begin_snapshot(self) -> str:
        """The statement that opens a consistent read-only transaction."""

    def stream_cursor(self, raw: Any, chunk: int) -> Any:
        """A cursor that streams rows (``chunk`` a round trip where that applies)."""
        return raw.cursor()

    def fetch_size(self, chunk: int) -> int:
        return chunk

    def follow(self, ledger: DriverContext, failed: Callable[[BaseException], str],
               instance: str, after_seq: int) -> Iterator[StoredEntry] | None:
        """``instance``'s rows after ``after_seq`` read without a snapshot, where the
        driver has a cheaper consistent read (see :meth:`.rows.Ledger.follow`); None:
        read them through one."""
        return None

    # --- writing and errors ---------------------------------------------------------

    def writers(self, db: Engine) -> Any:
        """Per-thread write connections the driver keeps (None: use the pool)."""
        return None

    @abstractmethod
    @contextlib.contextmanager
    def write(self, ledger: DriverContext, failed: Callable[[BaseException], str], *,
              durable: bool) -> Iterator[WriteTx]:
        """One write transaction holding the ledger-wide append lock."""

    def lock_held(self, raw: Any, busy_ms: int) -> bool:
        """Whether another process holds the write lock now (a schema write's check)."""
        return False

    def connect_lost(self, exc: BaseException, db: Engine) -> bool:
        """Whether a failure to get a connection means the server is away."""
        return False

    def dropped(self, raw: Any) -> bool:
        """Whether the connection under ``raw`` is gone (the server went away): a failure
        then says nothing about the statement."""
        return False

    def lock_timed_out(self, text: str) -> bool:
        """Whether a failure's first line says a write gave up waiting for the lock."""
        return False

    @abstractmethod
    def rollback(self, raw: Any) -> None:
        """Undo whatever transaction ``raw`` has open (errors are the caller's)."""

    def explain(self, text: str, url: str) -> str:
        """``text`` (a failure's first line) with what it means on this database."""
        return text

    def file(self, parsed: sa.URL) -> Path | None:
        """The database file (None: a server)."""
        return None


DRIVERS: dict[str, str] = {
    "sqlite": "histaudit.ledger.store.sqlite:SqliteDriver",
    "postgresql": "histaudit.ledger.store.postgres:PostgresDriver",
}
"""The registry: each URL backend name and the ``module:class`` of its driver, imported
when a URL names it."""


def driver_for(parsed: sa.URL, shown: str) -> Driver:
    """The driver of ``parsed``'s backend; StoreError naming the URL when there is none,
    or it does not take the URL's drivername."""
    backend = parsed.get_backend_name()
    where = DRIVERS.get(backend)
    if where is None:
        raise StoreError(f"ledger URL {shown}: no store driver for {backend!r} (there are: "
                         f"{', '.join(DRIVERS)})")
    module, _, name = where.partition(":")
    driver: Driver = getattr(importlib.import_module(module), name)()
    if parsed.drivername not in driver.drivernames:
        raise StoreError(f"ledger URL {shown}: driver {parsed.drivername!r} is not "
                         f"supported (use {' or '.join(driver.drivernames)})")
    return driver
