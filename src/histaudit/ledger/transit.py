"""Signing with an Ed25519 key held by a remote key service: the transit secrets engine of
HashiCorp Vault or OpenBao (they speak the same API), the KMS-style signer.

``--key`` / ``$HISTAUDIT_KEY`` names such a key by a URL::

    transit+https://vault.internal:8200/transit/histaudit-ledger?token-source=file:/run/secrets/vault-token

* the path is ``/<mount>/<key name>`` (the transit engine's mount, ``transit`` by default
  in Vault, and the key's name); the key must be of type ``ed25519``;
* ``token-source=file:PATH`` names a file holding the service's token, readable by its
  owner only (like a key file), else ``$VAULT_TOKEN`` (the variable Vault's and OpenBao's
  own clients read). A token in the URL itself is refused: a key URL is shown in messages;
* ``ca-file=PATH`` trusts a private CA for ``https``; ``transit+http://`` (no TLS) is
  allowed to a loopback address only, so a token never crosses a network in clear;
* ``timeout=SECONDS`` bounds each exchange with the service as a whole — connecting, the
  request, every byte of the answer — (default 10): a service that trickles its answer a
  byte at a time is given up at the deadline, not kept waiting on per read;
* ``key-version=N`` pins the key version; by default the latest version, read when the
  signer is opened, is pinned for the process. A rotation inside the service then changes
  nothing until the app restarts, and every record of one process is signed by one public
  key — the one exported into the trust store (``histaudit keys export-public``), as with
  every signer: a new version is a new histaudit key, added with its validity window.

What the service says (an error, a key's type) is quoted in messages through
:func:`histaudit.services.service_words`: the token — whole or any 8 characters of it —
and anything shaped like a token never reaches a message, even when the service echoes
it ("permission denied for token hvs.…").

The public key is the one the service reports for that version (``GET
/v1/<mount>/keys/<name>``); signatures come from ``POST /v1/<mount>/sign/<name>``
(pure Ed25519 over the exact bytes, base64 ``input``), the messages of one batch of
appends in one request (``batch_input``). **Every signature is verified
with the pinned public key before it is returned**: an answer made with another key or
version, or altered on the way, is refused and never reaches the ledger.

Other services plug in the same way (a module with a class implementing
:class:`~histaudit.ledger.keys.Signer`, its key URL's scheme one entry of
:data:`histaudit.ledger.signers.SIGNERS`, one more case of the signer contract test): GCP
Cloud KMS with a key version of algorithm ``EC_SIGN_ED25519`` (``asymmetricSign`` with
``data``, pure Ed25519, 64-byte signatures; ``getPublicKey`` gives a PEM
SubjectPublicKeyInfo), or AWS KMS where it offers Ed25519 keys (key spec
``ECC_NIST_EDWARDS25519``, pure EdDSA over the raw message). A service that offers only
ECDSA keys cannot sign histaudit's records.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import os
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from histaudit.config import VAULT_TOKEN_ENV, Settings
from histaudit.errors import KeyMaterialError
from histaudit.services import Connection, ExchangeError, service_words
from histaudit.urls import check_url_text, shown_word

from .keys import PublicKey, Signer, key_id, secret_from

__all__ = ["TOKEN_ENV", "TransitSigner"]

TOKEN_ENV = VAULT_TOKEN_ENV
_MAX_TOKEN_FILE = 4096
_MAX_ANSWER = 1 << 20
_BATCH = 256
"""Messages signed per request: a batch's answer stays far below :data:`_MAX_ANSWER`
(about 150 bytes a signature)."""
_TIMEOUT_S = 10.0
"""Seconds one exchange with the service may take in all, by default (``timeout=``)."""
_MAX_VERSION_DIGITS = 9


def _seconds(text: str | None) -> float:
    """``timeout=``'s seconds (default :data:`_TIMEOUT_S`); KeyMaterialError unless a
    finite number from 0.1 to 600."""
    if text is None:
        return _TIMEOUT_S
    try:
        value = float(text) if len(text) <= 20 else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0.1 <= value <= 600):
        raise KeyMaterialError(f"transit key URL: timeout {shown_word(text, 20)} is not a "
                               f"number of seconds from 0.1 to 600")
    return value


def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The TLS context trusting ``ca-file`` (else the system's CAs); KeyMaterialError
    when that file cannot be read as PEM certificates."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) \
            or type(exc).__name__
        raise KeyMaterialError(f"transit key URL: ca-file {str(ca_file)[:80]!r} cannot be "
                               f"read as PEM certificates ({why})") from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class TransitSigner(Signer):
    """An Ed25519 key in a Vault/OpenBao transit engine, named by a ``transit+https://``
    URL (module docstring). The private key never leaves the service."""

    __slots__ = ("_conn", "_context", "_host", "_lock", "_mount", "_name", "_pid", "_port",
                 "_timeout", "_tls", "_token", "_verifier", "_version", "public", "shown")

    @classmethod
    def from_name(cls, name: str, settings: Settings) -> TransitSigner:
        """The key ``name`` (a ``transit+https://`` URL) names; the token from
        ``settings`` where the URL names no token file
        (:data:`~histaudit.ledger.signers.SIGNERS`)."""
        return cls(name, token=settings.vault_token)

    def __init__(self, url: str, *, token: str | None = None) -> None:
        """``token``: what ``$VAULT_TOKEN`` holds (given by the caller,
        histaudit.config), used when the URL names no ``token-source`` file."""
        check_url_text(url, "transit key URL")
        parts = urlsplit(url)
        self._tls = parts.scheme == "transit+https"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if any(name in query for name in ("token", "token-value")):
            raise KeyMaterialError("transit key URL: a token in the URL is refused (a URL "
                                   "is shown in messages); use token-source=file:PATH or $"
                                   + TOKEN_ENV)
        unknown = sorted(set(query) - {"token-source", "ca-file", "key-version", "timeout"})
        if unknown:
            raise KeyMaterialError(f"transit key URL: unsupported parameter(s) "
                                   f"{', '.join(shown_word(u, 40) for u in unknown[:4])}")
        if parts.username or parts.password:
            raise KeyMaterialError("transit key URL: credentials in the URL are refused")
        segments = [s for s in parts.path.split("/") if s]
        if len(segments) != 2 or not parts.hostname:
            raise KeyMaterialError("transit key URL must be transit+https://HOST[:PORT]/"
                                   "MOUNT/KEY")
        self._host, self._mount, self._name = parts.hostname, segments[0], segments[1]
        try:
            self._port = parts.port or (443 if self._tls else 80)
        except ValueError:
            raise KeyMaterialError("transit key URL: the port is not a number") from None
        if not self._tls and not _loopback(self._host):
            raise KeyMaterialError("transit key URL: transit+http:// (no TLS) is allowed to "
                                   "a loopback address only; use transit+https://")
        self.shown = f"{parts.scheme}://{self._host}:{self._port}/{self._mount}/{self._name}"
        self._context = _tls_context(query.get("ca-file")) if self._tls else None
        self._token = secret_from(query.get("token-source"), token, secret="token",
                                  param="token-source", owner="transit key", env=TOKEN_ENV,
                                  limit=_MAX_TOKEN_FILE).strip()
        self._timeout = _seconds(query.get("timeout"))
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._pid = os.getpid()
        version = query.get("key-version")
        # ASCII digits only, and few: "²".isdigit() is true and int() refuses it, as it
        # refuses 4,301 digits and more (a ValueError, not an error of histaudit's)
        if version is not None and not (
                version.isascii() and version.isdigit()
                and len(version) <= _MAX_VERSION_DIGITS and int(version) >= 1):
            raise KeyMaterialError(f"transit key URL: key-version {shown_word(version, 20)} "
                                   f"is not a version number (1 to "
                                   f"{'9' * _MAX_VERSION_DIGITS})")
        raw, self._version = self._public_key(int(version) if version else None)
        self._verifier = Ed25519PublicKey.from_public_bytes(raw)
        self.public = PublicKey(kid=key_id(raw), raw=raw)

    # --- the service's API ------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request to the service on this process's kept-alive connection, within
        ``timeout`` in all; its JSON ``data``. KeyMaterialError naming the service and
        what failed, never the token."""
        where = f"transit key {self.shown}"
        payload = orjson.dumps(body) if body is not None else None
        headers = {"X-Vault-Token": self._token, "Content-Type": "application/json"}
        if self._conn is None or self._pid != os.getpid():
            self._conn = Connection("https" if self._tls else "http", self._host, self._port,
                                    context=self._context)
            self._pid = os.getpid()
        try:
            answer = self._conn.request(method, f"/v1/{quote(self._mount)}/{path}",
                                        body=payload, headers=headers,
                                        deadline=time.monotonic() + self._timeout,
                                        limit=_MAX_ANSWER)
        except ExchangeError as exc:
            if exc.timed_out:
                raise KeyMaterialError(f"{where}: no complete answer within "
                                       f"{self._timeout:g}s (timeout=)") from None
            raise KeyMaterialError(f"{where}: cannot reach the service "
                                   f"({self._said(str(exc))})") from None
        if answer.status == 403:
            raise KeyMaterialError(f"{where}: the service refused the token (HTTP 403)")
        if answer.status == 404:
            raise KeyMaterialError(f"{where}: no such key or mount (HTTP 404)")
        if answer.status != 200 or len(answer.body) > _MAX_ANSWER:
            raise KeyMaterialError(f"{where}: the service answered HTTP {answer.status}")
        try:
            found = orjson.loads(answer.body)["data"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise KeyMaterialError(f"{where}: the service's answer is not transit's") \
                from None
        return found

    def _said(self, text: object, limit: int = 200) -> str:
        """What the service said, fit for a message: one line, without the token."""
        return service_words(str(text), [self._token], limit=limit)

    def _public_key(self, version: int | None) -> tuple[bytes, int]:
        """The raw public key of ``version`` (default: the latest) and that version."""
        info = self._call("GET", f"keys/{quote(self._name)}")
        where = f"transit key {self.shown}"
        if not isinstance(info, dict) or info.get("type") != "ed25519":
            kind = self._said(info.get("type"), 40) if isinstance(info, dict) else "?"
            raise KeyMaterialError(f"{where} is not an ed25519 key (type {kind})")
        keys = info.get("keys")
        chosen = version if version is not None else info.get("latest_version")
        entry = keys.get(str(chosen)) if isinstance(keys, dict) else None
        public = entry.get("public_key") if isinstance(entry, dict) else None
        if not isinstance(chosen, int) or not isinstance(public, str):
            raise KeyMaterialError(f"{where} has no version {self._said(chosen, 40)}")
        try:
            raw = base64.b64decode(public, validate=True)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise KeyMaterialError(f"{where}: version {chosen}'s public key is not 32 bytes")
        return raw, chosen

    # --- Signer -------------------------------------------------------------------------

    def sign(self, message: bytes) -> bytes:
        """The service's Ed25519 signature of ``message`` (see :meth:`sign_all`)."""
        return self.sign_all([message])[0]

    def sign_all(self, messages: Sequence[bytes]) -> list[bytes]:
        """The service's Ed25519 signatures of ``messages`` with the pinned key version,
        in order, each verified here before it is returned: one request (``batch_input``)
        per :data:`_BATCH` messages, so a batch of appends costs one round trip."""
        out: list[bytes] = []
        for at in range(0, len(messages), _BATCH):
            chunk = messages[at:at + _BATCH]
            with self._lock:
                answer = self._call("POST", f"sign/{quote(self._name)}", {
                    "key_version": self._version,
                    "batch_input": [{"input": base64.b64encode(m).decode()} for m in chunk]})
            results = answer.get("batch_results") if isinstance(answer, dict) else None
            if not isinstance(results, list) or len(results) != len(chunk):
                raise KeyMaterialError(f"transit key {self.shown}: the service's answer is "
                                       f"not transit's")
            out += (self._checked(result, message) for result, message in zip(results, chunk))
        return out

    def _checked(self, result: object, message: bytes) -> bytes:
        """One batch result's signature, verified with the pinned public key."""
        if isinstance(result, dict) and isinstance(result.get("error"), str):
            # the service's own words, on one line, without the token even if it echoes it
            said = self._said(result["error"])
            raise KeyMaterialError(f"transit key {self.shown}: the service could not sign: "
                                   f"{said}")
        signature = result.get("signature") if isinstance(result, dict) else None
        prefix = f"vault:v{self._version}:"
        if not isinstance(signature, str) or not signature.startswith(prefix):
            raise KeyMaterialError(f"transit key {self.shown}: the service signed with "
                                   f"another key version")
        try:
            raw = base64.b64decode(signature.removeprefix(prefix), validate=True)
            self._verifier.verify(raw, message)
        except (ValueError, InvalidSignature):
            raise KeyMaterialError(f"transit key {self.shown}: the service's signature does "
                                   f"not verify with the key's public key") from None
        return raw

    def __repr__(self) -> str:  # never the token
        return f"TransitSigner({self.shown}, version={self._version}, kid={self.kid})"
