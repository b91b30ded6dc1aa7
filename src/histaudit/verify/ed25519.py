"""Ed25519 verification for ``--full``'s hot loop: libsodium first, OpenSSL decides a "no".

``verify --full`` checks one signature per entry, and on a million-entry chain that is
nearly all of its time. libsodium (PyNaCl, maintained by PyCA like ``cryptography``)
verifies the same signatures ≈ 1.5–2× faster here than OpenSSL through
``cryptography`` (``benchmarks/bench_verify.py``, figure 3b).

The two libraries do not accept exactly the same set of signatures, so the verdict is
defined as OpenSSL's, the library every other signature check in histaudit uses:

* libsodium is *stricter*. It refuses what OpenSSL takes: a public key or an ``R`` of
  small order, a public key encoded non-canonically. It adds refusals, never an
  acceptance: both check ``S < L`` and then the same cofactorless equation, comparing
  the encoding of ``[S]B − [k]A`` with the signature's ``R`` bytes.
* So **a libsodium "yes" is final**, and **a libsodium "no" is asked again of OpenSSL**,
  whose answer is the verdict. A genuine chain is all "yes" (one fast check per entry);
  a forged or corrupted entry costs both checks, once.

``tests/unit/verify/test_ed25519.py`` holds this to OpenSSL's verdict on random and
mutated signatures and on the edge cases where Ed25519 implementations are known to
differ (small-order keys and ``R``, non-canonical ``S`` and key encodings, the identity
point).
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError, CryptoError

__all__ = ["Ed25519Verifier"]


class Ed25519Verifier:
    """One public key (32 raw bytes), verifying exactly as OpenSSL does, faster."""

    __slots__ = ("_openssl", "_raw")

    def __init__(self, raw: bytes) -> None:
        self._openssl = Ed25519PublicKey.from_public_bytes(raw)  # ValueError unless 32 bytes
        self._raw = bytes(raw)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message``."""
        if len(signature) == 64:
            try:
                crypto_sign_open(signature + message, self._raw)
                return True
            except (BadSignatureError, CryptoError, ValueError):
                pass  # a refusal OpenSSL may not share: it decides
        try:
            self._openssl.verify(signature, message)
        except InvalidSignature:
            return False
        return True
