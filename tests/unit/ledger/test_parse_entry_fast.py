"""histaudit.ledger.records.parse_entry: the one-expression check accepts exactly what
the field-by-field sequence accepts, and every refusal keeps its message.

The oracle is ``parse_entry`` as it was before the combined check (copied below): for
each body — a table of malformed ones, then random documents with random fields bent —
both must return equal entries or raise ``FormatError`` with the same message.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.errors import FormatError
from histaudit.ledger import records
from histaudit.ledger.records import ENTRY_FIELDS, Entry


def original_parse_entry(body: bytes) -> Entry:
    doc = records._load(body, "entry")
    if doc.get("type") != "entry":
        raise FormatError(f"entry has type {doc.get('type')!r}, expected 'entry'")
    if set(doc) != ENTRY_FIELDS:
        extra, missing = set(doc) - ENTRY_FIELDS, ENTRY_FIELDS - set(doc)
        raise FormatError(f"entry fields wrong (missing {sorted(missing)}, extra {sorted(extra)})")
    data = doc["data"]
    if not isinstance(data, dict):
        raise FormatError("entry field 'data' must be an object")
    return Entry(instance=records._str(doc, "instance", "entry"),
                 seq=records._int(doc, "seq", "entry", 1),
                 leaf=records._int(doc, "leaf", "entry", 0),
                 prev=records._hex64(doc, "prev", "entry"),
                 kind=records._str(doc, "kind", "entry"), ts=records._ts(doc, "entry"),
                 kid=records._kid(doc, "entry"), data=data, body=body)


def outcome(parse: Any, body: bytes) -> Any:
    try:
        return parse(body)
    except FormatError as exc:
        return ("FormatError", str(exc))


GOOD: dict[str, Any] = {"v": 1, "type": "entry", "instance": "wf", "seq": 3, "leaf": 7,
                        "prev": "ab" * 32, "kind": "activity.started",
                        "ts": "2026-12-01T00:00:00.000000Z", "kid": "0123456789abcdef",
                        "data": {"task_id": 1}}
BENT: dict[str, list[Any]] = {
    "v": [2, 0, True, 1.0, "1", None],
    "type": ["head", "", None, 0],
    "instance": ["", 5, None, [], "x" * 2000, "\n"],
    "seq": [0, -3, True, 3.0, "3", None, 2**64 - 1],
    "leaf": [-1, True, 7.0, "7", None, 0],
    "prev": ["AB" * 32, "ab" * 31, "g" * 64, "", 5, "ab" * 32 + "\n"],
    "kind": ["", 0, None, ["k"], {"k": 1}],
    "ts": ["2026-12-01T00:00:00Z", "2026-12-01T00:00:00.000000Z\n", "x", "", 0,
           "٢٠٢٦-١٢-٠١T00:00:00.000000Z", "2026-12-01T00:00:00.00000١Z"],
    "kid": ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdeg", "", 5, None],
    "data": [[], "x", None, 0],
}


def _bodies() -> dict[str, bytes]:
    out = {"good": orjson.dumps(GOOD), "not json": b"{", "array": b"[]", "number": b"1",
           "empty": b"{}", "duplicate name": orjson.dumps(GOOD)[:-1] + b',"seq":0}'}
    for name, values in BENT.items():
        for value in values:
            out[f"{name}={value!r}"[:60]] = orjson.dumps({**GOOD, name: value})
        out[f"{name} missing"] = orjson.dumps({k: v for k, v in GOOD.items() if k != name})
    out["extra"] = orjson.dumps({**GOOD, "extra": 1})
    out["two wrong"] = orjson.dumps({**GOOD, "seq": 0, "kid": "x"})
    return out


BODIES = _bodies()


@pytest.mark.parametrize("case", sorted(BODIES))
def test_each_body_parses_or_fails_as_before(case: str) -> None:
    body = BODIES[case]
    assert outcome(records.parse_entry, body) == outcome(original_parse_entry, body)


def test_the_table_holds_refusals_and_acceptances() -> None:
    results = [outcome(records.parse_entry, b) for b in BODIES.values()]
    refused = [r for r in results if isinstance(r, tuple)]
    assert len(refused) > 50 and len(results) - len(refused) >= 4  # good, huge ids, …


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=70),
                    st.sampled_from(["", "entry", "ab" * 32, "0123456789abcdef",
                                     "2026-12-01T00:00:00.000000Z", "wf", 1, 0]))
_value = st.one_of(_scalar, st.lists(_scalar, max_size=2), st.dictionaries(
    st.text(max_size=4), _scalar, max_size=2))


@settings(max_examples=500, deadline=None)
@given(bent=st.dictionaries(st.sampled_from(sorted(ENTRY_FIELDS | {"extra"})), _value,
                            max_size=4),
       dropped=st.lists(st.sampled_from(sorted(ENTRY_FIELDS)), max_size=2))
def test_random_bent_entries_parse_or_fail_as_before(bent: dict[str, Any],
                                                     dropped: list[str]) -> None:
    doc = {k: v for k, v in {**GOOD, **bent}.items() if k not in dropped}
    body = orjson.dumps(doc)
    assert outcome(records.parse_entry, body) == outcome(original_parse_entry, body)
