"""``span-unproven``: a span names an entry the ledger (or bundle) does not hold as named."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from histaudit.ledger import merkle
from histaudit.ledger import records as rec
from histaudit.ledger.spans import ProvenSpan

from .findings import Finding

__all__ = ["check_spans"]


def check_spans(spans: Iterable[ProvenSpan], origin: str,
                entries: Mapping[str, Sequence[rec.StoredEntry]]) -> list[Finding]:
    """A ``span-unproven`` finding for each span of another ledger than ``origin``, or
    whose entry ``entries`` (rows by instance) lacks, or holds at another leaf or with
    another leaf hash."""
    findings = []
    for span in spans:
        row = next((r for r in entries.get(span.instance, ()) if r.seq == span.seq), None)
        if span.origin != origin:
            why = f"it names ledger {span.origin}, not {origin}"
        elif row is None:
            why = "there is no such entry"
        else:
            held = merkle.leaf_hash(row.body).hex()
            if row.leaf == span.leaf and held == span.leaf_hash:
                continue
            why = f"the entry there is another (leaf {row.leaf}, leaf hash {held[:16]}…)"
        findings.append(Finding.make(
            "span-unproven", span.instance, span.seq,
            f"span {span.span_id} ({span.name}) of trace {span.trace_id} names entry "
            f"{span.seq} of {rec.shown_id(span.instance)} at leaf {span.leaf} with leaf hash "
            f"{span.leaf_hash[:16]}…; {why}"))
    return findings
