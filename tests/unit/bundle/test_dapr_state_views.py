"""The Dapr state reader reads stored rows only (issue #40, item 6): a state file of a few
kilobytes whose ``state`` is an endless recursive view ran for ever and took gigabytes.
Cost: under 1 s of CPU."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from histaudit.bundle.dapr_state import read_workflow_rows
from histaudit.errors import InputError

ENDLESS_VIEW = """
CREATE VIEW state AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
SELECT 'app||dapr.internal.default.app.workflow||wf-1||history-' || i AS key,
       '{}' AS value, 0 AS is_binary FROM n
"""
GENERATED = """
CREATE TABLE state (key TEXT PRIMARY KEY, is_binary INTEGER,
                    value TEXT GENERATED ALWAYS AS (printf('%.*c', 1000000000, 'x')))
"""


@pytest.mark.parametrize(("schema", "what"), [(ENDLESS_VIEW, "a view"),
                                              (GENERATED, "computed (generated columns)")])
def test_a_state_table_that_computes_its_rows_is_refused_before_reading(
        tmp_path: Path, schema: str, what: str) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute(schema)
    assert db.stat().st_size < 16_384
    with pytest.raises(InputError) as raised:
        read_workflow_rows(db, "wf-1")
    assert f"table 'state' is {what}, not a stored table: refused" in str(raised.value)
