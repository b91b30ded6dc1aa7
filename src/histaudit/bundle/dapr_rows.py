"""Dapr's signed workflow rows inside a bundle: the file format, both ways.

``export --dapr-state`` adds two files to a bundle, listed and hashed in its signed
manifest like every other file:

``dapr-rows.jsonl``
    one line per exported instance, ``{"instance", "app_id", "rows"}``: ``rows`` maps
    daprd's row names (``metadata``, ``history-NNNNNN``, ``signature-NNNNNN``,
    ``sigcert-NNNNNN``, ``ext-sigcert-NNNNNN``) to the exact stored bytes, base64 (the
    bytes daprd signed, as the state store holds them once its own base64 is undone);
    ``null`` when the store
    held no state for the instance (purged, deleted). ``app_id`` is the ``--dapr-app-id``
    given at export (``null`` without one): the signer's SPIFFE ID must name it.
``dapr-anchors.pem``
    the trust anchors given at export (sentry's root), byte for byte.

This module only encodes and decodes; reading the state store is the exporter's
(``histaudit.bundle.dapr_state``), checking is ``histaudit.verify``'s. It imports no
database driver, so ``bundle.verify`` may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from histaudit.errors import FormatError, InputError
from histaudit.ledger.records import shown_id
from histaudit.verify.dapr_history import ROW_KINDS, ROW_NAME, DaprWorkflowRows

from .envelope import b64, unb64

__all__ = ["DAPR_ANCHORS", "DAPR_ROWS", "BundledDapr", "decode_rows", "encode_rows"]

DAPR_ROWS = "dapr-rows.jsonl"
DAPR_ANCHORS = "dapr-anchors.pem"



@dataclass(frozen=True)
class BundledDapr:
    """One line of ``dapr-rows.jsonl``: ``rows`` None when the store held nothing."""

    instance: str
    app_id: str | None
    rows: DaprWorkflowRows | None


def _names(rows: DaprWorkflowRows) -> dict[str, bytes]:
    named: dict[str, bytes] = {}
    if rows.metadata is not None:
        named["metadata"] = rows.metadata
    for kind, by_index in rows.kinds().items():
        for index, raw in by_index.items():
            named[f"{kind}-{index:06d}"] = raw
    return named


def encode_rows(items: Mapping[str, DaprWorkflowRows | None], app_id: str | None) -> bytes:
    """``dapr-rows.jsonl`` for ``items`` (instance -> its rows, None when absent)."""
    lines = []
    for instance, rows in items.items():
        doc = {"instance": instance, "app_id": app_id,
               "rows": None if rows is None else {name: b64(raw) for name, raw
                                                  in sorted(_names(rows).items())}}
        lines.append(orjson.dumps(doc) + b"\n")
    return b"".join(lines)


def decode_rows(data: bytes) -> dict[str, BundledDapr]:
    """The lines of ``dapr-rows.jsonl`` by instance; InputError for a file that does not
    read as one (a line not JSON, a value not base64, a row name daprd never writes)."""
    if data and not data.endswith(b"\n"):
        raise InputError(f"bundle file {DAPR_ROWS} is truncated (last line has no newline)")
    out: dict[str, BundledDapr] = {}
    for n, line in enumerate(data.splitlines(), 1):
        where = f"bundle file {DAPR_ROWS} line {n}"
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{where} is not JSON ({exc.msg})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("instance"), str):
            raise InputError(f"{where} is not an object naming an instance")
        app_id, named = doc.get("app_id"), doc.get("rows")
        if app_id is not None and not isinstance(app_id, str):
            raise InputError(f"{where}: app_id is not a string")
        if named is not None and not isinstance(named, dict):
            raise InputError(f"{where}: rows is not an object")
        if doc["instance"] in out:
            raise InputError(f"{where}: instance {shown_id(doc['instance'])} has a line "
                             f"already")
        out[doc["instance"]] = BundledDapr(doc["instance"], app_id,
                                           None if named is None
                                           else _rows(doc["instance"], named, where))
    return out


def _rows(instance: str, named: Mapping[str, object], where: str) -> DaprWorkflowRows:
    found: dict[str, dict[int, bytes]] = {kind: {} for kind in ROW_KINDS}
    metadata = None
    for name, text in named.items():
        try:
            raw = unb64(text, f"row {shown_id(name)}")
        except FormatError as exc:
            raise InputError(f"{where}: {exc}") from None
        if name == "metadata":
            metadata = raw
            continue
        m = ROW_NAME.match(name)
        if m is None:
            raise InputError(f"{where}: {shown_id(name)} is not a row name daprd writes")
        kind, index = m.group(1), int(m.group(2))
        if index in found[kind]:
            raise InputError(f"{where}: {shown_id(name)} names row {kind} {index}, "
                             f"which another name gave already")
        found[kind][index] = raw
    return DaprWorkflowRows.of_kinds(instance, found, metadata)
