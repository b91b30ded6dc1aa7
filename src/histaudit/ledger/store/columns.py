"""Column values as the verifier can use them, whatever the database holds there."""

from __future__ import annotations

import re
from typing import Any

from histaudit.errors import StoreError
from histaudit.ledger.records import (
    StoredEntry,
)


def _blob(value: Any) -> bytes:
    """A BLOB column as bytes, whatever storage class the row really holds.

    SQLite keeps any value in any column (``UPDATE ... SET body = replace(body, ...)``
    turns a BLOB into TEXT). TEXT becomes its exact bytes, a number its digits, NULL
    empty bytes: bytes that fail every check a tampered row should fail (hash, parse,
    signature, commitment), so the verifier reports the row instead of the reader crashing.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return b"" if value is None else str(value).encode()


def _text(value: Any) -> str:
    """A TEXT column as a printable-safe ``str`` (bytes and stray surrogates replaced)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


_INT_TEXT = re.compile(r"-?[0-9]{1,19}")


def _int(value: Any) -> int:
    """An INTEGER column; -1 (never a valid seq or leaf, so always reported) when the row
    holds anything that is not an integer."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        return int(value)
    return -1


def _leaf_count(top: Any) -> int:
    """The leaves a ledger holds whose ``max(leaf)`` read ``top`` (None: none), which is
    also the index the next entry gets; a top that is no integer, or one whose count would
    not fit a BIGINT, is refused naming it."""
    if top is None:
        return 0
    if type(top) is not int:
        raise StoreError(f"the ledger's leaf column holds {_text(top)[:40]!r}, not an "
                         f"integer: run `histaudit verify --all`")
    if top >= (1 << 63) - 1:  # the tree's size, top + 1, would not fit a BIGINT
        raise StoreError(f"the ledger's leaf column holds {top}, the largest 64-bit "
                         f"integer: no tree has that size (the database was edited): run "
                         f"`histaudit verify --all`")
    return top + 1


def _entry(r: Any) -> StoredEntry:
    return StoredEntry(_int(r.leaf), _text(r.instance), _int(r.seq), _text(r.hash),
                       _blob(r.body), _blob(r.sig))


def _sqlite_text(raw: bytes) -> str:
    """SQLite TEXT that is not UTF-8 (a forged value) is read, not refused mid-stream."""
    return raw.decode("utf-8", "surrogateescape")
