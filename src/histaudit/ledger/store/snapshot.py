"""Reads from one consistent committed state of the ledger: :class:`Snapshot`."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from histaudit.ledger.records import InstanceSummary, StoredEntry, StoredHead

from .columns import _blob, _int, _leaf_count, _text
from .sql import entry_row, instance_entry, instance_rows

if TYPE_CHECKING:
    from .driver import Driver
"""Rows per fetch of :meth:`Snapshot.entry_chunks` from SQLite: a fetch of ~0.5 KB rows
that stays in a core's L2 cache while the scan reads it (5,000 rows did not: 5 % slower
per row at 1M entries); PostgreSQL fetches the snapshot's ``chunk`` a round trip."""


class Snapshot:
    """Reads from one consistent committed state of the ledger (one read transaction).

    Everything read through one snapshot — heads, entries, leaves, payloads — is what the
    ledger held at one moment, however many writers append meanwhile: a verifier that
    reads a head and then the entries sees exactly the entries that head was signed over
    (or more, only if someone stored rows without signing them in).

    Rows stream through one forward cursor of the driver itself — SQLite steps its
    statement, PostgreSQL a server-side cursor fetching ``chunk`` rows a round trip — so
    memory stays constant for a huge instance and a row costs a tuple, not an ORM row.
    Point lookups (a payload, a head) are one prepared statement each.
    """

    def __init__(self, raw: Any, driver: Driver, chunk: int) -> None:
        self._raw = raw  # the driver's connection, inside the snapshot's transaction
        self._chunk = chunk
        self._driver = driver
        self._sql = driver.statements

    @contextlib.contextmanager
    def _streaming(self, sql: str, params: tuple[Any, ...]) -> Iterator[Any]:
        """A cursor that has run ``sql``, its rows not yet read: on PostgreSQL a named
        (server-side) one that fetches ``chunk`` rows a round trip."""
        cur = self._driver.stream_cursor(self._raw, self._chunk)
        try:
            cur.execute(sql, params)
            yield cur
        finally:
            cur.close()

    def _stream(self, sql: str, params: tuple[Any, ...]) -> Iterator[Any]:
        with self._streaming(sql, params) as cur:
            yield from cur

    def _one(self, sql: str, params: tuple[Any, ...]) -> Any:
        cur = self._raw.cursor()
        try:
            cur.execute(sql, params)
            return cur.fetchone()
        finally:
            cur.close()

    def entries(self, instance: str, *, after_seq: int = 0) -> Iterator[StoredEntry]:
        """``instance``'s rows in insertion (leaf) order; ``after_seq`` skips the rows up
        to that seq (an index range, for a reader that keeps up with a chain)."""
        if after_seq:
            rows = self._stream(self._sql.entries_of_after, (instance, after_seq))
        else:
            rows = self._stream(self._sql.entries_of, (instance,))
        return instance_rows(instance, rows)

    def entry_chunks(self, instance: str) -> tuple[Iterator[list[tuple[Any, ...]]],
                                                   Callable[[Any], StoredEntry]]:
        """``instance``'s rows in leaf order as the driver returns them, a fetch at a time,
        and the function that makes one of them the StoredEntry :meth:`entries` gives.

        The rows are tuples in :class:`StoredEntry`'s column order, the instance's slot
        ``None`` (the rows are those of ``instance``), their types unchecked. For a loop
        that checks the types it relies on itself (the verifier's scan) and hands any
        other row to the function. A list per fetch spares the loop a generator step per
        row."""
        return self._chunks(instance), functools.partial(instance_entry, instance)

    def _chunks(self, instance: str) -> Iterator[list[tuple[Any, ...]]]:
        fetch = self._driver.fetch_size(self._chunk)
        with self._streaming(self._sql.entry_rows_of, (instance,)) as cur:
            while rows := cur.fetchmany(fetch):
                yield rows

    def all_entries(self) -> Iterator[StoredEntry]:
        """Every row in leaf order — negative, duplicate or non-integer leaves included."""
        for r in self._stream(self._sql.all_entries, ()):
            yield entry_row(r)

    def leaves(self, *, below: int | None = None) -> Iterator[tuple[int, bytes]]:
        """(leaf index, exact body bytes) in leaf order, optionally only leaves < ``below``."""
        rows = (self._stream(self._sql.leaves, ()) if below is None
                else self._stream(self._sql.leaves_below, (below,)))
        for leaf, body in rows:
            yield (leaf if type(leaf) is int else _int(leaf),
                   body if type(body) is bytes else _blob(body))

    def entry_at(self, instance: str, seq: int) -> StoredEntry | None:
        """The row stored under ``instance`` with that seq *column* (an index hint only:
        callers check what the signed body says)."""
        r = self._one(self._sql.entry_at, (instance, seq))
        return None if r is None else entry_row(r)

    def entry_at_leaf(self, leaf: int) -> StoredEntry | None:
        r = self._one(self._sql.entry_at_leaf, (leaf,))
        return None if r is None else entry_row(r)

    def head(self, instance: str) -> StoredHead | None:
        r = self._one(self._sql.head, (instance,))
        return None if r is None else StoredHead(_text(r[0]), _int(r[1]), _blob(r[2]),
                                                 _blob(r[3]))

    def leaf_count(self) -> int:
        """Number of leaves in the ledger-wide tree: max(leaf) + 1 (leaves are contiguous)."""
        top = self._one(self._sql.top_leaf, ())[0]
        return _leaf_count(top)

    def payload(self, commitment: str) -> tuple[bytes, bytes] | None:
        """The (salt, bytes) stored for a commitment, or None once erased."""
        r = self._one(self._sql.payload, (commitment,))
        return None if r is None else (_blob(r[0]), _blob(r[1]))

    PAYLOAD_BATCH = 256
    """Commitments per ``IN (…)`` of :meth:`payloads` (well under every driver's limit)."""

    def payloads(self, commitments: Sequence[str]) -> dict[str, tuple[bytes, bytes]]:
        """{commitment: (salt, bytes)} of those stored among ``commitments``, in one
        statement per :data:`PAYLOAD_BATCH`: what :meth:`payload` returns for each, at a
        fraction of the round trips (``verify --full`` checks ≈ one payload per entry).
        ``IN`` compares as ``=`` does; of rows sharing a commitment (only in a table
        stripped of its key) the first returned is kept."""
        found: dict[str, tuple[bytes, bytes]] = {}
        wanted = list(dict.fromkeys(commitments))
        mark = self._driver.placeholder
        cur = self._raw.cursor()
        try:
            for i in range(0, len(wanted), self.PAYLOAD_BATCH):
                part = wanted[i:i + self.PAYLOAD_BATCH]
                cur.execute("SELECT commitment, salt, data FROM histaudit_payloads "
                            f"WHERE commitment IN ({', '.join([mark] * len(part))})", part)
                for commitment, salt, data in cur.fetchall():
                    found.setdefault(_text(commitment), (_blob(salt), _blob(data)))
        finally:
            cur.close()
        return found

    # -- once per command ----------------------------------------------------------

    def _all(self, sql: str) -> list[Any]:
        cur = self._raw.cursor()
        try:
            cur.execute(sql)
            return list(cur.fetchall())
        finally:
            cur.close()

    def checkpoint_notes(self) -> list[tuple[int, bytes]]:
        """Every stored checkpoint as (size, signed note), oldest first."""
        return [(_int(size), _blob(note)) for size, note in self._all(self._sql.checkpoints)]

    def cosignatures(self) -> list[tuple[int, str, str, bytes]]:
        """Every stored witness cosignature as (size, witness, key hash hex, line)."""
        return [(_int(size), _text(name), _text(kh), _blob(line))
                for size, name, kh, line in self._all(self._sql.cosignatures)]

    def instances(self) -> list[InstanceSummary]:
        """Every instance that has entries or a head, with entry counts."""
        found: dict[str, InstanceSummary] = {}
        for name, count, top_seq, first, last in self._all(self._sql.instances):
            name = _text(name)
            found.setdefault(name, InstanceSummary(name, _int(count), _int(top_seq),
                                                   _int(first), _int(last)))
        for (name,) in self._all(self._sql.head_instances):
            found.setdefault(_text(name), InstanceSummary(_text(name), 0, 0, -1, -1))
        return list(found.values())

    def instance_ids(self) -> list[str]:
        return [s.instance for s in self.instances()]
