"""``Ed25519Verifier`` gives OpenSSL's verdict, on every kind of input where Ed25519
implementations are known to disagree.

The fast path (libsodium) may only ever *add* refusals, which OpenSSL then overrules;
it must never accept what OpenSSL refuses. Every case below compares the verifier with
``cryptography``'s OpenSSL verify directly. The edge cases are built here with a small
pure-Python Edwards-curve arithmetic (RFC 8032's formulas): the torsion points (from
[L]P of random points), the identity, non-canonical encodings of y (y + p, for each
y < 19 that has one), ``S`` + L, keys with a torsion component added (mixed order), and
signatures made over them with the private scalar so that only the cofactor decides.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from histaudit.verify.ed25519 import Ed25519Verifier

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
Point = tuple[int, int]
IDENTITY: Point = (0, 1)


def add(a: Point, b: Point) -> Point:
    (x1, y1), (x2, y2) = a, b
    t = D * x1 * x2 * y1 * y2 % P
    return ((x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P,
            (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P)


def mul(k: int, pt: Point) -> Point:
    out = IDENTITY
    while k:
        if k & 1:
            out = add(out, pt)
        pt, k = add(pt, pt), k >> 1
    return out


def neg(pt: Point) -> Point:
    return (-pt[0] % P, pt[1])


def encode(pt: Point) -> bytes:
    x, y = pt
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def recover_x(y: int, sign: int) -> int | None:
    xx = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(xx, (P + 3) // 8, P)
    if (x * x - xx) % P:
        x = x * SQRT_M1 % P
    if (x * x - xx) % P or (x == 0 and sign):
        return None
    return x if x & 1 == sign else P - x


def decode(raw: bytes) -> Point | None:
    n = int.from_bytes(raw, "little")
    y, sign = n & ((1 << 255) - 1), n >> 255
    if y >= P:
        return None
    x = recover_x(y, sign)
    return None if x is None else (x, y)


B: Point = (recover_x(4 * pow(5, P - 2, P) % P, 0) or 0, 4 * pow(5, P - 2, P) % P)


def torsion() -> list[Point]:
    """The 8 points of small order: multiples of [L]P for a P whose [L]P has order 8."""
    for seed in range(100):
        pt = decode(hashlib.sha256(seed.to_bytes(2, "big")).digest()[:31] + b"\x00")
        if pt is None:
            continue
        t = mul(L, pt)
        if mul(4, t) != IDENTITY:  # order 8
            return [mul(i, t) for i in range(8)]
    raise AssertionError("no point with a torsion component of order 8 found")


TORSION = torsion()


def h(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def openssl(pub: bytes, sig: bytes, msg: bytes) -> bool:
    try:
        key = Ed25519PublicKey.from_public_bytes(pub)
    except ValueError:
        return False
    try:
        key.verify(sig, msg)
    except InvalidSignature:
        return False
    return True


def sodium(pub: bytes, sig: bytes, msg: bytes) -> bool:
    try:
        crypto_sign_open(sig + msg, pub)
    except BadSignatureError:
        return False
    return True


def ours(pub: bytes, sig: bytes, msg: bytes) -> bool:
    try:
        return Ed25519Verifier(pub).verify(sig, msg)
    except ValueError:
        return False


def same_verdict(pub: bytes, sig: bytes, msg: bytes) -> bool:
    verdict = openssl(pub, sig, msg)
    assert ours(pub, sig, msg) == verdict, (pub.hex(), sig.hex(), msg.hex(), verdict)
    assert not (sodium(pub, sig, msg) and not verdict), "libsodium accepted what OpenSSL refuses"
    return verdict


def sign_with_scalar(a: int, pub: bytes, msg: bytes, nonce: bytes) -> bytes:
    """An RFC 8032 signature by scalar ``a`` claiming public key ``pub`` (which may be
    [a]B plus a torsion point): R = [r]B, S = r + H(R, pub, msg)·a."""
    r = h(nonce, msg) % L
    big_r = encode(mul(r, B))
    s = (r + h(big_r, pub, msg) * a) % L
    return big_r + s.to_bytes(32, "little")


def test_the_arithmetic_is_ed25519() -> None:
    """The helper curve is the real one: our signature of a message is OpenSSL's."""
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())
    digest = hashlib.sha512(seed).digest()
    a = int.from_bytes(digest[:32], "little")
    a = (a & ~7 & ((1 << 254) - 1)) | (1 << 254)
    pub = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    assert encode(mul(a, B)) == pub
    msg = b"histaudit"
    assert sign_with_scalar(a, pub, msg, digest[32:]) == key.sign(msg)
    assert len({encode(t) for t in TORSION}) == 8 and mul(8, TORSION[1]) == IDENTITY


@settings(max_examples=150, deadline=None)
@given(msg=st.binary(max_size=600), flip=st.integers(min_value=-1, max_value=96 * 8 - 1))
def test_genuine_and_bit_flipped_signatures(msg: bytes, flip: int) -> None:
    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    sig = key.sign(msg)
    if flip < 0:
        assert same_verdict(pub, sig, msg)
        return
    blob = bytearray(sig + pub)  # one bit flipped in the signature or in the key
    blob[flip // 8] ^= 1 << (flip % 8)
    assert not same_verdict(bytes(blob[64:]), bytes(blob[:64]), msg)


@pytest.mark.parametrize("key_order", range(8))
@pytest.mark.parametrize("r_order", range(8))
def test_small_order_key_and_r(key_order: int, r_order: int) -> None:
    """A small-order key with S = 0 verifies (cofactorless) exactly when −[k]A = R: OpenSSL
    accepts some of these and libsodium none; the verdict is OpenSSL's."""
    pub, big_r = encode(TORSION[key_order]), encode(TORSION[r_order])
    accepted = 0
    for i in range(16):
        msg = b"m%d" % i
        sig = big_r + bytes(32)
        accepted += same_verdict(pub, sig, msg)
        assert not sodium(pub, sig, msg)
    if key_order == 0 and r_order == 0:
        assert accepted in (0, 16)  # the identity: k never matters


def _non_canonical_encodings() -> list[bytes]:
    """y + p for every y < 19 (the only ones whose y + p fits), both sign bits."""
    out = []
    for y in range(19):
        for sign in (0, 1):
            out.append(((y + P) | (sign << 255)).to_bytes(32, "little"))
    return out


@pytest.mark.parametrize("encoded", _non_canonical_encodings(), ids=lambda b: b[:1].hex())
def test_non_canonical_key_and_r_encodings(encoded: bytes) -> None:
    for i in range(4):
        msg = b"n%d" % i
        same_verdict(encoded, encode(IDENTITY) + bytes(32), msg)
        same_verdict(encode(IDENTITY), encoded + bytes(32), msg)
        same_verdict(encoded, encoded + bytes(32), msg)


def test_non_canonical_s() -> None:
    """S + L (and S + 2L, …, while it fits in 32 bytes) of a genuine signature."""
    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    msg = os.urandom(40)
    sig = key.sign(msg)
    s = int.from_bytes(sig[32:], "little")
    assert same_verdict(pub, sig, msg)
    bigger = s + L
    while bigger < 2**256:
        assert not same_verdict(pub, sig[:32] + bigger.to_bytes(32, "little"), msg)
        bigger += L


@pytest.mark.parametrize("t", range(1, 8))
def test_mixed_order_keys(t: int) -> None:
    """Key [a]B + T (T of small order) and honest signatures by a over it: the
    cofactorless equation holds only when [k]T is the identity. Both libraries must agree
    on each message (libsodium does not reject mixed-order keys)."""
    a = int.from_bytes(os.urandom(32), "little") % L
    pub = encode(add(mul(a, B), TORSION[t]))
    verdicts = [same_verdict(pub, sign_with_scalar(a, pub, m, b"nonce"), m)
                for m in (b"x%d" % i for i in range(24))]
    assert any(not v for v in verdicts)  # [k]T ≠ 0 for most k
    order = next(n for n in (1, 2, 4, 8) if mul(n, TORSION[t]) == IDENTITY)
    assert order > 1


def test_wrong_length_signature_and_key() -> None:
    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    sig = key.sign(b"x")
    verifier = Ed25519Verifier(pub)
    assert verifier.verify(sig, b"x")
    assert not verifier.verify(sig[:63], b"x")
    assert not verifier.verify(sig + b"\x00", b"x")
    with pytest.raises(ValueError, match="32 bytes"):
        Ed25519Verifier(pub[:31])


def test_libsodium_refusals_that_openssl_overrules_exist() -> None:
    """The fallback is not dead code: among small-order keys and R, OpenSSL accepts some
    signatures (its verdict, hence ours) that libsodium refuses."""
    overruled = 0
    for key in TORSION:
        for big_r in TORSION:
            for i in range(16):
                pub, sig, msg = encode(key), encode(big_r) + bytes(32), b"m%d" % i
                if openssl(pub, sig, msg) and not sodium(pub, sig, msg):
                    assert ours(pub, sig, msg)
                    overruled += 1
    assert overruled > 0
