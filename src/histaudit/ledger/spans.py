"""What a span says of its signed entry: the attributes, and the bundle's list of spans.

An audited app's spans (:mod:`histaudit.interceptor.tracing`) each carry
:data:`PROOF_ATTRIBUTES`, naming the entry that records the span's call: the ledger's
checkpoint origin, the instance, the entry's seq, its leaf index, its RFC 9162 leaf hash
(``SHA-256(0x00 || body)``, the value its inclusion proof starts from) and its kind.
``histaudit prove`` reads them back (:mod:`histaudit.bundle.prove`), and a proof bundle
lists the spans it proves in ``spans.json`` (:func:`spans_file`, docs/bundle.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from histaudit.errors import FormatError

__all__ = ["INSTANCE", "KIND", "LEAF", "LEAF_HASH", "ORIGIN", "PROOF_ATTRIBUTES", "SEQ",
           "SPANS_FILE", "ProvenSpan", "from_attributes", "read_spans_file", "spans_file"]

ORIGIN = "histaudit.ledger.origin"
INSTANCE = "histaudit.instance"
SEQ = "histaudit.entry.seq"
LEAF = "histaudit.entry.leaf"
LEAF_HASH = "histaudit.entry.leaf_hash"
KIND = "histaudit.entry.kind"
PROOF_ATTRIBUTES = (ORIGIN, INSTANCE, SEQ, LEAF, LEAF_HASH, KIND)
"""The attributes that name a span's signed entry."""

SPANS_FILE = "spans.json"
SPANS_FORMAT = "histaudit-spans"
SPANS_VERSION = 1
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class ProvenSpan:
    """A span and the signed entry it names."""

    trace_id: str
    span_id: str
    name: str
    origin: str
    instance: str
    seq: int
    leaf: int
    leaf_hash: str
    kind: str


def from_attributes(trace_id: str, span_id: str, name: str,
                    attributes: Mapping[str, Any]) -> ProvenSpan:
    """The entry a span's attributes name; FormatError when they are malformed."""
    a = attributes
    origin, instance, kind = a.get(ORIGIN), a.get(INSTANCE), a.get(KIND)
    seq, leaf, leaf_hash = a.get(SEQ), a.get(LEAF), a.get(LEAF_HASH)
    if not (isinstance(origin, str) and isinstance(instance, str) and isinstance(kind, str)
            and type(seq) is int and type(leaf) is int and seq >= 1 and leaf >= 0
            and isinstance(leaf_hash, str) and _HASH.fullmatch(leaf_hash)):
        raise FormatError(f"span {span_id} ({name}) has malformed histaudit.* attributes")
    return ProvenSpan(trace_id, span_id, name, origin, instance, seq, leaf, leaf_hash, kind)


def spans_file(spans: Sequence[ProvenSpan]) -> bytes:
    """A bundle's ``spans.json``: the spans it proves."""
    return orjson.dumps({"format": SPANS_FORMAT, "version": SPANS_VERSION,
                         "spans": [asdict(s) for s in spans]}, option=orjson.OPT_INDENT_2)


def read_spans_file(data: bytes) -> list[ProvenSpan]:
    """The spans ``spans.json`` lists; FormatError naming what is wrong with it."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FormatError(f"{SPANS_FILE} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != SPANS_FORMAT:
        raise FormatError(f"{SPANS_FILE} is not a {SPANS_FORMAT} document")
    if doc.get("version") != SPANS_VERSION:
        raise FormatError(f"{SPANS_FILE} has unknown version {doc.get('version')!r}")
    listed = doc.get("spans")
    if not isinstance(listed, list) or not all(isinstance(i, dict) for i in listed):
        raise FormatError(f"{SPANS_FILE} has no list of span objects")
    return [from_attributes(str(i.get("trace_id", "")), str(i.get("span_id", "")),
                            str(i.get("name", "")),
                            {ORIGIN: i.get("origin"), INSTANCE: i.get("instance"),
                             SEQ: i.get("seq"), LEAF: i.get("leaf"),
                             LEAF_HASH: i.get("leaf_hash"), KIND: i.get("kind")})
            for i in listed]
