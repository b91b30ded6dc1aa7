"""The row operations of one write transaction: :class:`WriteTx`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from histaudit.errors import FormatError, StoreError
from histaudit.ledger.records import (
    StoredEntry,
    StoredHead,
    check_instance_id,
    parse_entry,
    sha256_hex,
    shown_id,
)

from .columns import _blob, _leaf_count, _text
from .sql import Statements


class WriteTx:
    """The row operations of one write transaction (see :meth:`Ledger.write`).

    The ledger-wide append lock is held before its first statement runs and until it
    commits, so what :meth:`tips` and :meth:`next_leaf` return stays true meanwhile.
    Statements run on the driver's cursor (:mod:`.sql`); rows of one kind go in one
    ``executemany``.
    """

    def __init__(self, cursor: Any, sql: Statements, *, tips: TipMemo,
                 pipelined: bool = False,
                 lock: tuple[str, tuple[Any, ...]] | None = None) -> None:
        """``pipelined``: the whole transaction runs in the driver's pipeline mode
        (psycopg's ``Connection.pipeline``): a statement goes to the server with the next
        one whose result is read, so the inserts of a batch and its COMMIT cost one round
        trip, and an error surfaces, as a database error, at that read or at the commit;
        ``tips``: the ledger's memo of bodies it wrote (see :meth:`tips`); ``lock``: the
        statement that takes the append lock, when the caller has not taken it: it runs
        just before this transaction's first statement (with :meth:`start`, in the same
        round trip)."""
        self._cursor = cursor
        self._sql = sql
        self._pipelined = pipelined
        self._memo = tips
        self._lock = lock

    @property
    def _cur(self) -> Any:
        """The cursor, once the append lock is taken (see ``lock``)."""
        if self._lock is not None:
            sql, params = self._lock
            self._lock = None
            self._cursor.execute(sql, params)
        return self._cursor

    def tips(self, instances: Sequence[str]) -> dict[str, tuple[int, str]]:
        """{instance: (seq, hash) of its newest stored entry} for those of ``instances``
        that have entries (a new instance is absent).

        Both come from the signed body (its ``seq``, the SHA-256 of its exact bytes), not
        from the unsigned ``seq``/``hash`` columns, which anyone with file access can edit;
        a newest row whose body does not parse is refused rather than linked to. A hostile
        id (a control or bidi character) is refused before it reaches any SQL. On
        PostgreSQL one statement answers for all the instances (a batch of appends to
        many instances costs one round trip, not one per instance).

        A newest row whose body is, byte for byte, the body this ledger last wrote for the
        instance (:meth:`remember`) is not parsed and hashed again: the same bytes give
        the same seq and hash. Any other body, edited or written elsewhere, is.
        """
        wanted = _checked_ids(instances)
        rows: list[tuple[str, Any]] = []
        if self._sql.tips_of and len(wanted) > 1:
            self._cur.execute(self._sql.tips_of, (wanted,))
            rows = [(_text(i), body) for i, body in self._cur.fetchall()]
        else:
            for instance in wanted:
                self._cur.execute(self._sql.last_of_instance, (instance,))
                last = self._cur.fetchone()
                if last is not None:
                    rows.append((instance, last[0]))
        return self._tips_of(rows)

    def start(self, instances: Sequence[str]) -> tuple[int, dict[str, tuple[int, str]]]:
        """:meth:`next_leaf` and :meth:`tips` of ``instances``, as a batch begins.

        For one instance one statement (a lone append, the common case). On PostgreSQL
        one round trip, the append lock included when it is still to be
        taken: the lock, the top leaf and the tips go to the server together, which runs
        them in that order, so both reads see what the lock holder may rely on. Every
        round trip spent under the ledger-wide lock is one that no other appender of any
        process can use (benchmarks/README.md, figure 2a).
        """
        wanted = _checked_ids(instances)
        if len(wanted) == 1 and not self._pipelined:
            self._cur.execute(self._sql.top_leaf_and_last_of, (wanted[0],))
            top, body = self._cur.fetchone()
            return _leaf_count(top), self._tips_of([] if body is None else [(wanted[0], body)])
        if not self._pipelined or not self._sql.tips_of:
            return self.next_leaf(), self.tips(wanted)
        conn = self._cursor.connection
        leaf_cur, tips_cur = conn.cursor(), conn.cursor()
        try:
            self._cur  # noqa: B018 - takes the append lock first, in the same round trip
            leaf_cur.execute(self._sql.top_leaf)
            tips_cur.execute(self._sql.tips_of, (wanted,))
            top = leaf_cur.fetchone()[0]
            rows = [(_text(i), body) for i, body in tips_cur.fetchall()]
        finally:
            leaf_cur.close()
            tips_cur.close()
        return _leaf_count(top), self._tips_of(rows)

    def _tips_of(self, rows: Sequence[tuple[str, Any]]) -> dict[str, tuple[int, str]]:
        """{instance: (seq, hash)} of (instance, newest stored body) rows."""
        memo = self._memo
        return {instance: memo.tip(instance, _blob(body)) for instance, body in rows}

    def remember(self, instance: str, body: bytes, seq: int, digest: str) -> None:
        """``body`` (whose parsed seq is ``seq`` and SHA-256 ``digest``: the caller knows
        :func:`~histaudit.ledger.records.parse_entry` accepts it) is stored here as
        ``instance``'s newest entry; see :meth:`tips`."""
        self._memo.put(instance, body, seq, digest)

    def next_leaf(self) -> int:
        """The ledger-wide index the next entry gets: max(leaf) + 1."""
        self._cur.execute(self._sql.top_leaf)
        top = self._cur.fetchone()[0]
        return _leaf_count(top)

    def insert_entries(self, rows: Sequence[StoredEntry]) -> None:
        self._cur.executemany(self._sql.insert_entry, [
            (r.leaf, r.instance, r.seq, r.hash, r.body, r.sig) for r in rows])

    def insert_entry(self, row: StoredEntry) -> None:
        self.insert_entries([row])

    def put_head(self, head: StoredHead, *, new: bool) -> None:
        """Store ``instance``'s first head (``new``) or move it forward."""
        self.put_heads([(head, new)])

    def put_heads(self, heads: Sequence[tuple[StoredHead, bool]]) -> None:
        """Store first heads and move heads forward: (head, is the instance's first)."""
        first = [(h.instance, h.seq, h.body, h.sig) for h, new in heads if new]
        moved = [(h.seq, h.body, h.sig, h.instance) for h, new in heads if not new]
        if first:
            self._cur.executemany(self._sql.insert_head, first)
        if moved:
            self._cur.executemany(self._sql.move_head, moved)

    def insert_payloads(self, rows: Sequence[tuple[str, bytes, bytes]]) -> None:
        """Store (commitment, salt, bytes) payload rows beside the chain."""
        if rows:
            self._cur.executemany(self._sql.insert_payload, list(rows))

    def delete_payload(self, commitment: str) -> bool:
        """Delete one payload row; True when there was one."""
        self._cur.execute(self._sql.delete_payload, (commitment,))
        return self._cur.fetchone() is not None

    def add_checkpoint(self, size: int, root_hex: str, note: bytes) -> None:
        """Store a signed checkpoint unless one of that size is stored (append-only).

        One stored already must say the same (its note text — origin, size, root — equal;
        its signatures may be another key's): anything else was written by someone else,
        e.g. a writer planting a note of a future size so the genuine one is never stored.
        """
        self._cur.execute(self._sql.checkpoint_at, (size,))
        have = self._cur.fetchone()
        if have is None:
            self._cur.execute(self._sql.insert_checkpoint, (size, root_hex, note))
            return
        if _note_text(_blob(have[0])) != _note_text(note):
            raise StoreError(f"a different checkpoint of size {size} is already stored: the "
                             f"checkpoints table was written by something other than "
                             f"histaudit (compare it with the checkpoints you kept)")

    def add_cosignature(self, size: int, witness: str, key_hash: str, line: bytes) -> bool:
        """Store a witness's cosignature line of the checkpoint of ``size``, unless that very
        line is stored already (rows are never replaced; which of several lines by one
        witness key counts is the readers' rule, witness/policy.py); True when stored. The
        checkpoint must be stored."""
        self._cur.execute(self._sql.checkpoint_at, (size,))
        if self._cur.fetchone() is None:
            raise StoreError(f"no checkpoint of size {size} is stored to add a cosignature to")
        self._cur.execute(self._sql.cosignature_at, (size, witness, key_hash, line))
        if self._cur.fetchone() is not None:
            return False
        self._cur.execute(self._sql.insert_cosignature, (size, witness, key_hash, line))
        return True


class TipMemo:
    """The newest body a ledger wrote per instance, with its seq and hash: what
    :meth:`WriteTx.tips` would parse out of those exact bytes (for at most
    :attr:`LIMIT` instances; past that it starts again empty)."""

    LIMIT = 1024

    def __init__(self) -> None:
        # instance -> (body, seq, hash); an item is replaced whole, so threads sharing
        # the memo never see one body with another's seq
        self._known: dict[str, tuple[bytes, int, str]] = {}

    def tip(self, instance: str, body: bytes) -> tuple[int, str]:
        known = self._known.get(instance)
        if known is not None and known[0] == body:
            return known[1], known[2]
        return _newest(instance, body)

    def put(self, instance: str, body: bytes, seq: int, digest: str) -> None:
        if len(self._known) >= self.LIMIT and instance not in self._known:
            self._known.clear()
        self._known[instance] = (body, seq, digest)


def _checked_ids(instances: Sequence[str]) -> list[str]:
    """``instances`` without repeats, a hostile id (a control or bidi character) refused
    before it reaches any SQL."""
    wanted = list(dict.fromkeys(instances))
    for instance in wanted:
        check_instance_id(instance)
    return wanted


def _newest(instance: str, body: bytes) -> tuple[int, str]:
    """(seq, hash) of an instance's newest stored body, refused when it is no entry."""
    try:
        entry = parse_entry(body)
    except FormatError as exc:
        raise StoreError(f"the newest stored entry of {shown_id(instance)} is not a "
                         f"valid entry ({exc}); run `histaudit verify` before "
                         f"appending") from None
    return entry.seq, sha256_hex(body)


def _note_text(note: bytes) -> bytes:
    """A signed note's text: everything before the blank line that starts its signatures."""
    end = note.find(b"\n\n")
    return note if end < 0 else note[:end + 1]
