"""Signed checkpoints of the ledger-wide Merkle tree (C2SP tlog-checkpoint in a signed note).

A checkpoint note is::

    histaudit/<ledger id>\\n
    <tree size>\\n
    <base64 root hash>\\n
    \\n
    — histaudit/<ledger id> <base64(4-byte key hash || 64-byte Ed25519 signature)>\\n

The signature covers the note text (the first three lines, newline included); the key
hash is SHA-256(name || "\\n" || 0x01 || raw public key)[:4], as C2SP signed-note
defines it for Ed25519, so Go's ``golang.org/x/mod/sumdb/note`` can read these notes.
Anyone who keeps a checkpoint can later prove the ledger only grew since
(:mod:`histaudit.verify.consistency`); checkpoints are made by
:func:`histaudit.ledger.chain.make_checkpoint`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Protocol

from histaudit.errors import InputError, SignatureError

from .keys import PublicKey, Signer, TrustStore

ED25519_ALG = b"\x01"
SIG_PREFIX = "\u2014 "  # an em dash and a space start every signature line


class _HasLedgerId(Protocol):
    @property
    def ledger_id(self) -> str: ...


def origin_of(ledger: _HasLedgerId) -> str:
    """The checkpoint origin line of a ledger: ``histaudit/<ledger id>``."""
    return f"histaudit/{ledger.ledger_id}"


def note_key_hash(name: str, key: PublicKey) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ED25519_ALG + key.raw).digest()[:4]


def verifier_key(name: str, key: PublicKey) -> str:
    """The key in signed-note verifier-key form: ``name+hash+base64(0x01||pubkey)``."""
    return (f"{name}+{note_key_hash(name, key).hex()}+"
            f"{base64.b64encode(ED25519_ALG + key.raw).decode()}")


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: ``size`` leaves whose tree has ``root``."""

    origin: str
    size: int
    root: bytes
    note: bytes
    kid: str


def sign_note(origin: str, size: int, root: bytes, signer: Signer) -> bytes:
    text = f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n".encode()
    sig = signer.sign(text)
    line = (f"{SIG_PREFIX}{origin} "
            f"{base64.b64encode(note_key_hash(origin, signer.public) + sig).decode()}\n")
    return text + b"\n" + line.encode()


def parse_note(note: bytes, trust: TrustStore, *, source: str = "checkpoint") -> Checkpoint:
    """Parse a checkpoint note and verify one of its signatures with a trusted key.

    InputError when it does not read as a signed note (docs/bundle.md §4.2 steps 1-3);
    SignatureError when it reads but no signature verifies with a trusted key (step 4).
    """
    try:
        text_str = note.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source} is not UTF-8 text") from None
    text_end = text_str.rfind("\n\n")
    if text_end < 0:
        raise InputError(f"{source} is not a signed note (no blank line before signatures)")
    text, sig_block = text_str[:text_end + 1], text_str[text_end + 2:]
    lines = text.split("\n")[:-1]
    if len(lines) < 3 or any(not ln for ln in lines):
        raise InputError(f"{source}: note text must have origin, size and root lines")
    origin, size_s, root_b64 = lines[:3]
    # isdigit() alone admits non-ASCII digits ("١٢", "²"); C2SP requires ASCII decimal.
    if not (size_s.isascii() and size_s.isdigit()) or (size_s != "0" and size_s.startswith("0")):
        raise InputError(f"{source}: tree size {size_s[:40]!r} is not a decimal number")
    # A tree size is a 64-bit count (C2SP tlog-checkpoint); thousands of digits would
    # also make int() raise ValueError (Python's integer string conversion limit).
    if len(size_s) > 19 or int(size_s) >= 1 << 63:
        raise InputError(f"{source}: tree size of {len(size_s)} digits is larger than "
                         f"2^63 - 1")
    try:
        root = base64.b64decode(root_b64, validate=True)
    except binascii.Error:
        root = b""
    if len(root) != 32:
        raise InputError(f"{source}: root hash is not base64 of 32 bytes")
    signed_by = _verify_signatures(text.encode(), sig_block, origin, trust, source)
    return Checkpoint(origin=origin, size=int(size_s), root=root, note=note, kid=signed_by)


def _verify_signatures(text: bytes, block: str, origin: str, trust: TrustStore,
                       source: str) -> str:
    if not block.endswith("\n") or not block.strip():
        raise InputError(f"{source}: note has no signature lines")
    by_hash = {note_key_hash(origin, k): k for k in trust}
    for line in block[:-1].split("\n"):
        if not line.startswith(SIG_PREFIX) or line.count(" ") != 2:
            raise InputError(f"{source}: malformed signature line")
        _, name, blob_b64 = line.split(" ")
        try:
            blob = base64.b64decode(blob_b64, validate=True)
        except binascii.Error:
            raise InputError(f"{source}: signature line is not base64") from None
        key = by_hash.get(blob[:4]) if name == origin and len(blob) == 68 else None
        if key is not None and key.verify(blob[4:], text):
            return key.kid
    raise SignatureError(f"{source}: no valid signature by a trusted key for origin {origin}")
