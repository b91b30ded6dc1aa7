"""The commands on a ledger an attacker edited cell by cell (property-style), both stores.

On SQLite the attacker owns the database file, and SQLite keeps any value in any column
(text in an INTEGER column, a 40-digit number, a float, bytes where text belongs): this is
where the store's types protect least. On PostgreSQL the attacker is a superuser whose
session skips the triggers (``session_replication_role = replica``) and writes any value
the column's type admits. Each example edits one to three cells or deletes a row of the
entries, heads or payloads of a real ledger (the append-only triggers are in place again
afterwards, so the ledger still opens), then runs what an operator or auditor runs:

* ``verify --all --full`` must not call the changed ledger clean: exit 1 (findings) or 2
  (one line naming the problem), never 0;
* ``verify ID``, ``show ID`` and ``export ID`` must end in exit 0, 1 or 2 with at most
  one error line: never a traceback.

The ledger's payload references carry the kept flag (``"k": true``, format.md §8.3), as
the interceptor writes them, so even a deleted payload row is a finding.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.cli import main
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, generate_keypair
from histaudit.ledger.store import Ledger
from support.ledgers import committed

# one xdist worker builds the module fixtures (its module ledger) once (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("ledger_hostile")

COLUMNS = {"histaudit_entries": ("leaf", "instance", "seq", "hash", "body", "sig"),
           "histaudit_heads": ("instance", "seq", "body", "sig"),
           "histaudit_payloads": ("commitment", "salt", "data")}
TABLES = sorted(COLUMNS)


@dataclass(frozen=True)
class Pristine:
    url: str
    key: Path
    trust: Path
    rows: dict[str, list[tuple[Any, ...]]]  # table -> its rows, in primary-key order
    copy: Callable[[], str]                 # a fresh copy of the ledger: its URL
    apply: Callable[[str, list[Edit]], None]


Edit = tuple[str, int, "str | None", Any]  # table, row index, column (None: delete), value
_KEYS = {"histaudit_entries": "leaf", "histaudit_heads": "instance",
         "histaudit_payloads": "commitment"}


def _kept(data: bytes) -> tuple[dict[str, Any], Any]:
    ref, rows = committed(data)
    return {**ref, "k": True}, rows


def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {t: [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                        for row in conn.execute(sa.text(f"SELECT * FROM {t} "
                                                        f"ORDER BY {_KEYS[t]}"))]
                    for t in TABLES}
    finally:
        engine.dispose()


def _build(url: str, keys: Path) -> tuple[Path, Path]:
    key, trust, _ = generate_keypair(keys)
    signer = KeyFileSigner.load(key)
    with Ledger.open(url, create=True) as ledger:
        for instance in ("order-1", "order-2"):  # interleaved below, by step
            ref, rows = _kept(b'{"card":"4111-1111-1111-1111"}')
            chain.append(ledger, instance, "workflow.started",
                         {"workflow": "order", "input": ref}, signer=signer, payloads=rows)
        for instance in ("order-1", "order-2"):
            task = {"task_id": 1, "activity": "charge"}
            chain.append(ledger, instance, "activity.started", task, signer=signer)
            out, rows = _kept(b'{"charged":true}')
            chain.append(ledger, instance, "activity.completed", {**task, "output": out},
                         signer=signer, payloads=rows)
            chain.append(ledger, instance, "workflow.completed", {"status": "COMPLETED"},
                         signer=signer)
    return key, trust


def _where(rows: dict[str, list[tuple[Any, ...]]], table: str, index: int
           ) -> tuple[str, Any]:
    """The edited row by its primary key, as it was in the pristine ledger."""
    column = _KEYS[table]
    return column, rows[table][index][COLUMNS[table].index(column)]


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def pristine(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pristine]:
    tmp = tmp_path_factory.mktemp(f"hostile-ledger-{request.param}")
    if request.param == "sqlite":
        db = tmp / "ledger.db"
        key, trust = _build(f"sqlite:///{db}", tmp / "keys")
        with contextlib.closing(sqlite3.connect(db)) as conn:  # one file to copy: no WAL
            conn.execute("PRAGMA journal_mode=DELETE")
        rows = _dump(f"sqlite:///{db}")

        def copy() -> str:
            shutil.copy(db, tmp / "edited.db")
            return f"sqlite:///{tmp / 'edited.db'}"

        def apply(url: str, edits: list[Edit]) -> None:
            _apply_sqlite(Path(url.removeprefix("sqlite:///")), rows, edits)

        yield Pristine(f"sqlite:///{db}", key, trust, rows, copy, apply)
        return
    server = request.getfixturevalue("pg_server")
    template = f"t_hostile_{uuid.uuid4().hex[:8]}"
    url = server.create_database(template)
    key, trust = _build(url, tmp / "keys")
    rows = _dump(url)
    work = f"{template}_work"
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{work}" TEMPLATE "{template}"')

    def copy_pg() -> str:
        """The working copy, put back to the pristine rows (CREATE DATABASE per example
        took a second each): every table the commands write, emptied and refilled."""
        with psycopg.connect(server.conninfo(work), autocommit=True) as conn, \
                conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")  # no triggers
            conn.execute("DELETE FROM histaudit_checkpoints")
            for table in TABLES:
                conn.execute(f"DELETE FROM {table}")
                marks = ", ".join(["%s"] * len(COLUMNS[table]))
                with conn.cursor() as cur:
                    cur.executemany(f"INSERT INTO {table} ({', '.join(COLUMNS[table])}) "
                                    f"VALUES ({marks})", rows[table])
        return server.superuser_url(work)

    def apply_pg(url: str, edits: list[Edit]) -> None:
        with psycopg.connect(server.conninfo(url.rsplit("/", 1)[1]), autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # no triggers
            for table, index, column, value in edits:
                key_column, key_value = _where(rows, table, index)
                with contextlib.suppress(psycopg.Error):  # a value the type refuses
                    if column is None:
                        conn.execute(f"DELETE FROM {table} WHERE {key_column} = %s",
                                     (key_value,))
                    else:
                        conn.execute(f'UPDATE {table} SET "{column}" = %s '
                                     f"WHERE {key_column} = %s", (value, key_value))

    try:
        yield Pristine(url, key, trust, rows, copy_pg, apply_pg)
    finally:
        server.drop_database(work)
        server.drop_database(template)


def _run(argv: list[str]) -> tuple[int, str]:
    """``histaudit *argv`` in this process: exit status and stderr. An exception other
    than SystemExit (a traceback for the user) fails the test as it propagates."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            return int(exc.code or 0), err.getvalue()
    raise AssertionError("the CLI returned without exiting")


_BYTES_NOISE = st.sampled_from([b'"', b"{", b"}", b"\\u0000", b"1e999", b"-0", b"\xff",
                                b'"kind":"x",', b"null", b"9" * 30, b"\n"])
_VALUES = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([0, -1, (1 << 63) - 1]),
    st.text(max_size=20), st.sampled_from(["order-1", "order-2", "9" * 40, "1.5", ""]),
    st.binary(max_size=80), st.floats(allow_nan=False), st.just(b"x" * 70_000))


@st.composite
def _edits(draw: st.DrawFn, rows: dict[str, list[tuple[Any, ...]]]) -> list[Edit]:
    """(table, row index, column or None for a delete, new value), one to three of them."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(TABLES))
        index = draw(st.integers(0, len(rows[table]) - 1))
        if draw(st.integers(0, 9)) == 0:
            out.append((table, index, None, None))
            continue
        column = draw(st.sampled_from(COLUMNS[table]))
        old = rows[table][index][COLUMNS[table].index(column)]
        if isinstance(old, bytes) and draw(st.booleans()):  # a nearby body, sig or salt
            at = draw(st.integers(0, len(old)))
            cut = draw(st.integers(0, 4))
            value: Any = old[:at] + draw(st.one_of(_BYTES_NOISE, st.binary(max_size=3))) \
                + old[at + cut:]
        else:
            value = draw(_VALUES)
        out.append((table, index, column, value))
    return out


def _apply_sqlite(db: Path, rows: dict[str, list[tuple[Any, ...]]],
                  edits: list[Edit]) -> None:
    """The owner's edit: drop the triggers, change cells (an edit a constraint refuses is
    left out), put the triggers back."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        triggers = conn.execute("SELECT name, sql FROM sqlite_master "
                                "WHERE type = 'trigger'").fetchall()
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        for table, index, column, value in edits:
            key_column, key_value = _where(rows, table, index)
            with contextlib.suppress(sqlite3.IntegrityError, OverflowError):
                if column is None:
                    conn.execute(f"DELETE FROM {table} WHERE {key_column} = ?", (key_value,))
                else:
                    conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE {key_column} = ?',
                                 (value, key_value))
        for _, sql in triggers:
            conn.execute(sql)
        conn.commit()


def test_the_pristine_ledger_is_clean(pristine: Pristine) -> None:
    """Without this, the property below would hold for a ledger that never verifies."""
    url = pristine.copy()
    assert _dump(url) == pristine.rows
    assert _run(["verify", "--all", "--full", "--db", url, "--trust", str(pristine.trust)]
                )[0] == 0
    assert len(pristine.rows["histaudit_payloads"]) == 4
    # The edits reach the store (a typed column takes a value of its type) and are seen.
    for table, column, value in (("histaudit_entries", "seq", 7),
                                 ("histaudit_payloads", None, None)):
        url = pristine.copy()
        pristine.apply(url, [(table, 1, column, value)])
        assert _dump(url) != pristine.rows
        assert _run(["verify", "--all", "--full", "--db", url, "--trust",
                     str(pristine.trust)])[0] == 1
    assert _dump(pristine.copy()) == pristine.rows  # and the next copy is pristine again


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_an_edited_ledger_is_never_clean_and_never_a_traceback(
        pristine: Pristine, tmp_path: Path, data: st.DataObject) -> None:
    edits = data.draw(_edits(pristine.rows))
    url = pristine.copy()
    pristine.apply(url, edits)
    changed = _dump(url) != pristine.rows
    trust = str(pristine.trust)
    status, err = _run(["verify", "--all", "--full", "--db", url, "--trust", trust])
    assert status in ((1, 2) if changed else (0,)), (edits, err)
    for argv in (["verify", "order-1", "--db", url, "--trust", trust],
                 ["show", "order-1", "--db", url],
                 ["export", "order-1", "--db", url, "--key", str(pristine.key),
                  "--trust", trust, "--out", str(tmp_path / "bundle")]):
        status, err = _run(argv)
        assert status in (0, 1, 2), (argv, edits)
        if status == 2:
            assert err.count("\n") == 1 and err.startswith("histaudit: error: "), err
    shutil.rmtree(tmp_path / "bundle", ignore_errors=True)
