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

Witnesses (C2SP tlog-witness) add *cosignature* lines to the same note: C2SP
tlog-cosignature ``cosignature/v1``, whose signature line is ``— <witness name>
base64(4-byte key hash || 8-byte big-endian UNIX time || 64-byte Ed25519 signature)``,
the key hash taken with algorithm byte 0x04, and the signed message
``cosignature/v1\ntime <T>\n`` followed by the note text exactly as signed
(:func:`cosignature_message`). :class:`WitnessKey` and :func:`verify_cosignature` check
one; which witnesses must have cosigned is a policy (:mod:`histaudit.witness.policy`).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Protocol

from histaudit.errors import InputError, SignatureError
from histaudit.urls import shown_word

from .keys import PublicKey, Signer, TrustStore

ED25519_ALG = b"\x01"
COSIGNATURE_V1_ALG = b"\x04"
"""The signed-note algorithm byte of a C2SP tlog-cosignature/v1 (timestamped) key."""
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
    root = _b64(root_b64) or b""
    if len(root) != 32:
        raise InputError(f"{source}: root hash is not base64 of 32 bytes")
    signed_by = _verify_signatures(text.encode(), sig_block, origin, trust, source)
    return Checkpoint(origin=origin, size=int(size_s), root=root, note=note, kid=signed_by)


def _b64(text: str) -> bytes | None:
    """Strict base64 (RFC 4648 alphabet, padded), or None. ``b64decode`` raises
    binascii.Error for a bad symbol but plain ValueError for a non-ASCII one."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None


def _verify_signatures(text: bytes, block: str, origin: str, trust: TrustStore,
                       source: str) -> str:
    if not block.endswith("\n") or not block.strip():
        raise InputError(f"{source}: note has no signature lines")
    by_hash = {note_key_hash(origin, k): k for k in trust}
    for line in block[:-1].split("\n"):
        if not line.startswith(SIG_PREFIX) or line.count(" ") != 2:
            raise InputError(f"{source}: malformed signature line")
        _, name, blob_b64 = line.split(" ")
        blob = _b64(blob_b64)
        if blob is None:
            raise InputError(f"{source}: signature line is not base64")
        key = by_hash.get(blob[:4]) if name == origin and len(blob) == 68 else None
        if key is not None and key.verify(blob[4:], text):
            return key.kid
    raise SignatureError(f"{source}: no valid signature by a trusted key for origin {origin}")


# --- witness cosignatures (C2SP tlog-cosignature) ----------------------------------------

def note_text(note: bytes) -> bytes:
    """A signed note's text: everything up to and including the LF before the blank line
    that starts its signatures (the bytes every signature and cosignature covers)."""
    end = note.rfind(b"\n\n")
    if end < 0:
        raise InputError("not a signed note (no blank line before signatures)")
    return note[:end + 1]


def signature_lines(note: bytes) -> list[bytes]:
    """The note's signature lines, each with its LF, in order."""
    block = note[len(note_text(note)) + 1:]
    return [line + b"\n" for line in block.split(b"\n")[:-1]]


def with_lines(note: bytes, lines: list[bytes]) -> bytes:
    """``note`` with the signature ``lines`` not already in it appended, in order."""
    have = set(signature_lines(note))
    extra = []
    for line in lines:
        if line not in have:
            have.add(line)
            extra.append(line)
    return note + b"".join(extra)


def cosignature_message(timestamp: int, text: bytes) -> bytes:
    """What a cosignature/v1 signs: ``cosignature/v1``, ``time T``, then the note text."""
    return b"cosignature/v1\ntime %d\n" % timestamp + text


@dataclass(frozen=True)
class WitnessKey:
    """A witness's cosignature/v1 verifier key (``name+hash+base64(0x04||key)``)."""

    name: str
    key: PublicKey
    key_hash: bytes

    @classmethod
    def parse(cls, vkey: str, *, source: str = "witness key") -> WitnessKey:
        """Read a vkey; InputError when it is malformed, its hash does not match, or its
        algorithm is not cosignature/v1 (0x04)."""
        parts = vkey.split("+", 2)  # the base64 key may itself hold "+"
        if len(parts) != 3 or not parts[0] or any(c.isspace() for c in parts[0]):
            raise InputError(f"{source}: {shown_word(vkey)} is not a vkey (name+hash+key)")
        name, hash_hex, key_b64 = parts
        try:
            blob = base64.b64decode(key_b64, validate=True)
            want = bytes.fromhex(hash_hex)
        except ValueError:  # binascii.Error is one
            raise InputError(f"{source}: {shown_word(vkey)} is not a vkey (name+hash+key)") \
                from None
        if blob[:1] != COSIGNATURE_V1_ALG or len(blob) != 33:
            raise InputError(f"{source}: {shown_word(name)} is not an Ed25519 cosignature/v1 key "
                             f"(algorithm byte 0x04)")
        digest = hashlib.sha256(name.encode() + b"\n" + blob).digest()[:4]
        if len(want) != 4 or want != digest:
            raise InputError(f"{source}: the key hash of {shown_word(name)} does not match its "
                             f"key")
        raw = blob[1:]
        return cls(name=name, key=PublicKey(kid=f"witness:{name}", raw=raw), key_hash=digest)

    @property
    def vkey(self) -> str:
        return (f"{self.name}+{self.key_hash.hex()}+"
                f"{base64.b64encode(COSIGNATURE_V1_ALG + self.key.raw).decode()}")


@dataclass(frozen=True)
class Cosignature:
    """One cosignature line as read: who (name, key hash), when, and the signature."""

    name: str
    key_hash: bytes
    timestamp: int
    signature: bytes
    line: bytes


def read_cosignature(line: bytes) -> Cosignature | None:
    """The cosignature/v1 a signature line carries, or None when it has another shape
    (the log's own signature, another algorithm, not a signature line)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if (not text.startswith(SIG_PREFIX) or not text.endswith("\n") or text.count(" ") != 2
            or "\n" in text[:-1]):
        return None  # one line: a stored row is not split by a newline of its own
    _, name, blob_b64 = text[:-1].split(" ")
    blob = _b64(blob_b64)
    if blob is None or len(blob) != 4 + 8 + 64:
        return None
    return Cosignature(name=name, key_hash=blob[:4],
                       timestamp=int.from_bytes(blob[4:12], "big"), signature=blob[12:],
                       line=line)


def verify_cosignature(text: bytes, cosig: Cosignature, key: WitnessKey) -> bool:
    """True when ``cosig`` is ``key``'s cosignature/v1 over the exact note ``text``."""
    return (cosig.name == key.name and cosig.key_hash == key.key_hash
            and key.key.verify(cosig.signature, cosignature_message(cosig.timestamp, text)))
