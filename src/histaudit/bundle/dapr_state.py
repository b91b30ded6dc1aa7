"""Read one workflow instance's rows from daprd's SQLite actor state store.

Dapr's ``state.sqlite`` component keeps every actor state key in one table (``state``
unless the component sets ``tableName``): ``key, value, is_binary, etag, …``, binary
values base64-encoded. A workflow actor's keys are
``<app-id>||dapr.internal.<namespace>.<app-id>.workflow||<instance>||<name>`` with
``<name>`` one of ``metadata``, ``history-NNNNNN``, ``signature-NNNNNN``,
``sigcert-NNNNNN`` (and others this reader ignores). The file is opened read-only; the
rows go to :func:`histaudit.verify.dapr_history.verify_dapr_history` unchanged.
"""

from __future__ import annotations

import base64
import binascii
import re
import sqlite3
from pathlib import Path

from histaudit.errors import InputError
from histaudit.verify.dapr_history import DaprWorkflowRows

__all__ = ["read_workflow_rows"]

_NAME = re.compile(r"(history|signature|sigcert)-(\d{6,})\Z")
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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


def read_workflow_rows(db_path: str | Path, instance: str, *, app_id: str | None = None,
                       table: str = "state") -> DaprWorkflowRows:
    """The ``metadata``, ``history-*``, ``signature-*`` and ``sigcert-*`` rows of
    workflow ``instance`` (of app ``app_id`` when given). InputError when the file is not
    a readable state store, the instance has no rows, or several apps hold it."""
    if not _TABLE.match(table):
        raise InputError(f"bad table name {table!r}")
    path = Path(db_path)
    if not path.is_file():
        raise InputError(f"state store {path}: no such file")
    suffix = f"||{instance}||"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InputError(f"state store {path}: {exc}") from None
    try:
        # instr() rather than LIKE: an instance id may hold % or _.
        rows = conn.execute(f"SELECT key, value, is_binary FROM {table} "  # table checked above
                            "WHERE instr(key, ?) > 0", (suffix,)).fetchall()
    except sqlite3.Error as exc:
        raise InputError(f"state store {path}: {exc}") from None
    finally:
        conn.close()
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
        raise InputError(f"no workflow state for instance {instance!r}{whose} in {path}")
    if len(apps) > 1:
        raise InputError(f"instance {instance!r} is held by apps {sorted(apps)}; "
                         "pass --app-id")
    (named,) = apps.values()
    found: dict[str, dict[int, bytes]] = {"history": {}, "signature": {}, "sigcert": {}}
    for name, raw in named.items():
        m = _NAME.match(name)
        if m:
            found[m.group(1)][int(m.group(2))] = raw
    return DaprWorkflowRows(instance=instance, history=found["history"],
                            signatures=found["signature"], certificates=found["sigcert"],
                            metadata=named.get("metadata"))
