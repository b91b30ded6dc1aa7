"""Reading a workflow's rows from daprd's SQLite state store (histaudit.bundle.dapr_state):
the keys daprd writes are sorted into the rows the signature check needs, and keys it
never writes — another app's, another instance's, an index no 64-bit counter reaches —
are left out rather than crash the reader."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path

import pytest

from histaudit.bundle.dapr_state import read_workflow_rows
from histaudit.errors import InputError

APP, INSTANCE = "shop", "order-7"


def _store(path: Path, rows: dict[str, tuple[bytes, bool]]) -> Path:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT, is_binary BOOLEAN)")
    db.executemany("INSERT INTO state VALUES (?, ?, ?)",
                   [(k, base64.b64encode(v).decode() if binary else v.decode(), binary)
                    for k, (v, binary) in rows.items()])
    db.commit()
    db.close()
    return path


def _key(name: str, app: str = APP, instance: str = INSTANCE) -> str:
    return f"{app}||dapr.internal.default.{app}.workflow||{instance}||{name}"


def test_rows_are_sorted_by_kind_and_index_and_strangers_left_out(tmp_path: Path) -> None:
    store = _store(tmp_path / "state.db", {
        _key("metadata"): (b'{"g":1}', False),
        _key("history-000000"): (b"\x0a\x00ev", True),
        _key("history-000001"): (b"ev1", True),
        _key("signature-000000"): (b"sig", True),
        _key("sigcert-000000"): (b"cert", True),
        _key("inbox-000000"): (b"not a signed row", True),
        _key("history-" + "9" * 5000): (b"no daprd writes this", True),
        _key("history-000002", instance="order-8"): (b"another instance", True),
    })
    rows = read_workflow_rows(store, INSTANCE)
    assert rows.history == {0: b"\x0a\x00ev", 1: b"ev1"}
    assert rows.signatures == {0: b"sig"} and rows.certificates == {0: b"cert"}
    assert rows.metadata == b'{"g":1}'


def test_an_instance_held_by_two_apps_needs_an_app_id(tmp_path: Path) -> None:
    store = _store(tmp_path / "state.db", {
        _key("history-000000"): (b"a", True),
        _key("history-000000", app="other"): (b"b", True),
    })
    with pytest.raises(InputError, match=r"held by apps \['other', 'shop'\]"):
        read_workflow_rows(store, INSTANCE)
    assert read_workflow_rows(store, INSTANCE, app_id="other").history == {0: b"b"}


@pytest.mark.parametrize(("rows", "message"), [
    ({}, "no workflow state for instance 'order-7'"),
    ({_key("history-000000"): (b"!!", False)}, None),  # text rows are taken as they are
])
def test_what_the_store_lacks_is_named(tmp_path: Path, rows: dict[str, tuple[bytes, bool]],
                                      message: str | None) -> None:
    store = _store(tmp_path / "state.db", rows)
    if message is None:
        assert read_workflow_rows(store, INSTANCE).history == {0: b"!!"}
        return
    with pytest.raises(InputError, match=message):
        read_workflow_rows(store, INSTANCE)


def test_a_binary_row_that_is_not_base64_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT, is_binary BOOLEAN)")
    db.execute("INSERT INTO state VALUES (?, '%%%', 1)", (_key("history-000000"),))
    db.commit()
    db.close()
    with pytest.raises(InputError, match="marked binary but is not base64"):
        read_workflow_rows(tmp_path / "state.db", INSTANCE)
