"""The hot paths' SQL, run on the driver's own cursor (stdlib ``sqlite3``, psycopg 3).

SQLAlchemy builds the schema, parses URLs and pools connections; the statements every
append and every verified row go through are plain SQL on the DB-API cursor, because
SQLAlchemy's per-statement machinery (compiling, caching, result rows) cost more CPU than
everything else an append or a streamed row does (benchmarks/README.md, figures 1 and 3).
The statements are written once with ``?`` and rewritten to psycopg's ``%s``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from histaudit.ledger.records import StoredEntry

from .columns import _blob, _int, _text

_ENTRY_COLUMNS = "leaf, instance, seq, hash, body, sig"
_as_entry = tuple.__new__


@dataclass(frozen=True, slots=True)
class Statements:
    """Every hot-path statement in one dialect's placeholder style."""

    entries_of: str
    entries_of_after: str
    entry_rows_of: str
    all_entries: str
    leaves: str
    leaves_below: str
    entry_at: str
    entry_at_leaf: str
    head: str
    top_leaf: str
    payload: str
    last_of_instance: str
    top_leaf_and_last_of: str
    """:attr:`top_leaf` and :attr:`last_of_instance` of one instance in one statement: an
    append's start (one statement fewer on the path of every append; figure 7)."""
    tips_of: str
    """The newest row of each of many instances in one statement (PostgreSQL: an array
    parameter); "" where :attr:`last_of_instance` is run once per instance instead."""
    insert_entry: str
    insert_head: str
    move_head: str
    insert_payload: str
    delete_payload: str
    checkpoint_at: str
    insert_checkpoint: str
    checkpoints: str
    cosignatures: str
    cosignature_at: str
    insert_cosignature: str
    instances: str
    head_instances: str


_QMARK = Statements(
    # One instance's rows: the instance column is the one asked for (``=`` compares
    # storage class and bytes), so it is not read back: see Snapshot.entries.
    entries_of="SELECT leaf, seq, hash, body, sig FROM histaudit_entries WHERE instance = ? "
               "ORDER BY leaf",
    entries_of_after="SELECT leaf, seq, hash, body, sig FROM histaudit_entries "
                     "WHERE instance = ? AND seq > ? ORDER BY leaf",
    # The verifier's raw rows, StoredEntry's columns (its scan checks their types), the
    # instance's slot NULL: it is the one asked for, and reading it back cost a value a
    # row (Snapshot.entry_chunks fills it in for a row made a StoredEntry). TEXT comes as
    # its exact bytes: read as TEXT, each value would go through the connection's
    # text_factory, a Python call (it must not refuse forged non-UTF-8) that cost ~1 µs a
    # row of the verifier's ~15 (s16's machine). instance_entry decodes as text_factory
    # and _text did; a hash column holding another storage class (forged) comes as it is.
    entry_rows_of="SELECT leaf, NULL, seq, CASE typeof(hash) WHEN 'text' "
                  "THEN CAST(hash AS BLOB) ELSE hash END, body, sig FROM histaudit_entries "
                  "WHERE instance = ? ORDER BY leaf",
    all_entries=f"SELECT {_ENTRY_COLUMNS} FROM histaudit_entries ORDER BY leaf",
    leaves="SELECT leaf, body FROM histaudit_entries ORDER BY leaf",
    leaves_below="SELECT leaf, body FROM histaudit_entries WHERE leaf < ? ORDER BY leaf",
    entry_at=f"SELECT {_ENTRY_COLUMNS} FROM histaudit_entries WHERE instance = ? AND seq = ?",
    entry_at_leaf=f"SELECT {_ENTRY_COLUMNS} FROM histaudit_entries WHERE leaf = ?",
    head="SELECT instance, seq, body, sig FROM histaudit_heads WHERE instance = ?",
    top_leaf="SELECT max(leaf) FROM histaudit_entries",
    payload="SELECT salt, data FROM histaudit_payloads WHERE commitment = ?",
    last_of_instance="SELECT body FROM histaudit_entries WHERE instance = ? "
                     "ORDER BY seq DESC LIMIT 1",
    top_leaf_and_last_of="SELECT (SELECT max(leaf) FROM histaudit_entries), "
                         "(SELECT body FROM histaudit_entries WHERE instance = ? "
                         "ORDER BY seq DESC LIMIT 1)",
    tips_of="",  # SQLite runs in the process: a statement per instance costs no round trip
    insert_entry=f"INSERT INTO histaudit_entries ({_ENTRY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
    insert_head="INSERT INTO histaudit_heads (instance, seq, body, sig) VALUES (?, ?, ?, ?)",
    move_head="UPDATE histaudit_heads SET seq = ?, body = ?, sig = ? WHERE instance = ?",
    insert_payload="INSERT INTO histaudit_payloads (commitment, salt, data) VALUES (?, ?, ?)",
    # RETURNING: a pipelined transaction (PostgreSQL) has no rowcount until it syncs
    delete_payload="DELETE FROM histaudit_payloads WHERE commitment = ? RETURNING 1",
    checkpoint_at="SELECT note FROM histaudit_checkpoints WHERE size = ?",
    insert_checkpoint="INSERT INTO histaudit_checkpoints (size, root, note) VALUES (?, ?, ?)",
    checkpoints="SELECT size, note FROM histaudit_checkpoints ORDER BY size",
    cosignatures="SELECT size, witness, key_hash, line FROM histaudit_cosignatures "
                 "ORDER BY size, witness, key_hash, line",
    cosignature_at="SELECT 1 FROM histaudit_cosignatures WHERE size = ? AND witness = ? "
                   "AND key_hash = ? AND line = ?",
    insert_cosignature="INSERT INTO histaudit_cosignatures (size, witness, key_hash, line) "
                       "VALUES (?, ?, ?, ?)",
    instances="SELECT instance, count(*), max(seq), min(leaf), max(leaf) FROM histaudit_entries "
              "GROUP BY instance ORDER BY max(leaf) DESC",
    head_instances="SELECT instance FROM histaudit_heads",
)
_FORMAT = dataclasses.replace(
    Statements(**{name: getattr(_QMARK, name).replace("?", "%s")
                  for name in _QMARK.__dataclass_fields__}),
    # PostgreSQL text is UTF-8 and psycopg decodes it in C: read as it is
    entry_rows_of="SELECT leaf, NULL, seq, hash, body, sig FROM histaudit_entries "
                  "WHERE instance = %s ORDER BY leaf",
    # one round trip for a whole batch's instances; each is last_of_instance's index probe
    tips_of="SELECT i.instance, e.body FROM unnest(%s::text[]) AS i(instance) "
            "CROSS JOIN LATERAL (SELECT body FROM histaudit_entries "
            "WHERE instance = i.instance ORDER BY seq DESC LIMIT 1) AS e")


QMARK = _QMARK
"""The statements with ``?`` placeholders (SQLite's sqlite3)."""
FORMAT = _FORMAT
"""The statements with ``%s`` placeholders (psycopg), PostgreSQL's own reads."""


def instance_rows(instance: str, rows: Iterable[Any]) -> Iterator[StoredEntry]:
    """(leaf, seq, hash, body, sig) rows of ``instance`` as StoredEntry values (the same
    tests as :func:`entry_row`, inlined: this is the verifier's per-row path)."""
    plain = type(instance) is str and instance.isascii()
    for leaf, seq, digest, body, sig in rows:
        if plain and type(leaf) is int and type(seq) is int and type(body) is bytes and \
                type(sig) is bytes and type(digest) is str and digest.isascii():
            yield _as_entry(StoredEntry, (leaf, instance, seq, digest, body, sig))
        else:
            yield entry_row((leaf, instance, seq, digest, body, sig))


def instance_entry(instance: str, r: Any) -> StoredEntry:
    """A row of ``entry_rows_of``, its instance slot not read, as the StoredEntry of
    ``instance`` (the instance its statement asked for)."""
    return entry_row((r[0], instance, *r[2:]))


def entry_row(r: Any) -> StoredEntry:
    """A (leaf, instance, seq, hash, body, sig) row as a StoredEntry, whatever the
    columns hold: the common case (the types the schema declares) is tested first and
    becomes the entry as it is; anything else goes through the tolerant converters of
    ``columns``."""
    leaf, instance, seq, digest, body, sig = r
    if type(leaf) is int and type(seq) is int and type(body) is bytes and \
            type(sig) is bytes and type(instance) is str and type(digest) is str and \
            instance.isascii() and digest.isascii():
        return _as_entry(StoredEntry, r)
    return StoredEntry(
        leaf if type(leaf) is int else _int(leaf),
        instance if type(instance) is str and instance.isascii() else _text(instance),
        seq if type(seq) is int else _int(seq),
        digest if type(digest) is str and digest.isascii() else _text(digest),
        body if type(body) is bytes else _blob(body),
        sig if type(sig) is bytes else _blob(sig))
