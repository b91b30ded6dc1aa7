"""COSE_Sign1 signed statements and RFC 9162 receipts (RFC 9052, RFC 9943, RFC 9942).

A **signed statement** (SCITT, RFC 9943) is a COSE_Sign1 whose protected header holds the
algorithm (EdDSA, -8), the key id (the histaudit kid as ASCII bytes), a content type and
CWT claims (RFC 9597, label 15) naming issuer and subject; its payload is attached.

A **receipt** (COSE Receipts, RFC 9942, formerly draft-ietf-cose-merkle-tree-proofs) is a
COSE_Sign1 by the log's key whose protected header says ``vds`` (395) = 1, RFC9162_SHA256,
and whose payload is *detached*: it is the root of the tree, which a verifier rebuilds from
the statement's leaf and the proof in the unprotected ``vdp`` (396) map: key -1 holds
inclusion proofs ``bstr .cbor [tree_size, leaf_index, [+ hash]]``, key -2 consistency proofs
``bstr .cbor [tree_size_1, tree_size_2, [+ hash]]`` (the payload then is the newer root). A
statement with receipts in its unprotected header (label 394) is a transparent statement.

Every signature is made by a :class:`~histaudit.ledger.keys.Signer` over the RFC 9052
``Sig_structure``, so key files, PKCS#11 tokens and transit key services all sign here
the same way. docs/scitt.md is the spec of what histaudit puts in each field.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from histaudit.errors import FormatError, SignatureError
from histaudit.ledger import merkle
from histaudit.ledger.keys import PublicKey, Signer, TrustStore

from . import cbor

__all__ = [
    "Receipt", "Sign1", "cose_key", "pem", "read_receipt", "read_sign1", "receipts_of",
    "sign1", "unsigned", "verify_sign1", "with_receipts",
]

COSE_SIGN1_TAG = 18
ALG, CRIT, CONTENT_TYPE, KID, CWT_CLAIMS = 1, 2, 3, 4, 15
RECEIPTS, VDS, VDP = 394, 395, 396
EDDSA = -8
RFC9162_SHA256 = 1
INCLUSION_PROOFS, CONSISTENCY_PROOFS = -1, -2
ISS, SUB = 1, 2
CHECKPOINT = "histaudit-checkpoint"
"""Unprotected label of a receipt: the signed (and witness-cosigned) checkpoint note whose
root the receipt's signature covers. A text label (RFC 9052 allows int or tstr), so no
registry's private-use integer can collide with it."""
CHECKPOINT_FROM = "histaudit-checkpoint-from"
"""Unprotected label of a consistency receipt: the earlier checkpoint's note."""
TREE_SIZE = "histaudit-tree-size"
"""Protected label of a receipt: the size of the tree whose root it signs. RFC 9942 signs
only the root, and the size sits unprotected in the proof, where it only steers the
fold: for leaves left of the right border of the tree the same path gives the same root
under several sizes, so an altered size would verify. Signed here, a verifier compares it
with the proof's (scitt-cose reports it in ``protected_header_ext``)."""
MAX_MESSAGE = 4 << 20
"""A statement carries one entry body (and its receipt); larger is refused unread."""

# RFC 8410: an Ed25519 SubjectPublicKeyInfo is this fixed DER prefix and the raw key.
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")


@dataclass(frozen=True)
class Sign1:
    """A decoded COSE_Sign1: the protected header as signed (bytes) and as read."""

    protected_bytes: bytes
    protected: dict[Any, Any]
    unprotected: dict[Any, Any]
    payload: bytes | None
    signature: bytes

    def encode(self) -> bytes:
        return cbor.dumps(cbor.Tag(COSE_SIGN1_TAG, [self.protected_bytes, self.unprotected,
                                                    self.payload, self.signature]))

    @property
    def kid(self) -> str | None:
        kid = self.protected.get(KID)
        return kid.decode("ascii", "replace") if isinstance(kid, bytes) else None

    def claims(self) -> dict[Any, Any]:
        claims = self.protected.get(CWT_CLAIMS)
        return claims if isinstance(claims, dict) else {}


def sig_structure(protected: bytes, payload: bytes) -> bytes:
    """RFC 9052 §4.4: what a COSE_Sign1 signature covers (no external data)."""
    return cbor.dumps(["Signature1", protected, b"", payload])


def unsigned(kid: str, protected: dict[Any, Any], unprotected: dict[Any, Any],
             payload: bytes, *, detached: bool = False) -> tuple[Sign1, bytes]:
    """A COSE_Sign1 by key ``kid`` still without its signature, and the bytes to sign
    (its Sig_structure): EdDSA and the kid go into ``protected``. Signing apart lets a
    caller sign many messages in one :meth:`Signer.sign_all` (one request for a transit
    service)."""
    header = {**protected, ALG: EDDSA, KID: kid.encode("ascii")}
    data = cbor.dumps(header)
    return (Sign1(data, header, dict(unprotected), None if detached else payload, b""),
            sig_structure(data, payload))


def sign1(signer: Signer, protected: dict[Any, Any], unprotected: dict[Any, Any],
          payload: bytes, *, detached: bool = False) -> Sign1:
    """A COSE_Sign1 by ``signer`` (see :func:`unsigned`)."""
    msg, tbs = unsigned(signer.kid, protected, unprotected, payload, detached=detached)
    return replace(msg, signature=signer.sign(tbs))


def read_sign1(data: bytes, what: str) -> Sign1:
    """A COSE_Sign1 (tag 18) from ``data``; FormatError when it is not one."""
    if len(data) > MAX_MESSAGE:
        raise FormatError(f"{what} is {len(data)} bytes, more than {MAX_MESSAGE}")
    item = cbor.loads(data, what=what)
    if not isinstance(item, cbor.Tag) or item.tag != COSE_SIGN1_TAG:
        raise FormatError(f"{what} is not a COSE_Sign1 (CBOR tag 18)")
    parts = item.value
    if not isinstance(parts, list) or len(parts) != 4:
        raise FormatError(f"{what} is not a four-element COSE_Sign1")
    prot, unprot, payload, signature = parts
    if not isinstance(prot, bytes) or not isinstance(unprot, dict):
        raise FormatError(f"{what} has malformed headers")
    if not (payload is None or isinstance(payload, bytes)) or not isinstance(signature,
                                                                              bytes):
        raise FormatError(f"{what} has a malformed payload or signature")
    header = cbor.loads(prot, what=f"{what} protected header") if prot else {}
    if not isinstance(header, dict):
        raise FormatError(f"{what} protected header is not a map")
    return Sign1(prot, header, unprot, payload, signature)


def verify_sign1(msg: Sign1, trust: TrustStore, what: str, *,
                 payload: bytes | None = None) -> PublicKey:
    """The trusted key whose EdDSA signature ``msg`` carries (over its attached payload,
    or ``payload`` when it is detached). FormatError for a message that is not one
    histaudit can judge (another algorithm, a critical header, an unknown kid);
    SignatureError when the signature does not verify."""
    if msg.protected.get(ALG) != EDDSA:
        raise FormatError(f"{what} is not signed with EdDSA (alg -8)")
    if CRIT in msg.protected:
        raise FormatError(f"{what} marks header parameters critical")
    key = trust.get(msg.kid) if msg.kid is not None else None
    if key is None:
        raise FormatError(f"{what} names no key of the trust store (kid {msg.kid!r})")
    content = msg.payload if payload is None else payload
    if content is None or (payload is not None and msg.payload is not None):
        raise FormatError(f"{what} has {'no' if content is None else 'an attached'} payload")
    if not key.verify(msg.signature, sig_structure(msg.protected_bytes, content)):
        raise SignatureError(f"{what}: signature does not verify with key {key.kid}")
    return key


def with_receipts(statement: Sign1, receipts: Sequence[bytes]) -> Sign1:
    """The transparent statement: ``statement`` with ``receipts`` in its unprotected
    header (label 394); what is signed is unchanged."""
    return Sign1(statement.protected_bytes, statement.protected,
                 {**statement.unprotected, RECEIPTS: list(receipts)}, statement.payload,
                 statement.signature)


def receipts_of(statement: Sign1, what: str) -> list[bytes]:
    found = statement.unprotected.get(RECEIPTS, [])
    if not isinstance(found, list) or not all(isinstance(r, bytes) for r in found):
        raise FormatError(f"{what}: its receipts (label 394) are not a list of byte strings")
    return found


# --- receipts --------------------------------------------------------------------------

def inclusion_receipt(kid: str, *, issuer: str, subject: str, size: int, index: int,
                      path: Sequence[bytes], root: bytes, note: bytes) -> tuple[Sign1, bytes]:
    """A receipt that leaf ``index`` is in the tree (``size``, ``root``), unsigned (see
    :func:`unsigned`): the root detached, ``note`` (the signed checkpoint of that tree)
    beside the proof."""
    proof = cbor.dumps([size, index, list(path)])
    return unsigned(kid, _receipt_header(issuer, subject, size),
                    {VDP: {INCLUSION_PROOFS: [proof]}, CHECKPOINT: note}, root, detached=True)


def consistency_receipt(kid: str, *, issuer: str, old_size: int, size: int,
                        path: Sequence[bytes], root: bytes, old_note: bytes,
                        note: bytes) -> tuple[Sign1, bytes]:
    """A receipt that the tree (``size``, ``root``) extends the tree of ``old_note``,
    unsigned."""
    proof = cbor.dumps([old_size, size, list(path)])
    return unsigned(kid, _receipt_header(issuer, issuer, size),
                    {VDP: {CONSISTENCY_PROOFS: [proof]}, CHECKPOINT: note,
                     CHECKPOINT_FROM: old_note}, root, detached=True)


def _receipt_header(issuer: str, subject: str, size: int) -> dict[Any, Any]:
    return {VDS: RFC9162_SHA256, CWT_CLAIMS: {ISS: issuer, SUB: subject}, TREE_SIZE: size}


@dataclass(frozen=True)
class Receipt:
    """What a verified receipt proves: the tree (``size``, ``root``) holds the leaf at
    ``index`` (inclusion) or extends the tree of ``old_size`` (consistency: ``index`` is
    then that size). ``note`` is the checkpoint note it carries, unverified here."""

    kind: str
    size: int
    index: int
    root: bytes
    key: PublicKey
    note: bytes | None
    old_note: bytes | None = None


def read_receipt(data: bytes, trust: TrustStore, what: str, *, leaf: bytes | None = None,
                 old_root: bytes | None = None) -> Receipt:
    """Verify a receipt: for ``leaf`` (the statement's payload, an inclusion receipt) or
    from ``old_root`` (a consistency receipt). FormatError when it is no receipt of that
    kind; SignatureError when its proof does not lead to a root its key signed."""
    msg = read_sign1(data, what)
    if msg.protected.get(VDS) != RFC9162_SHA256:
        raise FormatError(f"{what} is not an RFC9162_SHA256 receipt (protected vds 395 = 1)")
    if msg.payload is not None:
        raise FormatError(f"{what} has an attached payload; a receipt's root is detached")
    vdp = msg.unprotected.get(VDP)
    label = INCLUSION_PROOFS if leaf is not None else CONSISTENCY_PROOFS
    proofs = vdp.get(label) if isinstance(vdp, dict) else None
    if not isinstance(proofs, list) or len(proofs) != 1 or not isinstance(proofs[0], bytes):
        raise FormatError(f"{what} does not hold exactly one "
                          f"{'inclusion' if leaf is not None else 'consistency'} proof")
    first, second, path = _proof(proofs[0], what)
    signed_size = msg.protected.get(TREE_SIZE)
    if type(signed_size) is not int or signed_size != (first if leaf is not None else second):
        raise SignatureError(f"{what}: the proof's tree size is not the signed one "
                             f"({signed_size!r})")
    if leaf is not None:
        size, index = first, second
        root = _inclusion_root(index, size, merkle.leaf_hash(leaf), path)
        if root is None:
            raise SignatureError(f"{what}: the inclusion proof does not fit leaf {index} of a "
                                 f"tree of {size}")
    else:
        assert old_root is not None
        index, size = first, second
        root = _consistency_root(index, size, old_root, path)
        if root is None:
            raise SignatureError(f"{what}: the consistency proof from {index} to {size} does "
                                 f"not start at the earlier root")
    key = verify_sign1(msg, trust, what, payload=root)
    note = msg.unprotected.get(CHECKPOINT)
    old = msg.unprotected.get(CHECKPOINT_FROM)
    return Receipt("inclusion" if leaf is not None else "consistency", size, index, root,
                   key, note if isinstance(note, bytes) else None,
                   old if isinstance(old, bytes) else None)


def _proof(data: bytes, what: str) -> tuple[int, int, list[bytes]]:
    doc = cbor.loads(data, what=f"{what} proof")
    if (not isinstance(doc, list) or len(doc) != 3 or not all(
            type(n) is int and 0 <= n < 1 << 62 for n in doc[:2])
            or not isinstance(doc[2], list) or len(doc[2]) > 64
            or not all(isinstance(h, bytes) and len(h) == 32 for h in doc[2])):
        raise FormatError(f"{what} proof is not [size, size or index, [32-byte hashes]]")
    return doc[0], doc[1], doc[2]


def _inclusion_root(index: int, size: int, leaf_hash: bytes,
                    path: Sequence[bytes]) -> bytes | None:
    """RFC 9162 §2.1.3.2: the root the proof leads to (docs/bundle.md §3.3), or None."""
    if index >= size:
        return None
    fn, sn, r = index, size - 1, leaf_hash
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = merkle.node_hash(p, r)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = merkle.node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None


def _consistency_root(old_size: int, size: int, old_root: bytes,
                      path: Sequence[bytes]) -> bytes | None:
    """RFC 9162 §2.1.4.2: the newer root the proof leads to from ``old_root``, or None."""
    if not 0 < old_size <= size:
        return None
    if old_size == size:
        return old_root if not path else None
    nodes = list(path)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the proof
        nodes.insert(0, old_root)
    if not nodes:
        return None
    fn, sn = old_size - 1, size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = nodes[0]
    for c in nodes[1:]:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            fr, sr = merkle.node_hash(c, fr), merkle.node_hash(c, sr)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = merkle.node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sr if sn == 0 and fr == old_root else None


# --- keys ------------------------------------------------------------------------------

def pem(key: PublicKey) -> bytes:
    """The key as a PEM SubjectPublicKeyInfo (RFC 8410), what OpenSSL-based tools read."""
    b64 = base64.b64encode(_ED25519_SPKI + key.raw).decode("ascii")
    return f"-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n".encode()


def cose_key(key: PublicKey) -> bytes:
    """The key as a COSE_Key (RFC 9053 §7.2: OKP, Ed25519, EdDSA), its kid as in headers."""
    return cbor.dumps({1: 1, 2: key.kid.encode("ascii"), 3: EDDSA, -1: 6, -2: key.raw})


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
