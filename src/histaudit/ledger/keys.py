"""Keys: the only module that touches the signing primitives (Ed25519).

A key pair is an Ed25519 private key (PKCS#8 PEM, file mode 0600) and a public key file
(JSON, see docs/format.md §Keys). The key id is derived from the public key, so it cannot
be chosen to collide with another key's. A trust store is a directory of ``*.pub.json``
files or one JSON file; each key may carry a validity window. :class:`BatchVerifier`
checks many signatures at once, on every core.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

from histaudit.errors import FormatError, KeyMaterialError
from histaudit.inputs import read_limited

ALGORITHM = "ed25519"
PUBLIC_SUFFIX = ".pub.json"
PRIVATE_SUFFIX = ".key"
# A key pair's file name stem: no path separators, no hidden or empty names.
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def key_id(raw_public: bytes) -> str:
    """Key id: the first 8 bytes of SHA-256 over the raw 32-byte public key, in hex."""
    return hashlib.sha256(raw_public).hexdigest()[:16]


_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 UTC timestamp ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``.

    Entries always carry six fraction digits; key windows may omit the fraction.
    """
    if not isinstance(text, str) or not _TS.fullmatch(text):
        raise FormatError(f"timestamp {text!r} is not RFC 3339 UTC "
                          f"(YYYY-MM-DDTHH:MM:SS[.ffffff]Z)")
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00")
    except ValueError:
        raise FormatError(f"timestamp {text!r} is not a valid date and time") from None


@dataclass(frozen=True, kw_only=True)
class PublicKey:
    """A trusted public key with its optional validity window (inclusive bounds)."""

    kid: str
    raw: bytes
    not_before: str | None = None
    not_after: str | None = None
    name: str | None = None

    def verify(self, signature: bytes, message: bytes) -> bool:
        """True when ``signature`` is this key's Ed25519 signature over exactly ``message``."""
        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def valid_at(self, ts: str) -> bool:
        """True when the timestamp ``ts`` lies inside this key's validity window."""
        if self.not_before is None and self.not_after is None:
            return True
        when = parse_time(ts)
        if self.not_before is not None and when < parse_time(self.not_before):
            return False
        return self.not_after is None or when <= parse_time(self.not_after)

    def to_json(self) -> dict[str, str]:
        doc = {"alg": ALGORITHM, "kid": self.kid,
               "public_key": base64.b64encode(self.raw).decode("ascii")}
        if self.name:
            doc["name"] = self.name
        if self.not_before:
            doc["not_before"] = self.not_before
        if self.not_after:
            doc["not_after"] = self.not_after
        return doc

    @classmethod
    def from_json(cls, doc: object, *, source: str) -> PublicKey:
        if not isinstance(doc, Mapping):
            raise KeyMaterialError(f"{source}: a public key must be a JSON object")
        if doc.get("alg") != ALGORITHM:
            raise KeyMaterialError(f"{source}: unsupported key algorithm {doc.get('alg')!r}")
        try:
            raw = base64.b64decode(str(doc["public_key"]), validate=True)
            Ed25519PublicKey.from_public_bytes(raw)
        except (KeyError, ValueError):
            raise KeyMaterialError(f"{source}: public_key is not a base64 Ed25519 key") from None
        kid = key_id(raw)
        if doc.get("kid", kid) != kid:
            raise KeyMaterialError(f"{source}: kid {doc.get('kid')!r} does not match the key "
                                   f"({kid})")
        window: dict[str, datetime] = {}
        for bound in ("not_before", "not_after"):
            if doc.get(bound) is not None:
                try:
                    window[bound] = parse_time(doc[bound])
                except FormatError as exc:
                    raise KeyMaterialError(f"{source}: {bound}: {exc}") from None
        if len(window) == 2 and window["not_before"] > window["not_after"]:
            # Every entry would then fail as key-outside-window: refused, not loaded.
            raise KeyMaterialError(f"{source}: validity window is empty: not_before "
                                   f"{doc['not_before']} is after not_after {doc['not_after']}")
        name = doc.get("name")
        if name is not None and not (isinstance(name, str) and name):
            # It is printed and exported as the key's label: text, or nothing.
            raise KeyMaterialError(f"{source}: name must be a non-empty string")
        return cls(kid=kid, raw=raw, not_before=doc.get("not_before"),
                   not_after=doc.get("not_after"), name=name)


@runtime_checkable
class Signer(Protocol):
    """What signs: one Ed25519 key, wherever it is held. Every signature histaudit makes
    (entries and heads, checkpoints, witness cosignatures, bundles, SCITT statements) goes
    through this, and nothing else of a signer is asked for.

    The implementations, each chosen by the form of the key's name
    (:data:`histaudit.ledger.signers.SIGNERS`): :class:`KeyFileSigner` (a key file, here),
    :class:`~histaudit.ledger.pkcs11.Pkcs11Signer` (a PKCS#11 token),
    :class:`~histaudit.ledger.transit.TransitSigner` (a transit key service). Each
    subclasses this Protocol, so it inherits :attr:`kid` and a one-by-one
    :meth:`sign_all`, and is held to it by one contract test
    (tests/integration/test_signer_contract.py). A signer signs the exact bytes it is
    given, returns 64-byte Ed25519 signatures that verify with :attr:`public`, and never
    shows key material or a secret (its ``repr`` included).
    """

    __slots__ = ()

    public: PublicKey
    """The public key the signatures verify with."""

    @property
    def kid(self) -> str:
        return self.public.kid

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of exactly ``message``."""
        ...

    def sign_all(self, messages: Sequence[bytes]) -> list[bytes]:
        """The signatures of ``messages``, in order: what one batch of appends signs (its
        entries and heads). Here one by one; a signer whose signature is a round trip to
        a service signs them in as few requests as it can."""
        return [self.sign(message) for message in messages]


class KeyFileSigner(Signer):
    """Holds one private key (from a key file, or generated) and signs exact bytes with it.

    Signatures are made by libsodium (PyNaCl), 1.6x faster here than OpenSSL's (21 against
    34 µs), and every append signs twice. Ed25519 signing is deterministic (RFC 8032
    §5.1.6): one key and one message have exactly one signature, so both libraries give
    the same 64 bytes — tests/unit/ledger/test_keys.py holds libsodium to OpenSSL's on
    RFC 8032's vectors and on random keys and messages. The ``cryptography`` key stays
    the key of record: it is what is loaded, exported and asked for the public key, and
    the key pair libsodium derives from its seed must name the same public key.
    """

    __slots__ = ("_private", "_sodium", "public")

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        raw = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = PublicKey(kid=key_id(raw), raw=raw)
        seed = private.private_bytes(serialization.Encoding.Raw,
                                     serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())
        public, self._sodium = crypto_sign_seed_keypair(seed)
        if public != raw:  # never expected: both derive the key pair as RFC 8032 says
            raise KeyMaterialError("libsodium and OpenSSL derive different public keys")

    def sign(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message`` (libsodium's combined form is signature
        then message: its first 64 bytes)."""
        return crypto_sign(message, self._sodium)[:64]

    def __repr__(self) -> str:  # never show key material
        return f"KeyFileSigner(kid={self.kid})"

    @classmethod
    def generate(cls) -> KeyFileSigner:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyFileSigner:
        """Load a private key file, refusing one that group or others can read.

        A ``path`` that holds key material instead (the PEM text, its base64 line, a hex
        seed) is refused without being echoed: no message ever shows a secret.
        """
        if is_key_material(os.fspath(path)):
            raise KeyMaterialError(KEY_TEXT_NOT_PATH)
        p = Path(path)
        try:
            mode = p.stat().st_mode
        except FileNotFoundError:
            raise KeyMaterialError(f"private key {p} does not exist") from None
        except OSError as exc:
            raise KeyMaterialError(f"private key {p}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            raise KeyMaterialError(f"private key {p} is not a regular file")
        if mode & 0o077:
            raise KeyMaterialError(
                f"private key {p} is readable by others (mode {stat.S_IMODE(mode):04o}); "
                f"run: chmod 600 {p}")
        try:
            data = p.read_bytes()
            key = serialization.load_pem_private_key(data, password=None)
        except OSError as exc:
            raise KeyMaterialError(f"private key {p}: {exc.strerror}") from None
        except (ValueError, TypeError):
            raise KeyMaterialError(f"private key {p} is not an unencrypted PEM private "
                                   f"key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyMaterialError(f"private key {p} is not an Ed25519 key")
        return cls(key)

    def private_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption())


KEY_TEXT_NOT_PATH = ("HISTAUDIT_KEY/--key holds key material, not a path: pass the path of "
                     "the key file")
MAX_KEY_PATH_CHARS = 1024
_HEX_SEED = re.compile(r"[0-9A-Fa-f]{64}")
_KEY_TEXT_MARKS = ("\n", "\r", "\x00", "-----", "PRIVATE KEY")


def is_key_material(text: str) -> bool:
    """True when ``text``, given as a key file's path, is no plausible path and may be the
    key itself: it has a newline, NUL or PEM armour, is over 1024 chars, or names no file
    and is (or holds a word that is) a base64 DER key or a 64-digit hex seed. Such text
    is never shown in a message."""
    if len(text) > MAX_KEY_PATH_CHARS or any(mark in text for mark in _KEY_TEXT_MARKS):
        return True
    try:
        if Path(text).exists():
            return False
    except (OSError, ValueError):
        return True
    for word in text.split():
        if _HEX_SEED.fullmatch(word):
            return True
        try:
            der = base64.b64decode(word, validate=True)
        except ValueError:
            continue
        if len(der) >= 32 and der[0] == 0x30:  # a DER SEQUENCE: PKCS#8, SEC1, PKCS#1
            return True
    return False


def secret_from(source: str | None, fallback: str | None, *, secret: str, param: str,
                owner: str, env: str, limit: int = 4096) -> str:
    """A secret a key's name points to (a PKCS#11 PIN, a key service's token): from
    ``param=file:PATH`` (``source``), a file only its owner may read, like a key file;
    else ``fallback``, what the environment variable ``env`` held. KeyMaterialError in one
    line naming ``owner`` and the file, never the secret."""
    if source is None:
        if not fallback:
            raise KeyMaterialError(f"{owner}: no {secret} ({param}=file:PATH, or ${env})")
        return fallback
    if not source.startswith("file:"):
        raise KeyMaterialError(f"{owner}: {param} must be file:PATH")
    name = source.removeprefix("file:")
    if not name.isprintable():  # a NUL (%00 in a URI) is a ValueError of the OS layer
        raise KeyMaterialError(f"{owner}: the {secret} file's path {name[:80]!r} holds a "
                               f"control character")
    path = Path(name)
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise KeyMaterialError(f"{secret} file {path} is not a regular file")
        if mode & 0o077:
            raise KeyMaterialError(f"{secret} file {path} is readable by others (mode "
                                   f"{stat.S_IMODE(mode):04o}); run: chmod 600 {path}")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise KeyMaterialError(f"{secret} file {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise KeyMaterialError(f"{secret} file {path} is over {limit} bytes")
    text = data.decode("utf-8", "replace").rstrip("\r\n")
    if not text:
        raise KeyMaterialError(f"{secret} file {path} is empty")
    return text


def generate_keypair(out_dir: str | os.PathLike[str], *, name: str = "histaudit",
                     not_before: str | None = None,
                     not_after: str | None = None) -> tuple[Path, Path, KeyFileSigner]:
    """Write ``NAME.key`` (mode 0600, created exclusively) and ``NAME.pub.json``."""
    signer = KeyFileSigner.generate()
    priv_path = Path(out_dir) / f"{name}{PRIVATE_SUFFIX}"
    pub_path = _write_key_files(signer, out_dir, name, not_before, not_after,
                                private=(priv_path, signer.private_pem()))
    return priv_path, pub_path, signer


def export_public_key(signer: Signer, out_dir: str | os.PathLike[str], *, name: str,
                      not_before: str | None = None, not_after: str | None = None) -> Path:
    """Write ``NAME.pub.json`` (created exclusively) for ``signer``'s public key: how a
    key that lives outside any file (a PKCS#11 token) gets into a trust store."""
    return _write_key_files(signer, out_dir, name, not_before, not_after, private=None)


def _write_key_files(signer: Signer, out_dir: str | os.PathLike[str], name: str,
                     not_before: str | None, not_after: str | None, *,
                     private: tuple[Path, bytes] | None) -> Path:
    """Check the name and validity window, then write the public key file of ``signer``
    (and ``private``, the private key file and its PEM, mode 0600), all or none."""
    if not _KEY_NAME.fullmatch(name):
        raise KeyMaterialError(f"key name {name!r} must be 1-100 letters, digits, '.', '_' or '-' "
                         f"and start with a letter or digit")
    try:
        window = [parse_time(t) if t is not None else None for t in (not_before, not_after)]
    except FormatError as exc:
        raise KeyMaterialError(f"validity window: {exc}") from None
    if window[0] is not None and window[1] is not None and window[0] > window[1]:
        raise KeyMaterialError(f"validity window is empty: not_before {not_before} is after "
                         f"not_after {not_after}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise KeyMaterialError(f"key directory {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyMaterialError(f"cannot create key directory {out}: {exc.strerror}") from None
    pub_path = out / f"{name}{PUBLIC_SUFFIX}"
    files = [] if private is None else [(private[0], private[1], 0o600)]
    for existing in [*(f[0] for f in files), pub_path]:  # the private key's name first
        if existing.exists():
            raise KeyMaterialError(f"{existing} already exists; refusing to overwrite a key")
    public = PublicKey(kid=signer.kid, raw=signer.public.raw, name=name,
                       not_before=not_before, not_after=not_after)
    files.append((pub_path, orjson.dumps(public.to_json(), option=orjson.OPT_INDENT_2) + b"\n",
                  0o644))
    try:
        _write_new_files(out, files)
    except OSError as exc:
        raise KeyMaterialError(f"cannot write key {'pair ' if private else ''}{name} in "
                               f"{out}: {exc.strerror or exc}; nothing was written") from None
    return pub_path


def _write_new_files(directory: Path, files: list[tuple[Path, bytes, int]]) -> None:
    """Create every file of ``files`` (path, bytes, mode) in ``directory``, or none.

    Each is written to a temporary file beside it first — ``O_EXCL`` with its final mode
    from creation, so a private key is never briefly readable by others — and flushed to
    disk; only when all are complete are they linked into place (a link, unlike a rename,
    never replaces a file someone created meanwhile). On any failure (a full disk, a
    file size limit, a directory turned read-only) whatever this call created is removed,
    so a failed ``keys generate`` leaves nothing that blocks the next one.
    """
    temps: list[Path] = []
    placed: list[Path] = []
    try:
        for final, data, mode in files:
            tmp = directory / f".{final.name}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for (final, _, _), tmp in zip(files, temps, strict=True):
            _link_new(tmp, final)
            placed.append(final)
        _fsync_dir(directory)
    except BaseException:
        for path in placed:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _link_new(tmp: Path, final: Path) -> None:
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise KeyMaterialError(f"{final} already exists; refusing to overwrite a key") from None
    except OSError as exc:
        # A file system without hard links: rename, after checking (not atomically).
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        if final.exists():
            raise KeyMaterialError(f"{final} already exists; refusing to overwrite a "
                                   f"key") from None
        os.rename(tmp, final)


def _fsync_dir(directory: Path) -> None:
    """Make the new names durable too (best effort: not every file system allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class TrustStore:
    """The public keys a verifier trusts, by key id."""

    def __init__(self, keys: Iterable[PublicKey] = ()) -> None:
        self._keys: dict[str, PublicKey] = {}
        for key in keys:
            self._keys[key.kid] = key

    @classmethod
    def _from_sources(cls, sources: Iterable[tuple[str, PublicKey]], store: Path
                      ) -> TrustStore:
        """Keys read from files; KeyMaterialError when one key is listed twice (format.md
        §7.4: with two windows for one key, which one holds would depend on file order)."""
        seen: dict[str, str] = {}
        keys = []
        for where, key in sources:
            if key.kid in seen:
                raise KeyMaterialError(f"trust store {store} lists key {key.kid} twice "
                                       f"({seen[key.kid]}, {where})")
            seen[key.kid] = where
            keys.append(key)
        return cls(keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def __iter__(self) -> Iterator[PublicKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, kid: str) -> PublicKey | None:
        return self._keys.get(kid)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrustStore:
        """Load a directory of ``*.pub.json`` files, or one JSON file (a key or {"keys": [...]})."""
        p = Path(path)
        if p.is_dir():
            files = sorted(p.glob(f"*{PUBLIC_SUFFIX}"))
            if not files:
                raise KeyMaterialError(f"trust store {p} holds no *{PUBLIC_SUFFIX} files")
            return cls._from_sources(((w, k) for f in files for w, k in _read_keys(f)), p)
        if not p.exists():
            raise KeyMaterialError(f"trust store {p} does not exist")
        return cls._from_sources(_read_keys(p), p)


TRUST_FILE_LIMIT = 4 << 20
"""Largest trust-store file read (bytes): tens of thousands of keys."""


def _read_keys(path: Path) -> list[tuple[str, PublicKey]]:
    """The keys of one trust-store file, each with where it was read."""
    data = read_limited(path, "trust store", TRUST_FILE_LIMIT, error=KeyMaterialError)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise KeyMaterialError(f"trust store {path} is not JSON") from None
    if isinstance(doc, Mapping) and "keys" in doc:
        items = doc["keys"]
        if not isinstance(items, list):
            raise KeyMaterialError(f"trust store {path}: 'keys' must be a list")
        return [(f"{path} key {i}", PublicKey.from_json(k, source=f"{path} key {i}"))
                for i, k in enumerate(items)]
    return [(str(path), PublicKey.from_json(doc, source=str(path)))]
