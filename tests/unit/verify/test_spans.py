"""verify.spans.check_spans: a span is proven only by the entry it names, as named — at
its seq, leaf and leaf hash, and of the kind it claims (issue #50 item 10) — and one span
id names one span (item 6). The check ``prove`` and ``verify --bundle`` both run.
Cost: well under 1 s of CPU (rows built in memory)."""

from __future__ import annotations

from dataclasses import replace

from histaudit.ledger import merkle
from histaudit.ledger.spans import ProvenSpan

from .chains import INSTANCE, chain

ORIGIN = "histaudit/00000000-0000-4000-8000-000000000000"
ROWS = chain([("workflow.started", {"workflow": "w"}), ("activity.completed", {"n": 1}),
              ("llm.call", {"model": "m"})])


def _span(seq: int, kind: str, span_id: str = "00f067aa0ba902b7") -> ProvenSpan:
    row = ROWS[seq - 1]
    return ProvenSpan("4bf92f3577b34da6a3ce929d0e0e4736", span_id, f"span {seq}", ORIGIN,
                      INSTANCE, seq, row.leaf, merkle.leaf_hash(row.body).hex(), kind)


def _why(*spans: ProvenSpan) -> list[str]:
    from histaudit.verify.spans import check_spans

    found = check_spans(spans, ORIGIN, {INSTANCE: ROWS})
    assert {f.code for f in found} <= {"span-unproven"}
    return [f.message.rsplit("; ", 1)[-1] for f in found]


def test_a_span_naming_its_entry_as_it_is_is_proven() -> None:
    assert _why(_span(2, "activity.completed"), _span(3, "llm.call", "1" * 16)) == []


def test_a_kind_the_entry_does_not_sign_is_unproven() -> None:
    """The leaf hash is right; the kind a lie (an LLM call claimed of an activity)."""
    assert _why(_span(2, "llm.call")) == [
        "the span claims kind 'llm.call', and the entry it names signs 'activity.completed'"]


def test_one_span_id_listed_twice_differently_is_unproven_both_times() -> None:
    true = _span(2, "activity.completed")
    forged = replace(true, seq=3, leaf=ROWS[2].leaf,
                     leaf_hash=merkle.leaf_hash(ROWS[2].body).hex(), kind="llm.call")
    assert _why(forged, true) == ["the span id is listed 2 times, differently"] * 2
    assert _why(true, true) == []  # the same span twice is one span
