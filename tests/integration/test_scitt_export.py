"""``histaudit export --format scitt``: every entry a SCITT signed statement with its COSE
receipt, read back by ``histaudit verify --bundle`` and by third-party verifiers that
know nothing of histaudit: scitt-cose 0.5.0 and pycose 1.1.0 (PyPI) and
tests/independent/scittcheck (Go: veraison/go-cose, transparency-dev/merkle, x/mod's
note). Each single-field tamper (payload, protected header, receipt path, tree size) is
caught by scitt-cose, the Go verifier and histaudit.

The ledger: two agent instances (tests/support/agent_ledger.py, no engine), a checkpoint
between them (so the export carries a consistency receipt) cosigned by a hand-made
witness (so the receipts carry the cosignature).

CPU ≈ 2.5 s (measured 1.6 s in the test process, plus the forked CLI commands and the Go
runs): one export and one `verify --bundle` through the CLI, 76 statements checked by
three verifiers, 5 tampered copies; building the Go verifier ≈ 0.4 s with Go's build
cache warm (≈ 17 s cold, once per machine).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest
import scitt_cose
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from histaudit.bundle.verify import verify_bundle
from histaudit.ledger import chain
from histaudit.ledger.checkpoint import note_text
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from support.agent_ledger import sign_into, travel
from support.cli import cli
from support.scitt import (
    FIELDS,
    GoCheck,
    build_scittcheck,
    payload_of,
    pycose_verifies,
    scitt_cose_verifies,
    tamper,
)

WITNESS = "witness.test/scitt"


class Exported:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bundle = tmp / "bundle"
        key, pub, self.signer = generate_keypair(tmp, name="exporter")
        self.key, self.trust_file = key, pub
        self.trust = TrustStore([self.signer.public])
        self.pem = (self.bundle / "scitt" / "keys" / f"{self.signer.kid}.pem")
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.witness = Ed25519PrivateKey.generate()
        raw = self.witness.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.witness_hash = hashlib.sha256(WITNESS.encode() + b"\n\x04" + raw).digest()[:4]
        b64 = base64.b64encode(b"\x04" + raw).decode()
        self.vkey = f"{WITNESS}+{self.witness_hash.hex()}+{b64}"

    @property
    def cose_key(self) -> Path:
        """The trusted key as a COSE_Key, written from the trust store, not the bundle."""
        from histaudit.bundle.cose import cose_key
        path = self.tmp / "trusted.cose_key"
        path.write_bytes(cose_key(self.signer.public))
        return path

    @property
    def trusted_pem(self) -> bytes:
        from histaudit.bundle.cose import pem
        return pem(self.signer.public)

    def cosign(self, note: bytes, when: int = 1_770_000_000) -> bytes:
        """A C2SP cosignature/v1 line of the witness over ``note``'s text."""
        text = note_text(note)
        sig = self.witness.sign(b"cosignature/v1\ntime %d\n" % when + text)
        blob = self.witness_hash + when.to_bytes(8, "big") + sig
        return "— ".encode() + WITNESS.encode() + b" " + base64.b64encode(blob) + b"\n"

    def entries(self) -> list[Path]:
        return sorted((self.bundle / "scitt" / "entries").glob("*.cose"),
                      key=lambda p: int(p.stem))

    def index(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.bundle / "scitt" / "index.json").read_bytes())
        return doc


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    ex = Exported(tmp_path_factory.mktemp("scitt"))
    with Ledger.open(ex.url, create=True) as ledger:
        sign_into(ledger, ex.signer, "trip-1", travel())
        chain.make_checkpoint(ledger, ex.signer)  # an earlier checkpoint: a consistency receipt
        sign_into(ledger, ex.signer, "trip-2", travel(1))
        cp = chain.make_checkpoint(ledger, ex.signer)  # what `checkpoint cosign` would send
        with ledger.write() as tx:
            tx.add_cosignature(cp.size, WITNESS, ex.witness_hash.hex(), ex.cosign(cp.note))
    done = cli("export", "--format", "scitt", "--db", ex.url, "--key", ex.key,
               "--trust", ex.trust_file, "--out", ex.bundle, cwd=ex.tmp)
    assert done.returncode == 0, done.stderr
    return ex


@pytest.fixture(scope="module")
def scittcheck(tmp_path_factory: pytest.TempPathFactory) -> GoCheck:
    return build_scittcheck(tmp_path_factory.mktemp("go"))


def test_export_writes_a_statement_and_receipt_per_entry_and_verify_reads_them_back(
        exported: Exported) -> None:
    index = exported.index()
    lines = (exported.bundle / "entries.jsonl").read_bytes().splitlines()
    assert len(index["statements"]) == len(lines) == len(exported.entries()) > 50
    verdicts = {i: [c["verdict_class"] for c in index["capsules"] if c["instance"] == i]
                for i in ("trip-1", "trip-2")}
    assert verdicts == {"trip-1": ["uncertain", "executed", "executed", "deduplicated"],
                        "trip-2": ["uncertain", "executed", "executed", "deduplicated",
                                   "executed"]}  # two crashes, and trip-2 sends a note
    # trip-1's 31 entries were checkpointed before trip-2 was appended
    assert [c["from_size"] for c in index["consistency"]] == [31]
    manifest = json.loads(base64.b64decode(json.loads(
        (exported.bundle / "manifest.dsse.json").read_bytes())["payload"]))
    assert "scitt/index.json" in manifest["files"]  # every scitt file is signed for
    assert all(f"scitt/entries/{s['leaf']}.cose" in manifest["files"]
               for s in index["statements"])
    done = cli("verify", "--bundle", exported.bundle, "--trust", exported.trust_file,
               "--witness-policy", _policy(exported), cwd=exported.tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    # The witness's cosignature travels in every receipt, with the operator's signature.
    receipt = cbor2.loads((exported.bundle / "scitt" / "entries" / "3.receipt").read_bytes())
    note = receipt.value[1]["histaudit-checkpoint"]
    assert note == (exported.bundle / "checkpoint.note").read_bytes()
    assert f"— {WITNESS} ".encode() in note


def _policy(ex: Exported) -> Path:
    path = ex.tmp / "policy.txt"
    path.write_text(f"witness {WITNESS} {ex.vkey}\nquorum {WITNESS}\n")
    return path


def test_every_statement_and_receipt_verifies_with_scitt_cose_and_pycose(
        exported: Exported) -> None:
    pem, key = exported.trusted_pem, exported.cose_key
    for statement in exported.entries():
        assert scitt_cose_verifies(statement, pem) == (True, True), statement.name
        assert pycose_verifies(statement, key) == (True, True), statement.name
        alone = statement.with_suffix(".receipt").read_bytes()
        result = scitt_cose.verify_receipt(alone, leaf_entry_hex=payload_of(statement).hex(),
                                           log_public_key_pem=pem)
        assert result.ok and result.leaf_index == int(statement.stem), result.errors
        assert result.issuer == exported.index()["origin"]
    # The consistency receipt: the proof from the earlier root (its note, carried) leads
    # to the checkpoint's root, which the receipt's signature covers.
    for item in exported.index()["consistency"]:
        msg = cbor2.loads((exported.bundle / item["file"]).read_bytes())
        old, new = (_note_tree(msg.value[1][k]) for k in ("histaudit-checkpoint-from",
                                                          "histaudit-checkpoint"))
        m, n, path = cbor2.loads(msg.value[1][396][-2][0])
        assert (m, n) == (old[0], new[0])
        assert scitt_cose.verify_consistency(old[1].hex(), new[1].hex(), m, n,
                                             [bytes(p).hex() for p in path])
        scitt_cose.verify_sign1((exported.bundle / item["file"]).read_bytes(),
                                public_key_pem=pem, detached_payload=new[1])


def _note_tree(note: bytes) -> tuple[int, bytes]:
    lines = note.split(b"\n")
    return int(lines[1]), base64.b64decode(lines[2])


def test_go_verifier_accepts_every_statement_receipt_and_capsule(
        exported: Exported, scittcheck: GoCheck) -> None:
    done = scittcheck(exported.bundle, exported.cose_key)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    n = len(exported.entries())
    # each statement's attached receipt, and each .receipt file again; 9 Capsules with one each
    assert done.stdout.splitlines()[-1] == (
        f"{n} statements, {2 * n + 9} receipts, 9 capsules, 1 consistency receipts "
        f"verified; 0 failed")


def test_the_auditors_command_from_the_docs(exported: Exported) -> None:
    """docs/scitt.md's commands, but for the paths: the leaf taken from the statement
    with cbor2 (scitt-cose installs it), then the scitt-cose CLI on the statement and its
    receipt."""
    (exported.tmp / "exporter.pem").write_bytes(exported.trusted_pem)
    leaf = subprocess.run(
        [sys.executable, "-c",
         "import sys,cbor2; print(cbor2.loads(open(sys.argv[1],'rb').read()).value[2].hex())",
         "scitt/entries/7.cose"],
        cwd=exported.bundle, capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run(
        [Path(sys.executable).with_name("scitt-cose"), "--statement", "scitt/entries/7.cose",
         "--statement-pubkey", exported.tmp / "exporter.pem", "--receipt",
         "scitt/entries/7.receipt", "--receipt-log-pubkey", exported.tmp / "exporter.pem",
         "--leaf-entry-hex", leaf],
        cwd=exported.bundle, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "signature      : PASS" in done.stdout and "ok             : True" in done.stdout
    assert "leaf_index     : 7" in done.stdout


#: (statement signature verifies, its receipt verifies) by scitt-cose after each tamper
CAUGHT = {"payload": (False, False),  # another payload: another leaf, too
          "protected header": (False, True), "receipt path": (True, False),
          "tree size": (True, False)}


@pytest.mark.parametrize("field", FIELDS)
def test_a_single_field_tamper_is_caught_by_every_verifier(
        exported: Exported, scittcheck: GoCheck, tmp_path: Path, field: str) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(exported.bundle, bundle)
    leaf = 12  # an effect.intent of trip-1 (its proof has a path to spoil)
    statement = tamper(bundle, leaf, field)
    assert scitt_cose_verifies(statement, exported.trusted_pem) == CAUGHT[field]
    go = scittcheck(bundle, exported.cose_key)
    assert go.returncode == 1 and f"FAIL {statement}" in go.stdout, go.stdout[-2000:]
    result = verify_bundle(bundle, exported.trust)
    codes = {(f.code, f.seq) for f in result.findings}
    code = ("scitt-statement-invalid" if field in ("payload", "protected header")
            else "scitt-receipt-invalid")
    assert (code, 13) in codes, codes  # leaf 12 is trip-1's seq 13
    assert ("bundle-file-changed", None) in codes and not result.ok


def test_a_consistency_receipt_with_a_spoiled_proof_is_caught(
        exported: Exported, scittcheck: GoCheck, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(exported.bundle, bundle)
    path = bundle / "scitt" / "consistency" / "31.receipt"
    parts = list(cbor2.loads(path.read_bytes()).value)
    m, n, proof = cbor2.loads(parts[1][396][-2][0])
    proof[0] = bytes([proof[0][0] ^ 1]) + proof[0][1:]
    parts[1] = {**parts[1], 396: {-2: [cbor2.dumps([m, n, proof], canonical=True)]}}
    path.write_bytes(cbor2.dumps(cbor2.CBORTag(18, parts), canonical=True))
    old, new = (_note_tree(parts[1][k]) for k in ("histaudit-checkpoint-from",
                                                   "histaudit-checkpoint"))
    assert not scitt_cose.verify_consistency(old[1].hex(), new[1].hex(), m, n,
                                             [bytes(p).hex() for p in proof])
    go = scittcheck(bundle, exported.cose_key)
    assert go.returncode == 1 and f"FAIL {path}: consistency proof" in go.stdout, go.stdout
    codes = {(f.code, f.instance) for f in verify_bundle(bundle, exported.trust).findings}
    assert ("scitt-receipt-invalid", "(bundle)") in codes
