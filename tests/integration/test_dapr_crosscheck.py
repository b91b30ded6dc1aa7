"""Dapr's signed history cross-checked with histaudit's own ledger, on a real signed store.

One run (tests/support/dapr_audit.py): sentry + mTLS + daprd with WorkflowHistorySigning,
the audited app writing its ledger through the real interceptor, a copy of the store
taken mid-run, one instance purged through the workflow client. Then, on copies of the
store, what Dapr's own signatures cannot catch and the ledger does: a history cut at a
signature boundary (metadata rewritten to match), the instance rolled back to the earlier
copy, the purged instance; and a bundle carrying Dapr's rows, verified offline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from histaudit import sdk
from histaudit.errors import EngineError
from histaudit.verify.dapr_crosscheck import parse_history_event
from histaudit.verify.dapr_history import parse_history_signature, read_message
from support.cli import cli, exits, one_error_line
from support.dapr_audit import (
    GATED,
    PURGED,
    TERMINATED,
    AuditedDaprRun,
    audited_dapr_run,
    backup,
    foreign_ca,
    put,
    rows,
    value,
)
from support.repo import SCHEMAS

# one xdist worker builds the module fixtures (run, bundle) once (tests/conftest.py)
pytestmark = [pytest.mark.engine, pytest.mark.daprd, pytest.mark.xdist_group("dapr_crosscheck")]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditedDaprRun]:
    try:
        with audited_dapr_run(tmp_path_factory.mktemp("dapr-crosscheck")) as r:
            yield r
    except EngineError as exc:
        pytest.fail(f"cannot start the signing daprd stack: {exc}", pytrace=False)


def _doc(result: Any, code: int) -> dict[str, Any]:
    exits(result, code)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _codes(findings: list[dict[str, Any]]) -> set[str]:
    return {f["code"] for f in findings}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _rewrite_metadata(db: Path, instance: str, **counts: int) -> None:
    """Re-encode ``metadata`` (BackendWorkflowStateMetadata: varint fields 1-6) with the
    given fields changed: field number -> value, as ``f2=``, ``f4=``."""
    [(key, _v, _b)] = rows(db, instance, "metadata")
    fields = read_message(value(db, key), dict.fromkeys(range(1, 7), int))
    fields.update({int(k[1:]): v for k, v in counts.items()})
    put(db, key, b"".join(_varint(n << 3) + _varint(v)
                          for n, v in sorted(fields.items()) if v))


def _cut_last_signature(db: Path, instance: str) -> int:
    """Delete the last signature and the events it covers, and rewrite the metadata's
    counts: what daprd itself wrote one batch earlier. Returns the events left."""
    sigs = rows(db, instance, "signature-%")
    last = parse_history_signature(value(db, sigs[-1][0]))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM state WHERE key = ?", (sigs[-1][0],))
        for i in range(last.start_event_index, last.start_event_index + last.event_count):
            conn.execute("DELETE FROM state WHERE key LIKE ?", (f"%||{instance}||history-{i:06d}",))
    _rewrite_metadata(db, instance, f2=last.start_event_index, f4=len(sigs) - 1)
    return last.start_event_index


def _rewind(db: Path, earlier: Path, instance: str) -> None:
    """Replace ``instance``'s rows in ``db`` by those of the earlier copy."""
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM state WHERE key LIKE ?", (f"%||{instance}||%",))
        conn.execute("ATTACH DATABASE ? AS earlier", (str(earlier),))
        conn.execute("INSERT INTO state SELECT * FROM earlier.state WHERE key LIKE ?",
                     (f"%||{instance}||%",))
        conn.commit()
        conn.execute("DETACH DATABASE earlier")


def test_untouched_store_and_ledger_agree(run: AuditedDaprRun) -> None:
    alone = _doc(run.dapr_verify(GATED, run.db, "--json", ledger=False), 0)
    assert alone["ledger"] is None and alone["crosscheck"] is None
    doc = _doc(run.dapr_verify(GATED, run.db, "--json", "--app-id", "histaudit"), 0)
    assert doc["ok"] is True and doc["present"] is True
    assert doc["signed_events"] == doc["events"] == doc["covered_events"] > 0
    assert doc["ledger"]["ok"] is True and doc["ledger"]["entries"] >= 7
    # both activities' results attested by daprd, and each attested ioDigest is the one
    # recomputed from the input and result the ledger committed to
    assert doc["attestations"] == 2
    assert doc["crosscheck"] == {"ok": True, "findings": []}
    text = run.dapr_verify(GATED, run.db)
    exits(text, 0)
    assert "cross-check with" in text.stdout and ": ok" in text.stdout


def test_stored_events_are_the_engines_history_and_read_alike(run: AuditedDaprRun) -> None:
    """The stored rows are the serialized HistoryEvents daprd served; the wire reader
    reads of them what the generated classes do."""
    stored = [value(run.db, k) for k, _v, _b in rows(run.db, GATED, "history-%")]
    pb = sdk.protos
    assert [pb.HistoryEvent.FromString(raw) for raw in stored] == run.engine_history
    for i, raw in enumerate(stored):
        mine, theirs = parse_history_event(raw, i), pb.HistoryEvent.FromString(raw)
        assert mine.event_id == theirs.eventId
        assert mine.kind == (theirs.WhichOneof("eventType") if mine.kind != "other"
                             else "other")
        if mine.kind == "taskCompleted":
            assert mine.taskCompleted is not None
            assert mine.taskCompleted.taskScheduledId == theirs.taskCompleted.taskScheduledId
            assert mine.taskCompleted.result.value == theirs.taskCompleted.result.value
            assert (mine.taskCompleted.taskExecutionId
                    == theirs.taskCompleted.taskExecutionId)
        if mine.kind == "executionCompleted":
            assert mine.result == theirs.executionCompleted.result.value
    assert {"taskScheduled", "taskCompleted", "executionCompleted"} <= {
        parse_history_event(raw, i).kind for i, raw in enumerate(stored)}


def test_a_terminated_instance_verifies_as_terminated(run: AuditedDaprRun,
                                                     tmp_path: Path) -> None:
    """A client's terminate is signed by Dapr (ExecutionCompleted, status TERMINATED) and
    by the ledger (workflow.terminated): no unsigned completion, here or in a bundle."""
    doc = _doc(run.dapr_verify(TERMINATED, run.db, "--json"), 0)
    assert doc["crosscheck"] == {"ok": True, "findings": []}
    r = cli("show", TERMINATED, "--json", "--db", run.ledger, cwd=run.work)
    assert json.loads(r.stdout)["entries"][-1]["kind"] == "workflow.terminated"
    out = tmp_path / "bundle"
    r = cli("export", TERMINATED, "--out", out, "--db", run.ledger, "--key", run.key,
            "--trust", run.keys, "--dapr-state", run.db, "--trust-anchors", run.anchors,
            "--with-payloads", cwd=run.work)
    assert r.returncode == 0, r.stderr
    # how it ended is said, as info: verify-bundle exits 0
    assert _report_codes(_verify_bundle(run, out, 0), TERMINATED) == {"workflow-terminated"}


def test_a_history_cut_at_a_signature_boundary_passes_dapr_but_not_the_ledger(
        run: AuditedDaprRun) -> None:
    db = run.copy("cut")
    left = _cut_last_signature(db, GATED)
    alone = _doc(run.dapr_verify(GATED, db, "--json", ledger=False), 0)
    assert alone["ok"] is True and alone["events"] == left  # Dapr alone cannot tell
    doc = _doc(run.dapr_verify(GATED, db, "--json"), 1)
    assert doc["findings"] == [] and doc["ledger"]["ok"] is True
    behind = [f for f in doc["crosscheck"]["findings"]
              if f["code"] == "dapr-history-behind-ledger"]
    assert behind, doc["crosscheck"]
    assert any("workflow.completed" in f["message"] and "ExecutionCompleted" in f["message"]
               for f in behind), behind
    text = run.dapr_verify(GATED, db)
    exits(text, 1)
    assert "dapr-history-behind-ledger" in text.stdout


def test_an_instance_rolled_back_to_an_earlier_signed_state_is_caught(
        run: AuditedDaprRun) -> None:
    db = run.copy("rewound")
    _rewind(db, run.mid, GATED)
    alone = _doc(run.dapr_verify(GATED, db, "--json", ledger=False), 0)
    full = _doc(run.dapr_verify(GATED, run.db, "--json", ledger=False), 0)
    assert alone["ok"] is True and alone["events"] < full["events"]
    doc = _doc(run.dapr_verify(GATED, db, "--json"), 1)
    findings = doc["crosscheck"]["findings"]
    assert "dapr-history-behind-ledger" in _codes(findings), findings
    # The copy was taken while shout ran, scheduled in Dapr's history: the end is what
    # Dapr lacks, and shout's signed completion.
    behind = [f for f in findings if f["code"] == "dapr-history-behind-ledger"]
    assert [(f["activity"], f["seq"]) for f in behind] == [(None, 8)], findings
    assert "workflow.completed" in behind[0]["message"]
    missing = {f["activity"] for f in findings if f["code"] == "engine-missing-completion"}
    assert missing == {"shout"}, findings


def test_a_purged_instance_is_missing_only_with_the_ledger(run: AuditedDaprRun) -> None:
    assert rows(run.db, PURGED) == [], "the purge API left rows"
    one_error_line(run.dapr_verify(PURGED, run.db, ledger=False), PURGED)
    doc = _doc(run.dapr_verify(PURGED, run.db, "--json"), 1)
    assert doc["present"] is False and doc["events"] == 0
    assert [f["code"] for f in doc["crosscheck"]["findings"]] == ["dapr-instance-missing"]
    assert doc["ledger"]["ok"] is True
    one_error_line(run.dapr_verify("never-was", run.db), "never-was")


def test_a_history_captured_before_a_purge_still_speaks_for_dapr(run: AuditedDaprRun) -> None:
    """dapr-capture (issue #42, item 3): Dapr's verified history of GATED, signed into a
    copy of the ledger; then the store as it is, purged, and rolled back."""
    ledger = f"sqlite:///{backup(run.ledger_path, run.work / 'captured-ledger.db')}"
    store = run.copy("capture")
    captured = cli("dapr-capture", GATED, "--state-db", store, "--trust-anchors", run.anchors,
                   "--app-id", "histaudit", "--db", ledger, "--key", run.key, "--json",
                   cwd=run.work)
    record = _doc(captured, 0)
    assert record["signed_events"] > 0 and record["signatures"] > 0
    assert record["signers"] and len(record["events_sha256"]) == 64
    exits(cli("verify", GATED, "--full", "--db", ledger, "--trust", run.keys, cwd=run.work))

    def check(db: Path, code: int) -> list[str]:
        doc = _doc(cli("dapr-verify", GATED, "--state-db", db, "--trust-anchors", run.anchors,
                       "--db", ledger, "--trust", run.keys, "--json", cwd=run.work), code)
        return [f["code"] for f in doc["crosscheck"]["findings"]]

    assert check(store, 0) == []  # the store still holds what was captured
    purged = run.copy("capture-purged")
    with sqlite3.connect(purged) as conn:  # what the purge API does to the store
        conn.execute("DELETE FROM state WHERE key LIKE ?", (f"%||{GATED}||%",))
    assert check(purged, 0) == ["dapr-history-purged"]  # info: the ledger still says it
    without = _doc(run.dapr_verify(GATED, purged, "--json"), 1)  # the ledger never captured
    assert [f["code"] for f in without["crosscheck"]["findings"]] == ["dapr-instance-missing"]
    rewound = run.copy("capture-rewound")
    _rewind(rewound, run.mid, GATED)
    assert "dapr-history-changed-since-capture" in check(rewound, 1)
    # a history that does not verify is not captured, and the ledger is left as it was
    cut = run.copy("capture-foreign")
    before = cli("show", GATED, "--db", ledger, "--json", cwd=run.work).stdout
    refused = cli("dapr-capture", GATED, "--state-db", cut, "--trust-anchors",
                  foreign_ca(run.work / "capture-foreign-ca.pem"), "--db", ledger, "--key",
                  run.key, cwd=run.work)
    assert refused.returncode == 1 and "not captured" in refused.stdout, refused.stderr
    assert cli("show", GATED, "--db", ledger, "--json", cwd=run.work).stdout == before


def test_a_changed_completion_result_is_not_signed_by_dapr(run: AuditedDaprRun) -> None:
    """A TaskCompleted whose result was rewritten breaks Dapr's events digest; the
    cross-check then trusts only the signatures before it, and the ledger says what the
    cut-off part must have held."""
    db = run.copy("rewritten")
    for key, _v, _b in rows(db, GATED, "history-%"):
        raw = value(db, key)
        if b"hello audit" in raw and parse_history_event(raw, 0).kind == "taskCompleted":
            put(db, key, raw.replace(b"hello audit", b"hello AUDIT"))
            break
    else:
        pytest.fail("no TaskCompleted of greet stored")
    doc = _doc(run.dapr_verify(GATED, db, "--json"), 1)
    assert "dapr-events-digest-mismatch" in _codes(doc["findings"])
    assert doc["signed_events"] < doc["events"]
    assert "dapr-history-behind-ledger" in _codes(doc["crosscheck"]["findings"])


# --- a bundle with Dapr's rows ----------------------------------------------------------

def _export(run: AuditedDaprRun, out: Path, db: Path, *extra: str | Path) -> None:
    r = cli("export", GATED, PURGED, "--out", out, "--db", run.ledger, "--key", run.key,
            "--trust", run.keys, "--dapr-state", db, "--trust-anchors", run.anchors,
            *extra, cwd=run.work)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def _verify_bundle(run: AuditedDaprRun, bundle: Path, code: int, *extra: str | Path
                   ) -> dict[str, Any]:
    return _doc(cli("verify", "--bundle", bundle, "--trust", run.keys, "--json", *extra,
                    cwd=run.work), code)


def _report_codes(doc: dict[str, Any], instance: str) -> set[str]:
    [report] = [r for r in doc["reports"] if r["instance"] == instance]
    return _codes(report["findings"])


@pytest.fixture(scope="module")
def bundle(run: AuditedDaprRun) -> Path:
    out = run.work / "bundle"
    _export(run, out, run.db, "--dapr-app-id", "histaudit", "--with-payloads")
    return out


def test_a_bundle_carries_daprs_rows_and_verifies_offline(run: AuditedDaprRun,
                                                          bundle: Path) -> None:
    names = {p.name for p in bundle.iterdir()}
    assert {"dapr-rows.jsonl", "dapr-anchors.pem"} <= names
    envelope = json.loads((bundle / "manifest.dsse.json").read_bytes())
    manifest = json.loads(base64.b64decode(envelope["payload"]))
    Draft202012Validator(json.loads((SCHEMAS / "bundle-manifest.schema.json").read_bytes())
                         ).validate(manifest)
    for name in ("dapr-rows.jsonl", "dapr-anchors.pem"):  # hashed under the signature
        data = (bundle / name).read_bytes()
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(),
                                           "bytes": len(data)}
    assert (bundle / "dapr-anchors.pem").read_bytes() == run.anchors.read_bytes()
    lines = [json.loads(line) for line in (bundle / "dapr-rows.jsonl").read_text().splitlines()]
    by = {line["instance"]: line for line in lines}
    assert by[PURGED]["rows"] is None
    stored = {k.rsplit("||", 1)[1]: value(run.db, k) for k, _v, _b in rows(run.db, GATED)}
    for name, b64 in by[GATED]["rows"].items():
        assert base64.b64decode(b64) == stored[name]  # the exact stored bytes
    doc = _verify_bundle(run, bundle, 1)
    assert _report_codes(doc, GATED) == set()
    assert _report_codes(doc, PURGED) == {"dapr-instance-missing"}
    [gated] = [r for r in doc["reports"] if r["instance"] == GATED]
    assert gated["mode"] == "full+engine" and gated["ok"] is True


def test_a_flipped_byte_in_the_bundles_dapr_rows_is_caught(run: AuditedDaprRun,
                                                           bundle: Path) -> None:
    copy = run.work / "bundle-flipped"
    shutil.copytree(bundle, copy)
    path = copy / "dapr-rows.jsonl"
    lines = path.read_text().splitlines()
    doc = [json.loads(line) for line in lines]
    for line in doc:
        if line["rows"]:
            raw = bytearray(base64.b64decode(line["rows"]["history-000001"]))
            raw[len(raw) // 2] ^= 0x01
            line["rows"]["history-000001"] = base64.b64encode(bytes(raw)).decode()
    path.write_text("".join(json.dumps(line) + "\n" for line in doc))
    out = _verify_bundle(run, copy, 1)
    [own] = [r for r in out["reports"] if r["scope"] == "bundle"]
    assert "bundle-file-changed" in _codes(own["findings"])
    assert "dapr-events-digest-mismatch" in _report_codes(out, GATED)


def test_a_bundle_of_a_cut_store_shows_it_offline(run: AuditedDaprRun) -> None:
    db = run.copy("cut-for-bundle")
    _cut_last_signature(db, GATED)
    out = run.work / "bundle-cut"
    _export(run, out, db)
    doc = _verify_bundle(run, out, 1)
    assert "dapr-history-behind-ledger" in _report_codes(doc, GATED)


def test_pinned_trust_anchors_replace_the_bundles(run: AuditedDaprRun, bundle: Path) -> None:
    other = foreign_ca(run.work / "other-ca.pem")
    doc = _verify_bundle(run, bundle, 1, "--trust-anchors", other)
    assert "dapr-cert-untrusted" in _report_codes(doc, GATED)
    pinned = _verify_bundle(run, bundle, 1, "--trust-anchors", run.anchors)
    assert _report_codes(pinned, GATED) == set()
    r = cli("verify", "--bundle", bundle, "--trust", run.keys, "--trust-anchors",
            run.work / "nope.pem", cwd=run.work)
    one_error_line(r, "nope.pem")


def test_bad_dapr_options_are_one_error_line(run: AuditedDaprRun) -> None:
    base = ("export", GATED, "--db", run.ledger, "--key", run.key, "--trust", run.keys)
    one_error_line(cli(*base, "--out", run.work / "b1", "--dapr-state", run.db,
                       cwd=run.work), "--trust-anchors")
    one_error_line(cli(*base, "--out", run.work / "b2", "--trust-anchors", run.anchors,
                       cwd=run.work), "--dapr-state")
    one_error_line(cli(*base, "--out", run.work / "b3", "--dapr-state", run.work / "nope.db",
                       "--trust-anchors", run.anchors, cwd=run.work), "nope.db")
    assert not (run.work / "b3").exists()
    one_error_line(cli("verify", GATED, "--db", run.ledger, "--trust", run.keys,
                       "--trust-anchors", run.anchors, cwd=run.work), "--bundle")
    one_error_line(cli("dapr-verify", GATED, "--state-db", run.db, "--trust-anchors",
                       run.anchors, "--db", run.ledger, cwd=run.work), "--trust")
