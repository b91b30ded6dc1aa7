"""Compliance export and offline bundle verification, on SQLite and on real PostgreSQL.

A real ledger (three interleaved order workflows with committed payloads, one payload
erased through ``histaudit redact``) is exported with the real command, two of its three
instances, and the bundle is checked as docs/bundle.md §9 says: it verifies clean; each
kind of tampering gives its precise findings and exit status 1; each kind of unreadable
or unauthenticated bundle is an input error, exit status 2 and one line on stderr. The
time window chooses instances by their entries' times; an export taken while another
process appends still verifies.
"""

from __future__ import annotations

import base64
import json
import multiprocessing as mp
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from jsonschema import Draft202012Validator

from histaudit.bundle.envelope import MANIFEST_TYPE, pae
from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.errors import InputError, SignatureError, UsageError
from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore, generate_keypair
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import Ledger
from histaudit.verify.findings import Severity
from support.bundles import (
    KEPT_CASES,
    edit_lines,
    kept_payload_bundle,
    put_head,
    read_lines,
    write_lines,
)
from support.cli import cli, exits, one_error_line, verification_failed
from support.ledgers import LedgerDb, committed
from support.repo import SCHEMAS

# one xdist worker builds the module fixtures (its module ledger) once (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("export")

SCHEMA = SCHEMAS / "bundle-manifest.schema.json"
EXPORTED = ("order-1", "order-2")
NOT_EXPORTED = "order-3"


# --- a real ledger, exported ------------------------------------------------------------

def order_steps(instance: str, amount: int) -> list[tuple[str, dict[str, Any], Any]]:
    """The four entries of one order workflow: (kind, data, payload rows)."""
    ref_in, rows_in = committed(b'{"card":"4111-1111-1111-1111","amount":%d}' % amount)
    ref_out, rows_out = committed(b'{"charged":true,"amount":%d}' % amount)
    charge = {"task_id": 1, "activity": "charge", "attempt": 1, "worker": "w-1:42"}
    return [
        ("workflow.started", {"workflow": "order", "input": ref_in, "instance_note": instance},
         rows_in),
        ("activity.started", charge, None),
        ("activity.completed", {**charge, "output": ref_out}, rows_out),
        ("workflow.completed", {"status": "COMPLETED"}, None),
    ]


def build_orders(url: str, signer: Signer, instances: tuple[str, ...]) -> None:
    """Interleaved appends: every instance's leaves are spread over the ledger."""
    plans = {i: order_steps(i, 100 * (n + 1)) for n, i in enumerate(instances)}
    with Ledger.open(url, create=True) as ledger:
        for step in range(4):
            for instance, plan in plans.items():
                kind, data, rows = plan[step]
                chain.append(ledger, instance, kind, data, signer=signer, payloads=rows)


@dataclass
class Exported:
    url: str
    tmp: Path
    signer: Signer
    key: Path
    pub: Path
    trust: TrustStore
    bundle: Path
    older_head: StoredHead  # order-1's genuine head before the erasure was recorded
    erased: str             # the commitment whose payload was erased

    def copy(self, dest: Path) -> Path:
        shutil.copytree(self.bundle, dest)
        return dest


def export_orders(db_url: str, tmp_path: Path) -> Exported:
    """Build the ledger, erase one payload and export two instances, all by the command."""
    key, pub, signer = generate_keypair(tmp_path / "keys", name="exporter")
    build_orders(db_url, signer, (*EXPORTED, NOT_EXPORTED))
    with Ledger.open(db_url) as ledger:
        older = ledger.head("order-1")
        first = fmt.parse_entry(ledger.entry_at("order-1", 1).body)  # type: ignore[union-attr]
    assert older is not None
    exits(cli("redact", "order-1", "--seq", "1", "--field", "input", "--reason", "GDPR art. 17",
              "--db", db_url, "--key", key, cwd=tmp_path), 0)
    bundle = tmp_path / "bundle"
    r = cli("export", *EXPORTED, "--out", bundle, "--with-payloads", "--db", db_url,
            "--key", key, "--trust", pub, cwd=tmp_path)
    exits(r, 0)
    assert r.stdout.startswith("exported 2 instance(s), 9 entries, ")
    return Exported(db_url, tmp_path, signer, key, pub, TrustStore([signer.public]), bundle,
                    older, first.data["input"]["c"])


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def exported(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """One exported bundle per store, shared by the tests that only read it (they copy it
    before spoiling it): building it takes two runs of the command."""
    tmp = tmp_path_factory.mktemp(f"export-{request.param}")
    if request.param == "sqlite":
        yield export_orders(f"sqlite:///{tmp / 'ledger.db'}", tmp)
        return
    server = request.getfixturevalue("pg_server")
    name = f"t_export_shared_{uuid.uuid4().hex[:8]}"
    url = server.create_database(name)
    try:
        yield export_orders(url, tmp)
    finally:
        server.drop_database(name)


def manifest_of(bundle: Path) -> dict[str, Any]:
    env = json.loads((bundle / "manifest.dsse.json").read_bytes())
    return json.loads(base64.b64decode(env["payload"]))


def errors_by_instance(bundle: Path, trust: TrustStore) -> dict[str, set[tuple[str, Any]]]:
    """{instance: {(code, seq)}} of verify_bundle's error findings, "(bundle)" for the
    bundle's own; every exported instance has a key, clean or not."""
    result = verify_bundle(bundle, trust)
    got: dict[str, set[tuple[str, Any]]] = {"(bundle)": set()}
    for report in result.all_reports():
        got.setdefault(report.instance_id, set())
        for f in report.failing(Severity.ERROR):
            got.setdefault(f.instance, set()).add((f.code, f.seq))
    return got


# --- a clean bundle ---------------------------------------------------------------------

def test_export_verifies_with_the_library_and_the_command(exported: Exported,
                                                         tmp_path: Path) -> None:
    b = exported.bundle
    assert sorted(p.name for p in b.iterdir()) == sorted([
        "manifest.dsse.json", "checkpoint.note", "entries.jsonl", "heads.jsonl", "keys.json",
        "payloads.jsonl", "report.html"])
    result = verify_bundle(b, exported.trust)
    assert result.ok and result.findings == ()
    assert [(r.instance_id, r.entries, r.findings) for r in result.reports] == [
        ("order-1", 5, ()), ("order-2", 4, ())]
    exits(cli("verify", "--bundle", b, "--trust", exported.pub, cwd=tmp_path), 0)
    r = cli("verify", "--bundle", b, "--trust", exported.pub, "--json", cwd=tmp_path)
    exits(r, 0)
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["checkpoint"]["size"] == 13  # 12 entries + the erasure
    # Entries: the two instances whole, in order, none of the third.
    entries = read_lines(b / "entries.jsonl")
    assert [(e["instance"], e["seq"]) for e in entries] == (
        [("order-1", s) for s in range(1, 6)] + [("order-2", s) for s in range(1, 5)])
    assert fmt.parse_entry(base64.b64decode(entries[4]["body"])).kind == "payload.erased"
    # Payloads: the kept ones only; the erased input is gone, its commitment still signed.
    kept = {p["commitment"] for p in read_lines(b / "payloads.jsonl")}
    assert len(kept) == 3 and exported.erased not in kept
    assert exported.erased.encode() in b"".join(base64.b64decode(e["body"]) for e in entries)


def test_manifest_validates_against_the_schema(exported: Exported, tmp_path: Path) -> None:
    schema = json.loads(SCHEMA.read_bytes())
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    manifest = manifest_of(exported.bundle)
    assert list(validator.iter_errors(manifest)) == []
    assert manifest["version"] == 1 and manifest["format"] == "histaudit-bundle"
    assert [i["instance"] for i in manifest["instances"]] == list(EXPORTED)
    assert manifest["instances"][0] == {"instance": "order-1", "entries": 5, "last_seq": 5}
    assert manifest["window"] == {"since": None, "until": None}
    assert manifest["exporter"] == exported.signer.kid
    # A bundle without payloads and report, with a window, validates too.
    with Ledger.open(exported.url) as ledger:
        export(ledger, ["order-2"], tmp_path / "bare", signer=exported.signer,
               trust=exported.trust, since="2000-01-01T00:00:00Z", html=False)
    bare = manifest_of(tmp_path / "bare")
    assert sorted(bare["files"]) == ["checkpoint.note", "entries.jsonl", "heads.jsonl",
                                     "keys.json"]
    assert list(validator.iter_errors(bare)) == []
    # And the schema does refuse what a version-1 manifest cannot be.
    for broken in ({**manifest, "version": 2}, {**manifest, "extra": 1},
                   {**manifest, "files": {**manifest["files"], "../x": manifest["files"][
                       "keys.json"]}},
                   {k: v for k, v in manifest.items() if k != "checkpoint"}):
        assert list(validator.iter_errors(broken)), broken


def test_report_html_is_one_offline_file_naming_each_instance(exported: Exported) -> None:
    html_files = [p for p in exported.bundle.iterdir() if p.suffix in (".html", ".htm", ".css",
                                                                       ".js")]
    assert [p.name for p in html_files] == ["report.html"]
    text = (exported.bundle / "report.html").read_text(encoding="utf-8")
    lowered = text.lower()
    assert lowered.startswith("<!doctype html>")
    assert "<script" not in lowered and not re.search(r"https?:", lowered)
    for tag in ("<link", "<img", "<iframe", "src=", "@import", "url("):
        assert tag not in lowered, tag
    for instance in EXPORTED:
        assert f">{instance}<" in text
    assert NOT_EXPORTED not in text
    assert "payload.erased" in text and "activity.completed" in text


# --- tampering: findings, exit status 1 -------------------------------------------------

def _edit_entries(bundle: Path, fn: Callable[[list[dict[str, Any]]], None]) -> None:
    edit_lines(bundle / "entries.jsonl", fn)


def _index(docs: list[dict[str, Any]], instance: str, seq: int) -> int:
    return next(n for n, d in enumerate(docs) if (d["instance"], d["seq"]) == (instance, seq))


def delete_middle_line(b: Path, ex: Exported) -> None:
    _edit_entries(b, lambda d: d.pop(_index(d, "order-1", 3)))


def delete_last_line(b: Path, ex: Exported) -> None:
    _edit_entries(b, lambda d: d.pop(_index(d, "order-1", 5)))


def swap_two_lines(b: Path, ex: Exported) -> None:
    def swap(d: list[dict[str, Any]]) -> None:
        i, j = _index(d, "order-2", 2), _index(d, "order-2", 3)
        d[i], d[j] = d[j], d[i]
    _edit_entries(b, swap)


def change_body_byte(b: Path, ex: Exported) -> None:
    def change(d: list[dict[str, Any]]) -> None:
        line = d[_index(d, "order-1", 2)]
        body = base64.b64decode(line["body"])
        forged = body.replace(b'"charge"', b'"refund"')
        assert forged != body and len(forged) == len(body)
        line["body"] = base64.b64encode(forged).decode()
    _edit_entries(b, change)


def change_proof_hash(b: Path, ex: Exported) -> None:
    def change(d: list[dict[str, Any]]) -> None:
        proof = d[_index(d, "order-2", 1)]["inclusion"]
        h = bytearray(base64.b64decode(proof[0]))
        h[7] ^= 0x10
        proof[0] = base64.b64encode(bytes(h)).decode()
    _edit_entries(b, change)


def older_head(b: Path, ex: Exported) -> None:
    put_head(b, "order-1", ex.older_head)


def replace_key(b: Path, ex: Exported) -> None:
    doc = json.loads((b / "keys.json").read_bytes())
    doc["keys"][0] = KeyFileSigner.generate().public.to_json()
    (b / "keys.json").write_bytes(orjson.dumps(doc))


def change_payload(b: Path, ex: Exported) -> None:
    docs = read_lines(b / "payloads.jsonl")
    with Ledger.open(ex.url) as ledger:
        row = ledger.entry_at("order-2", 1)
        assert row is not None
        c = fmt.parse_entry(row.body).data["input"]["c"]
    for p in docs:
        if p["commitment"] == c:
            p["data"] = base64.b64encode(b'{"card":"4111-1111-1111-1111","amount":1}').decode()
    write_lines(b / "payloads.jsonl", docs)


def move_line_to_unlisted_instance(b: Path, ex: Exported) -> None:
    _edit_entries(b, lambda d: d[_index(d, "order-2", 4)].update(instance="order-9"))


CHANGED = ("bundle-file-changed", None)
TAMPERING: dict[str, tuple[Callable[[Path, Exported], None], dict[str, set[Any]]]] = {
    "entry line deleted from the middle": (delete_middle_line, {
        "(bundle)": {CHANGED}, "order-1": {("seq-gap", 4)}}),
    "last entry line deleted": (delete_last_line, {
        "(bundle)": {CHANGED}, "order-1": {("tail-truncated", 5)}}),
    "two entry lines swapped": (swap_two_lines, {
        "(bundle)": {CHANGED}, "order-2": {("seq-reordered", 2), ("seq-gap", 3)}}),
    "body byte changed inside the base64": (change_body_byte, {
        "(bundle)": {CHANGED},
        "order-1": {("inclusion-invalid", 2), ("signature-invalid", 2), ("link-broken", 3)}}),
    "inclusion proof hash changed": (change_proof_hash, {
        "(bundle)": {CHANGED}, "order-2": {("inclusion-invalid", 1)}}),
    "heads.jsonl holds an older head": (older_head, {
        "(bundle)": {CHANGED}, "order-1": {("head-mismatch", 5)}}),
    "keys.json key replaced": (replace_key, {
        "(bundle)": {CHANGED, ("key-untrusted", None)}}),
    "kept payload changed": (change_payload, {
        "(bundle)": {CHANGED}, "order-2": {("payload-mismatch", 1)}}),
    "entry moved to an instance the manifest does not list": (move_line_to_unlisted_instance, {
        "(bundle)": {CHANGED}, "order-9": {CHANGED}, "order-2": {("tail-truncated", 4)}}),
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampered_bundle_gives_its_findings_and_exit_1(exported: Exported, tmp_path: Path,
                                                       case: str) -> None:
    tamper, expected = TAMPERING[case]
    b = exported.copy(tmp_path / "tampered")
    tamper(b, exported)
    got = errors_by_instance(b, exported.trust)
    want = {name: set() for name in ("(bundle)", *EXPORTED)} | expected
    assert got == want
    r = cli("verify", "--bundle", b, "--trust", exported.pub, cwd=tmp_path)
    exits(r, 1)
    for codes in expected.values():
        for code, _ in codes:
            assert code in r.stdout


def test_ledger_reordered_before_export_is_inclusion_invalid(db_url: str,
                                                             tmp_path: Path) -> None:
    """Someone swapped two rows' leaf columns before the export: every root and proof is
    computed over the swapped order, but the signed bodies still say where they belong."""
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    build_orders(db_url, signer, EXPORTED)
    with LedgerDb(db_url) as db:
        db.lift_guards()
        for old, new in ((0, -1), (1, 0), (-1, 1)):
            db.set_entry_at(old, leaf=new)
    with Ledger.open(db_url) as ledger:
        export(ledger, [], tmp_path / "b", signer=signer, trust=trust)
    got = errors_by_instance(tmp_path / "b", trust)
    # Each row sits at the other's leaf: the proofs do not hold, and the bodies say so.
    assert got == {"(bundle)": set(),
                   "order-1": {("inclusion-invalid", 1), ("leaf-mismatch", 1)},
                   "order-2": {("inclusion-invalid", 1), ("leaf-mismatch", 1)}}


def test_rows_no_bundle_can_carry_are_refused_and_nothing_is_stored(
        db_url: str, tmp_path: Path) -> None:
    """A row moved to leaf -1 (the count of leaves below the checkpoint still matches) has
    no inclusion proof, on SQLite a seq column of 2^64 has no JSON integer orjson writes,
    and a body that does not parse names no key for keys.json: export names the row (it
    crashed in the proof and in orjson, and gave a bare "entry body is not JSON") and
    leaves no bundle and no checkpoint row behind. A seq of -1 is carried: the bundle's verifier
    reports it, as `histaudit verify` does."""
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    build_orders(db_url, signer, EXPORTED)
    edits = [({"leaf": -1}, "a row stored with leaf column -1"),
             ({"body": b"{"}, r"an entry at leaf 2 that does not parse \(entry body is not "
                              r"JSON\)")]
    if db_url.startswith("sqlite"):  # kept as REAL
        edits.append(({"seq": str(1 << 64)}, f"a row stored with seq column {1 << 64}"))
    with LedgerDb(db_url) as db:
        checkpoints = db.run("SELECT count(*) FROM histaudit_checkpoints")
        body = db.entry("order-1", 2).body
        db.lift_guards()
        for cols, needle in edits:
            db.set_entry("order-1", 2, **cols)
            with Ledger.open(db_url) as ledger, pytest.raises(
                    InputError, match=f"'order-1' has {needle}, which histaudit cannot export"):
                export(ledger, [], tmp_path / "b", signer=signer, trust=trust)
            assert not (tmp_path / "b").exists()
            assert db.run("SELECT count(*) FROM histaudit_checkpoints") == checkpoints
            db.set_entry_at(-1 if "leaf" in cols else 2, leaf=2, seq=2, body=body)
        db.set_entry("order-1", 2, seq=-1)
        db.restore_guards()
    with Ledger.open(db_url) as ledger:
        export(ledger, [], tmp_path / "b", signer=signer, trust=trust)
    assert errors_by_instance(tmp_path / "b", trust) == {
        "(bundle)": set(), "order-1": {("entry-malformed", 2)}, "order-2": set()}


# --- unreadable or unauthenticated bundles: exit status 2, one line ---------------------

def _envelope(b: Path) -> dict[str, Any]:
    return json.loads((b / "manifest.dsse.json").read_bytes())


def _resign(b: Path, signer: Signer, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the manifest and sign it again properly, with the exporter's own key."""
    manifest = manifest_of(b)
    change(manifest)
    payload = orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    env = {"payloadType": MANIFEST_TYPE, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": signer.kid, "sig": base64.b64encode(
               signer.sign(pae(MANIFEST_TYPE, payload))).decode()}]}
    (b / "manifest.dsse.json").write_bytes(orjson.dumps(env))


def _alter_payload(b: Path, ex: Exported) -> None:
    env = _envelope(b)
    payload = base64.b64decode(env["payload"]).replace(b'"last_seq": 5', b'"last_seq": 4')
    assert payload != base64.b64decode(env["payload"])
    env["payload"] = base64.b64encode(payload).decode()
    (b / "manifest.dsse.json").write_text(json.dumps(env))


def _keyid_not_a_string(b: Path, ex: Exported) -> None:
    env = _envelope(b)
    env["signatures"][0]["keyid"] = ["not", "a", "string"]
    (b / "manifest.dsse.json").write_text(json.dumps(env))


def _truncate(name: str, keep: Callable[[bytes], int]) -> Callable[[Path, Exported], None]:
    def cut(b: Path, ex: Exported) -> None:
        data = (b / name).read_bytes()
        (b / name).write_bytes(data[:keep(data)])
    return cut


def _write(name: str, data: bytes) -> Callable[[Path, Exported], None]:
    def put(b: Path, ex: Exported) -> None:
        (b / name).write_bytes(data)
    return put


def _remove(name: str) -> Callable[[Path, Exported], None]:
    def rm(b: Path, ex: Exported) -> None:
        (b / name).unlink()
    return rm


def _entry_field(key: str, value: Any) -> Callable[[Path, Exported], None]:
    def put(b: Path, ex: Exported) -> None:
        _edit_entries(b, lambda d: d[0].update({key: value}))
    return put


BAD_INPUT: dict[str, tuple[Callable[[Path, Exported], None], str]] = {
    "manifest not JSON": (_write("manifest.dsse.json", b"this is not json\n"), "not JSON"),
    "manifest truncated": (_truncate("manifest.dsse.json", lambda d: len(d) // 2), "not JSON"),
    "manifest missing": (_remove("manifest.dsse.json"), "manifest.dsse.json is missing"),
    "manifest not an envelope": (_write("manifest.dsse.json", b'{"payload": "e30="}'),
                                 "not a histaudit DSSE envelope"),
    "unknown bundle version": (lambda b, ex: _resign(b, ex.signer, lambda m: m.update(
        version=99)), "unknown version 99"),
    "version true": (lambda b, ex: _resign(b, ex.signer, lambda m: m.update(version=True)),
                     "unknown version True"),
    "required file unlisted": (lambda b, ex: _resign(b, ex.signer, lambda m: m["files"].pop(
        "heads.jsonl")), "does not list heads.jsonl"),
    "heads.jsonl missing": (_remove("heads.jsonl"), "heads.jsonl is missing"),
    "entries.jsonl truncated mid-line": (_truncate("entries.jsonl", lambda d: len(d) - 40),
                                         "entries.jsonl is truncated"),
    "entries.jsonl line not an object": (_write("entries.jsonl", b"[1, 2]\n"),
                                         "line 1 is not a JSON object"),
    "entry inclusion not a list": (_entry_field("inclusion", 5), "inclusion is not a list"),
    "entry body not base64": (_entry_field("body", "%%%"), "not valid base64"),
    "checkpoint.note garbage": (_write("checkpoint.note", b"garbage\n"), "checkpoint.note"),
}


UNAUTHENTIC: dict[str, Callable[[Path, Exported], None]] = {
    "manifest payload altered": _alter_payload,
    "signature keyid not a string": _keyid_not_a_string,
    "checkpoint.note altered": lambda b, ex: (b / "checkpoint.note").write_bytes(
        (b / "checkpoint.note").read_bytes().replace(b"\n", b"\n1", 1)),
}
"""Bundles that read but fail authentication: a failed check (exit 1), not bad input."""


@pytest.mark.parametrize("case", list(UNAUTHENTIC))
def test_bundle_not_signed_by_a_trusted_key_fails_verification_exit_1(
        exported: Exported, tmp_path: Path, case: str) -> None:
    b = exported.copy(tmp_path / "spoiled")
    UNAUTHENTIC[case](b, exported)
    needle = ("checkpoint.note: no valid signature by a trusted key" if "checkpoint" in case
              else "bundle manifest is not signed by a trusted key")
    with pytest.raises(SignatureError, match=re.escape(needle)):
        verify_bundle(b, exported.trust)
    for json_flag in ((), ("--json",)):
        verification_failed(cli("verify", "--bundle", b, "--trust", exported.pub,
                                *json_flag, cwd=tmp_path), needle)


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_bundle_is_an_input_error_exit_2(exported: Exported, tmp_path: Path,
                                            case: str) -> None:
    spoil, needle = BAD_INPUT[case]
    b = exported.copy(tmp_path / "spoiled")
    spoil(b, exported)
    with pytest.raises(InputError, match=re.escape(needle)):
        verify_bundle(b, exported.trust)
    one_error_line(cli("verify", "--bundle", b, "--trust", exported.pub, cwd=tmp_path), needle)


def test_missing_bundle_is_an_input_error_wrong_trust_a_failed_check(
        exported: Exported, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-bundle"
    one_error_line(cli("verify", "--bundle", missing, "--trust", exported.pub,
                       cwd=tmp_path), "is not a directory")
    with pytest.raises(InputError, match="is not a directory"):
        verify_bundle(missing, exported.trust)
    _, other_pub, other = generate_keypair(tmp_path / "other-keys", name="someone-else")
    verification_failed(cli("verify", "--bundle", exported.bundle, "--trust", other_pub,
                            cwd=tmp_path), "not signed by a trusted key")
    with pytest.raises(SignatureError, match="not signed by a trusted key"):
        verify_bundle(exported.bundle, TrustStore([other.public]))
    one_error_line(cli("verify", "--bundle", exported.bundle, cwd=tmp_path), "--trust")


# --- choosing what to export ------------------------------------------------------------

def test_export_of_an_unknown_instance_is_refused(exported: Exported, tmp_path: Path) -> None:
    base = ("--db", exported.url, "--key", exported.key, "--trust", exported.pub)
    one_error_line(cli("export", "order-1", "no-such-order", "--out", tmp_path / "x",
                       *base, cwd=tmp_path), "no-such-order")
    one_error_line(cli("export", "--out", exported.bundle, *base, cwd=tmp_path),
                   "not empty")
    _, other_pub, _ = generate_keypair(tmp_path / "k2", name="other")
    one_error_line(cli("export", "--out", tmp_path / "y", "--db", exported.url, "--key",
                       exported.key, "--trust", other_pub, cwd=tmp_path),
                   "not in the trust store")


TIMES = {  # instance -> the entries' timestamps (set by the test, not the clock)
    "early": ["2025-01-01T09:00:00.000000Z", "2025-01-01T09:30:00.000000Z"],
    "boundary": ["2025-01-01T09:59:59.999999Z", "2025-01-01T10:00:00.300000Z"],
    "late": ["2025-01-02T08:00:00.000000Z", "2025-01-02T08:00:01.000000Z",
             "2025-01-02T08:00:02.000000Z"],
}


@pytest.fixture
def timed(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Exported:
    key, pub, signer = generate_keypair(tmp_path / "keys", name="exporter")
    with Ledger.open(db_url, create=True) as ledger:
        for step in range(3):
            for instance, times in TIMES.items():
                if step < len(times):
                    monkeypatch.setattr(fmt, "now_ts", lambda t=times[step]: t)
                    chain.append(ledger, instance, "step.done", {"step": step}, signer=signer)
    monkeypatch.undo()
    return Exported(db_url, tmp_path, signer, key, pub, TrustStore([signer.public]),
                    tmp_path / "unused", None, "")  # type: ignore[arg-type]


@pytest.mark.parametrize(("since", "until", "chosen"), [
    (None, None, ["late", "boundary", "early"]),
    # Compared as instants: 10:00:00.3 is after 10:00:00 (as text it sorts before).
    ("2025-01-01T10:00:00Z", None, ["late", "boundary"]),
    (None, "2025-01-01T10:00:00Z", ["boundary", "early"]),
    (None, "2025-01-01T09:59:59Z", ["early"]),
    ("2025-01-01T10:00:00.3Z", "2025-01-01T10:00:00.300000Z", ["boundary"]),
    ("2025-01-01T09:30:00Z", "2025-01-01T09:30:00Z", ["early"]),  # inclusive bounds
    ("2025-01-01T09:45:00Z", "2025-01-01T09:50:00Z", []),
])
def test_since_until_choose_whole_instances_by_time(timed: Exported, since: str | None,
                                                    until: str | None,
                                                    chosen: list[str]) -> None:
    out = timed.tmp / "window"
    with Ledger.open(timed.url) as ledger:
        if not chosen:
            with pytest.raises(UsageError, match="no instance"):
                export(ledger, [], out, signer=timed.signer, trust=timed.trust, since=since,
                       until=until)
            return
        export(ledger, [], out, signer=timed.signer, trust=timed.trust, since=since,
               until=until)
    manifest = manifest_of(out)
    assert [i["instance"] for i in manifest["instances"]] == chosen
    # Whole instances: entries outside the window come along.
    assert [i["entries"] for i in manifest["instances"]] == [len(TIMES[c]) for c in chosen]
    assert manifest["window"] == {"since": since, "until": until}
    assert verify_bundle(out, timed.trust).ok


def test_cli_since_until(timed: Exported) -> None:
    base = ("--db", timed.url, "--key", timed.key, "--trust", timed.pub)
    out = timed.tmp / "cli-window"
    exits(cli("export", "--out", out, "--since", "2025-01-01T10:00:00Z", "--until",
              "2025-01-01T23:00:00Z", *base, cwd=timed.tmp), 0)
    assert [i["instance"] for i in manifest_of(out)["instances"]] == ["boundary"]
    exits(cli("verify", "--bundle", out, "--trust", timed.pub, cwd=timed.tmp), 0)
    one_error_line(cli("export", "--out", timed.tmp / "none", "--since",
                       "2030-01-01T00:00:00Z", *base, cwd=timed.tmp), "no instance")
    one_error_line(cli("export", "--out", timed.tmp / "bad", "--since", "yesterday", *base,
                       cwd=timed.tmp), "--since")


# --- exporting while others append ------------------------------------------------------

def _keep_appending(url: str, key_path: str, running: Any, stop: Any) -> None:
    signer = KeyFileSigner.load(key_path)
    with Ledger.open(url) as ledger:
        n = 0
        while not stop.is_set():
            chain.append(ledger, "order-2", "progress", {"n": n}, signer=signer)
            chain.append(ledger, "busy", "progress", {"n": n}, signer=signer)
            running.set()
            n += 1


def test_export_while_another_process_appends_verifies(db_url: str, tmp_path: Path) -> None:
    key, _, signer = generate_keypair(tmp_path / "keys", name="exporter")
    trust = TrustStore([signer.public])
    build_orders(db_url, signer, EXPORTED)
    ctx = mp.get_context("spawn")
    running, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_keep_appending, daemon=True,
                       args=(db_url, str(key), running, stop))
    proc.start()
    sizes = []
    try:
        assert running.wait(timeout=120), "the appending process did not start"
        for n in range(6):
            out = tmp_path / f"live-{n}"
            with Ledger.open(db_url) as ledger:
                export(ledger, ["order-2", "order-1"], out, signer=signer, trust=trust)
            result = verify_bundle(out, trust)
            assert result.ok, [(r.instance_id, r.findings) for r in result.all_reports()]
            sizes.append(result.checkpoint.size)
    finally:
        stop.set()
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0], sizes  # it really was appending


# --- kept payloads in bundles (docs/format.md §8.3, docs/bundle.md §9 step 12) ----------

@pytest.mark.parametrize("case", KEPT_CASES)
def test_kept_payloads_in_a_bundle(db_url: str, tmp_path: Path, case: str) -> None:
    _key, pub, signer = generate_keypair(tmp_path / "keys", name="exporter")
    trust = TrustStore([signer.public])
    bundle = tmp_path / "bundle"
    refs = kept_payload_bundle(db_url, signer, bundle, case)
    expected = {
        "clean": {"(bundle)": set(), "kept-1": set()},
        "row deleted before export": {"(bundle)": set(), "kept-1": {("payload-missing", 2)}},
        "payload line deleted": {"(bundle)": {("bundle-file-changed", None)},
                                 "kept-1": {("payload-missing", 3)}},
        # No payloads.jsonl in the signed manifest: the bundle claims no payloads, so
        # kept references are not reported missing (and the erased one is not either).
        "exported without payloads": {"(bundle)": set(), "kept-1": set()},
    }[case]
    assert errors_by_instance(bundle, trust) == expected
    lines = read_lines(bundle / "payloads.jsonl") if (bundle / "payloads.jsonl").exists() else []
    assert refs[1] not in {d["commitment"] for d in lines}  # the erased one is never exported
    r = cli("verify", "--bundle", bundle, "--trust", pub, cwd=tmp_path)
    exits(r, 0 if expected["kept-1"] == set() else 1)
    if expected["kept-1"]:
        assert "payload-missing" in r.stdout


# --- output and checkpoint commit together (docs/bundle.md §8.8) ------------------------

def test_checkpoint_is_stored_only_with_its_bundle(db_url: str, tmp_path: Path) -> None:
    """A failure while the bundle is moved into place, inside the storing transaction (the
    target filled up after it was checked), rolls the checkpoint back; a success stores
    exactly the checkpoint the bundle holds."""
    from histaudit.bundle.staging import StagedOutput

    signer = KeyFileSigner.generate()
    build_orders(db_url, signer, EXPORTED)
    out = tmp_path / "b"
    with Ledger.open(db_url) as ledger:
        staged = StagedOutput(out, lambda cp: {"checkpoint.note": cp.note}, what="bundle",
                              directory=True)
        out.mkdir()
        (out / "intruder").write_bytes(b"arrived after the check")
        with pytest.raises(InputError, match="cannot write bundle"):
            chain.make_checkpoint(ledger, signer, output=staged)
        assert ledger.checkpoint_notes() == []
        assert not [p for p in tmp_path.iterdir() if "partial" in p.name]
        assert [p.name for p in out.iterdir()] == ["intruder"]
        (out / "intruder").unlink()
        export(ledger, [], out, signer=signer, trust=TrustStore([signer.public]))
        notes = ledger.checkpoint_notes()
    assert [n for _, n in notes] == [(out / "checkpoint.note").read_bytes()]
