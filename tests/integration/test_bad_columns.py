"""Every column of every table holding every storage class (SQLite) or an edge value of its
type (PostgreSQL): verify, list and checkpoint run to a verdict, never a crash; a changed
value is a finding. Shared helpers: ``support/bad_input.py``.
Cost: ≈ 70 s of CPU (131 tests).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from histaudit.ledger import chain, store
from histaudit.ledger import records as fmt
from histaudit.ledger.store import Ledger
from support.bad_input import DB_COMMANDS, Ctx, keys_for, run
from support.cli import exits, one_error_line
from support.ledgers import LedgerDb, append_order

# --- 14. every column x every storage class: findings, never a crash ------------------------

#: table -> (columns, WHERE clause naming the row to tamper with)
TAMPERED_ROWS = {
    "histaudit_entries": (("leaf", "instance", "seq", "hash", "body", "sig"), "leaf = 2"),
    "histaudit_heads": (("instance", "seq", "body", "sig"), "instance = 'order-1'"),
    "histaudit_payloads": (("commitment", "salt", "data"), "commitment = :c"),
    "histaudit_checkpoints": (("size", "root", "note"), "1 = 1"),
}
SQLITE_CLASSES = {"text": "'tampered'", "integer": "7", "real": "1.5", "null": "NULL",
                  "blob": "X'00ff'", "text by replace()": "replace({col}, 'c', 'C')"}
#: tampering that no check can see: erasing a payload row's key (issue 10 item 3, another
#: part of the work) and the checkpoints table (verify does not read it)
MAY_STAY_CLEAN = ("histaudit_payloads.commitment", "histaudit_checkpoints.")
STORAGE_CASES = [(t, c, k) for t, (cols, _) in TAMPERED_ROWS.items() for c in cols
                 for k in SQLITE_CLASSES]


def _matrix_ledger(url: str, tmp: Path) -> tuple[Ctx, str]:
    key, trust, signer = keys_for(tmp)
    with Ledger.open(url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
        append_order(ledger, signer, "order-2")
        chain.make_checkpoint(ledger, signer)
        row = ledger.entry_at("order-1", 3)
        assert row is not None
        output = fmt.parse_entry(row.body).data["output"]["c"]
    return Ctx(tmp=tmp, url=url, key=key, trust=trust, files=tmp), output


def _no_crash_verdicts(ctx: Ctx, column: str, *, changed: bool = True,
                       others_intact: bool = True) -> None:
    """verify --all --full, list --trust and checkpoint run to a verdict; a changed value
    is a finding (exit 1) and the untouched instance's report is still there."""
    r = run([*DB_COMMANDS["verify --all"](ctx), "--full", "--json"], cwd=ctx.tmp)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    assert r.returncode in (0, 1) and r.stderr == "", (r.returncode, r.stderr)
    reports = {d["instance"]: d for d in json.loads(r.stdout)["reports"]}
    assert "order-2" in reports  # the other instances' findings survive
    if others_intact:
        assert reports["order-2"]["ok"], reports["order-2"]
    if changed and not column.startswith(MAY_STAY_CLEAN):
        assert r.returncode == 1, (column, reports)
    r = run([*DB_COMMANDS["list --trust"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 0)
    r = run(["checkpoint", "--db", ctx.url, "--key", str(ctx.key)], cwd=ctx.tmp)
    assert "Traceback" not in r.stderr and r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        one_error_line(r)


@pytest.mark.parametrize(("table", "column", "kind"), STORAGE_CASES)
def test_any_storage_class_in_any_column(table: str, column: str, kind: str, tmp_path: Path,
                                         sqlite_url: str) -> None:
    ctx, output = _matrix_ledger(sqlite_url, tmp_path)
    _, where = TAMPERED_ROWS[table]
    with LedgerDb(sqlite_url) as db:
        db.lift_guards()
        # Without constraints (NOT NULL, keys) but with the same column affinities.
        db.run(f"CREATE TABLE loose AS SELECT * FROM {table}")
        db.run(f"DROP TABLE {table}")
        db.run(f"ALTER TABLE loose RENAME TO {table}")
        value = SQLITE_CLASSES[kind].format(col=column)
        rowid = db.run(f"SELECT rowid FROM {table} WHERE {where}", c=output)[0][0]
        read = f"SELECT typeof({column}), hex({column}) FROM {table} WHERE rowid = :r"
        (_, was), = db.run(read, r=rowid)
        assert db.count(f"UPDATE {table} SET {column} = {value} WHERE rowid = :r", r=rowid) == 1
        (stored, now), = db.run(read, r=rowid)
    # The column's affinity may convert (7 in a TEXT column is '7'); otherwise it sticks.
    assert stored == kind or kind.startswith("text") or stored == "text", (kind, stored)
    # Bytes unchanged (replace() found nothing; only the storage class moved): no finding.
    _no_crash_verdicts(ctx, f"{table}.{column}", changed=now != was)


#: PostgreSQL keeps column types: the hostile values each type allows, and a column whose
#: type an owner changed (the driver then returns str where bytes were expected).
PG_VALUES = {"BigInteger": ("-1", "9223372036854775807"),
             "Text": ("''", "E'zz\\n\\x1b[31m'"),
             "LargeBinary": ("'\\x'::bytea", "'\\x00ff'::bytea")}
PG_CASES = [(t, c, v) for t, (cols, _) in TAMPERED_ROWS.items() for c in cols
            for v in range(2)]


def _pg_type(table: str, column: str) -> str:
    kind = type(store.metadata.tables[table].c[column].type).__name__
    return kind if kind in PG_VALUES else "Text"  # String(64) is text too


@pytest.mark.postgres
@pytest.mark.parametrize(("table", "column", "which"), PG_CASES)
def test_any_value_in_any_postgres_column(table: str, column: str, which: int, tmp_path: Path,
                                          pg_url: str) -> None:
    ctx, output = _matrix_ledger(pg_url, tmp_path)
    _, where = TAMPERED_ROWS[table]
    value = PG_VALUES[_pg_type(table, column)][which]
    with LedgerDb(pg_url) as db:
        db.lift_guards()
        assert db.count(f"UPDATE {table} SET {column} = {value} WHERE {where}", c=output) >= 1
        db.restore_guards()
    _no_crash_verdicts(ctx, f"{table}.{column}")


@pytest.mark.postgres
@pytest.mark.parametrize("column", ["body", "sig", "hash"])
def test_postgres_column_of_another_type(column: str, tmp_path: Path, pg_url: str) -> None:
    ctx, _ = _matrix_ledger(pg_url, tmp_path)
    using = f"encode({column}, 'escape')" if column in ("body", "sig") else f"{column}::text"
    with LedgerDb(pg_url) as db:
        db.lift_guards()
        db.run(f"ALTER TABLE histaudit_entries ALTER COLUMN {column} TYPE text USING {using}")
        db.run(f"UPDATE histaudit_entries SET {column} = {column} || 'x' WHERE leaf = 2")
        db.restore_guards()
    # encode(sig, 'escape') turns every signature into other bytes, not only leaf 2's.
    _no_crash_verdicts(ctx, f"histaudit_entries.{column}", others_intact=column != "sig")


