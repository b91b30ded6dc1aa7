"""PostgreSQL: the store driver (:class:`PostgresDriver`), on sessions that find the
catalog's functions before anyone else's.

The driver: one SQLAlchemy pool whose connections are pinged only after sitting idle,
writes that take a ledger-wide advisory lock and run pipelined (the lock and the first
reads in one round trip, the inserts and COMMIT in the next), a COMMIT that does not
wait for the WAL flush and a durable write that waits for it afterwards (ADR 0005), and
PL/pgSQL triggers for the append-only rule.

The session: :func:`~histaudit.ledger.store.pg_session.catalog_first` (why, there).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .driver import Driver, DriverContext
from .pg_session import catalog_first
from .schema import HEAD_MISMATCH
from .sql import FORMAT
from .writetx import WriteTx

# The append-only guards (installed by PostgresDriver.install_guards).
PG_TRIGGERS = [
    """CREATE OR REPLACE FUNCTION histaudit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'histaudit ledger is append-only (% on %)', TG_OP, TG_TABLE_NAME;
       END $$""",
    # See histaudit_heads_forward on SQLite. The function's search_path is pinned, with
    # pg_temp last: otherwise a writer's own TEMP TABLE histaudit_entries (the TEMP right is
    # PUBLIC's by default) would shadow the real one inside the trigger and vouch for a
    # forged head. @SCHEMA@ is the ledger's schema, filled in when the function is created.
    f"""CREATE OR REPLACE FUNCTION histaudit_head_forward() RETURNS trigger LANGUAGE plpgsql
       SET search_path = pg_catalog, @SCHEMA@, pg_temp AS $$
       DECLARE doc jsonb;
       BEGIN
         IF TG_OP = 'UPDATE' AND (NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance) THEN
           RAISE EXCEPTION 'histaudit head may only move forward';
         END IF;
         doc := convert_from(NEW.body, 'UTF8')::jsonb;
         IF jsonb_typeof(doc) IS DISTINCT FROM 'object'
            OR jsonb_typeof(doc -> 'seq') IS DISTINCT FROM 'number'
            OR doc ->> 'seq' IS DISTINCT FROM NEW.seq::text
            OR doc ->> 'instance' IS DISTINCT FROM NEW.instance
            OR NOT EXISTS (SELECT 1 FROM histaudit_entries e
                           WHERE e.instance = NEW.instance AND e.seq = NEW.seq
                             AND e.hash = doc ->> 'hash' AND e.leaf::text = doc ->> 'leaf')
            OR EXISTS (SELECT 1 FROM histaudit_entries e
                       WHERE e.instance = NEW.instance AND e.seq > NEW.seq) THEN
           RAISE EXCEPTION '{HEAD_MISMATCH}';
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_append_only BEFORE UPDATE OR DELETE
       ON histaudit_entries FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_no_truncate BEFORE TRUNCATE
       ON histaudit_entries FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_forward BEFORE UPDATE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_head_forward()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_checked_insert BEFORE INSERT
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_head_forward()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_truncate BEFORE TRUNCATE
       ON histaudit_heads FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_append_only BEFORE UPDATE OR DELETE
       ON histaudit_checkpoints FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_no_truncate BEFORE TRUNCATE
       ON histaudit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_cosignatures_append_only BEFORE UPDATE OR DELETE
       ON histaudit_cosignatures FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_cosignatures_no_truncate BEFORE TRUNCATE
       ON histaudit_cosignatures FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_payloads_no_update BEFORE UPDATE
       ON histaudit_payloads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
]

PING_AFTER_IDLE_SECONDS = 1.0
"""A pooled PostgreSQL connection idle for longer than this is pinged before it is used."""
# Any 64-bit constant: the key of the PostgreSQL advisory lock that orders appends.
APPEND_LOCK_KEY = 0x6869_7374_6175_6474  # "histaudt"
_APPEND_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_TRY_APPEND_LOCK = "SELECT pg_try_advisory_xact_lock(%s)"
# A statement of its own transaction, after a write's COMMIT, that returns only once the
# WAL is on disk up to its own commit record, so up to the write's too: it writes a
# record and takes a transaction id (a commit flushes only then), and changes nothing.
# PUBLIC may run it; the message is decoded only by a logical-replication reader that
# asks for the "histaudit" prefix.
_FLUSH = "SELECT pg_logical_emit_message(true, 'histaudit', 'flush')"
_cursor_names = count()


# --- the driver --------------------------------------------------------------------------

def _engine(parsed: sa.URL) -> Engine:
    """A PostgreSQL engine whose sessions search pg_catalog first (:func:`catalog_first`),
    and whose pool pings a connection only when it sat idle for more than
    :data:`PING_AFTER_IDLE_SECONDS`.

    A ping on every checkout (``pool_pre_ping``) is a round trip and about 0.35 ms of
    client CPU for every transaction, which is a third of a one-entry append
    (benchmarks/README.md, figure 2). A connection that was used a moment ago is as
    good as a ping would find it; if the server went away meanwhile, that one write
    fails with a StoreError, and the pool replaces the broken connection.
    """
    db = sa.create_engine(parsed.set(drivername="postgresql+psycopg"))
    sa.event.listen(db, "connect", lambda dbapi_conn, _record: catalog_first(dbapi_conn))
    sa.event.listen(db, "checkin", _note_checkin)
    sa.event.listen(db, "checkout", functools.partial(_ping_if_idle, db.dialect))
    return db


def _note_checkin(_dbapi_conn: Any, record: Any) -> None:
    if record is not None:
        record.info["histaudit_idle_since"] = time.monotonic()


def _ping_if_idle(dialect: Any, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    """Pool checkout: ping a connection idle for long; one that fails is replaced (the
    pool retries the checkout on DisconnectionError)."""
    since = record.info.get("histaudit_idle_since")
    if since is None or time.monotonic() - since <= PING_AFTER_IDLE_SECONDS:
        return
    try:
        alive = dialect.do_ping(dbapi_conn)
    except dialect.loaded_dbapi.Error:
        alive = False
    if not alive:
        raise sa.exc.DisconnectionError("the pooled connection did not answer a ping")


class PostgresDriver(Driver):
    """A ledger in one PostgreSQL database (module docstring)."""

    name = "postgresql"
    drivernames: ClassVar[tuple[str, ...]] = ("postgresql", "postgresql+psycopg")
    statements = FORMAT
    placeholder = "%s"

    def engine(self, parsed: sa.URL, mode: str, *, create: bool, busy: float) -> Engine:
        return _engine(parsed)

    # --- the guards ---

    def install_guards(self, conn: Connection, *, upgrade: bool) -> None:
        # CREATE OR REPLACE: installing is idempotent, and it is also the upgrade.
        # text() escapes the '%' in the PL/pgSQL RAISE format for psycopg's pyformat
        # paramstyle; exec_driver_sql would hand it over unescaped.
        schema = str(conn.execute(sa.text("SELECT current_schema()")).scalar())
        quoted = '"' + schema.replace('"', '""') + '"'
        for stmt in PG_TRIGGERS:
            conn.execute(sa.text(stmt.replace("@SCHEMA@", quoted)))

    def guards_outdated(self, conn: Connection) -> bool:
        found = conn.execute(sa.text(
            "SELECT p.prosrc, (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid "
            "  AND t.tgname = 'histaudit_heads_checked_insert') "
            "FROM pg_proc p, pg_class c "
            "WHERE p.proname = 'histaudit_head_forward' "
            "  AND p.pronamespace = (SELECT oid FROM pg_namespace "
            "                        WHERE nspname = current_schema()) "
            "  AND c.oid = to_regclass(quote_ident(current_schema()) || '.histaudit_heads')"
        )).first()
        return found is not None and (HEAD_MISMATCH not in str(found[0]) or not found[1])

    def rekey_cosignatures(self, conn: Connection) -> None:
        pk = sa.inspect(conn).get_pk_constraint("histaudit_cosignatures")["name"]
        quoted = '"' + str(pk).replace('"', '""') + '"'
        conn.execute(sa.text(f"ALTER TABLE histaudit_cosignatures DROP CONSTRAINT {quoted}, "
                             f"ADD PRIMARY KEY (size, witness, key_hash, line)"))

    def not_stored_tables(self, conn: Connection, names: list[str]) -> list[str]:
        kinds = {"v": "a view", "m": "a materialized view", "f": "a foreign table",
                 "p": "a partitioned table", "c": "a composite type"}
        problems: list[str] = []
        for name, kind, generated in conn.execute(sa.text(
                "SELECT c.relname, c.relkind, (SELECT count(*) FROM pg_attribute a "
                "  WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
                "  AND a.attgenerated <> '') "
                "FROM unnest(CAST(:names AS text[])) AS n(name) "
                "JOIN pg_class c ON c.oid = to_regclass(quote_ident(n.name))"),
                {"names": names}):
            if kind != "r":
                problems.append(f"{name} is {kinds.get(kind, f'of relkind {kind!r}')}")
            elif generated:
                problems.append(f"{name} has a generated column")
        return problems

    def schema_lock(self, conn: Connection) -> None:
        conn.exec_driver_sql(_APPEND_LOCK, (APPEND_LOCK_KEY,))

    # --- reading ---

    def begin_snapshot(self) -> str:
        # psycopg opens the transaction with this statement's BEGIN; SET TRANSACTION
        # must be its first statement.
        return "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

    def stream_cursor(self, raw: Any, chunk: int) -> Any:
        """A named (server-side) cursor that fetches ``chunk`` rows a round trip."""
        cur = raw.cursor(name=f"histaudit_stream_{next(_cursor_names)}")
        cur.itersize = chunk
        return cur

    # --- writing and errors ---

    @contextlib.contextmanager
    def write(self, ledger: DriverContext, failed: Callable[[BaseException], str], *,
              durable: bool) -> Iterator[WriteTx]:
        with ledger.connection(failed) as raw:
            cur = raw.cursor()
            try:
                # The whole transaction in pipeline mode: the lock and the batch's first
                # reads go in one round trip, its inserts and COMMIT in the next, so the
                # append lock is held across one wait on the server (test_group_commit).
                # Without a bound on the wait the lock goes with the first statement
                # (WriteTx.start).
                with raw.dbapi_connection.pipeline():
                    lock = None
                    if ledger.lock_wait is None:
                        lock = (_APPEND_LOCK, (APPEND_LOCK_KEY,))
                    else:
                        self._append_lock(ledger, cur)
                    # The COMMIT does not wait for the WAL flush, so the lock is released
                    # at once; a durable write waits for it after (_FLUSH).
                    cur.execute("SET LOCAL synchronous_commit = off")
                    yield WriteTx(cur, self.statements, pipelined=True, tips=ledger.tips,
                                  lock=lock)
                    # queued like the inserts and sent, with them, when the pipeline ends
                    # (psycopg's commit() inside a pipeline can stall on a large batch:
                    # it waits for the answer before the queued bytes are all sent)
                    cur.execute("COMMIT")
                    if durable:
                        cur.execute(_FLUSH)
            finally:
                cur.close()

    def _append_lock(self, ledger: DriverContext, cur: Any) -> None:
        """The append lock, waited for at most ``ledger.lock_wait``."""
        assert ledger.lock_wait is not None
        lock = (APPEND_LOCK_KEY,)
        cur.execute(_TRY_APPEND_LOCK, lock)
        if cur.fetchone()[0]:
            return
        if ledger.on_lock_wait is not None:
            ledger.on_lock_wait()
        # lock_timeout also bounds advisory locks; 0 would mean "wait forever".
        cur.execute(f"SET LOCAL lock_timeout = {max(1, int(ledger.lock_wait * 1000))}")
        cur.execute(_APPEND_LOCK, lock)

    def dropped(self, raw: Any) -> bool:
        """psycopg marks a connection broken or closed when the server went away."""
        conn = getattr(raw, "dbapi_connection", None)
        return bool(getattr(conn, "broken", False) or getattr(conn, "closed", False))

    def lock_timed_out(self, text: str) -> bool:
        return "lock timeout" in text

    def connect_lost(self, exc: BaseException, db: Engine) -> bool:
        return isinstance(exc, (sa.exc.OperationalError,
                                db.dialect.loaded_dbapi.OperationalError))

    def rollback(self, raw: Any) -> None:
        raw.rollback()

