"""histaudit.verify.scan: the fast loop reports exactly what ``run_checks`` reports.

Each malformed or out-of-place row below is put into an otherwise clean chain; the report
of :func:`verify_chain` (fast loop) must equal the reference (``parse_entry`` and every
check's ``observe`` for each row, the original behaviour analyzer), finding for finding,
message for message — in default and full mode. Random chains with random damage follow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from histaudit.ledger import records
from histaudit.ledger.records import StoredEntry
from histaudit.ledger.store.sql import instance_entry
from histaudit.verify import scan as scan_mod
from histaudit.verify import verifier
from histaudit.verify.verifier import verify_chain

from .chains import (
    INSTANCE,
    SIGNER,
    STRANGER,
    TRUST,
    WINDOWED,
    chain,
    dumps,
    entry_doc,
    head_of,
    reference,
    stored,
)

STEPS: list[tuple[str, dict[str, Any]]] = [
    ("workflow.started", {"workflow": "w"}),
    ("activity.started", {"task_id": 1, "execution_id": "e1", "activity": "charge"}),
    ("effect.intent", {"task_id": 1, "execution_id": "e1", "name": "mail", "key": "k1"}),
    ("effect.done", {"name": "mail", "key": "k1", "intent_seq": 3}),
    ("activity.completed", {"task_id": 1, "execution_id": "e1", "output_digest": "d1"}),
    ("activity.started", {"task_id": 1, "execution_id": "e1", "activity": "charge"}),
    ("activity.completed", {"task_id": 1, "execution_id": "e1", "output_digest": "d2"}),
    ("workflow.completed", {}),
]
AT = 4  # the damaged row is entry AT + 1 (index AT)


def assert_same(rows: list[StoredEntry], *, full: bool, head: Any = None) -> None:
    head = head_of(rows) if head is None else head
    count, expected = reference(rows, head, full=full)
    report = verify_chain(INSTANCE, rows, head, trust=TRUST, full=full, workers=1)
    assert report.entries == count
    assert list(report.findings) == expected


def replaced(doc_change: Callable[[dict[str, Any]], Any] | None = None, *,
             body: bytes | None = None, rehash: bool = True) -> list[StoredEntry]:
    """The clean chain with row AT's body changed (its hash column recomputed or not)."""
    rows = chain(STEPS)
    row = rows[AT]
    if body is None:
        doc = orjson.loads(row.body)
        assert doc_change is not None
        out = doc_change(doc)
        body = dumps(doc if out is None else out)
    digest = records.sha256_hex(body) if rehash else row.hash
    rows[AT] = StoredEntry(row.leaf, row.instance, row.seq, digest, body, SIGNER.sign(body))
    return rows


def _set(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.__setitem__(field, value)


def _drop(field: str) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.pop(field)


_PREV5 = chain(STEPS)[AT - 1].hash
MALFORMED: dict[str, list[StoredEntry]] = {
    "not json": replaced(body=b"{not json"),
    "array": replaced(body=b"[1, 2]"),
    "string": replaced(body=b'"entry"'),
    "null": replaced(body=b"null"),
    "empty object": replaced(body=b"{}"),
    "whitespace (not canonical)": replaced(
        body=orjson.dumps(orjson.loads(chain(STEPS)[AT].body), option=orjson.OPT_INDENT_2)),
    "duplicate name": replaced(body=chain(STEPS)[AT].body[:-1] + b',"seq":5}'),
    "duplicate name, other value": replaced(body=chain(STEPS)[AT].body[:-1] + b',"seq":9}'),
    "float in data (not canonical)": replaced(lambda d: d["data"].__setitem__("x", 1.5)),
    "big int in data (not canonical)": replaced(
        lambda d: d["data"].__setitem__("x", 2**60)),
    "hash column wrong": [*chain(STEPS)[:AT], StoredEntry(
        AT, INSTANCE, AT + 1, "f" * 64, chain(STEPS)[AT].body, chain(STEPS)[AT].sig),
        *chain(STEPS)[AT + 1:]],
    "body edited, hash column kept": replaced(
        lambda d: d["data"].__setitem__("output_digest", "zz"), rehash=False),
    **{f"v={v!r}": replaced(_set("v", v)) for v in (2, 0, True, 1.0, "1", None)},
    "v missing": replaced(_drop("v")),
    **{f"type={t!r}": replaced(_set("type", t)) for t in ("head", "", None, 1)},
    **{f"{f} missing": replaced(_drop(f))
       for f in ("type", "instance", "seq", "leaf", "prev", "kind", "ts", "kid", "data")},
    "extra field": replaced(_set("extra", 1)),
    **{f"data={d!r}": replaced(_set("data", d)) for d in ([], "x", None, 3)},
    **{f"instance={i!r}": replaced(_set("instance", i))
       for i in ("", 5, None, "other", "wf ", "w\x00f")},
    **{f"seq={s!r}": replaced(_set("seq", s))
       for s in (0, -1, True, 5.0, "5", 4, 6, 3, 9, 2**64 - 1)},
    **{f"leaf={x!r}": replaced(_set("leaf", x)) for x in (-1, True, 4.0, 3, 5, 99, "4")},
    **{f"prev={label}": replaced(_set("prev", p))
       for label, p in (("upper case", _PREV5.upper()), ("63 digits", _PREV5[:63]),
                        ("not hex", "g" * 64), ("genesis", "0" * 64), ("empty", ""),
                        ("7", 7), ("65 digits", _PREV5 + "0"))},
    **{f"kind={k!r}": replaced(_set("kind", k))
       for k in ("", 5, None, ["a"], {"a": 1}, "activity.started", "effect.bogus")},
    **{f"ts={t!r}": replaced(_set("ts", t))
       for t in ("2026-12-01T00:00:01Z", "2026-12-01 00:00:01.500000Z",
                 "2026-12-01T00:00:01.500000Z\n", "2026-13-41T25:61:61.000000Z",
                 "٢٠٢٦-١٢-٠١T00:00:01.500000Z", "2026-12-01T00:00:01.5000٠٠Z",
                 "2026-12-01T00:00:01.500000z", "....................500000Z", 17, None)},
    **{f"kid={label}": replaced(_set("kid", k))
       for label, k in (("upper case", SIGNER.kid.upper()), ("15 digits", SIGNER.kid[:15]),
                        ("not hex", "x" * 16), ("a stranger's", STRANGER.kid),
                        ("windowed", WINDOWED.kid), ("empty", ""), ("5", 5),
                        ("a list", ["k"]))},
    "seq column wrong": [*chain(STEPS)[:AT], StoredEntry(
        chain(STEPS)[AT].leaf, INSTANCE, 77, chain(STEPS)[AT].hash, chain(STEPS)[AT].body,
        chain(STEPS)[AT].sig), *chain(STEPS)[AT + 1:]],
    "leaf column wrong": [*chain(STEPS)[:AT], StoredEntry(
        40, INSTANCE, AT + 1, chain(STEPS)[AT].hash, chain(STEPS)[AT].body,
        chain(STEPS)[AT].sig), *chain(STEPS)[AT + 1:]],
    "row missing": [*chain(STEPS)[:AT], *chain(STEPS)[AT + 1:]],
    "row twice": [*chain(STEPS)[:AT + 1], *chain(STEPS)[AT:]],
    "rows swapped": [*chain(STEPS)[:AT], chain(STEPS)[AT + 1], chain(STEPS)[AT],
                     *chain(STEPS)[AT + 2:]],
    "first row missing": chain(STEPS)[1:],
    "bad signature": [*chain(STEPS)[:AT], StoredEntry(
        chain(STEPS)[AT].leaf, INSTANCE, AT + 1, chain(STEPS)[AT].hash,
        chain(STEPS)[AT].body, b"\x00" * 64), *chain(STEPS)[AT + 1:]],
    "signed by a stranger": chain(STEPS, signers=[SIGNER] * AT + [STRANGER]),
    "signed by a key outside its window": chain(STEPS, signers=[WINDOWED] * len(STEPS)),
}


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_each_malformed_row_reports_what_run_checks_reports(case: str, full: bool) -> None:
    assert_same(MALFORMED[case], full=full)


def test_the_table_is_not_vacuous() -> None:
    """Every case changes the report of the clean chain, in one mode at least."""
    clean = chain(STEPS)
    baseline = [reference(clean, head_of(clean), full=f)[1] for f in (False, True)]
    quiet = [case for case, rows in MALFORMED.items()
             if [reference(rows, head_of(clean), full=f)[1] for f in (False, True)]
             == baseline]
    assert quiet == []


def test_a_clean_chain_takes_the_fast_path_for_every_row(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    slow: list[int] = []
    real = scan_mod.ChainScan._slow

    def counting(self: scan_mod.ChainScan, row: StoredEntry) -> None:
        slow.append(row.seq)
        real(self, row)

    monkeypatch.setattr(scan_mod.ChainScan, "_slow", counting)
    rows = chain(STEPS)
    report = verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST)
    assert slow == []
    assert [f.code for f in report.findings] == ["activity-reexecuted",
                                                 "activity-nondeterministic"]
    damaged = MALFORMED["v=2"]  # and so the next entry's link breaks: two slow rows
    verify_chain(INSTANCE, damaged, head_of(damaged), trust=TRUST)
    assert slow == [AT + 1, AT + 2]


def test_an_instance_id_no_body_can_match_sends_every_row_the_slow_way() -> None:
    rows = chain(STEPS, instance="")
    for full in (False, True):
        count, expected = reference(rows, None, full=full, instance="")
        report = verify_chain("", rows, None, trust=TRUST, full=full, workers=1)
        assert (report.entries, list(report.findings)) == (count, expected)
        assert "entry-malformed" in report.codes()


def test_payload_and_engine_checks_see_fast_rows_like_parsed_ones() -> None:
    payloads = {"c1": (b"s" * 32, b"payload"), "c2": (b"s" * 32, b"other")}
    steps = [*STEPS, ("activity.completed", {"task_id": 2, "output_digest": "d",
                                             "output": {"c": "c1", "n": 7}}),
             ("note", {"a": {"c": "c2", "n": 5, "k": True}, "b": {"c": "gone", "k": True}}),
             ("payload.erased", {"commitment": "gone"})]
    rows = chain(steps)
    head = head_of(rows)
    _count, expected = reference(rows, head, full=True, payload_lookup=payloads.get,
                                engine_history=[])
    report = verify_chain(INSTANCE, rows, head, trust=TRUST, full=True, workers=1,
                          payload_lookup=payloads.get, engine_history=[])
    assert list(report.findings) == expected
    assert {"payload-mismatch", "engine-missing-completion"} <= report.codes()


# --- random chains, random damage --------------------------------------------------------

_tracked = st.sampled_from([
    ("activity.started", {"task_id": 1, "execution_id": "e", "activity": "a"}),
    ("activity.started", {"task_id": 2, "activity": "b"}),
    ("activity.completed", {"task_id": 1, "execution_id": "e", "output_digest": "x"}),
    ("activity.completed", {"task_id": 1, "execution_id": "e", "output_digest": "y"}),
    ("effect.intent", {"task_id": 1, "execution_id": "e", "name": "n", "key": "k"}),
    ("effect.done", {"name": "n", "key": "k", "intent_seq": 3}),
    ("effect.skipped", {"name": "n", "key": "k"}),
    ("replay.mismatch", {"task_id": 1, "activity": "a", "completed_seq": 2}),
    ("workflow.started", {"x": [1, {"y": None}]}),
    ("workflow.started", {"workflow": "w", "started_at": "t0"}),
    ("workflow.scheduled_activity", {"activity": "a", "task_id": 1, "execution_id": "e"}),
    ("workflow.scheduled_child", {"child_workflow": "c", "task_id": 2}),
    ("activity.failed", {"task_id": 1, "execution_id": "e", "error_type": "E"}),
    ("note", {}),
])


def _damage(rows: list[StoredEntry], how: str, i: int, byte: int) -> list[StoredEntry]:
    i %= len(rows)
    row = rows[i]
    if how == "drop":
        return rows[:i] + rows[i + 1:]
    if how == "repeat":
        return rows[:i + 1] + rows[i:]
    if how == "swap" and i + 1 < len(rows):
        return [*rows[:i], rows[i + 1], row, *rows[i + 2:]]
    if how == "flip":
        pos = byte % len(row.body)
        body = row.body[:pos] + bytes([row.body[pos] ^ (1 + byte % 255)]) + row.body[pos + 1:]
        flipped = (stored(body, leaf=row.leaf, seq=row.seq) if byte % 2 else
                   StoredEntry(row.leaf, row.instance, row.seq, row.hash, body, row.sig))
        return [*rows[:i], flipped, *rows[i + 1:]]
    if how == "reseq":
        prev = rows[i - 1].hash if i else records.GENESIS_PREV
        doc = entry_doc(byte % 12, row.leaf, prev, "note", {})
        return [*rows[:i], stored(dumps(doc), leaf=row.leaf, seq=row.seq), *rows[i + 1:]]
    return rows


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_tracked, min_size=1, max_size=14),
       damage=st.lists(st.tuples(st.sampled_from(["drop", "repeat", "swap", "flip", "reseq"]),
                                 st.integers(0, 50), st.integers(0, 10_000)), max_size=3),
       full=st.booleans(), with_head=st.booleans())
def test_random_damaged_chains_report_what_run_checks_reports(
        steps: list[tuple[str, dict[str, Any]]], damage: list[tuple[str, int, int]],
        full: bool, with_head: bool) -> None:
    rows = chain(steps)
    head = head_of(rows) if with_head else None
    for how, i, byte in damage:
        rows = _damage(rows, how, i, byte) or rows
    count, expected = reference(rows, head, full=full)
    report = verify_chain(INSTANCE, rows, head, trust=TRUST, full=full, workers=1)
    assert (report.entries, list(report.findings)) == (count, expected)


# --- SQLite's raw rows: TEXT columns as their bytes ---------------------------------------

def _as_sqlite_reads(rows: list[StoredEntry]) -> list[tuple[Any, ...]]:
    """The rows as ``Snapshot.entry_chunks`` reads them from SQLite: the instance's slot
    None, the hash as the bytes of its text (``CAST(... AS BLOB)``)."""
    return [(r.leaf, None, r.seq,
             r.hash.encode() if isinstance(r.hash, str) else r.hash, r.body, r.sig)
            for r in rows]


def _verify_sqlite_reads(rows: list[StoredEntry], head: Any, *, full: bool = False) -> Any:
    """The report of ``rows`` fed as SQLite's raw rows, with the converter
    ``Snapshot.entry_chunks`` returns beside them (``instance_entry``), as ``verify_in``
    feeds them."""
    scan = verifier._Chain(INSTANCE, head, trust=TRUST, full=full, workers=1,
                           payload_lookup=None, payloads_lookup=None, engine_history=None,
                           engine_lookup=None)
    try:
        scan.scan([_as_sqlite_reads(rows)], functools.partial(instance_entry, INSTANCE))
        return scan.report()
    finally:
        scan.close()


@pytest.mark.parametrize("full", [False, True], ids=["default", "full"])
@pytest.mark.parametrize("case", ["clean", *sorted(MALFORMED)])
def test_rows_with_text_as_bytes_report_what_stored_entries_report(case: str, full: bool
                                                                   ) -> None:
    rows = chain(STEPS) if case == "clean" else MALFORMED[case]
    head = head_of(chain(STEPS))
    expected = verify_chain(INSTANCE, rows, head, trust=TRUST, full=full, workers=1)
    report = _verify_sqlite_reads(rows, head, full=full)
    assert (report.entries, report.findings) == (expected.entries, expected.findings)


def test_a_clean_chain_read_as_bytes_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    slow: list[Any] = []
    monkeypatch.setattr(scan_mod.ChainScan, "_slow", lambda self, row: slow.append(row))
    rows = chain(STEPS)
    report = _verify_sqlite_reads(rows, head_of(rows))
    assert slow == []
    assert [f.code for f in report.findings] == ["activity-reexecuted",
                                                 "activity-nondeterministic"]
