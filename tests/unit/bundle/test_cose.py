"""bundle.cbor and bundle.cose: deterministic CBOR as cbor2 writes it, strict reading,
and receipts whose proofs lead to histaudit's own Merkle roots. CPU < 1 s."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.bundle import cbor, cose
from histaudit.errors import FormatError, SignatureError
from histaudit.ledger import merkle
from histaudit.ledger.keys import KeyFileSigner, TrustStore

SIGNER = KeyFileSigner.generate()
TRUST = TrustStore([SIGNER.public])

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 64) + 1, (1 << 64) - 1),
                     st.binary(max_size=40), st.text(max_size=20))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.integers(-1000, 1000), st.text(max_size=8)), inner,
                    max_size=4)), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(_values)
def test_cbor_is_deterministic_reads_back_and_cbor2_reads_it(value: Any) -> None:
    data = cbor.dumps(value)
    assert cbor.loads(data) == value == cbor2.loads(data)
    # shortest heads, definite lengths: cbor2's canonical form has the same length (its
    # maps sort length-first, RFC 7049; ours by encoded bytes, RFC 8949 §4.2.1)
    assert len(data) == len(cbor2.dumps(value, canonical=True))


@pytest.mark.parametrize(("data", "why"), [
    (b"\x9f\x01\xff", "indefinite"),         # an indefinite-length array
    (b"\x18\x17", "longer than"),            # 23 in two bytes
    (b"\x19\x00\xff", "longer than"),         # 255 in three bytes
    (b"\xa2\x01\x01\x01\x02", "twice"),        # map key 1 twice
    (b"\x01\x00", "after its"),               # trailing byte
    (b"\xf9\x3c\x00", "float"),               # half-precision 1.0
    (b"\x5a\xff\xff\xff\xff", "ends early"),  # a 4 GiB byte string in five bytes
    (b"\x81" * 40 + b"\x00", "deep"),
    (b"\xa1\x40\x00", "not an integer or text"),  # a byte-string map key
])
def test_cbor_refuses_what_gives_one_message_two_encodings(data: bytes, why: str) -> None:
    with pytest.raises(FormatError, match=why):
        cbor.loads(data)


@pytest.mark.parametrize("size", range(1, 18))
def test_receipts_lead_to_the_ledgers_merkle_roots(size: int) -> None:
    leaves = [b"leaf %d" % i for i in range(size)]
    tree = merkle.Tree([merkle.leaf_hash(x) for x in leaves])
    note = b"note"
    for i in (0, size // 2, size - 1):
        msg, tbs = cose.inclusion_receipt(SIGNER.kid, issuer="o", subject="s", size=size,
                                          index=i, path=tree.inclusion_proof(i, size),
                                          root=tree.root(size), note=note)
        data = cose.Sign1(msg.protected_bytes, msg.protected, msg.unprotected, None,
                          SIGNER.sign(tbs)).encode()
        got = cose.read_receipt(data, TRUST, "r", leaf=leaves[i])
        assert (got.size, got.index, got.root, got.note) == (size, i, tree.root(size), note)
        with pytest.raises(SignatureError):
            cose.read_receipt(data, TRUST, "r", leaf=leaves[i] + b"!")
    for old in range(1, size + 1):
        assert cose._consistency_root(old, size, tree.root(old),
                                      tree.consistency_proof(old, size)) == tree.root(size)
        if old < size:  # from another old root the proof leads elsewhere, or nowhere
            assert cose._consistency_root(old, size, b"\x00" * 32,
                                          tree.consistency_proof(old, size)) != tree.root(size)


def test_a_receipt_signs_its_tree_size_and_keeps_its_root_detached() -> None:
    tree = merkle.Tree([merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b"), merkle.leaf_hash(b"c")])
    msg, tbs = cose.inclusion_receipt(SIGNER.kid, issuer="o", subject="s", size=3, index=0,
                                      path=tree.inclusion_proof(0, 3), root=tree.root(3),
                                      note=b"n")
    good = cose.Sign1(msg.protected_bytes, msg.protected, msg.unprotected, None,
                      SIGNER.sign(tbs))
    assert cose.read_receipt(good.encode(), TRUST, "r", leaf=b"a").size == 3
    # the proof's size altered (RFC 9942 signs only the root; leaf 0's path is the same
    # under size 3 and 4, so only the signed size tells)
    proof = cbor.dumps([4, 0, tree.inclusion_proof(0, 3)])
    altered = cose.Sign1(good.protected_bytes, good.protected,
                         {**good.unprotected, cose.VDP: {cose.INCLUSION_PROOFS: [proof]}},
                         None, good.signature)
    with pytest.raises(SignatureError, match="tree size"):
        cose.read_receipt(altered.encode(), TRUST, "r", leaf=b"a")
    attached = cose.Sign1(good.protected_bytes, good.protected, good.unprotected,
                          tree.root(3), good.signature)
    with pytest.raises(FormatError, match="detached"):
        cose.read_receipt(attached.encode(), TRUST, "r", leaf=b"a")
    with pytest.raises(FormatError, match="names no key"):
        cose.read_receipt(good.encode(), TrustStore([KeyFileSigner.generate().public]), "r",
                          leaf=b"a")


def test_statement_keys_are_what_openssl_and_cose_tools_read() -> None:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_public_key,
    )
    from pycose.keys import CoseKey

    key = SIGNER.public
    assert load_pem_public_key(cose.pem(key)).public_bytes(Encoding.Raw,
                                                           PublicFormat.Raw) == key.raw
    cose_key = CoseKey.decode(cose.cose_key(key))
    assert cose_key.kid == key.kid.encode() and cose_key.x == key.raw
