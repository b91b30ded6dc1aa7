"""Signing with an Ed25519 key that never leaves a PKCS#11 token: an HSM, a cloud HSM's
PKCS#11 library, or SoftHSM2 (what the tests use).

``--key`` / ``$HISTAUDIT_KEY`` names such a key by an RFC 7512 PKCS#11 URI instead of a
file path::

    pkcs11:token=histaudit;object=ledger?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/secrets/hsm-pin

* ``token`` (the token label) and ``object`` (the label of the key pair) are required;
* ``module-path`` names the PKCS#11 library, else ``$HISTAUDIT_PKCS11_MODULE``;
* the user PIN comes from ``pin-source=file:PATH`` (a file only its owner may read, like a
  key file), else ``$HISTAUDIT_PKCS11_PIN``. ``pin-value`` is refused: a key URI is shown in
  messages and logs, a PIN must never be.

:class:`Pkcs11Signer` implements :class:`~histaudit.ledger.keys.Signer`: the ledger, the
interceptor and every command take it where they take a key file. It signs with
``CKM_EDDSA`` (pure Ed25519, RFC 8032, the signature a key file's key makes), and takes the
public key, hence the key id, from the token's public key object of the same label
(``CKA_EC_POINT``); ``histaudit keys export-public`` writes it into a trust store. A token
session is not shared across threads or a fork: each process opens its own, and one lock
serializes the signatures. The binding is python-pkcs11 (``pip install 'histaudit[hsm]'``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any
from urllib.parse import unquote

from histaudit.config import PKCS11_MODULE_ENV, PKCS11_PIN_ENV, Settings
from histaudit.errors import KeyMaterialError

from .keys import PublicKey, Signer, key_id, secret_from

__all__ = ["MODULE_ENV", "PIN_ENV", "Pkcs11Signer"]

MODULE_ENV = PKCS11_MODULE_ENV
PIN_ENV = PKCS11_PIN_ENV
_ED25519_OID = "1.3.101.112"
_MAX_PIN_FILE = 1024


def _close(session: Any) -> None:
    """Close a session that may already be gone (its token removed)."""
    import pkcs11  # there is a session: python-pkcs11 is there

    with contextlib.suppress(pkcs11.PKCS11Error):
        session.close()


def _attributes(part: str, sep: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in filter(None, part.split(sep)):
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise KeyMaterialError(f"PKCS#11 URI attribute {name[:40]!r} has no value")
        if name in found:
            raise KeyMaterialError(f"PKCS#11 URI names {name[:40]!r} twice")
        found[name] = unquote(value)
    return found


class Pkcs11Signer(Signer):
    """An Ed25519 key pair held in a PKCS#11 token, named by a PKCS#11 URI (module
    docstring). Signs exact bytes inside the token; the private key is never read."""

    __slots__ = ("_key", "_label", "_lock", "_module", "_pid", "_pin", "_session", "_token",
                 "public")

    @classmethod
    def from_name(cls, name: str, settings: Settings) -> Pkcs11Signer:
        """The key ``name`` (a ``pkcs11:`` URI) names; PIN and module from ``settings``
        where the URI leaves them out (:data:`~histaudit.ledger.signers.SIGNERS`)."""
        return cls(name, pin=settings.pkcs11_pin, module=settings.pkcs11_module)

    def __init__(self, uri: str, *, pin: str | None = None, module: str | None = None
                 ) -> None:
        """``pin`` and ``module``: what ``$HISTAUDIT_PKCS11_PIN`` and
        ``$HISTAUDIT_PKCS11_MODULE`` hold (given by the caller, histaudit.config), used
        when the URI names no ``pin-source`` or ``module-path``."""
        path, _, query_text = uri.removeprefix("pkcs11:").partition("?")
        where, query = _attributes(path, ";"), _attributes(query_text, "&")
        if "pin-value" in query:
            raise KeyMaterialError("PKCS#11 URI: pin-value is refused (a URI is shown in "
                                   "messages); use pin-source=file:PATH or $" + PIN_ENV)
        unknown = sorted(set(where) - {"token", "object", "type"}) + sorted(
            set(query) - {"module-path", "pin-source"})
        if unknown:
            raise KeyMaterialError(f"PKCS#11 URI: unsupported attribute(s) {unknown[:4]}")
        if not where.get("token") or not where.get("object"):
            raise KeyMaterialError("PKCS#11 URI must name token=LABEL and object=LABEL")
        self._token, self._label = where["token"], where["object"]
        self._module = query.get("module-path") or module or ""
        if not self._module:
            raise KeyMaterialError(f"PKCS#11 key: no module (module-path= in the URI, or "
                                   f"${MODULE_ENV})")
        if not self._module.isprintable():  # %00 in the URI: no library has such a path
            raise KeyMaterialError(f"PKCS#11 module path {self._module[:80]!r} holds a "
                                   f"control character")
        self._pin = secret_from(query.get("pin-source"), pin, secret="PIN",
                                param="pin-source", owner="PKCS#11 key", env=PIN_ENV,
                                limit=_MAX_PIN_FILE)
        self._lock = threading.Lock()
        self._pid = -1
        self._session: Any = None
        self._key: Any = None
        raw = self._open()
        self.public = PublicKey(kid=key_id(raw), raw=raw)

    def _open(self) -> bytes:
        """Open this process's session, find the key pair; the raw public key."""
        try:
            import pkcs11
            from pkcs11 import Attribute, KeyType, ObjectClass
        except ImportError:
            raise KeyMaterialError("PKCS#11 keys need python-pkcs11: pip install "
                                   "'histaudit[hsm]'") from None
        where = f"PKCS#11 token {self._token!r}"
        try:
            lib = pkcs11.lib(self._module)
        except (OSError, RuntimeError, pkcs11.PKCS11Error) as exc:
            raise KeyMaterialError(f"PKCS#11 module {self._module}: cannot load it "
                                   f"({type(exc).__name__})") from None
        try:
            token = lib.get_token(token_label=self._token)
            try:
                session = token.open(user_pin=self._pin)
            except pkcs11.UserAlreadyLoggedIn:  # a fork: the module's login outlived it
                session = token.open()
        except pkcs11.NoSuchToken:
            raise KeyMaterialError(f"{where} is not in module {self._module}") from None
        except pkcs11.PinIncorrect:
            raise KeyMaterialError(f"{where}: the PIN is wrong") from None
        except pkcs11.PKCS11Error as exc:
            raise KeyMaterialError(f"{where}: cannot log in ({type(exc).__name__})") from None
        try:
            key = session.get_key(object_class=ObjectClass.PRIVATE_KEY,
                                  key_type=KeyType.EC_EDWARDS, label=self._label)
            public = session.get_key(object_class=ObjectClass.PUBLIC_KEY,
                                     key_type=KeyType.EC_EDWARDS, label=self._label)
            point = bytes(public[Attribute.EC_POINT])
        except pkcs11.NoSuchKey:
            _close(session)
            raise KeyMaterialError(f"{where} holds no Ed25519 key pair labelled "
                                   f"{self._label!r}") from None
        except pkcs11.MultipleObjectsReturned:
            _close(session)
            raise KeyMaterialError(f"{where} holds more than one Ed25519 key labelled "
                                   f"{self._label!r}") from None
        except pkcs11.PKCS11Error as exc:  # removed meanwhile, a device error
            _close(session)
            raise KeyMaterialError(f"{where}: cannot read key {self._label!r} "
                                   f"({type(exc).__name__})") from None
        # CKA_EC_POINT of an Edwards key: the 32 bytes, as a DER OCTET STRING (04 20 …)
        raw = point[2:] if len(point) == 34 and point[:2] == b"\x04\x20" else point
        if len(raw) != 32:
            _close(session)
            raise KeyMaterialError(f"{where}: key {self._label!r} is not an Ed25519 key")
        self._session, self._key, self._pid = session, key, os.getpid()
        return raw

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message``, made in the token (CKM_EDDSA).

        A token can go while the process signs through it (pulled out, its session
        closed by the device): the signature fails with a PKCS#11 error
        (``ObjectHandleInvalid``, ``SessionHandleInvalid``, ``DeviceRemoved``…). The
        session is then opened once more — the same key, or KeyMaterialError — and a
        second failure is KeyMaterialError too, one line at the CLI (issue #50): never
        a traceback, and the append or erasure under way is rolled back whole."""
        import pkcs11

        with self._lock:
            # after a fork the parent's session is not ours: open this process's own
            if self._pid != os.getpid():
                self._reopen()
            try:
                return self._sign(message)
            except pkcs11.PKCS11Error as exc:
                failed = type(exc).__name__
            where = f"PKCS#11 token {self._token!r}"
            try:
                self._reopen()
            except KeyMaterialError as exc:
                raise KeyMaterialError(f"{where}: signing failed ({failed}) and the token "
                                       f"cannot be opened again; was it removed? ({exc})") \
                    from None
            try:
                return self._sign(message)
            except pkcs11.PKCS11Error as exc:
                raise KeyMaterialError(f"{where}: signing failed ({type(exc).__name__}, "
                                       f"after {failed}); the token was removed or refuses "
                                       f"key {self._label!r}") from None

    def _sign(self, message: bytes) -> bytes:
        from pkcs11 import Mechanism

        return bytes(self._key.sign(message, mechanism=Mechanism.EDDSA))

    def _reopen(self) -> None:
        """A new session (after a fork, or a failed signature), the same key pair or
        KeyMaterialError."""
        old, self._session = self._session, None
        if old is not None and self._pid == os.getpid():
            _close(old)
        if self._open() != self.public.raw:
            raise KeyMaterialError("PKCS#11 key changed under the process")

    def __repr__(self) -> str:  # never the PIN
        return f"Pkcs11Signer(token={self._token!r}, object={self._label!r}, kid={self.kid})"
