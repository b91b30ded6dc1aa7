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
from typing import Any

from histaudit.errors import InputError

from . import merkle
from . import records as rec
from .checkpoint import Checkpoint, origin_of, sign_note
from .keys import Signer
from .kinds import Kind
from .store import Ledger, WriteTx

__all__ = ["PayloadRows", "append", "append_in", "erase_payload", "make_checkpoint"]

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
    that says why. The chain still verifies: it holds only the commitment. Returns
    (whether a stored payload was deleted, the erasure entry).
    """
    with ledger.write(f"erasing payload {commitment[:12]}…") as tx:
        gone = tx.delete_payload(commitment)
        entry = append_in(tx, instance, Kind.PAYLOAD_ERASED,
                          {**record, "commitment": commitment}, signer=signer)
        return gone, entry


def make_checkpoint(ledger: Ledger, signer: Signer) -> Checkpoint:
    """Sign and store a checkpoint over every leaf the ledger holds now."""
    size = ledger.leaf_count()
    got, root = merkle.root_of(merkle.leaf_hash(body) for _, body in ledger.leaves(below=size))
    if got != size:
        raise InputError(f"ledger has {got} leaves below index {size}: leaves are missing; "
                         f"run `histaudit verify --all` before checkpointing")
    origin = origin_of(ledger)
    note = sign_note(origin, size, root, signer)
    with ledger.write("storing a checkpoint") as tx:
        tx.add_checkpoint(size, root.hex(), note)
    return Checkpoint(origin=origin, size=size, root=root, note=note, kid=signer.kid)
