"""The commands on a SQLite ledger an attacker edited column by column (property-style).

The attacker owns the database file: SQLite keeps any value in any column (text in an
INTEGER column, a 40-digit number, a float, bytes where text belongs), so this is where
the store's types protect least. Each example edits one to three cells or deletes a row of
the entries, heads or payloads of a real ledger (the append-only triggers dropped for the
edit and put back, so the ledger still opens), then runs what an operator or auditor runs:

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.cli import main
from histaudit.ledger import chain
from histaudit.ledger.keys import Signer, generate_keypair
from histaudit.ledger.store import Ledger
from support.ledgers import committed

COLUMNS = {"histaudit_entries": ("leaf", "instance", "seq", "hash", "body", "sig"),
           "histaudit_heads": ("instance", "seq", "body", "sig"),
           "histaudit_payloads": ("commitment", "salt", "data")}
TABLES = sorted(COLUMNS)


@dataclass(frozen=True)
class Pristine:
    db: Path
    key: Path
    trust: Path
    rows: dict[str, list[tuple[Any, ...]]]  # table -> its rows, by rowid


def _kept(data: bytes) -> tuple[dict[str, Any], Any]:
    ref, rows = committed(data)
    return {**ref, "k": True}, rows


def _dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    tmp = tmp_path_factory.mktemp("hostile-ledger")
    key, trust, _ = generate_keypair(tmp / "keys")
    signer = Signer.load(key)
    db = tmp / "ledger.db"
    with Ledger.open(f"sqlite:///{db}", create=True) as ledger:
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
    with contextlib.closing(sqlite3.connect(db)) as conn:  # one file to copy: no WAL
        conn.execute("PRAGMA journal_mode=DELETE")
    return Pristine(db, key, trust, _dump(db))


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
def _edits(draw: st.DrawFn, rows: dict[str, list[tuple[Any, ...]]]
           ) -> list[tuple[str, int, str | None, Any]]:
    """(table, rowid, column or None for a delete, new value), one to three of them."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(TABLES))
        index = draw(st.integers(0, len(rows[table]) - 1))
        if draw(st.integers(0, 9)) == 0:
            out.append((table, index + 1, None, None))
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
        out.append((table, index + 1, column, value))
    return out


def _apply(db: Path, edits: list[tuple[str, int, str | None, Any]]) -> None:
    """The owner's edit: drop the triggers, change cells (an edit a constraint refuses is
    left out), put the triggers back."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        triggers = conn.execute("SELECT name, sql FROM sqlite_master "
                                "WHERE type = 'trigger'").fetchall()
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        for table, rowid, column, value in edits:
            with contextlib.suppress(sqlite3.IntegrityError, OverflowError):
                if column is None:
                    conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
                else:
                    conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE rowid = ?',
                                 (value, rowid))
        for _, sql in triggers:
            conn.execute(sql)
        conn.commit()


def test_the_pristine_ledger_is_clean(pristine: Pristine, tmp_path: Path) -> None:
    """Without this, the property below would hold for a ledger that never verifies."""
    db = tmp_path / "l.db"
    shutil.copy(pristine.db, db)
    url = f"sqlite:///{db}"
    assert _run(["verify", "--all", "--full", "--db", url, "--trust", str(pristine.trust)]
                )[0] == 0
    assert len(pristine.rows["histaudit_payloads"]) == 4


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_an_edited_ledger_is_never_clean_and_never_a_traceback(
        pristine: Pristine, tmp_path: Path, data: st.DataObject) -> None:
    edits = data.draw(_edits(pristine.rows))
    db = tmp_path / "l.db"
    shutil.copy(pristine.db, db)
    _apply(db, edits)
    changed = _dump(db) != pristine.rows
    url, trust = f"sqlite:///{db}", str(pristine.trust)
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
