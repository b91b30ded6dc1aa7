"""The documents are enough: an independent verifier checks real bundles.

``tests/independent/verifier.py`` was written from docs/format.md and docs/bundle.md only
and imports nothing from histaudit (checked here by reading its source, and by running it
with histaudit imports refused). Real ledgers on SQLite and on PostgreSQL are exported
with histaudit; the independent verifier must find no problem in the bundle, must find
problems in tampered copies — the same findings, at the same entries, as histaudit's own
verifier — and must refuse the same unreadable bundles. The worked examples of
docs/bundle.md are checked with it too.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from histaudit.bundle.envelope import MANIFEST_TYPE, pae
from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.errors import InputError, SignatureError
from histaudit.ledger import chain
from histaudit.ledger.chain import make_checkpoint
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
from support.ledgers import committed
from support.repo import DOCS, REPO, VECTORS

VERIFIER = REPO / "tests" / "independent" / "verifier.py"
ALLOWED_IMPORTS = {"__future__", "base64", "binascii", "hashlib", "json", "re", "sys",
                   "datetime", "pathlib", "typing", "cryptography"}


def load_verifier() -> ModuleType:
    spec = importlib.util.spec_from_file_location("independent_verifier", VERIFIER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["independent_verifier"] = module  # NamedTuple needs its module registered
    spec.loader.exec_module(module)
    return module


iv = load_verifier()


# --- independence ---------------------------------------------------------------------

def test_verifier_imports_only_stdlib_and_cryptography() -> None:
    source = VERIFIER.read_text(encoding="utf-8")
    import_lines = [ln for ln in source.splitlines() if re.match(r"\s*(import|from)\s", ln)]
    assert import_lines and not [ln for ln in import_lines if "histaudit" in ln]
    for forbidden in ("importlib", "__import__", "sys.path", "exec(", "eval(", "runpy"):
        assert forbidden not in source, forbidden
    modules = set()
    for node in ast.walk(ast.parse(source)):  # imports anywhere, not only at the top
        assert not (isinstance(node, ast.Name) and node.id == "histaudit")
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            modules.add((node.module or "").split(".")[0])
    assert modules <= ALLOWED_IMPORTS, modules - ALLOWED_IMPORTS


# Runs the verifier as a program with every histaudit import refused.
_BLOCKED = textwrap.dedent("""
    import runpy, sys

    class RefuseHistaudit:
        def find_spec(self, name, path=None, target=None):
            if name == "histaudit" or name.startswith("histaudit."):
                raise ImportError("the independent verifier imported " + name)
            return None

    sys.meta_path.insert(0, RefuseHistaudit())
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def run_blocked(bundle: Path, trust: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCKED, str(VERIFIER), str(bundle),
                           str(trust)], capture_output=True, text=True, timeout=300)


# --- a real ledger, exported by histaudit ---------------------------------------------

@dataclass
class Made:
    url: str
    tmp: Path
    signer: Signer
    trust: TrustStore
    pub: Path
    bundle: Path
    older_head: StoredHead

    def copy(self, name: str) -> Path:
        return Path(shutil.copytree(self.bundle, self.tmp / name))

    def independent(self, bundle: Path, pub: Path | None = None) -> list[Any]:
        return iv.verify_bundle(bundle, iv.load_trust(pub or self.pub))


# Data that exercises canonical JSON: key order by UTF-16 code units (U+FFFF after an
# astral character), escapes, raw UTF-8, integer edges.
AWKWARD = {"\uffff": "last in UTF-16", "\U0001f600": "astral", "é": "accent", "a": 1,
           "ctl": "tab\tnl\nnul\u0000 bell\u0007 slash/ quote\" backslash\\ \u2028",
           "big": 9007199254740991, "neg": -9007199254740991, "zero": 0, "nested": [
               {"z": None, "y": True, "x": False}, []]}


def build(url: str, signer: Signer) -> StoredHead:
    """Four instances, interleaved; returns an older head of inv-1 for the head test."""
    with Ledger.open(url, create=True) as ledger:
        refs = {}
        for rnd in range(1, 5):
            for inst in ("inv-1", "inv-2", "inv-3", "inv-4"):
                data: dict[str, Any] = {"round": rnd, "activity": "charge", "task_id": rnd}
                rows = None
                if rnd in (1, 3):
                    ref, rows = committed(f"{inst} payload {rnd} \u00fc".encode())
                    data["input"] = ref
                    refs[(inst, rnd)] = ref["c"]
                if inst == "inv-2" and rnd == 2:
                    data["odd"] = AWKWARD
                kind = "activity.started" if rnd < 4 else "workflow.completed"
                chain.append(ledger, inst, kind, data, signer=signer, payloads=rows)
        # A crash retry (a warning for histaudit, nothing for the chain), and an erasure.
        chain.append(ledger, "inv-3", "activity.started", {"task_id": 3, "activity": "charge"},
                      signer=signer)
        older = ledger.head("inv-1")
        assert older is not None
        erased, _ = chain.erase_payload(ledger, "inv-1", refs[("inv-1", 1)], signer=signer,
                                         record={"entry": 1, "field": "input"})
        assert erased
    return older


@pytest.fixture
def made(db_url: str, tmp_path: Path) -> Made:
    _, pub, signer = generate_keypair(tmp_path / "keys", name="exporter",
                                      not_before="2000-01-01T00:00:00Z",
                                      not_after="2100-01-01T00:00:00.5Z")
    trust = TrustStore.load(pub)
    older = build(db_url, signer)
    bundle = tmp_path / "bundle"
    with Ledger.open(db_url) as ledger:
        export(ledger, ["inv-1", "inv-2", "inv-3"], bundle, signer=signer, trust=trust,
               with_payloads=True)
    return Made(db_url, tmp_path, signer, trust, pub, bundle, older)


def histaudit_errors(bundle: Path, trust: TrustStore) -> set[tuple[str, str, int | None]]:
    result = verify_bundle(bundle, trust)
    return {(f.code, f.instance, f.seq) for r in result.all_reports()
            for f in r.failing(Severity.ERROR)}


def independent_errors(made: Made, bundle: Path) -> set[tuple[str, str, int | None]]:
    return {(p.code, p.instance, p.seq) for p in made.independent(bundle)}


# --- clean --------------------------------------------------------------------------------

def test_real_bundle_has_no_problems(made: Made) -> None:
    assert verify_bundle(made.bundle, made.trust).ok  # histaudit agrees it is clean
    assert made.independent(made.bundle) == []
    r = run_blocked(made.bundle, made.pub)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    # It really looked: the bundle holds what the test built.
    entries = read_lines(made.bundle / "entries.jsonl")
    assert len(entries) == 5 + 4 + 5  # inv-1 with its erasure, inv-2, inv-3 with a retry
    bodies = b"".join(base64.b64decode(e["body"]) for e in entries)
    assert "\uffff\U0001f600".encode() not in bodies  # raw UTF-8, UTF-16 order: see below
    assert b'"\xf0\x9f\x98\x80":"astral"' in bodies and b'"\xef\xbf\xbf":' in bodies


def test_independent_chain_checks_catch_what_the_key_window_says(made: Made) -> None:
    """A trust store whose key window ends before the entries were signed."""
    doc = made.signer.public.to_json()
    doc["not_after"] = "2001-01-01T00:00:00Z"
    narrow = made.tmp / "narrow.pub.json"
    narrow.write_text(json.dumps(doc))
    got = {(p.code, p.instance, p.seq) for p in made.independent(made.bundle, narrow)}
    assert {code for code, _, _ in got} == {"key-outside-window"}
    want = histaudit_errors(made.bundle, TrustStore.load(narrow))
    assert got == want


# --- tampered copies ----------------------------------------------------------------------

def _at(docs: list[dict[str, Any]], instance: str, seq: int) -> int:
    return next(n for n, d in enumerate(docs) if (d["instance"], d["seq"]) == (instance, seq))


def _on_entries(fn: Callable[[list[dict[str, Any]]], None]) -> Callable[[Path, Made], None]:
    def tamper(b: Path, m: Made) -> None:
        edit_lines(b / "entries.jsonl", fn)
    return tamper


def _swap(docs: list[dict[str, Any]]) -> None:
    i, j = _at(docs, "inv-2", 2), _at(docs, "inv-2", 3)
    docs[i], docs[j] = docs[j], docs[i]


def _body_byte(docs: list[dict[str, Any]]) -> None:
    line = docs[_at(docs, "inv-3", 2)]
    body = bytearray(base64.b64decode(line["body"]))
    at = body.index(b'"charge"') + 1
    body[at] = ord("C")
    line["body"] = base64.b64encode(bytes(body)).decode()


def _proof_hash(docs: list[dict[str, Any]]) -> None:
    proof = docs[_at(docs, "inv-1", 2)]["inclusion"]
    h = bytearray(base64.b64decode(proof[-1]))
    h[0] ^= 1
    proof[-1] = base64.b64encode(bytes(h)).decode()


def _older_head(b: Path, m: Made) -> None:
    put_head(b, "inv-1", m.older_head)


def _payload_changed(b: Path, m: Made) -> None:
    docs = read_lines(b / "payloads.jsonl")
    docs[0]["data"] = base64.b64encode(b"something else").decode()
    write_lines(b / "payloads.jsonl", docs)


def _key_replaced(b: Path, m: Made) -> None:
    stranger = KeyFileSigner.generate().public.to_json()
    (b / "keys.json").write_bytes(orjson.dumps({"keys": [stranger]}))


def _newer_checkpoint(b: Path, m: Made) -> None:
    """A genuine, trusted, later checkpoint of the same ledger put in the bundle."""
    with Ledger.open(m.url) as ledger:
        chain.append(ledger, "inv-4", "late", {}, signer=m.signer)
        (b / "checkpoint.note").write_bytes(make_checkpoint(ledger, m.signer).note)


def _forged_entry(b: Path, m: Made) -> None:
    """An entry re-signed by an untrusted key, so only its key is wrong."""
    docs = read_lines(b / "entries.jsonl")
    line = docs[_at(docs, "inv-2", 4)]
    entry = json.loads(base64.b64decode(line["body"]))
    mallory = KeyFileSigner.generate()
    entry["kid"] = mallory.kid
    body = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    line["body"], line["sig"] = (base64.b64encode(body).decode(),
                                 base64.b64encode(mallory.sign(body)).decode())
    write_lines(b / "entries.jsonl", docs)


TAMPERING: dict[str, Callable[[Path, Made], None]] = {
    "middle line deleted": _on_entries(lambda d: d.pop(_at(d, "inv-3", 2))),
    "last line deleted": _on_entries(lambda d: d.pop(_at(d, "inv-1", 5))),
    "first line deleted": _on_entries(lambda d: d.pop(_at(d, "inv-2", 1))),
    "lines swapped": _on_entries(_swap),
    "body byte changed": _on_entries(_body_byte),
    "proof hash changed": _on_entries(_proof_hash),
    "line moved to an unlisted instance": _on_entries(
        lambda d: d[_at(d, "inv-2", 4)].update(instance="inv-9")),
    "older head": _older_head,
    "payload changed": _payload_changed,
    "key replaced": _key_replaced,
    "newer checkpoint": _newer_checkpoint,
    "entry signed by an untrusted key": _forged_entry,
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_tampered_copy_gives_the_same_findings_as_histaudit(made: Made, case: str) -> None:
    b = made.copy("tampered")
    TAMPERING[case](b, made)
    mine = independent_errors(made, b)
    theirs = histaudit_errors(b, made.trust)
    assert mine, "the independent verifier found nothing"
    assert ("bundle-file-changed", "(bundle)", None) in mine
    assert mine == theirs
    r = run_blocked(b, made.pub)
    assert r.returncode == 1 and r.stdout.count("\n") == len(made.independent(b)), r.stderr


def _resign(b: Path, m: Made, change: Callable[[dict[str, Any]], None]) -> None:
    env = json.loads((b / "manifest.dsse.json").read_bytes())
    manifest = json.loads(base64.b64decode(env["payload"]))
    change(manifest)
    payload = json.dumps(manifest).encode()
    env["payload"] = base64.b64encode(payload).decode()
    env["signatures"] = [{"keyid": m.signer.kid, "sig": base64.b64encode(
        m.signer.sign(pae(MANIFEST_TYPE, payload))).decode()}]
    (b / "manifest.dsse.json").write_text(json.dumps(env))


def _alter_payload(b: Path, m: Made) -> None:
    env = json.loads((b / "manifest.dsse.json").read_bytes())
    manifest = json.loads(base64.b64decode(env["payload"]))
    manifest["instances"].pop()
    env["payload"] = base64.b64encode(json.dumps(manifest).encode()).decode()
    (b / "manifest.dsse.json").write_text(json.dumps(env))


def _cut(name: str, keep: int) -> Callable[[Path, Made], None]:
    def cut(b: Path, m: Made) -> None:
        data = (b / name).read_bytes()
        (b / name).write_bytes(data[:keep] if keep >= 0 else data[:len(data) + keep])
    return cut


UNREADABLE: dict[str, Callable[[Path, Made], None]] = {
    "manifest truncated": _cut("manifest.dsse.json", 100),
    "unknown version, properly signed": lambda b, m: _resign(
        b, m, lambda d: d.update(version=99)),
    "entries.jsonl cut mid-line": _cut("entries.jsonl", -25),
    "checkpoint.note garbage": lambda b, m: (b / "checkpoint.note").write_bytes(b"junk\n"),
    "heads.jsonl missing": lambda b, m: (b / "heads.jsonl").unlink(),
    "bundle directory missing": lambda b, m: shutil.rmtree(b),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_unreadable_copy_is_refused_by_both(made: Made, case: str) -> None:
    b = made.copy("unreadable")
    UNREADABLE[case](b, made)
    with pytest.raises(InputError):
        verify_bundle(b, made.trust)
    problems = made.independent(b)
    assert [p.code for p in problems] == ["input-error"], problems
    r = run_blocked(b, made.pub)
    assert r.returncode == 2, (r.stdout, r.stderr)


UNTRUSTED: dict[str, Callable[[Path, Made], None]] = {
    "manifest payload altered": _alter_payload,
    "checkpoint.note size altered": lambda b, m: (b / "checkpoint.note").write_bytes(
        (b / "checkpoint.note").read_bytes().replace(b"\n", b"\n1", 1)),
}


@pytest.mark.parametrize("case", list(UNTRUSTED))
def test_unauthentic_copy_fails_both_with_exit_1(made: Made, case: str) -> None:
    """It reads, but no signature verifies: a failed check (bundle.md §9), exit 1."""
    b = made.copy("untrusted")
    UNTRUSTED[case](b, made)
    with pytest.raises(SignatureError):
        verify_bundle(b, made.trust)
    assert [p.code for p in made.independent(b)] == ["untrusted"]
    r = run_blocked(b, made.pub)
    assert r.returncode == 1, (r.stdout, r.stderr)


def test_wrong_trust_store_fails_both(made: Made) -> None:
    _, other_pub, other = generate_keypair(made.tmp / "other", name="someone-else")
    with pytest.raises(SignatureError):
        verify_bundle(made.bundle, TrustStore([other.public]))
    assert [p.code for p in made.independent(made.bundle, other_pub)] == ["untrusted"]


# --- the documents' own examples ----------------------------------------------------------

GOLDEN_PUBLIC = bytes.fromhex("afc762ac14aad986b7f696988f3710593c633e7a166644dd4e610fce1447c4a9")


def test_docs_examples_check_out_with_the_independent_verifier() -> None:
    docs = (DOCS / "bundle.md").read_text(encoding="utf-8")
    block = docs.split("### 4.3 Example", 1)[1].split("```", 2)[1].lstrip("\n")
    note = block.encode("utf-8")
    golden = iv.Key(hashlib.sha256(GOLDEN_PUBLIC).hexdigest()[:16], GOLDEN_PUBLIC, None, None)
    parsed = iv.read_note(note, {golden.kid: golden})
    assert (parsed.origin, parsed.size) == ("histaudit/00000000-0000-4000-8000-000000000000", 3)
    assert parsed.root.hex() == (
        "36642e73c2540ab121e3a6bf9545b0a24982cd830eb13d3cd19de3ce6c021ec1")
    with pytest.raises(iv.Untrusted):
        iv.read_note(note.replace(b"\n3\n", b"\n4\n"), {golden.kid: golden})
    # §15: the inclusion paths of the tree of a, b, c verify against its root.
    la, lb, lc = (iv.leaf_hash(x) for x in (b"a", b"b", b"c"))
    two = iv.node_hash(la, lb)
    for index, leaf, path in ((0, b"a", [lb, lc]), (1, b"b", [la, lc]), (2, b"c", [two])):
        assert iv.inclusion_ok(index, 3, leaf, path, parsed.root)
        assert not iv.inclusion_ok((index + 1) % 3, 3, leaf, path, parsed.root)
    # §7.1: the PAE example.
    assert iv.pae(MANIFEST_TYPE, b'{"a":1}') == (
        b'DSSEv1 46 application/vnd.histaudit.bundle-manifest+json 7 {"a":1}')
    assert iv.pae(MANIFEST_TYPE, b'{"a":1}') == pae(MANIFEST_TYPE, b'{"a":1}')


def test_independent_canonical_form_matches_the_golden_vectors() -> None:
    """format.md §15: every canonicalization case, and every refused input."""
    vectors = json.loads(VECTORS.read_bytes())
    cases = vectors["canonicalization"]
    assert cases
    for case in cases:
        value = iv.strict_json(case["input"].encode("utf-8"))
        assert iv.canonical(value).encode("utf-8").hex() == case["canonical_hex"], case
    for bad in vectors["canonicalization_rejected"]:
        with pytest.raises(iv.NotCanonical):
            iv.strict_json(bad["input"].encode("utf-8", "surrogatepass"))


# --- kept payloads (format.md §8.3): the independent reading agrees -----------------------

@pytest.mark.parametrize("case", KEPT_CASES)
def test_kept_payload_rule_matches_histaudit(db_url: str, tmp_path: Path, case: str) -> None:
    _, pub, signer = generate_keypair(tmp_path / "keys", name="exporter")
    trust = TrustStore.load(pub)
    bundle = tmp_path / "bundle"
    kept_payload_bundle(db_url, signer, bundle, case)
    mine = {(p.code, p.instance, p.seq) for p in iv.verify_bundle(bundle, iv.load_trust(pub))}
    expected = {
        "clean": set(),
        "row deleted before export": {("payload-missing", "kept-1", 2)},
        "payload line deleted": {("bundle-file-changed", "(bundle)", None),
                                 ("payload-missing", "kept-1", 3)},
        "exported without payloads": set(),
    }[case]
    assert mine == expected
    assert histaudit_errors(bundle, trust) == expected
