"""The append rule: how a new entry joins its instance's chain, and how checkpoints are made.

For one append, inside one store transaction (:meth:`histaudit.ledger.store.Ledger.write`,
which holds the ledger-wide lock):

1. ``seq`` is one past the instance's newest entry, ``prev`` that entry's hash (the
   genesis value for a new instance), ``leaf`` one past the ledger's newest leaf;
2. the body is built in canonical form (:func:`histaudit.ledger.records.entry_body`),
   hashed and signed, and stored with the payloads it commits to;
3. the instance's signed head moves to the new entry.

Either all of it commits or none of it does. The store only stores rows; this module is
the one place that decides what a row holds — the way trillian's sequencer integrates a
batch inside a transaction the storage layer hands it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from histaudit.errors import InputError

from . import merkle, sha
from . import records as rec
from .checkpoint import Checkpoint, origin_of, sign_note
from .keys import Signer
from .kinds import Kind
from .store import Ledger, WriteTx

__all__ = ["CheckpointOutput", "Item", "PayloadRows", "append", "append_in",
           "append_many", "erase_payload", "make_checkpoint"]

PayloadRows = Mapping[bytes, tuple[str, bytes]]
"""Payloads an entry commits to: salt -> (commitment, payload bytes)."""


class Item(NamedTuple):
    """One entry to append: what :func:`append_many` and :class:`GroupWriter` take."""

    instance: str
    kind: str
    data: Mapping[str, Any]
    payloads: PayloadRows | None = None


def append(ledger: Ledger, instance: str, kind: str, data: Mapping[str, Any], *,
           signer: Signer, payloads: PayloadRows | None = None,
           durable: bool = True) -> rec.Entry:
    """Append one signed entry to ``instance``'s chain and move its signed head.

    ``payloads`` are stored beside the chain, so they can be erased later. ``durable``:
    see :meth:`~histaudit.ledger.store.Ledger.write`.
    """
    with ledger.write(f"append to {instance!r}", durable=durable) as tx:
        return append_in(tx, instance, kind, data, signer=signer, payloads=payloads)


def append_many(ledger: Ledger, items: Sequence[Item], *, signer: Signer,
                durable: bool = True) -> list[rec.Entry]:
    """Append ``items`` in order in one transaction: one commit, one head per instance.

    The entries take consecutive leaves; entries of one instance consecutive seqs, in
    the order given. All of them commit, or none.
    """
    what = (f"append to {items[0].instance!r}" if len(items) == 1
            else f"append of {len(items)} entries")
    with ledger.write(what, durable=durable) as tx:
        batch = _Batch(tx, signer, [item.instance for item in items])
        entries = [batch.add(item) for item in items]
        batch.store()
        return entries


def append_in(tx: WriteTx, instance: str, kind: str, data: Mapping[str, Any], *,
              signer: Signer, payloads: PayloadRows | None = None) -> rec.Entry:
    """The append rule, inside a write transaction the caller holds."""
    batch = _Batch(tx, signer, [instance])
    entry = batch.add(Item(instance, kind, data, payloads))
    batch.store()
    return entry


class _Batch:
    """Entries appended in one transaction to ``instances``, stored together by :meth:`store`.

    The tips of the instances (in one lookup) and the next leaf are read once and then
    carried forward, and each instance's head is signed once, over its last entry of the
    batch. The entries and heads are signed together when the batch is stored
    (:meth:`Signer.sign_all <histaudit.ledger.keys.Signer.sign_all>`): for a key service,
    one round trip a batch.
    """

    def __init__(self, tx: WriteTx, signer: Signer, instances: Sequence[str]) -> None:
        self._tx = tx
        self._signer = signer
        self._leaf, tips = tx.start(instances)
        # instance -> seq, hash, is new
        self._tips: dict[str, tuple[int, str, bool]] = {
            i: (tips[i][0], tips[i][1], False) if i in tips else (0, rec.GENESIS_PREV, True)
            for i in instances}
        self._heads: dict[str, tuple[int, int, str, str]] = {}  # seq, leaf, hash, ts
        self._rows: list[tuple[int, str, int, str, bytes]] = []  # a StoredEntry but its sig
        self._payloads: list[tuple[str, bytes, bytes]] = []

    def add(self, item: Item) -> rec.Entry:
        instance, kind, data, payloads = item
        last_seq, prev, new = self._tips[instance]
        seq, leaf, ts, kid = last_seq + 1, self._leaf, rec.now_ts(), self._signer.kid
        body, parses = rec.entry_body_parses(instance=instance, seq=seq, leaf=leaf, prev=prev,
                                             kind=kind, ts=ts, kid=kid, data=data)
        digest = sha.single_hex(body)  # one body at a time: see .sha
        if parses:
            self._tx.remember(instance, body, seq, digest)
        self._rows.append((leaf, instance, seq, digest, body))
        if payloads:
            self._payloads += [(c, salt, raw) for salt, (c, raw) in payloads.items()]
        self._tips[instance] = (seq, digest, new)
        self._heads[instance] = (seq, leaf, digest, ts)
        self._leaf += 1
        return rec.Entry(instance=instance, seq=seq, leaf=leaf, prev=prev, kind=kind, ts=ts,
                         kid=kid, data=dict(data), body=body)

    def store(self) -> None:
        """Store the entries, then each instance's head (the triggers check it names the
        newest entry), then the payloads, in that order (on PostgreSQL they go to the
        server with the commit: see :class:`~histaudit.ledger.store.WriteTx`)."""
        heads = [(instance, seq, rec.head_body(instance=instance, seq=seq, leaf=leaf,
                                               hash=digest, ts=ts, kid=self._signer.kid))
                 for instance, (seq, leaf, digest, ts) in self._heads.items()]
        sigs = self._signer.sign_all([row[4] for row in self._rows] + [h[2] for h in heads])
        n = len(self._rows)
        self._tx.insert_entries([rec.StoredEntry(*row, sig)
                                 for row, sig in zip(self._rows, sigs[:n], strict=True)])
        self._tx.put_heads([(rec.StoredHead(instance, seq, head, sig), self._tips[instance][2])
                            for (instance, seq, head), sig in zip(heads, sigs[n:], strict=True)])
        self._tx.insert_payloads(self._payloads)


def erase_payload(ledger: Ledger, instance: str, commitment: str, *, signer: Signer,
                  record: Mapping[str, Any]) -> tuple[bool, rec.Entry]:
    """Erase one payload (privacy request) and sign ``payload.erased`` into ``instance``.

    Both happen in one transaction: a payload never disappears without the signed record
    that says why. The chain still verifies: it holds only the commitment. ``instance``
    must be the instance whose entry references the payload: only an erasure in that
    chain covers a payload signed as kept (docs/format.md §8.3). Returns
    (whether a stored payload was deleted, the erasure entry).
    """
    with ledger.write(f"erasing payload {commitment[:12]}…") as tx:
        gone = tx.delete_payload(commitment)
        entry = append_in(tx, instance, Kind.PAYLOAD_ERASED,
                          {**record, "commitment": commitment}, signer=signer)
        return gone, entry


class CheckpointOutput(Protocol):
    """Output that goes with a checkpoint (a note file, a bundle), written so that when it
    fails the ledger is unchanged and no partial output is left: see :func:`make_checkpoint`."""

    def prepare(self, cp: Checkpoint) -> None:
        """Do every fallible step where it can be thrown away (files in a temporary place)."""

    def place(self) -> None:
        """Put the prepared output in place; runs inside the transaction storing ``cp``."""

    def finish(self, stored: bool) -> None:
        """Always called last. ``stored`` False: undo ``prepare`` and ``place``, leaving the
        file system as it was; True: drop leftovers. Never raises."""


def make_checkpoint(ledger: Ledger, signer: Signer, *,
                    output: CheckpointOutput | None = None) -> Checkpoint:
    """Sign and store a checkpoint over every leaf the ledger holds now.

    With ``output``, the output is prepared before anything is stored and placed inside
    the transaction that stores the checkpoint, before it commits: if preparing, placing
    or the commit fails, the checkpoint is not stored and the output is undone.
    """
    size = ledger.leaf_count()
    got, root = merkle.root_of(merkle.leaf_hash(body) for _, body in ledger.leaves(below=size))
    if got != size:
        raise InputError(f"ledger has {got} leaves below index {size}: leaves are missing; "
                         f"run `histaudit verify --all` before checkpointing")
    origin = origin_of(ledger)
    note = sign_note(origin, size, root, signer)
    cp = Checkpoint(origin=origin, size=size, root=root, note=note, kid=signer.kid)
    stored = False
    try:
        if output is not None:
            output.prepare(cp)
        with ledger.write("storing a checkpoint") as tx:
            tx.add_checkpoint(size, root.hex(), note)
            if output is not None:
                output.place()
        stored = True
    finally:
        if output is not None:
            output.finish(stored)
    return cp
