"""Read one workflow instance's rows from daprd's actor state store: SQLite or PostgreSQL.

Dapr's ``state.sqlite`` component keeps every actor state key in one table (``state``
unless the component sets ``tableName``): ``key, value, is_binary, etag, …``, binary
values base64-encoded. Its ``state.postgresql`` component (v1, the one
``DaprdStack(postgres_actor_store=…)`` runs) keeps them in a table of the same default
name: ``key text, value jsonb, isbinary boolean, insertdate, updatedate, expiredate, …``,
a binary value stored as a JSON string holding its base64. A workflow actor's keys are
``<app-id>||dapr.internal.<namespace>.<app-id>.workflow||<instance>||<name>`` with
``<name>`` one of ``metadata``, ``history-NNNNNN``, ``signature-NNNNNN``,
``sigcert-NNNNNN``, ``ext-sigcert-NNNNNN`` (and others this reader ignores).

A SQLite file is opened read-only; a PostgreSQL store (a ``postgresql://`` or
``postgres://`` URL, libpq's syntax) is read in one read-only transaction. Either way the
rows go to :func:`histaudit.verify.dapr_history.verify_dapr_history` unchanged: the bytes
daprd hashed and signed.
"""

from __future__ import annotations

import base64
import binascii
import re
import sqlite3
from pathlib import Path
from typing import Any

from histaudit.errors import InputError
from histaudit.ledger.store.pg_session import catalog_first
from histaudit.urls import shown_url, without_secrets
from histaudit.verify.dapr_history import ROW_KINDS, ROW_NAME, DaprWorkflowRows

__all__ = ["is_postgres_url", "read_workflow_rows"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TABLE = re.compile(rf"{_IDENT}\Z")
_VIRTUAL = re.compile(r"\s*create\s+virtual\s", re.IGNORECASE)
MAX_STATE_BYTES = 1 << 30
"""Most key and value bytes read for one instance from a Dapr state store (1 GiB)."""
_PG_TABLE = re.compile(rf"(?:{_IDENT}\.)?{_IDENT}\Z")  # state.postgresql allows schema.table
_PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
_PG_CONNECT_TIMEOUT_S = 10

_Row = tuple[object, object, object]  # key, value, is-binary flag


def is_postgres_url(db: str | Path) -> bool:
    """True when ``db`` names a PostgreSQL state store (``postgresql://…``,
    ``postgres://…``, or SQLAlchemy's ``postgresql+psycopg://…``) rather than a file."""
    return isinstance(db, str) and db.split("://", 1)[0].lower() in _PG_SCHEMES \
        and "://" in db


def _value(value: object, is_binary: object, key: str) -> bytes:
    if isinstance(value, bytes):
        text = value
    elif isinstance(value, str):
        text = value.encode()
    else:
        raise InputError(f"state row {key!r} has a value that is not text")
    if not is_binary:
        return text
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"state row {key!r} is marked binary but is not base64") from None


def _sqlite_rows(path: Path, table: str, suffix: str) -> list[_Row]:
    if not _TABLE.match(table):
        raise InputError(f"bad table name {table!r}")
    if not path.is_file():
        raise InputError(f"state store {path}: no such file")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InputError(f"state store {path}: {exc}") from None
    try:
        # The table must store its rows: a view (an endless recursive one ran for ever
        # and took gigabytes), a virtual table or a generated column computes them.
        found = conn.execute(
            "SELECT m.type, m.sql, (SELECT count(*) FROM pragma_table_xinfo(m.name) "
            "WHERE hidden <> 0) FROM sqlite_master m WHERE lower(m.name) = lower(?) "
            "AND m.type IN ('table', 'view')", (table,)).fetchone()
        if found is not None and (found[0] != "table" or found[2]
                                  or _VIRTUAL.match(str(found[1] or ""))):
            what = ("a view" if found[0] != "table" else "a virtual table"
                    if _VIRTUAL.match(str(found[1] or "")) else "computed (generated columns)")
            raise InputError(f"state store {path}: table {table!r} is {what}, not a stored "
                             f"table: refused")
        # instr() rather than LIKE: an instance id may hold % or _.
        return _bounded(conn.execute(f"SELECT key, value, is_binary FROM {table} "  # checked
                                     "WHERE instr(key, ?) > 0", (suffix,)), str(path))
    except sqlite3.Error as exc:
        raise InputError(f"state store {path}: {exc}") from None
    finally:
        conn.close()


def _bounded(cursor: Any, where: str) -> list[_Row]:
    """The cursor's rows, refused past :data:`MAX_STATE_BYTES` of keys and values."""
    rows: list[_Row] = []
    size = 0
    while batch := cursor.fetchmany(256):
        for row in batch:
            size += sum(len(v) for v in row[:2] if isinstance(v, str | bytes))
            if size > MAX_STATE_BYTES:
                raise InputError(f"state store {where}: the instance's rows exceed "
                                 f"{MAX_STATE_BYTES} bytes: refused")
            rows.append(row)
    return rows


def _pg_rows(url: str, table: str, suffix: str) -> list[_Row]:
    import psycopg
    from psycopg import sql

    shown = shown_url(url)
    if not _PG_TABLE.match(table):
        raise InputError(f"bad table name {table!r}")
    scheme, rest = url.split("://", 1)
    conninfo = f"postgresql://{rest}" if scheme.lower() == "postgresql+psycopg" else url
    *schema, name = table.split(".")
    ident = sql.Identifier(*schema, name)
    try:
        conn = psycopg.connect(conninfo, connect_timeout=_PG_CONNECT_TIMEOUT_S,
                               application_name="histaudit dapr-verify")
    except (psycopg.Error, ValueError) as exc:
        raise InputError(f"state store {shown}: "
                         f"{without_secrets(_first_line(exc), url)}") from None
    try:
        catalog_first(conn)  # the store's owner's functions never stand in for pg_catalog's
        conn.read_only = True  # every transaction READ ONLY: the server refuses writes
        with conn.transaction():
            kind = conn.execute(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attname = 'value' "
                "AND NOT a.attisdropped", (ident.as_string(conn),)).fetchone()
            if kind is None:
                raise InputError(f"state store {shown}: no table {table!r} with a value "
                                 "column (not a state.postgresql store, or another "
                                 "tableName: --table)")
            relkind = conn.execute("SELECT c.relkind FROM pg_class c WHERE c.oid = "
                                   "to_regclass(%s)", (ident.as_string(conn),)).fetchone()
            if relkind is not None and relkind[0] not in ("r", "p"):
                raise InputError(f"state store {shown}: {table!r} is not a stored table "
                                 f"(relkind {relkind[0]!r}): refused")
            if kind[0] != "jsonb":
                raise InputError(f"state store {shown}: table {table!r} keeps values as "
                                 f"{kind[0]}, not jsonb: not a state.postgresql v1 store")
            # A binary value is a JSON string of base64 (#>> '{}' unwraps it); any other
            # value is read as the JSON text the component returns to daprd.
            query = sql.SQL("SELECT key, CASE WHEN isbinary THEN value #>> '{{}}' "
                            "ELSE value::text END, isbinary FROM {} "
                            "WHERE strpos(key, %s) > 0").format(ident)
            return _bounded(conn.execute(query, (suffix,)), shown)
    except psycopg.Error as exc:
        raise InputError(f"state store {shown}: "
                         f"{without_secrets(_first_line(exc), url)}") from None
    finally:
        conn.close()


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def read_workflow_rows(db_path: str | Path, instance: str, *, app_id: str | None = None,
                       table: str = "state") -> DaprWorkflowRows:
    """The ``metadata``, ``history-*``, ``signature-*`` and ``sigcert-*`` rows of
    workflow ``instance`` (of app ``app_id`` when given), from a SQLite file or, when
    ``db_path`` is a ``postgresql://`` URL, a PostgreSQL store. InputError when the store
    is not a readable state store, the instance has no rows, or several apps hold it."""
    suffix = f"||{instance}||"
    where: str | Path
    if is_postgres_url(db_path):
        where = shown_url(str(db_path))
        rows = _pg_rows(str(db_path), table, suffix)
    else:
        where = Path(db_path)
        rows = _sqlite_rows(where, table, suffix)
    apps: dict[str, dict[str, bytes]] = {}
    for key, value, is_binary in rows:
        parts = str(key).split("||")
        if len(parts) != 4 or parts[2] != instance or not parts[1].endswith(".workflow"):
            continue
        if app_id is not None and parts[0] != app_id:
            continue
        apps.setdefault(parts[0], {})[parts[3]] = _value(value, is_binary, str(key))
    if not apps:
        whose = f" of app {app_id!r}" if app_id else ""
        raise InputError(f"no workflow state for instance {instance!r}{whose} in {where}")
    if len(apps) > 1:
        raise InputError(f"instance {instance!r} is held by apps {sorted(apps)}; "
                         "pass --app-id")
    (named,) = apps.values()
    found: dict[str, dict[int, bytes]] = {kind: {} for kind in ROW_KINDS}
    for name, raw in named.items():
        m = ROW_NAME.match(name)
        if m:
            found[m.group(1)][int(m.group(2))] = raw
    return DaprWorkflowRows.of_kinds(instance, found, named.get("metadata"))
