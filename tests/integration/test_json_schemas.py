"""Every ``--json`` output, produced as a user would (the console script on a small ledger,
a bundle, a kept checkpoint, saved histories, one crash) and validated against its JSON
Schema in ``schemas/*.output.schema.json`` (draft 2020-12).

The schemas are written from the code that prints each document; these tests are what
keeps the two together. They cover the variants a consumer meets: clean and with
findings, one instance and many, with and without optional blocks (``--payloads``,
``--since-checkpoint``), a replay that diverges and a history that cannot be replayed —
and the decisions of issue 13 item 6 (one ``instance`` name, enums for statuses, what a
finding is about, one verify shape, the replay's ``ok`` apart from the item's).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.errors import EngineError
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli, exits
from support.dapr_audit import GATED, PURGED, AuditedDaprRun, audited_dapr_run, put, rows, value
from support.ledgers import LedgerDb, World, append_order
from support.repo import HISTORIES, ORDER_HISTORY, REPO, SCHEMAS
from support.schemas import valid, validator

SWEEP_APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"
ORDER_REF = "examples.nondeterminism.workflows:order"


def stdout_json(result: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    exits(result, code)
    return json.loads(result.stdout)


def test_every_output_schema_is_a_valid_draft_2020_12_schema() -> None:
    names = sorted(p.name.removesuffix(".output.schema.json")
                   for p in SCHEMAS.glob("*.output.schema.json"))
    assert names == ["checkpoint-cosign", "checkpoint-verify", "crashtest", "dapr-verify",
                     "finding", "list", "replay", "report", "show", "verify", "verify-bundle"]
    for name in names:
        validator(name)


# --- a small ledger, as tests/integration/test_cli.py builds it -----------------------------

@pytest.fixture
def world(sqlite_url: str, tmp_path: Path) -> World:
    """``order-1`` clean, ``order-2`` re-executed (an info finding), ``order-3`` with one
    body rewritten by someone with database access (error findings)."""
    key, trust, signer = generate_keypair(tmp_path / "keys", name="ops")
    with Ledger.open(sqlite_url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
        append_order(ledger, signer, "order-2", reexecuted=True)
        append_order(ledger, signer, "order-3")
    with LedgerDb(sqlite_url) as db:
        db.lift_guards()
        db.rewrite_body(db.entry("order-3", 2).leaf, b'"charge"', b'"refund"', rehash=False)
        db.restore_guards()
    return World(tmp=tmp_path, url=sqlite_url, signer=signer, key=key, trust=trust)


def test_verify_json(world: World) -> None:
    db = ("--db", world.url, "--trust", world.trust, "--json")
    one = valid("verify", stdout_json(world.run("verify", "order-1", *db)))
    assert one["ok"] is True and one["since_checkpoint"] is None
    assert [(r["instance"], r["findings"]) for r in one["reports"]] == [("order-1", [])]
    info = valid("verify", stdout_json(world.run("verify", "order-2", *db)))
    [finding] = info["reports"][0]["findings"]
    assert finding["code"] == "activity-reexecuted" and finding["instance"] == "order-2"
    assert (finding["entries"], finding["task_id"], finding["activity"]) == (
        [2, 3], 1, "charge")
    bad = valid("verify", stdout_json(world.run("verify", "order-3", *db), 1))
    [report] = bad["reports"]
    assert not bad["ok"] and {f["severity"] for f in report["findings"]} == {"error"}
    assert all(f["entries"] == [f["seq"]] for f in report["findings"])
    every = valid("verify", stdout_json(world.run("verify", "--all", *db), 1))
    assert sorted(r["instance"] for r in every["reports"]) == ["order-1", "order-2", "order-3"]
    assert every["ok"] is False and set(every) == set(one)


def test_verify_json_is_one_shape_for_every_variant(world: World) -> None:
    """The same four members whatever is asked; what varies is inside them."""
    schema = json.loads((SCHEMAS / "verify.output.schema.json").read_bytes())
    assert schema["type"] == "object" and "oneOf" not in schema
    assert set(schema["required"]) == set(schema["properties"]) == {
        "ok", "reports", "since_checkpoint", "tree"}
    for change in ({"reports": {}}, {"since_checkpoint": []}, {"extra": 1}, {"tree": []}):
        assert not validator("verify").is_valid(
            {"ok": True, "reports": [], "since_checkpoint": None, "tree": None, **change})


def test_list_json(world: World) -> None:
    unchecked = valid("list", stdout_json(world.run("list", "--db", world.url, "--json")))
    assert {(r["status"], r["findings"]) for r in unchecked} == {("not-checked", None)}
    checked = valid("list", stdout_json(world.run("list", "--db", world.url, "--trust",
                                                  world.trust, "--json")))
    assert {r["instance"]: (r["status"], r["findings"]["error"]) for r in checked} == {
        "order-1": ("ok", 0), "order-2": ("findings", 0), "order-3": ("failed", 2)}
    # the counts must agree with the status
    row = next(r for r in checked if r["status"] == "failed")
    assert not validator("list").is_valid([{**row, "findings": {**row["findings"],
                                                                "error": 0}}])
    assert not validator("list").is_valid([{**row, "status": "FAILED (2)"}])


def test_show_json(world: World) -> None:
    plain = valid("show", stdout_json(world.run("show", "order-1", "--db", world.url,
                                                "--json")))
    assert plain["instance"] == "order-1"
    assert len(plain["entries"]) == 4 and all("payloads" not in e for e in plain["entries"])
    assert all(e["error"] is None for e in plain["entries"])
    filtered = valid("show", stdout_json(world.run(
        "show", "order-1", "--db", world.url, "--kind", "activity", "--seq", "2..",
        "--payloads", "--json")))
    assert filtered["filters"]["seq"] == {"from": 2, "to": None}
    assert any(e["payloads"] for e in filtered["entries"])


def test_checkpoint_and_bundle_json(world: World) -> None:
    note = world.tmp / "cp.note"
    exits(world.run("checkpoint", "--db", world.url, "--key", world.key, "--out", note))
    cp = valid("checkpoint-verify", stdout_json(world.run(
        "checkpoint", "verify", note, "--trust", world.trust, "--json")))
    assert cp["size"] == 13  # 4 + 5 (a re-execution) + 4 entries and cp["key_name"] == "ops"
    # An instance and the ledger's proof against the kept checkpoint: the proof apart.
    both = valid("verify", stdout_json(world.run(
        "verify", "order-1", "--since-checkpoint", note, "--db", world.url, "--trust",
        world.trust, "--json")))
    assert [r["scope"] for r in both["reports"]] == ["instance"]
    since = both["since_checkpoint"]
    assert (since["size"], since["origin"], since["checked"]) == (13, cp["origin"], True)
    assert (since["report"]["scope"], since["report"]["mode"]) == ("ledger", "consistency")
    alone = valid("verify", stdout_json(world.run(
        "verify", "--since-checkpoint", note, "--db", world.url, "--trust", world.trust,
        "--json")))
    assert alone["reports"] == [] and alone["since_checkpoint"] == since

    bundle = world.tmp / "bundle"
    exits(world.run("export", "order-1", "order-2", "--out", bundle, "--with-payloads",
                    "--db", world.url, "--key", world.key, "--trust", world.trust))
    doc = valid("verify-bundle", stdout_json(world.run(
        "verify", "--bundle", bundle, "--trust", world.trust, "--json")))
    assert doc["ok"] and [r["scope"] for r in doc["reports"]] == ["bundle", "instance",
                                                                  "instance"]
    assert doc["since_checkpoint"] is None
    # Every instance, the tampered one too: its chain fails (exit 1), the tree the
    # checkpoint signed is extended (the ledger-scope report is clean).
    whole = world.tmp / "whole"
    exits(world.run("export", "--out", whole, "--db", world.url, "--key", world.key,
                    "--trust", world.trust))
    since = world.run("verify", "--bundle", whole, "--trust", world.trust,
                      "--since-checkpoint", note, "--json")
    doc = valid("verify-bundle", stdout_json(since, 1))
    proof = doc["since_checkpoint"].pop("report")
    assert doc["since_checkpoint"] == {"size": 13, "origin": cp["origin"], "checked": True}
    assert [r["scope"] for r in doc["reports"]] == ["bundle", *["instance"] * 3]
    assert [r["ok"] for r in doc["reports"]].count(False) == 1
    assert proof["scope"] == "ledger" and proof["ok"] and proof["mode"] == "consistency"
    shown = valid("show", stdout_json(world.run(
        "show", "order-1", "--bundle", bundle, "--trust", world.trust, "--payloads",
        "--json")))
    assert shown["entries"]


# --- replay: saved histories, no engine -------------------------------------------------------

def test_replay_json_one_history(sqlite_url: str, tmp_path: Path) -> None:
    with Ledger.open(sqlite_url, create=True):
        pass
    clean = valid("replay", stdout_json(cli("replay", "--history", ORDER_HISTORY,
                                            "--workflow", ORDER_REF, "--json", cwd=REPO)))
    assert clean["status"] == "ok" and clean["output_check"]["status"] == "not-compared"
    assert clean["ok"] is True and clean["replay"]["ok"] is True
    assert clean["replay"]["instance"] == "golden-order"
    assert clean["replay"]["outcome"] == "completed"
    compared = valid("replay", stdout_json(cli(
        "replay", "--history", ORDER_HISTORY, "--workflow", ORDER_REF, "--db", sqlite_url,
        "--json", cwd=REPO)))
    assert compared["output_check"]["status"] == "not-signed"
    diverged = valid("replay", stdout_json(cli(
        "replay", "--history", ORDER_HISTORY, "--workflow",
        "examples.nondeterminism.v2:order_swapped", "--json", cwd=REPO), 1))
    assert diverged["status"] == "diverged" and diverged["replay"]["divergence"]["kind"]
    assert diverged["ok"] is False and diverged["replay"]["ok"] is False


def test_replay_json_several_histories(tmp_path: Path) -> None:
    d = tmp_path / "histories"
    d.mkdir()
    for stem in ("order", "approval"):
        (d / f"{stem}.json").write_bytes((HISTORIES / f"{stem}.json").read_bytes())
    (d / "broken.json").write_text("{not json", encoding="utf-8")
    workflows = [arg for name in ("order", "approval")
                 for arg in ("--workflow", f"examples.nondeterminism.workflows:{name}")]
    r = cli("replay", "--history", d, *workflows, "--keep-going", "--json", cwd=REPO)
    assert r.returncode == 2 and r.stderr == "", r  # one history could not be replayed
    doc = valid("replay", json.loads(r.stdout))
    assert sorted(i["status"] for i in doc["results"]) == ["error", "ok", "ok"]
    assert doc["summary"]["histories"] == 3 and doc["summary"]["error"] == 1
    broken = next(i for i in doc["results"] if i["status"] == "error")
    assert broken["replay"] is None and broken["ok"] is False and broken["error"]
    assert all(i["replay"]["ok"] and i["ok"] for i in doc["results"] if i is not broken)


# --- the crash matrix report ------------------------------------------------------------------

@pytest.mark.engine
@pytest.mark.crash
def test_crashtest_json_report(engine_binary: Path, tmp_path: Path) -> None:
    report = tmp_path / "matrix.json"
    r = cli("crashtest", f"{SWEEP_APP}:steps", "--input", "0", "--points", "before:step:1",
            "--no-engine-points", "--json", report, cwd=tmp_path,
            env={"HISTAUDIT_ENGINE_BIN": str(engine_binary)})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = valid("crashtest", json.loads(report.read_text(encoding="utf-8")))
    assert [p["point"] for p in doc["points"]] == ["before:add"]
    assert doc["summary"] == {"identical": 1}
    findings = [f for p in [doc["clean"], *doc["points"]] for f in p["findings"]]
    assert all(valid("finding", f) for f in findings)


# --- the schemas refuse what the code never prints --------------------------------------------

FINDING = {"code": "effect-duplicate", "severity": "error", "instance": "i", "seq": 3,
           "entries": [2, 3], "task_id": None, "activity": None,
           "effect": {"name": "mail", "key": "k1"}, "message": "m"}


# a code is of one form, not from a closed list: a release may add codes (issue #51)
@pytest.mark.parametrize("change", [
    {"code": "No_Such_Code"}, {"code": ""}, {"code": 3}, {"severity": "ERROR"}, {"seq": "3"},
    {"extra": 1},
    {"instance_id": "i"}, {"entries": [3, 3]}, {"entries": None}, {"task_id": 1.5},
    {"effect": "mail"}, {"effect": {"name": "mail"}}])
def test_finding_schema_is_closed(change: dict[str, Any]) -> None:
    valid("finding", FINDING)
    assert not validator("finding").is_valid({**FINDING, **change})


@pytest.mark.parametrize("key", sorted(FINDING))
def test_every_finding_key_is_required(key: str) -> None:
    assert not validator("finding").is_valid({k: v for k, v in FINDING.items() if k != key})


def test_no_output_schema_says_instance_id() -> None:
    """One name for the instance field in every --json output: ``instance``."""
    for path in SCHEMAS.glob("*.output.schema.json"):
        assert '"instance_id"' not in path.read_text(encoding="utf-8"), path.name


# --- dapr-verify, on a real signed daprd store and a real ledger ------------------------------

@pytest.fixture(scope="module")
def dapr_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditedDaprRun]:
    try:
        with audited_dapr_run(tmp_path_factory.mktemp("dapr-json")) as run:
            yield run
    except EngineError as exc:
        pytest.fail(f"cannot start the signing daprd stack: {exc}", pytrace=False)


@pytest.mark.engine
@pytest.mark.daprd
def test_dapr_verify_json(dapr_run: AuditedDaprRun) -> None:
    """Every variant: Dapr's checks alone, with the ledger (clean), a purged instance,
    a tampered store (Dapr and cross-check findings)."""
    run = dapr_run
    alone = valid("dapr-verify", stdout_json(run.dapr_verify(GATED, run.db, "--json",
                                                             ledger=False)))
    assert alone["ledger"] is None and alone["crosscheck"] is None and alone["ok"] is True
    both = valid("dapr-verify", stdout_json(run.dapr_verify(GATED, run.db, "--json")))
    assert both["ledger"]["mode"] == "default" and both["crosscheck"]["findings"] == []
    gone = valid("dapr-verify", stdout_json(run.dapr_verify(PURGED, run.db, "--json"), 1))
    assert gone["present"] is False and gone["ok"] is False
    db = run.copy("tampered")
    [(key, _v, _b)] = rows(db, GATED, "history-000002")
    raw = bytearray(value(db, key))
    raw[-1] ^= 0x01
    put(db, key, bytes(raw))
    bad = valid("dapr-verify", stdout_json(run.dapr_verify(GATED, db, "--json"), 1))
    assert bad["findings"] and bad["crosscheck"]["findings"] and bad["signed_events"] == 0
