"""The ledger's records (docs/format.md is the normative spec): parse, build, commit.

Two signed record types, both canonical JSON (see :mod:`histaudit.ledger.canonical`):

* an **entry** — one event of one workflow instance, chained to the previous entry of the
  same instance by SHA-256 and numbered by a contiguous per-instance ``seq`` and a
  ledger-wide ``leaf`` index;
* a **head** — the newest entry of an instance, re-signed on every append, so that a cut
  tail is detectable.

The signature is Ed25519 over exactly the stored body bytes; the entry hash is SHA-256
over the same bytes. Nothing here re-serializes a stored record to check it.

:class:`StoredEntry` and :class:`StoredHead` are rows as a store keeps them (and a bundle
carries them): the exact signed bytes and the columns that index them. The verifier
reads these values, whoever produced them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from histaudit.errors import FormatError

from .canonical import canonical_bytes
from .sha import Hash

FORMAT_VERSION = 1
GENESIS_PREV = "0" * 64
COMMIT_DOMAIN = b"histaudit.commit.v1\x00"
SALT_BYTES = 32
MAX_ID_CHARS = 1024
_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")

ENTRY_FIELDS = frozenset({"v", "type", "instance", "seq", "leaf", "prev", "kind", "ts", "kid",
                          "data"})
HEAD_FIELDS = frozenset({"v", "type", "instance", "seq", "leaf", "hash", "ts", "kid"})


def now_ts() -> str:
    """The current time as RFC 3339 UTC with microseconds, the only form histaudit writes.

    Every append stamps two records, so the date and time of day are formatted once per
    second and reused (the microseconds are truncated, as ``datetime.now`` truncates).
    """
    global _ts_second
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _ts_second
    if cached[0] != second:
        cached = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        _ts_second = cached
    return f"{cached[1]}.{micro:06d}Z"


_ts_second: tuple[int, str] = (-1, "")
"""(Unix second, its text) of the last :func:`now_ts`: one tuple, replaced whole, so a
thread never sees a second paired with another's text."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- payload commitments ------------------------------------------------------------

def commit(payload: bytes, salt: bytes, *,
           sha256: Callable[[bytes], Hash] = hashlib.sha256) -> str:
    """Salted commitment: hex SHA-256(domain || 32-byte salt || payload bytes).

    The random salt is what keeps a short erased value (``"yes"``, a small number) from
    being recovered by hashing guesses against the commitment left in the chain.
    ``sha256``: the recorder, committing one payload at a time, passes
    :func:`histaudit.ledger.sha.single`.
    """
    if len(salt) != SALT_BYTES:
        raise FormatError(f"salt must be {SALT_BYTES} bytes, got {len(salt)}")
    h = sha256(COMMIT_DOMAIN + salt)
    h.update(payload)
    return h.hexdigest()


def new_salt() -> bytes:
    # os.urandom is what secrets.token_bytes calls, through three Python layers: a salt is
    # made for every committed payload on an activity's path (figure 7)
    return os.urandom(SALT_BYTES)


def commitment_matches(commitment: str, payload: bytes, salt: bytes) -> bool:
    return len(salt) == SALT_BYTES and hmac.compare_digest(commit(payload, salt), commitment)


# --- records --------------------------------------------------------------------------

class StoredEntry(NamedTuple):
    """One stored entry row: the exact signed bytes and the columns that index them.

    A named tuple, not a frozen dataclass: a verifier builds one per row streamed, and a
    store row that already has the right types becomes one without a constructor call
    (``tuple.__new__``; 0.1 µs against a frozen dataclass's 0.5)."""

    leaf: int
    instance: str
    seq: int
    hash: str
    body: bytes
    sig: bytes


@dataclass(frozen=True, slots=True)
class StoredHead:
    """One stored signed head: the exact signed bytes and their signature."""

    instance: str
    seq: int
    body: bytes
    sig: bytes


@dataclass(frozen=True, slots=True)
class InstanceSummary:
    """What a store can say about one instance without parsing anything."""

    instance: str
    entries: int
    last_seq: int
    first_leaf: int
    last_leaf: int


@dataclass(frozen=True, slots=True)
class Entry:
    """A parsed entry. ``body`` is the exact signed bytes it was parsed from."""

    instance: str
    seq: int
    leaf: int
    prev: str
    kind: str
    ts: str
    kid: str
    data: Mapping[str, Any]
    body: bytes

    @property
    def hash(self) -> str:
        return sha256_hex(self.body)


@dataclass(frozen=True, slots=True)
class Head:
    """A parsed signed head: instance ``instance`` ends at entry ``seq`` with ``hash``."""

    instance: str
    seq: int
    leaf: int
    hash: str
    ts: str
    kid: str
    body: bytes


def entry_body(*, instance: str, seq: int, leaf: int, prev: str, kind: str, ts: str,
               kid: str, data: Mapping[str, Any]) -> bytes:
    """Build the canonical bytes of a new entry (the bytes that get signed and stored)."""
    return canonical_bytes(_entry_doc(instance, seq, leaf, prev, kind, ts, kid, data))


def entry_body_parses(*, instance: str, seq: int, leaf: int, prev: str, kind: str, ts: str,
                      kid: str, data: Mapping[str, Any]) -> tuple[bytes, bool]:
    """:func:`entry_body`, and whether :func:`parse_entry` accepts those bytes, decided
    from the values (the checks of :func:`_entry_fields_ok`) without parsing the bytes.

    The canonical bytes hold exactly these values, in the same types (they refuse
    anything JSON cannot hold), so the check on the values is the check on the bytes;
    False is also said for a value of a ``str`` or ``int`` subclass, which does parse.
    """
    doc = _entry_doc(instance, seq, leaf, prev, kind, ts, kid, data)
    return canonical_bytes(doc), _entry_fields_ok(doc)


def _entry_doc(instance: str, seq: int, leaf: int, prev: str, kind: str, ts: str, kid: str,
               data: Mapping[str, Any]) -> dict[str, Any]:
    _check_id(instance, "instance")
    _check_id(kind, "kind")
    return {"v": FORMAT_VERSION, "type": "entry", "instance": _exact(instance), "seq": seq,
            "leaf": leaf, "prev": prev, "kind": _exact(kind), "ts": ts, "kid": kid,
            "data": dict(data)}


def _exact(value: str) -> str:
    """``value`` as an exact str. A str subclass (a Kind member is a StrEnum) has the same
    canonical bytes, but only the reference encoder takes it, at ten times the fast
    path's cost."""
    return value if value.__class__ is str else str.__str__(value)


def head_body(*, instance: str, seq: int, leaf: int, hash: str,  # noqa: A002 - the field's name
              ts: str, kid: str) -> bytes:
    """Build the canonical bytes of a signed head."""
    return canonical_bytes({"v": FORMAT_VERSION, "type": "head", "instance": _exact(instance),
                            "seq": seq, "leaf": leaf, "hash": hash, "ts": ts, "kid": kid})


# C0 and C1 controls (newline, NUL, ESC of ANSI escapes, DEL), bidi embeddings, overrides
# and isolates, line/paragraph separators: an id holding one could forge or hide output
# lines wherever it is printed ("...OK" lines in `verify --all`), so none is accepted.
_HOSTILE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                      "\u202a-\u202e\u2066-\u2069\ufeff]")
SHOWN_ID_CHARS = 80


def shown_id(value: object, limit: int = SHOWN_ID_CHARS) -> str:
    """``value`` for an error message: repr-escaped, and clipped (saying its length)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} chars)"


def check_instance_id(value: str) -> None:
    """Refuse an instance id that is empty, too long, or holds a control or bidi character."""
    _check_id(value, "instance")


def _check_id(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        shown = f" (got {shown_id(value)})" if isinstance(value, str) and value else ""
        raise FormatError(f"{what} must be a non-empty string of at most {MAX_ID_CHARS} "
                          f"chars{shown}")
    bad = _HOSTILE.search(value)
    if bad:
        raise FormatError(f"{what} {shown_id(value)} holds control or bidi character "
                          f"U+{ord(bad.group()):04X} at position {bad.start()}: refused")


def _load(body: bytes, what: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise FormatError(f"{what} body is not JSON") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{what} body is not a JSON object")
    version = doc.get("v")
    if type(version) is not int or version != FORMAT_VERSION:
        raise FormatError(f"{what} has unknown format version {version!r}")
    return doc


def _int(doc: Mapping[str, Any], field: str, what: str, minimum: int) -> int:
    value = doc.get(field)
    if type(value) is not int or value < minimum:
        raise FormatError(f"{what} field '{field}' must be an integer >= {minimum}")
    return value


def _str(doc: Mapping[str, Any], field: str, what: str) -> str:
    value = doc.get(field)
    if not isinstance(value, str) or not value:
        raise FormatError(f"{what} field '{field}' must be a non-empty string")
    return value


def _ts(doc: Mapping[str, Any], what: str) -> str:
    value = _str(doc, "ts", what)
    if not _TS.fullmatch(value):
        raise FormatError(f"{what} field 'ts' must be YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return value


def _kid(doc: Mapping[str, Any], what: str) -> str:
    value = _str(doc, "kid", what)
    if len(value) != 16 or value.strip("0123456789abcdef"):
        raise FormatError(f"{what} field 'kid' must be 16 lowercase hex digits")
    return value


def _hex64(doc: Mapping[str, Any], field: str, what: str) -> str:
    value = _str(doc, field, what)
    if len(value) != 64 or value.strip("0123456789abcdef"):
        raise FormatError(f"{what} field '{field}' must be 64 lowercase hex digits")
    return value


def parse_entry(body: bytes) -> Entry:
    """Parse stored entry bytes; :class:`FormatError` names the first problem found.

    A well-formed entry passes one combined check (:func:`_entry_fields_ok`); only a body
    that fails it goes through the field-by-field sequence, which decides which problem
    is named first. Both accept exactly the same bodies.
    """
    doc = _load(body, "entry")
    if _entry_fields_ok(doc):
        return Entry(instance=doc["instance"], seq=doc["seq"], leaf=doc["leaf"],
                     prev=doc["prev"], kind=doc["kind"], ts=doc["ts"], kid=doc["kid"],
                     data=doc["data"], body=body)
    return _entry_checked(doc, body)


def _entry_fields_ok(doc: dict[str, Any]) -> bool:
    """Every check of :func:`_entry_checked` at once, for a body that passed ``_load``.

    Ten distinct required names present in a ten-name object is ``set(doc) ==
    ENTRY_FIELDS``; orjson yields exact ``str``/``int``/``dict``, so ``type(x) is`` is
    ``isinstance``.
    """
    try:
        instance, seq, leaf, kind, ts = (doc["instance"], doc["seq"], doc["leaf"],
                                         doc["kind"], doc["ts"])
        fields_ok = len(doc) == 10 and doc["type"] == "entry" and type(doc["data"]) is dict
        prev, kid = doc["prev"], doc["kid"]
    except KeyError:
        return False
    return bool(fields_ok and type(instance) is str and instance
                and type(seq) is int and seq >= 1 and type(leaf) is int and leaf >= 0
                and _is_hex(prev, 64) and type(kind) is str and kind
                and type(ts) is str and _TS.fullmatch(ts) and _is_hex(kid, 16))


def _is_hex(value: object, length: int) -> bool:
    return type(value) is str and len(value) == length and not value.strip("0123456789abcdef")


def _entry_checked(doc: dict[str, Any], body: bytes) -> Entry:
    if doc.get("type") != "entry":
        raise FormatError(f"entry has type {doc.get('type')!r}, expected 'entry'")
    if set(doc) != ENTRY_FIELDS:
        extra, missing = set(doc) - ENTRY_FIELDS, ENTRY_FIELDS - set(doc)
        raise FormatError(f"entry fields wrong (missing {sorted(missing)}, extra {sorted(extra)})")
    data = doc["data"]
    if not isinstance(data, dict):
        raise FormatError("entry field 'data' must be an object")
    return Entry(instance=_str(doc, "instance", "entry"), seq=_int(doc, "seq", "entry", 1),
                 leaf=_int(doc, "leaf", "entry", 0), prev=_hex64(doc, "prev", "entry"),
                 kind=_str(doc, "kind", "entry"), ts=_ts(doc, "entry"),
                 kid=_kid(doc, "entry"), data=data, body=body)


def parse_head(body: bytes) -> Head:
    doc = _load(body, "head")
    if doc.get("type") != "head" or set(doc) != HEAD_FIELDS:
        raise FormatError("head has the wrong type or fields")
    return Head(instance=_str(doc, "instance", "head"), seq=_int(doc, "seq", "head", 1),
                leaf=_int(doc, "leaf", "head", 0), hash=_hex64(doc, "hash", "head"),
                ts=_ts(doc, "head"), kid=_kid(doc, "head"), body=body)
