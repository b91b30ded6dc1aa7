"""An Agent Action Capsule per guarded call, its disposition read from the ledger, accepted
by the profile's reference verifier (``agent-action-capsule`` 0.12.0: Class 1 over the
payload, and ``--transparent``'s substrate check of the signature and receipt through
scitt-cose) and by ``histaudit verify --bundle``.

The ledgers are those the durable_agent example leaves (examples/durable_agent/README.md):
a ``write_note`` tool guarded by histaudit and a read-only ``lookup`` beside it, signed as
the interceptor signs them (tests/support/agent_ledger.py's writer, no engine): a clean
run, a crash after the tool (its re-delivery skips it: deduplicated), a crash inside it
(its intent unanswered: uncertain, then done again), and a tool that fails (errored).

CPU ≈ 0.5 s: four small ledgers exported with SCITT files, each Capsule verified twice by
the reference verifier and once by histaudit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import scitt_cose
from agent_action_capsule import verify, verify_store
from agent_action_capsule.transparent import verify_transparent

from histaudit.bundle.cose import pem
from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from support.agent_ledger import RUN_TOOL, A, B, _Writer, sign_into
from support.scitt import payload_of

AGENT = "dapr.agents.scribe"


def _spec(case: str) -> list[tuple[str, dict[str, Any]]]:
    """The scribe's instance: lookup (read-only, unguarded), then write_note, as ``case``
    leaves it."""
    w = _Writer()
    w.add("workflow.started", workflow=f"{AGENT}.workflow", worker=A)
    lookup = w.start(1, RUN_TOOL, A)
    w.complete(lookup)
    note = w.start(2, RUN_TOOL, A)
    if case == "clean":
        w.tool(note, "write_note", "done")
        w.complete(note)
    elif case == "crash after the tool":
        w.tool(note, "write_note", "done")  # A stops before the activity completes
        again = w.start(2, RUN_TOOL, B, attempt=2)
        w.tool(again, "write_note", "skipped")
        w.complete(again)
    elif case == "crash inside the tool":
        w.tool(note, "write_note")  # A stops inside: the intent is all there is
        again = w.start(2, RUN_TOOL, B, attempt=2)
        w.tool(again, "write_note", "done")  # it could not know, and wrote again
        w.complete(again)
    else:  # the tool raised: its error went back to the LLM as the tool's result
        w.tool(note, "write_note", "failed")
        w.complete(note)
    w.add("workflow.completed", status="COMPLETED", worker=B)
    return w.spec


VERDICTS = {"clean": ["executed"], "crash after the tool": ["executed", "deduplicated"],
            "crash inside the tool": ["uncertain", "executed"], "tool error": ["errored"]}
EFFECT_MODES = {"executed": "confirmed", "deduplicated": "not_applicable",
                "uncertain": "dispatched_unconfirmed", "errored": "dispatched_unconfirmed"}


class Exported:
    def __init__(self, tmp: Path, case: str) -> None:
        self.tmp, self.bundle = tmp, tmp / "bundle"
        self.key, _, self.signer = generate_keypair(tmp, name="exporter")
        self.trust = TrustStore([self.signer.public])
        self.pem = tmp / "exporter.pem"
        self.pem.write_bytes(pem(self.signer.public))
        with Ledger.open(f"sqlite:///{tmp / 'ledger.db'}", create=True) as ledger:
            sign_into(ledger, self.signer, "scribe-1", _spec(case))
            export(ledger, [], self.bundle, signer=self.signer, trust=self.trust, scitt=True,
                   html=False)

    def capsules(self) -> list[tuple[Path, dict[str, Any]]]:
        index = json.loads((self.bundle / "scitt" / "index.json").read_bytes())
        return [(self.bundle / c["file"], json.loads(payload_of(self.bundle / c["file"])))
                for c in index["capsules"]]

    def leaf_hex(self, capsule: Path) -> str:
        """The entry the Capsule's receipt proves: the statement of the same leaf."""
        return payload_of(self.bundle / "scitt" / "entries" / capsule.name).hex()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exported]:
    return {case: Exported(tmp_path_factory.mktemp("capsules"), case) for case in VERDICTS}


@pytest.mark.parametrize("case", VERDICTS)
def test_each_guarded_call_has_a_capsule_with_its_disposition_from_the_ledger(
        bundles: dict[str, Exported], case: str) -> None:
    ex = bundles[case]
    capsules = ex.capsules()
    assert [c["disposition"]["verdict_class"] for _, c in capsules] == VERDICTS[case]
    for (_, capsule), result in zip(capsules, verify_store([c for _, c in capsules]),
                                    strict=True):
        # Class 1 (§6): identity, confirmed-effect binding, the effect-attestation matrix,
        # chain parents present in the store; only informational findings (unseeded
        # values: effect.type, "uncertain", "deduplicated", the reference type)
        assert result.ok, result.findings
        assert {f.severity for f in result.findings} <= {"info"}, result.findings
        assert result.capsule_id == capsule["capsule_id"]
        verdict = capsule["disposition"]["verdict_class"]
        assert result.assurance["effect_mode"] == EFFECT_MODES[verdict]
        assert verify(capsule).ok
    if case == "crash after the tool":  # the skip is chained to the call that did it
        (_, done), (_, skipped) = capsules
        assert skipped["chain"] == {"parent_capsule_id": done["capsule_id"],
                                    "relation": "follows"}
        assert "effect" not in skipped
    result = verify_bundle(ex.bundle, ex.trust)
    assert result.ok, [f.message for f in result.findings]


@pytest.mark.parametrize("case", VERDICTS)
def test_the_reference_verifier_anchors_each_capsule_with_its_receipt(
        bundles: dict[str, Exported], case: str) -> None:
    ex = bundles[case]
    for path, capsule in ex.capsules():
        report = verify_transparent(statement_path=str(path), issuer_key_path=str(ex.pem),
                                    log_key_path=str(ex.pem), leaf_entry_hex=ex.leaf_hex(path))
        assert report.ok and report.signature_verified and report.receipt_verified, \
            report.substrate_errors
        assert report.attestation_tier == "anchored"
        assert report.payload is not None and report.payload.capsule_id == \
            capsule["capsule_id"]


def test_the_reference_verifiers_command_from_the_docs(bundles: dict[str, Exported]) -> None:
    ex = bundles["crash inside the tool"]
    path, _ = ex.capsules()[0]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("agent-action-capsule")), "verify",
         "--transparent", str(path.relative_to(ex.bundle)), "--issuer-key", str(ex.pem),
         "--log-key", str(ex.pem), "--leaf-entry-hex", ex.leaf_hex(path)],
        cwd=ex.bundle, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "attestation_tier   : anchored" in done.stdout and "ok: True" in done.stdout
    assert "effect_mode=dispatched_unconfirmed" in done.stdout


def test_a_signed_capsule_claiming_another_disposition_is_caught_by_histaudit(
        bundles: dict[str, Exported], tmp_path: Path) -> None:
    """Whoever holds the key can sign a Capsule saying the unanswered call was executed:
    the reference verifier accepts it (Class 1 reads the payload alone), histaudit derives
    the Capsule from the entries and does not."""
    import shutil

    ex = bundles["crash inside the tool"]

    from agent_action_capsule import compute_capsule_id

    bundle = tmp_path / "bundle"
    shutil.copytree(ex.bundle, bundle)
    path, capsule = ex.capsules()[0]
    forged = {**capsule, "disposition": {**capsule["disposition"], "verdict_class": "executed"},
              "effect": {**capsule["effect"], "status": "confirmed",
                         "response_digest": "ab" * 32},
              "assurance": {**capsule["assurance"], "effect_mode": "confirmed"}}
    forged["capsule_id"] = compute_capsule_id(forged)
    statement = scitt_cose.build_signed_statement(
        json.dumps(forged).encode(), alg="EdDSA", private_key_pem=ex.key.read_bytes(),
        issuer=capsule["operator"], subject="scribe-1", content_type="application/json",
        kid=ex.signer.kid.encode())
    receipts = scitt_cose.extract_receipts(path.read_bytes())
    target = bundle / path.relative_to(ex.bundle)
    target.write_bytes(scitt_cose.attach_receipts(statement, receipts))
    report = verify_transparent(statement_path=str(target), issuer_key_path=str(ex.pem),
                                log_key_path=str(ex.pem), leaf_entry_hex=ex.leaf_hex(path))
    assert report.ok and report.attestation_tier == "anchored"  # the forgery passes there
    result = verify_bundle(bundle, ex.trust)
    assert {(f.code, f.seq) for f in result.findings} >= {("capsule-invalid", 5),
                                                          ("bundle-file-changed", None)}
    assert any("not the Capsule its entries imply" in f.message for f in result.findings)
