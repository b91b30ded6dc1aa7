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

from collections.abc import Mapping
from typing import Any, Protocol

from histaudit.errors import InputError

from . import merkle
from . import records as rec
from .checkpoint import Checkpoint, origin_of, sign_note
from .keys import Signer
from .kinds import Kind
from .store import Ledger, WriteTx

__all__ = ["CheckpointOutput", "PayloadRows", "append", "append_in", "erase_payload",
           "make_checkpoint"]

PayloadRows = Mapping[bytes, tuple[str, bytes]]
"""Payloads an entry commits to: salt -> (commitment, payload bytes)."""


def append(ledger: Ledger, instance: str, kind: str, data: Mapping[str, Any], *,
           signer: Signer, payloads: PayloadRows | None = None) -> rec.Entry:
    """Append one signed entry to ``instance``'s chain and move its signed head.

    ``payloads`` are stored beside the chain, so they can be erased later.
    """
    with ledger.write(f"append to {instance!r}") as tx:
        return append_in(tx, instance, kind, data, signer=signer, payloads=payloads)


def append_in(tx: WriteTx, instance: str, kind: str, data: Mapping[str, Any], *,
              signer: Signer, payloads: PayloadRows | None = None) -> rec.Entry:
    """The append rule, inside a write transaction the caller holds."""
    tip = tx.tip(instance)
    seq, prev = (1, rec.GENESIS_PREV) if tip is None else (tip[0] + 1, tip[1])
    leaf = tx.next_leaf()
    ts = rec.now_ts()
    body = rec.entry_body(instance=instance, seq=seq, leaf=leaf, prev=prev, kind=kind, ts=ts,
                          kid=signer.kid, data=data)
    digest = rec.sha256_hex(body)
    tx.insert_entry(rec.StoredEntry(leaf, instance, seq, digest, body, signer.sign(body)))
    head = rec.head_body(instance=instance, seq=seq, leaf=leaf, hash=digest, ts=ts,
                         kid=signer.kid)
    tx.put_head(rec.StoredHead(instance, seq, head, signer.sign(head)), new=tip is None)
    if payloads:
        tx.insert_payloads([(c, salt, raw) for salt, (c, raw) in payloads.items()])
    return rec.Entry(instance=instance, seq=seq, leaf=leaf, prev=prev, kind=kind, ts=ts,
                     kid=signer.kid, data=dict(data), body=body)


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
