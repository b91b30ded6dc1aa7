"""Bad input, table-driven: the bad *databases* — every command against every bad SQLite
file, bad URL, and reachable database that is not a usable ledger, and a cut file under
the writing and proving commands. The rule and the other bad inputs (trust stores, keys,
command lines): ``test_bad_input.py``; what they share: ``support/bad_input.py``. Split
from ``test_bad_input.py`` (stop 47) to keep each file inside its CPU budget.
Cost: ≈ 60 s of CPU on a slow 2-core machine (278 tests; most are one forked command each).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from histaudit.ledger import chain
from histaudit.ledger.keys import Signer
from histaudit.ledger.store import Ledger
from support.bad_input import (
    DB_COMMANDS,
    GARBAGE,
    Ctx,
    keys_for,
    raw_sql,
    run,
    snapshot_files,
)
from support.cli import cli, one_error_line
from support.ledgers import LedgerDb, append_order

# --- 1. the database itself is bad (SQLite files) ----------------------------------------

def _write(data: bytes) -> Callable[[Path, Path], None]:
    def make(path: Path, big: Path) -> None:
        path.write_bytes(data)
    return make


def _truncated(size: int | None) -> Callable[[Path, Path], None]:
    def make(path: Path, big: Path) -> None:
        data = big.read_bytes()
        path.write_bytes(data[:size if size is not None else len(data) // 2])
    return make


def _holes(path: Path, big: Path) -> None:
    data = bytearray(big.read_bytes())
    data[4096 * 5:4096 * 8] = b"\xff" * (4096 * 3)  # b-tree pages past the schema
    path.write_bytes(bytes(data))


def _sqlite_db(*statements: str) -> Callable[[Path, Path], None]:
    def make(path: Path, big: Path) -> None:
        conn = sqlite3.connect(path)
        try:
            for stmt in statements:
                conn.execute(stmt)
            conn.commit()
        finally:
            conn.close()
    return make


def _ledger_then(*statements: str) -> Callable[[Path, Path], None]:
    def make(path: Path, big: Path) -> None:
        shutil.copyfile(big, path)
        _sqlite_db(*statements)(path, big)
    return make


def _nothing(path: Path, big: Path) -> None:
    pass


def _directory(path: Path, big: Path) -> None:
    path.mkdir()



MakeFile = Callable[[Path, Path], None]  # (path to create, a real multi-page ledger)

#: name -> (make the file at path, URL for the path, what the error line must say)
BAD_SQLITE: dict[str, tuple[MakeFile, Callable[[Path], str], tuple[str, ...]]] = {
    "missing file": (_nothing, lambda p: f"sqlite:///{p}", ("does not exist",)),
    "missing directory": (_nothing, lambda p: f"sqlite:///{p.parent / 'no' / 'x.db'}",
                          ("does not exist",)),
    "directory": (_directory, lambda p: f"sqlite:///{p}", ("is a directory",)),
    "garbage": (_write(GARBAGE), lambda p: f"sqlite:///{p}", ("not a SQLite database",)),
    "text file": (_write(b"instance,seq\norder-1,1\n"), lambda p: f"sqlite:///{p}",
                  ("not a SQLite database",)),
    "SQLite header then garbage": (_write(b"SQLite format 3\x00" + GARBAGE),
                                   lambda p: f"sqlite:///{p}", ("not a database",)),
    "empty file": (_write(b""), lambda p: f"sqlite:///{p}", ("holds no histaudit ledger",)),
    "truncated to 1000 bytes": (_truncated(1000), lambda p: f"sqlite:///{p}", ("malformed",)),
    "truncated to half": (_truncated(None), lambda p: f"sqlite:///{p}", ("malformed",)),
    "corrupt pages": (_holes, lambda p: f"sqlite:///{p}", ("malformed",)),
    "other application's db": (
        _sqlite_db("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)",
                   "INSERT INTO customers (name) VALUES ('Ada')"),
        lambda p: f"sqlite:///{p}", ("holds no histaudit ledger",)),
    "schema version 999": (
        _ledger_then("UPDATE histaudit_meta SET value = '999' WHERE key = 'schema_version'"),
        lambda p: f"sqlite:///{p}", ("unknown schema version '999'",)),
    "schema version missing": (
        _ledger_then("DELETE FROM histaudit_meta WHERE key = 'schema_version'"),
        lambda p: f"sqlite:///{p}", ("unknown schema version None",)),
    "entries table dropped": (
        _ledger_then("DROP TRIGGER histaudit_entries_no_delete",
                     "DROP TABLE histaudit_entries"),
        lambda p: f"sqlite:///{p}", ("no such table: histaudit_entries",)),
    "bad query option": (lambda p, b: shutil.copyfile(b, p),
                         lambda p: f"sqlite:///{p}?timeout=soon", ("timeout=soon",)),
}


def _bad_sqlite_file(case: str, tmp: Path, big: Path) -> tuple[Path, str, tuple[str, ...]]:
    """``BAD_SQLITE[case]`` made at ``tmp/db/ledger.db``: (its path, its URL, what the
    error line must say)."""
    make, to_url, needles = BAD_SQLITE[case]
    db_dir = tmp / "db"
    db_dir.mkdir()
    path = db_dir / "ledger.db"
    make(path, big)
    return path, to_url(path), needles


@pytest.mark.parametrize("command", DB_COMMANDS)
@pytest.mark.parametrize("case", BAD_SQLITE)
def test_bad_sqlite_database(case: str, command: str, tmp_path: Path, big_ledger: Path) -> None:
    key, trust, _ = keys_for(tmp_path)
    path, url, needles = _bad_sqlite_file(case, tmp_path, big_ledger)
    ctx = Ctx(tmp=tmp_path, url=url, key=key, trust=trust, files=tmp_path)
    before = ctx.state()
    line = one_error_line(run(DB_COMMANDS[command](ctx), cwd=tmp_path), *needles)
    if not case.startswith("missing directory"):
        assert str(path) in line, line
    assert ctx.state() == before, "the command changed the database files"


# --- 2. the URL is bad, or names a server that refuses ------------------------------------

BAD_URLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "not a url": ("not a url", ("'not a url'", "not a database URL")),
    "mysql": ("mysql://x/y", ("mysql://x/y", "no store driver for 'mysql'")),
    "unreachable postgres": ("postgresql+psycopg://nobody@127.0.0.1:1/x",
                             ("127.0.0.1", "port 1")),
    "plain postgresql scheme, unreachable": ("postgresql://nobody@127.0.0.1:1/x",
                                             ("127.0.0.1",)),
    "driver not shipped": ("postgresql+asyncpg://nobody@127.0.0.1:1/x",
                           ("postgresql+asyncpg", "not supported")),
    "psycopg2 driver": ("postgresql+psycopg2://nobody@127.0.0.1:1/x",
                        ("postgresql+psycopg2", "not supported")),
    "unknown sqlite driver": ("sqlite+nosuch:///x.db", ("sqlite+nosuch", "not supported")),
    "port not a number": ("postgresql+psycopg://nobody@127.0.0.1:http/x",
                          ("not a database URL",)),
    "port out of range": ("postgresql+psycopg://nobody@127.0.0.1:99999/x", ("99999",)),
    "unknown option": ("postgresql+psycopg://nobody@127.0.0.1:1/x?frobnicate=1",
                       ("frobnicate",)),
}


@pytest.mark.parametrize("command", DB_COMMANDS)
@pytest.mark.parametrize("case", BAD_URLS)
def test_bad_url(case: str, command: str, tmp_path: Path) -> None:
    url, needles = BAD_URLS[case]
    key, trust, _ = keys_for(tmp_path)
    ctx = Ctx(tmp=tmp_path, url=url, key=key, trust=trust, files=tmp_path)
    before = snapshot_files(tmp_path)
    one_error_line(run(DB_COMMANDS[command](ctx), cwd=tmp_path), *needles)
    assert snapshot_files(tmp_path) == before  # no stray ledger file created


def test_password_in_url_is_never_printed(tmp_path: Path) -> None:
    line = one_error_line(
        run(["list", "--db", "postgresql+psycopg://ops:hunter2@127.0.0.1:1/x"], cwd=tmp_path),
        "ops:***@127.0.0.1")
    assert "hunter2" not in line


def test_bad_url_from_the_environment(tmp_path: Path) -> None:
    r = run(["list"], cwd=tmp_path, env={"HISTAUDIT_DB": "mysql://x/y"})
    one_error_line(r, "mysql://x/y", "no store driver for 'mysql'")


def test_default_ledger_missing(tmp_path: Path) -> None:
    one_error_line(run(["list"], cwd=tmp_path), "histaudit.db", "does not exist")
    one_error_line(run(["list", "--db", ""], cwd=tmp_path), "histaudit.db")
    assert list(tmp_path.iterdir()) == []


# --- 3. a live PostgreSQL server, but not a usable ledger --------------------------------

@pytest.mark.postgres
@pytest.mark.parametrize("command", DB_COMMANDS)
def test_postgres_database_does_not_exist(command: str, pg_server: Any, tmp_path: Path
                                          ) -> None:
    key, trust, _ = keys_for(tmp_path)
    url = pg_server.superuser_url("histaudit_no_such_database")
    ctx = Ctx(tmp=tmp_path, url=url, key=key, trust=trust, files=tmp_path)
    one_error_line(run(DB_COMMANDS[command](ctx), cwd=tmp_path),
                          "histaudit_no_such_database", "does not exist")
    with psycopg.connect(pg_server.conninfo()) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = "
                            "'histaudit_no_such_database'").fetchone() == (0,)


@pytest.mark.postgres
def test_postgres_unknown_role(pg_server: Any, tmp_path: Path) -> None:
    url = f"postgresql+psycopg://nobody_here@127.0.0.1:{pg_server.port}/postgres"
    one_error_line(run(["list", "--db", url], cwd=tmp_path), "nobody_here")


def _pg_other_app(url: str) -> None:
    raw_sql(url, "CREATE TABLE customers (id integer PRIMARY KEY, name text)",
            "INSERT INTO customers VALUES (1, 'Ada')")


def _good_ledger(url: str, signer: Signer) -> None:
    with Ledger.open(url, create=True) as ledger:
        append_order(ledger, signer, "order-1")


def _pg(url: str) -> bool:
    return url.startswith("postgresql")


# Rows no write stored, computed on every read: a database of a few kilobytes that
# would hand the verifier endless rows, or a 900 MB value.
_ENDLESS_SQLITE = (  # SQLite finds it under any ASCII case
    "CREATE VIEW Histaudit_Entries AS WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL "
    "SELECT n + 1 FROM r) SELECT n AS leaf, 'order-1' AS instance, n + 1 AS seq, "
    "'x' AS hash, CAST('{}' AS BLOB) AS body, x'00' AS sig FROM r")
_ENDLESS_PG = (
    "CREATE VIEW histaudit_entries AS WITH RECURSIVE r(n) AS (SELECT 0::bigint UNION ALL "
    "SELECT n + 1 FROM r) SELECT n AS leaf, 'order-1'::text AS instance, n + 1 AS seq, "
    "'x'::text AS hash, '\\x7b7d'::bytea AS body, '\\x00'::bytea AS sig FROM r")
_GENERATED_SQLITE = (
    "CREATE TABLE histaudit_entries (leaf INTEGER PRIMARY KEY, instance TEXT NOT NULL, "
    "seq BIGINT NOT NULL, hash VARCHAR(64) NOT NULL, sig BLOB NOT NULL, "
    "body BLOB GENERATED ALWAYS AS (zeroblob(900000000)) VIRTUAL)")
_GENERATED_PG = (
    "CREATE TABLE histaudit_entries (leaf bigint PRIMARY KEY, instance text NOT NULL, "
    "seq bigint NOT NULL, hash varchar(64) NOT NULL, sig bytea NOT NULL, "
    "body bytea GENERATED ALWAYS AS (sha256(sig)) STORED)")


def _replace_entries(sqlite_sql: str, pg_sql: str) -> Callable[[str, Signer], None]:
    """A good ledger whose entries table an attacker replaced with ``*_sql``."""
    def make(url: str, signer: Signer) -> None:
        _good_ledger(url, signer)
        raw_sql(url, "DROP TABLE histaudit_entries" + (" CASCADE" if _pg(url) else ""),
                pg_sql if _pg(url) else sqlite_sql)
    return make


def _virtual_heads(url: str, signer: Signer) -> None:
    """SQLite: heads as a full-text virtual table. PostgreSQL has none: a view instead."""
    _good_ledger(url, signer)
    raw_sql(url, "DROP TABLE histaudit_heads" + (" CASCADE" if _pg(url) else ""),
            "CREATE VIEW histaudit_heads AS SELECT 'order-1'::text AS instance, "
            "4::bigint AS seq, '\\x7b7d'::bytea AS body, '\\x00'::bytea AS sig" if _pg(url)
            else "CREATE VIRTUAL TABLE histaudit_heads USING fts5(instance, seq, body, sig)")


#: name -> (turn a fresh ledger URL into the bad database, what the error must say)
BAD_LEDGERS: dict[str, tuple[Callable[[str, Signer], None], tuple[str, ...]]] = {
    "empty database": (lambda url, s: None if url.startswith("postgresql") else
                       raw_sql(url, "PRAGMA user_version = 7"), ("holds no histaudit ledger",)),
    "other application's database": (lambda url, s: _pg_other_app(url)
                                     if url.startswith("postgresql") else
                                     raw_sql(url, "CREATE TABLE customers (id integer)"),
                                     ("holds no histaudit ledger",)),
    "schema version 999": (
        lambda url, s: (_good_ledger(url, s), raw_sql(
            url, "UPDATE histaudit_meta SET value = '999' WHERE key = 'schema_version'")),
        ("unknown schema version '999'", "this histaudit reads 1")),
    "entries an endless view": (_replace_entries(_ENDLESS_SQLITE, _ENDLESS_PG),
                                ("not a plain histaudit ledger", "ntries is a view",
                                 "stored in tables")),
    "entries with a generated body": (_replace_entries(_GENERATED_SQLITE, _GENERATED_PG),
                                      ("not a plain histaudit ledger",
                                       "histaudit_entries has a generated column")),
    "heads a virtual table or view": (_virtual_heads,
                                      ("not a plain histaudit ledger", "histaudit_heads is a")),
}


@pytest.mark.parametrize("command", DB_COMMANDS)
@pytest.mark.parametrize("case", BAD_LEDGERS)
def test_database_that_is_not_a_ledger(case: str, command: str, db_url: str, tmp_path: Path
                                       ) -> None:
    """On both stores: a reachable database that is not a (readable) histaudit ledger."""
    make, needles = BAD_LEDGERS[case]
    key, trust, signer = keys_for(tmp_path)
    make(db_url, signer)
    ctx = Ctx(tmp=tmp_path, url=db_url, key=key, trust=trust, files=tmp_path)
    before = ctx.state()
    one_error_line(run(DB_COMMANDS[command](ctx), cwd=tmp_path), *needles)
    assert ctx.state() == before, "the command changed the database"


def test_owner_functions_never_shadow_the_catalog(pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL resolves an unqualified function along the search path, and a database's
    owner can set one for every session that puts its own schema before pg_catalog
    (CVE-2018-1058). An owner who wants a view of endless entries read as a ledger shadows
    the catalog's to_regclass with one that finds no table, hiding the view from the
    check at open. Every session the ledger opens searches pg_catalog first, so the
    view is still refused, and the owner's function never runs."""
    key, trust, signer = keys_for(tmp_path)
    _replace_entries(_ENDLESS_SQLITE, _ENDLESS_PG)(pg_url, signer)
    database = pg_url.rsplit("/", 1)[1]
    raw_sql(pg_url,
            "CREATE TABLE shadow_calls (at timestamptz)",
            "CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE sql AS "
            "'INSERT INTO shadow_calls VALUES (now()) RETURNING NULL::regclass'",
            f'ALTER DATABASE "{database}" SET search_path = public, pg_catalog')
    ctx = Ctx(tmp=tmp_path, url=pg_url, key=key, trust=trust, files=tmp_path)
    before = ctx.state()
    for command in ("verify", "list", "show"):
        one_error_line(run(DB_COMMANDS[command](ctx), cwd=tmp_path),
                       "not a plain histaudit ledger", "histaudit_entries is a view")
    assert ctx.state() == before, "the command changed the database"
    with LedgerDb(pg_url) as db:
        assert db.rows("SELECT count(*) FROM shadow_calls") == [(0,)]


def test_an_unparseable_url_never_shows_its_password(tmp_path: Path) -> None:
    """A URL SQLAlchemy cannot parse is echoed with its user:password part cut."""
    for url in ("postgresql://u:s3cretpw@host:notaport/db", "sqlite://u:s3cretpw@/x:y:z"):
        r = cli("list", "--db", url, cwd=tmp_path)
        line = one_error_line(r, "***@")
        assert "s3cretpw" not in line and "s3cretpw" not in r.stdout


# --- a corrupt database under the writing and proving commands ----------------------------

# "corrupt pages" is left out: its holes lie in pages these commands do not read, and they
# rightly succeed (checkpoint) or report findings (since-checkpoint) on what they can read.
CORRUPT = ("truncated to 1000 bytes", "truncated to half")
WRITING_COMMANDS: dict[str, Callable[[Ctx, Path], list[str]]] = {
    "checkpoint": lambda c, note: ["checkpoint", "--db", c.url, "--key", str(c.key)],
    "export": lambda c, note: ["export", "--out", str(c.tmp / "bundle"), "--db", c.url,
                               "--key", str(c.key), "--trust", str(c.trust)],
    "verify --since-checkpoint": lambda c, note: ["verify", "--since-checkpoint", str(note),
                                                  "--db", c.url, "--trust", str(c.trust)],
}


@pytest.mark.parametrize("command", WRITING_COMMANDS)
@pytest.mark.parametrize("case", CORRUPT)
def test_corrupt_database_under_checkpoint_export_and_since_checkpoint(
        case: str, command: str, tmp_path: Path, big_ledger: Path) -> None:
    """A cut or corrupted SQLite file: one line naming it, exit 2, no file changed, no
    bundle written."""
    key, trust, signer = keys_for(tmp_path)
    path, url, needles = _bad_sqlite_file(case, tmp_path, big_ledger)
    good = tmp_path / "good.db"
    with Ledger.open(f"sqlite:///{good}", create=True) as ledger:  # a real note to compare
        append_order(ledger, signer, "order-1")
        note = tmp_path / "kept.note"
        note.write_bytes(chain.make_checkpoint(ledger, signer).note)
    ctx = Ctx(tmp=tmp_path, url=url, key=key, trust=trust, files=path.parent)
    before = ctx.state()
    line = one_error_line(run(WRITING_COMMANDS[command](ctx, note), cwd=tmp_path), *needles)
    assert str(path) in line, line
    assert ctx.state() == before, "the command changed the database files"
    assert not (tmp_path / "bundle").exists()

