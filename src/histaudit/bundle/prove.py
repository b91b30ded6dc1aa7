"""From a span to a proof: the signed entry an OpenTelemetry span names, in a bundle.

The interceptor's spans (:mod:`histaudit.interceptor.tracing`) each name the entry that
records them: the ledger's origin, the instance, the entry's seq, its leaf index and its
RFC 9162 leaf hash. ``histaudit prove`` reads spans as OTLP JSON — what a trace backend
answers (Jaeger's ``GET /api/v3/traces/<trace id>``) or a file a SIEM kept — and checks
each named entry against the ledger: present at that seq and leaf, with that leaf hash.
When every span checks, the instances are exported whole (:func:`~histaudit.bundle.export.
export`: each entry with its inclusion proof under a signed, possibly witnessed
checkpoint) with :data:`SPANS_FILE` listing the spans, signed in the manifest like every
file. ``verify --bundle`` then checks each listed span against the bundle's proven
entries, offline, with only the public key.

A span that names an entry the ledger does not hold, or holds with another leaf hash, is
``span-unproven``: the ledger is not what it was when the span was emitted (or the span
was not emitted by it). No bundle is written then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from histaudit.errors import FormatError, InputError
from histaudit.ledger import spans as sp
from histaudit.ledger.checkpoint import origin_of
from histaudit.ledger.keys import Signer, TrustStore
from histaudit.ledger.spans import ProvenSpan
from histaudit.ledger.store import Ledger
from histaudit.services import ExchangeError, fetch
from histaudit.urls import check_url_text, shown_url, shown_word
from histaudit.verify.findings import Finding
from histaudit.verify.spans import check_spans
from histaudit.witness.policy import WitnessPolicy

from .export import ExportResult, export

__all__ = ["ProveResult", "Span", "fetch_trace", "prove", "proven_spans", "read_spans"]

TRACE_MAX_BYTES = 64 * 1024 * 1024
FETCH_TIMEOUT = 30.0
"""Seconds ``prove --jaeger`` waits for a whole trace by default (``--timeout``)."""
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Span:
    """One span as a trace backend gave it: ids (lowercase hex), name, attributes."""

    trace_id: str
    span_id: str
    name: str
    attributes: Mapping[str, Any]


# --- reading spans ----------------------------------------------------------------------

def read_spans(data: bytes, *, source: str) -> list[Span]:
    """The spans of an OTLP JSON document (``{"resourceSpans": [...]}``, or Jaeger API
    v3's ``{"result": {...}}`` around it); InputError naming ``source`` if it is not one."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{source} is not JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict):
        doc = doc["result"]
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise InputError(f"{source} is not OTLP JSON traces (no resourceSpans list)")
    spans = []
    for resource in doc["resourceSpans"]:
        for scope in _list(resource, "scopeSpans", source):
            for raw in _list(scope, "spans", source):
                spans.append(_span(raw, source))
    return spans


def _list(obj: Any, member: str, source: str) -> list[Any]:
    found = obj.get(member, []) if isinstance(obj, dict) else None
    if not isinstance(found, list):
        raise InputError(f"{source}: {member} is not a list")
    return found


def _span(raw: Any, source: str) -> Span:
    if not isinstance(raw, dict):
        raise InputError(f"{source}: a span is not an object")
    trace_id, span_id = str(raw.get("traceId", "")).lower(), str(raw.get("spanId", "")).lower()
    if not _TRACE_ID.fullmatch(trace_id) or not _SPAN_ID.fullmatch(span_id):
        raise InputError(f"{source}: a span's traceId/spanId is not hex (OTLP JSON encodes "
                         f"ids as hex)")
    attributes = {}
    for item in _list(raw, "attributes", source):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attributes[item["key"]] = _value(item.get("value"))
    return Span(trace_id, span_id, str(raw.get("name", "")), attributes)


def _value(value: Any) -> Any:
    """An OTLP AnyValue's value (int64s come as JSON strings)."""
    if not isinstance(value, dict):
        return None
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    for member in ("stringValue", "boolValue", "doubleValue"):
        if member in value:
            return value[member]
    return None


def proven_spans(spans: Iterable[Span], chosen: Sequence[str] = ()) -> list[ProvenSpan]:
    """The spans that name a signed entry (``chosen`` span ids only, when given).

    InputError when a chosen id is not among the spans, names no entry, or names one
    with attributes of the wrong type, and when no span names an entry at all; and when
    the trace holds one span id twice, differently, where that id is chosen or names an
    entry: which of them is the span is not for prove to pick (the last one used to win,
    so a forged span sent first and the true one after proved the true one's entry under
    the forged one's id). The same span twice (an exporter's retry) is one span."""
    wanted = [s.lower() for s in chosen]
    by_id: dict[str, list[Span]] = {}
    for span in spans:
        same = by_id.setdefault(span.span_id, [])
        if span not in same:
            same.append(span)
    for span_id, found in by_id.items():
        if len(found) > 1 and (span_id in wanted
                               or any(sp.SEQ in s.attributes for s in found)):
            raise InputError(f"the trace holds span {span_id} {len(found)} times, "
                             f"differently; refusing to choose one (a span id names one "
                             f"span)")
    for span_id in wanted:
        if span_id not in by_id:
            shown = span_id if _SPAN_ID.fullmatch(span_id) else shown_word(span_id, 40)
            raise InputError(f"the trace has no span {shown}")
    picked = ([by_id[s][0] for s in dict.fromkeys(wanted)] if wanted
              else [found[0] for found in by_id.values()])
    proven = []
    for span in picked:
        if sp.SEQ not in span.attributes:
            if wanted:
                raise InputError(f"span {span.span_id} ({span.name}) names no histaudit entry "
                                 f"(it has no {sp.SEQ} attribute)")
            continue
        try:
            proven.append(sp.from_attributes(span.trace_id, span.span_id, span.name,
                                             span.attributes))
        except FormatError as exc:
            raise InputError(str(exc)) from None
    if not proven:
        raise InputError("no span of the trace names a histaudit entry (spans are named by "
                         "an audited app with an OpenTelemetry tracer provider)")
    return proven


def fetch_trace(base_url: str, trace_id: str, *, timeout: float = FETCH_TIMEOUT) -> bytes:
    """Trace ``trace_id`` from a Jaeger query service (API v3, OTLP JSON), the whole
    answer within ``timeout`` seconds (however slowly the backend trickles it), through
    redirects within the backend's own origin only; InputError when it cannot be had,
    naming why and the backend without its credentials."""
    trace_id = trace_id.lower()
    if not _TRACE_ID.fullmatch(trace_id):
        raise InputError(f"trace id {shown_word(trace_id, 40)} is not 32 hex digits")
    check_url_text(base_url, "--jaeger URL")
    shown = shown_url(base_url, user=False)
    if not base_url.startswith(("http://", "https://")):
        raise InputError(f"--jaeger {shown[:80]!r} is not an http(s) URL")
    url = f"{base_url.rstrip('/')}/api/v3/traces/{trace_id}"
    try:
        answer = fetch(url, timeout=timeout, limit=TRACE_MAX_BYTES,
                       headers={"Accept": "application/json"})
    except ExchangeError as exc:
        raise InputError(f"cannot reach the trace backend at {shown}: {exc}") from None
    if answer.status == 404:
        raise InputError(f"the trace backend at {shown} has no trace {trace_id}")
    if answer.status != 200:
        raise InputError(f"the trace backend at {shown} answered HTTP {answer.status} for "
                         f"trace {trace_id}")
    if len(answer.body) > TRACE_MAX_BYTES:
        raise InputError(f"trace {trace_id} is over {TRACE_MAX_BYTES} bytes")
    return answer.body


# --- proving them -----------------------------------------------------------------------

@dataclass(frozen=True)
class ProveResult:
    spans: tuple[ProvenSpan, ...]
    findings: tuple[Finding, ...]
    export: ExportResult | None
    """The bundle written (None when a span did not check: nothing is written then)."""


def prove(ledger: Ledger, spans: Sequence[ProvenSpan], out: str | os.PathLike[str], *,
          signer: Signer, trust: TrustStore,
          witnesses: WitnessPolicy | None = None) -> ProveResult:
    """Check ``spans`` against ``ledger``; if all hold, export their instances whole to
    ``out`` with :data:`SPANS_FILE`. InputError for a span of another ledger."""
    origin = origin_of(ledger)
    for span in spans:
        if span.origin != origin:
            raise InputError(f"span {span.span_id} ({span.name}) names ledger {span.origin}, "
                             f"and this ledger is {origin}")
    instances = list(dict.fromkeys(s.instance for s in spans))
    named = {(s.instance, s.seq) for s in spans}
    entries = {i: [r for r in ledger.entries(i) if (i, r.seq) in named] for i in instances}
    findings = check_spans(spans, origin, entries)
    if findings:
        return ProveResult(tuple(spans), tuple(findings), None)
    result = export(ledger, instances, out, signer=signer, trust=trust, html=True,
                    witnesses=witnesses, files={sp.SPANS_FILE: sp.spans_file(spans)})
    return ProveResult(tuple(spans), (), result)
