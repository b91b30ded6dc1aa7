"""``span-unproven``: a span names an entry the ledger (or bundle) does not hold as named —
not at that seq, leaf and leaf hash, or not of the kind the span claims (issue #50: a
correctly hashed ``activity.completed`` claimed as an ``llm.call`` is not proven, and
its false kind never reaches a bundle's signed ``spans.json``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from histaudit.errors import FormatError
from histaudit.ledger import merkle
from histaudit.ledger import records as rec
from histaudit.ledger.spans import ProvenSpan

from .findings import Finding

__all__ = ["check_spans"]


def check_spans(spans: Iterable[ProvenSpan], origin: str,
                entries: Mapping[str, Sequence[rec.StoredEntry]]) -> list[Finding]:
    """A ``span-unproven`` finding for each span of another ledger than ``origin``, or
    whose entry ``entries`` (rows by instance) lacks, holds at another leaf or with
    another leaf hash, or signs another kind than the span claims; and for each of spans
    that share a trace and span id but differ (which one the id names cannot be told)."""
    spans = list(spans)
    seen: dict[tuple[str, str], list[ProvenSpan]] = {}
    for span in spans:
        same = seen.setdefault((span.trace_id, span.span_id), [])
        if span not in same:
            same.append(span)
    findings = []
    for span in spans:
        twins = len(seen[(span.trace_id, span.span_id)])
        row = next((r for r in entries.get(span.instance, ()) if r.seq == span.seq), None)
        if twins > 1:
            why = f"the span id is listed {twins} times, differently"
        elif span.origin != origin:
            why = f"it names ledger {span.origin}, not {origin}"
        elif row is None:
            why = "there is no such entry"
        else:
            held = merkle.leaf_hash(row.body).hex()
            if row.leaf != span.leaf or held != span.leaf_hash:
                why = f"the entry there is another (leaf {row.leaf}, leaf hash {held[:16]}…)"
            else:
                kind = _kind(row.body)
                if kind == span.kind:
                    continue
                why = (f"the span claims kind {rec.shown_id(span.kind)}, and the entry it "
                       f"names signs {rec.shown_id(kind)}" if kind is not None
                       else "the entry there is not a readable record")
        findings.append(Finding.make(
            "span-unproven", span.instance, span.seq,
            f"span {span.span_id} ({span.name}) of trace {span.trace_id} names entry "
            f"{span.seq} of {rec.shown_id(span.instance)} at leaf {span.leaf} with leaf hash "
            f"{span.leaf_hash[:16]}…; {why}"))
    return findings


def _kind(body: bytes) -> str | None:
    try:
        return rec.parse_entry(body).kind
    except FormatError:
        return None
