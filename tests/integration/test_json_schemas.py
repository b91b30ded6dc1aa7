"""Every ``--json`` output, produced as a user would (the console script on a small ledger,
a bundle, a kept checkpoint, saved histories, one crash) and validated against its JSON
Schema in ``schemas/*.output.schema.json`` (draft 2020-12).

The schemas are written from the code that prints each document; these tests are what
keeps the two together. They cover the variants a consumer meets: clean and with
findings, one object and a list, with and without optional blocks (``--payloads``,
``--since-checkpoint``), a replay that diverges and a history that cannot be replayed.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from histaudit.ledger.keys import Signer, generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli, exits
from support.ledgers import LedgerDb, append_order
from support.repo import HISTORIES, ORDER_HISTORY, REPO, SCHEMAS

SWEEP_APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"
ORDER_REF = "examples.nondeterminism.workflows:order"


def _registry() -> Registry:
    """Every output schema by its ``$id``: they share the finding and report schemas."""
    docs = [json.loads(p.read_bytes()) for p in sorted(SCHEMAS.glob("*.output.schema.json"))]
    return Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)


REGISTRY = _registry()


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.output.schema.json").read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=REGISTRY)


def valid(name: str, doc: Any) -> Any:
    """``doc`` after asserting it matches ``schemas/NAME.output.schema.json`` (every error
    listed, not only the first)."""
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in validator(name).iter_errors(doc)]
    assert not errors, "\n".join(errors)
    return doc


def stdout_json(result: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    exits(result, code)
    return json.loads(result.stdout)


def test_every_output_schema_is_a_valid_draft_2020_12_schema() -> None:
    names = sorted(p.name.removesuffix(".output.schema.json")
                   for p in SCHEMAS.glob("*.output.schema.json"))
    assert names == ["checkpoint-verify", "crashtest", "finding", "list", "replay", "report",
                     "show", "verify", "verify-bundle"]
    for name in names:
        validator(name)


# --- a small ledger, as tests/integration/test_cli.py builds it -----------------------------

@dataclass
class World:
    tmp: Path
    url: str
    signer: Signer
    key: Path
    trust: Path

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return cli(*args, cwd=self.tmp)


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
    assert one["ok"] is True and one["findings"] == []
    info = valid("verify", stdout_json(world.run("verify", "order-2", *db)))
    assert {f["code"] for f in info["findings"]} == {"activity-reexecuted"}
    bad = valid("verify", stdout_json(world.run("verify", "order-3", *db), 1))
    assert not bad["ok"] and {f["severity"] for f in bad["findings"]} == {"error"}
    every = valid("verify", stdout_json(world.run("verify", "--all", *db), 1))
    assert sorted(r["instance_id"] for r in every) == ["order-1", "order-2", "order-3"]


def test_list_json(world: World) -> None:
    unchecked = valid("list", stdout_json(world.run("list", "--db", world.url, "--json")))
    assert {r["status"] for r in unchecked} == {"not checked (no --trust)"}
    checked = valid("list", stdout_json(world.run("list", "--db", world.url, "--trust",
                                                  world.trust, "--json")))
    assert {r["instance"]: r["status"] for r in checked} == {
        "order-1": "ok", "order-2": "ok, 1 warning/info", "order-3": "FAILED (2)"}


def test_show_json(world: World) -> None:
    plain = valid("show", stdout_json(world.run("show", "order-1", "--db", world.url,
                                                "--json")))
    assert len(plain["entries"]) == 4 and all("payloads" not in e for e in plain["entries"])
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
    # An instance and the ledger's proof against the kept checkpoint: a list of two.
    both = valid("verify", stdout_json(world.run(
        "verify", "order-1", "--since-checkpoint", note, "--db", world.url, "--trust",
        world.trust, "--json")))
    assert [r["scope"] for r in both] == ["instance", "ledger"]
    alone = valid("verify", stdout_json(world.run(
        "verify", "--since-checkpoint", note, "--db", world.url, "--trust", world.trust,
        "--json")))
    assert alone["scope"] == "ledger"

    bundle = world.tmp / "bundle"
    exits(world.run("export", "order-1", "order-2", "--out", bundle, "--with-payloads",
                    "--db", world.url, "--key", world.key, "--trust", world.trust))
    doc = valid("verify-bundle", stdout_json(world.run(
        "verify", "--bundle", bundle, "--trust", world.trust, "--json")))
    assert doc["ok"] and [r["scope"] for r in doc["reports"]] == ["bundle", "instance",
                                                                  "instance"]
    assert "since_checkpoint" not in doc
    # Every instance, the tampered one too: its chain fails (exit 1), the tree the
    # checkpoint signed is extended (the ledger-scope report is clean).
    whole = world.tmp / "whole"
    exits(world.run("export", "--out", whole, "--db", world.url, "--key", world.key,
                    "--trust", world.trust))
    since = world.run("verify", "--bundle", whole, "--trust", world.trust,
                      "--since-checkpoint", note, "--json")
    doc = valid("verify-bundle", stdout_json(since, 1))
    assert doc["since_checkpoint"] == {"size": 13, "origin": cp["origin"], "checked": True}
    assert [r["scope"] for r in doc["reports"]] == ["bundle", *["instance"] * 3, "ledger"]
    assert [r["ok"] for r in doc["reports"]].count(False) == 1 and doc["reports"][-1]["ok"]
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
    compared = valid("replay", stdout_json(cli(
        "replay", "--history", ORDER_HISTORY, "--workflow", ORDER_REF, "--db", sqlite_url,
        "--json", cwd=REPO)))
    assert compared["output_check"]["status"] == "not-signed"
    diverged = valid("replay", stdout_json(cli(
        "replay", "--history", ORDER_HISTORY, "--workflow",
        "examples.nondeterminism.v2:order_swapped", "--json", cwd=REPO), 1))
    assert diverged["status"] == "diverged" and diverged["divergence"]["kind"]


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


# --- the schemas refuse what the code never prints --------------------------------------------

@pytest.mark.parametrize("change", [
    {"code": "no-such-code"}, {"severity": "ERROR"}, {"seq": "3"}, {"extra": 1}])
def test_finding_schema_is_closed(change: dict[str, Any]) -> None:
    finding = {"code": "link-broken", "severity": "error", "instance": "i", "seq": 3,
               "message": "m"}
    valid("finding", finding)
    assert not validator("finding").is_valid({**finding, **change})
