"""The seed's 100-step agent as SCITT evidence: examples/financial_agent crashes after
step 87 and is resumed on the real engine (``demo.py``, what ``make demo-87`` runs), then
``histaudit export --format scitt`` writes its 305 entries as signed statements with
receipts. scitt-cose (PyPI) and the Go verifier (tests/independent/scittcheck) verify every
statement and receipt, ``histaudit verify --bundle`` the bundle; each single-field tamper
(payload, protected header, receipt path, tree size) is caught by all three. The report
step's guarded send is one Capsule, executed, which the reference verifier accepts.

CPU ≈ 11 s: the demo ≈ 9 s (engine, two workers, 100 steps), the export and the
verifications ≈ 2 s, the Go build ≈ 0.4 s with a warm cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_action_capsule.transparent import verify_transparent

from histaudit.bundle.cose import cose_key, pem
from histaudit.bundle.verify import verify_bundle
from histaudit.ledger.keys import TrustStore
from support.cli import cli
from support.scitt import FIELDS, GoCheck, build_scittcheck, payload_of, scitt_cose_verifies, tamper

pytestmark = [pytest.mark.engine, pytest.mark.crash]

DEMO = Path(__file__).resolve().parents[2] / "examples" / "financial_agent" / "demo.py"


class Agent:
    def __init__(self, out: Path) -> None:
        self.out, self.bundle = out, out / "scitt-bundle"
        self.trust_file = out / "keys" / "agent.pub.json"
        self.trust = TrustStore.load(self.trust_file)
        key = next(iter(self.trust))
        self.pem, self.cose_key = out / "agent.pem", out / "agent.cose_key"
        self.pem.write_bytes(pem(key))
        self.cose_key.write_bytes(cose_key(key))


@pytest.fixture(scope="module")
def agent(engine_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Agent:
    out = tmp_path_factory.mktemp("agent") / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    run = subprocess.run([sys.executable, str(DEMO), "--out", str(out)],
                         env={**env, "HISTAUDIT_ENGINE_BIN": str(engine_binary),
                              "COLUMNS": "100"},
                         cwd=out.parent, capture_output=True, text=True, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    ag = Agent(out)
    done = cli("export", "--format", "scitt", "--db", f"sqlite:///{out / 'ledger.db'}",
               "--key", out / "keys" / "agent.key", "--trust", ag.trust_file,
               "--out", ag.bundle, cwd=out)
    assert done.returncode == 0, done.stderr
    return ag


@pytest.fixture(scope="module")
def scittcheck(tmp_path_factory: pytest.TempPathFactory) -> GoCheck:
    return build_scittcheck(tmp_path_factory.mktemp("go"))


def test_every_statement_and_receipt_verifies_with_scitt_cose_go_and_histaudit(
        agent: Agent, scittcheck: GoCheck) -> None:
    statements = sorted((agent.bundle / "scitt" / "entries").glob("*.cose"))
    assert len(statements) == 305
    pem_bytes = agent.pem.read_bytes()
    for statement in statements:
        assert scitt_cose_verifies(statement, pem_bytes) == (True, True), statement.name
    go = scittcheck(agent.bundle, agent.cose_key)
    assert go.returncode == 0, go.stdout[-2000:] + go.stderr
    assert go.stdout.splitlines()[-1] == ("305 statements, 611 receipts, 1 capsules, "
                                          "0 consistency receipts verified; 0 failed")
    # histaudit: exit 1 only for what the demo expects, step 87 delivered twice (info)
    done = cli("verify", "--bundle", agent.bundle, "--trust", agent.trust_file, "--json",
               cwd=agent.out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    codes = {f["code"] for r in json.loads(done.stdout)["reports"] for f in r["findings"]}
    assert codes == {"activity-reexecuted"}


def test_the_report_sends_once_and_its_capsule_says_executed(agent: Agent) -> None:
    index = json.loads((agent.bundle / "scitt" / "index.json").read_bytes())
    [item] = index["capsules"]
    assert item["verdict_class"] == "executed"
    capsule = agent.bundle / item["file"]
    leaf = payload_of(agent.bundle / "scitt" / "entries" / capsule.name)
    assert json.loads(leaf)["kind"] == "effect.done"
    report = verify_transparent(statement_path=str(capsule), issuer_key_path=str(agent.pem),
                                log_key_path=str(agent.pem), leaf_entry_hex=leaf.hex())
    assert report.ok and report.attestation_tier == "anchored", report.substrate_errors
    assert report.payload is not None and report.payload.assurance["effect_mode"] == \
        "confirmed"


@pytest.mark.parametrize("field", FIELDS)
def test_a_single_field_tamper_is_caught_by_all_three(
        agent: Agent, scittcheck: GoCheck, tmp_path: Path, field: str) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(agent.bundle, bundle)
    leaf = 260  # an entry of step 87, the step that ran twice
    statement = tamper(bundle, leaf, field)
    assert scitt_cose_verifies(statement, agent.pem.read_bytes()) != (True, True)
    go = scittcheck(bundle, agent.cose_key)
    assert go.returncode == 1 and f"FAIL {statement}" in go.stdout, go.stdout[-2000:]
    codes = {f.code for f in verify_bundle(bundle, agent.trust).findings}
    assert codes & {"scitt-statement-invalid", "scitt-receipt-invalid"}, codes
