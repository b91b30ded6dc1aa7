"""SHA-256 for one input at a time on an activity's path: CPython's own C code, not OpenSSL.

Both give the same digests; they differ in what one call costs when the CPU's caches are
cold, which they are for every hash the interceptor makes: each comes between the SDK's,
the agent's and the engine client's own work. ``hashlib.sha256`` goes through OpenSSL 3's
EVP layer (a method fetch, a context, provider dispatch), which touches so much memory
that one hash of an entry's 700 bytes costs 50 µs cold against 1.2 µs warm, and one
``hmac.digest`` 80 µs against 2.3 µs. CPython's builtin SHA-256 (the module ``hashlib``
itself falls back to without OpenSSL) costs 15 µs cold, 3 µs warm; an HMAC made from two
of its states saved per key, 16 µs cold (benchmarks/results/HISTORY.md, s25: figure 7,
where an audited turn makes ≈ 110 such hashes).

So :func:`single` hashes what the interceptor hashes once per event (an entry's body, a
payload's commitment and digest, a replayed result), and ``hashlib`` stays where many
inputs are hashed in a loop and its warm speed wins (the verifier, exports). A Python
built without the builtin module (some FIPS builds) gets ``hashlib.sha256`` here too.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from typing import Protocol

__all__ = ["Hash", "Hmac", "single", "single_hex"]


class Hash(Protocol):
    """What both give: a hash object (``hashlib``'s interface)."""

    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...
    def hexdigest(self) -> str: ...
    def copy(self) -> Hash: ...


def _builtin() -> Callable[[bytes], Hash]:
    for module in ("_sha2", "_sha256"):  # CPython >= 3.12, 3.11
        try:
            found: Callable[[bytes], Hash] = importlib.import_module(module).sha256
        except (ImportError, AttributeError):
            continue
        return found
    return hashlib.sha256


single: Callable[[bytes], Hash] = _builtin()
"""The SHA-256 hash object of its argument, from CPython's builtin module when it has
one."""


def single_hex(data: bytes) -> str:
    return single(data).hexdigest()


class Hmac:
    """HMAC-SHA256 (RFC 2104) under one key, its padded key blocks hashed once.

    Equal, byte for byte, to ``hmac.digest(key, message, "sha256")`` (the unit tests hold
    it to that on random keys and messages); per message it copies the two saved states
    and hashes the message and the inner digest, with :func:`single`'s hash.
    """

    __slots__ = ("_inner", "_outer")

    _BLOCK = 64

    def __init__(self, key: bytes) -> None:
        if len(key) > self._BLOCK:
            key = single(key).digest()
        key = key.ljust(self._BLOCK, b"\0")
        self._inner = single(bytes(b ^ 0x36 for b in key))
        self._outer = single(bytes(b ^ 0x5C for b in key))

    def hexdigest(self, message: bytes) -> str:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def __repr__(self) -> str:  # never show key material
        return "Hmac(...)"
