"""``histaudit retention apply`` and ``histaudit report`` (issue #42, item 3) on
SQLite and PostgreSQL: payloads past their term are erased through the signed erasure and
the chain still verifies; a hold keeps an instance's payloads; a run cut short by a crash
between two erasures is finished by the next, which erases nothing twice; bad policies are
one line, exit 2, the ledger unchanged; and the period report (``histaudit report``): its
JSON against schemas/period-report.schema.json, its page as headless Chromium builds it.
Issue #50: the report fails where ``verify --all`` fails, rows that do not parse included;
a hold names instances exactly (``glob:`` globs) and a hold matching nothing is named;
policy members set to null are one line. Cost: ≈ 16 s of CPU, 20 s of wall (≈ 5 s of it
the issue #50 cases).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from histaudit.crash import CRASH_EXIT_CODE, ENV_CRASH_AT
from histaudit.ledger import chain
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.chromium import chromium
from support.cli import cli, exits, one_error_line
from support.ledgers import LedgerDb, committed, read_entries
from support.repo import SCHEMAS

POLICY = {"version": 1,
          "payloads": [{"kinds": ["llm.*"], "keep_days": 30},
                       {"kinds": ["activity.*"], "workflows": ["claims*"], "keep_days": 180}],
          "holds": [{"instances": ["claim-2"], "reason": "litigation hold LH-12"}]}
INSTANCES = {"claim-1": "claims", "claim-2": "claims", "other-1": "other"}


def _later(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def rig(db_url: str, tmp_path: Path) -> dict[str, Any]:
    key, pub, signer = generate_keypair(tmp_path / "keys", name="ops")
    with Ledger.open(db_url, create=True) as ledger:
        for instance, workflow in INSTANCES.items():
            chain.append(ledger, instance, "workflow.started", {"workflow": workflow},
                         signer=signer)
            for kind, text in (("activity.completed", b'{"claim":"a private answer"}'),
                               ("llm.call", b'{"prompt":"a private prompt"}')):
                ref, rows = committed(text)
                chain.append(ledger, instance, kind, {"output": {**ref, "k": True}},
                             signer=signer, payloads=rows)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    return {"url": db_url, "tmp": tmp_path, "key": key, "pub": pub, "policy": policy}


def _apply(rig: dict[str, Any], days: int, *extra: str, env: dict[str, str] | None = None
           ) -> Any:
    return cli("retention", "apply", "--policy", rig["policy"], "--now", _later(days),
               "--db", rig["url"], "--key", rig["key"], *extra, cwd=rig["tmp"], env=env)


def _erasures(url: str) -> Counter[str]:
    """payload.erased entries per commitment, over every instance."""
    return Counter(e.data["commitment"] for i in INSTANCES for e in read_entries(url, i)
                   if e.kind == "payload.erased")


def _stored(url: str) -> int:
    with LedgerDb(url) as db:
        return int(db.run("SELECT count(*) FROM histaudit_payloads")[0][0])


def _verify_clean(rig: dict[str, Any]) -> None:
    exits(cli("verify", "--all", "--full", "--db", rig["url"], "--trust", rig["pub"],
              cwd=rig["tmp"]))


def test_terms_and_holds_are_applied_through_the_signed_erasure(rig: dict[str, Any]) -> None:
    assert _stored(rig["url"]) == 6
    dry = _apply(rig, 40, "--dry-run", "--json")
    exits(dry)
    assert json.loads(dry.stdout)["counts"] == {"erased": 2, "already-erased": 0, "kept": 3,
                                                "held": 1}
    assert _stored(rig["url"]) == 6  # a dry run erases nothing
    # 40 days on: the LLM payloads are past their 30 days, but claim-2 is on hold
    r = _apply(rig, 40, "--json")
    exits(r)
    doc = json.loads(r.stdout)
    assert doc["counts"] == {"erased": 2, "already-erased": 0, "kept": 3, "held": 1}
    assert doc["held"] == {"claim-2": "litigation hold LH-12"}
    assert {(e["instance"], e["kind"], e["rule"]) for e in doc["erased"]} == {
        ("claim-1", "llm.call", 1), ("other-1", "llm.call", 1)}
    assert _stored(rig["url"]) == 4
    erased = read_entries(rig["url"], "claim-1")[-1]
    assert erased.kind == "payload.erased" and erased.data["entry"] == 3
    assert "keeps llm.* payloads 30 days" in erased.data["reason"]
    # 200 days on: claim-1's activity output too; other-1's has no rule (another workflow)
    r = _apply(rig, 200)
    exits(r)
    assert "erased 1 payload(s); already erased 2; kept 1" in r.stdout
    assert "on hold: claim-2 (litigation hold LH-12)" in r.stdout
    assert _stored(rig["url"]) == 3 and set(_erasures(rig["url"]).values()) == {1}
    _verify_clean(rig)


def test_a_run_cut_short_is_finished_by_the_next_and_erases_nothing_twice(
        rig: dict[str, Any]) -> None:
    cut = _apply(rig, 200, env={ENV_CRASH_AT: "retention:erased#2"})
    assert cut.returncode == CRASH_EXIT_CODE, cut.stderr
    assert sum(_erasures(rig["url"]).values()) == 2 and _stored(rig["url"]) == 4
    _verify_clean(rig)  # each erasure is whole: row gone and its record signed, together
    done = _apply(rig, 200, "--json")
    exits(done)
    assert json.loads(done.stdout)["counts"] == {"erased": 1, "already-erased": 2, "kept": 1,
                                                 "held": 2}
    again = _apply(rig, 200, "--json")
    exits(again)
    assert json.loads(again.stdout)["counts"]["erased"] == 0  # idempotent
    erasures = _erasures(rig["url"])
    assert sum(erasures.values()) == 3 and set(erasures.values()) == {1}
    _verify_clean(rig)


@pytest.mark.parametrize(("policy", "needle"), [
    ("not json", "is not JSON"),
    ('{"version": 2}', "version '2' is not 1"),
    ('{"version": 1, "keep": []}', "unknown member(s) 'keep'"),
    ('{"version": 1, "payloads": [{"kinds": ["llm.*"], "keep_days": -1}]}', "keep_days"),
    ('{"version": 1, "payloads": [{"kinds": ["llm.*"], "keep_days": true}]}', "keep_days"),
    ('{"version": 1, "payloads": [{"kinds": [], "keep_days": 3}]}', "kinds must be"),
    ('{"version": 1, "holds": [{"reason": "x"}]}', "holds[1] must be"),
])
def test_a_bad_policy_is_one_line_and_changes_nothing(rig: dict[str, Any], policy: str,
                                                      needle: str) -> None:
    rig["policy"].write_text(policy)
    one_error_line(_apply(rig, 400), "retention policy", needle)
    assert _stored(rig["url"]) == 6 and not _erasures(rig["url"])


def test_members_set_to_null_are_named(rig: dict[str, Any]) -> None:
    """Issue #50 item 3: a member set to null (or to the wrong type) is one line naming
    it, exit 2, nothing erased; one rig for every case."""
    for policy, needle in (
            ('{"version": 1, "holds": null}', "holds must be a list"),
            ('{"version": 1, "payloads": null}', "payloads must be a list"),
            ('{"version": 1, "payloads": {"kinds": ["*"]}}', "payloads must be a list"),
            ('{"version": 1, "payloads": [{"kinds": null, "keep_days": 3}]}', "kinds must be"),
            ('{"version": 1, "payloads": [{"kinds": ["*"], "workflows": null, '
             '"keep_days": 3}]}', "workflows must be"),
            ('{"version": 1, "payloads": [{"kinds": ["*"], "keep_days": null}]}',
             "keep_days"),
            ('{"version": 1, "holds": [{"instances": null}]}', "instances must be"),
            ('{"version": 1, "holds": [{"instances": ["a"], "reason": null}]}',
             "reason must be"),
            ('{"version": 1, "holds": [{"instances": ["glob:"]}]}', "instances must be")):
        rig["policy"].write_text(policy)
        one_error_line(_apply(rig, 400), "retention policy", needle)
    assert _stored(rig["url"]) == 6 and not _erasures(rig["url"])


def test_the_period_report_says_what_was_kept_erased_held_and_verified(
        rig: dict[str, Any]) -> None:
    exits(_apply(rig, 40))
    exits(cli("checkpoint", "--db", rig["url"], "--key", rig["key"], cwd=rig["tmp"]))
    out = rig["tmp"] / "report"
    r = cli("report", "--since", _later(-1), "--until", _later(1), "--out", out,
            "--retention-policy", rig["policy"], "--db", rig["url"], "--trust", rig["pub"],
            cwd=rig["tmp"])
    exits(r)
    assert "3 instance(s), 11 entries in the period: 3 verified, 0 failing; 2 payload(s) " \
           "erased, 1 on hold" in r.stdout
    doc = json.loads((out / "report.json").read_text())
    Draft202012Validator(json.loads((SCHEMAS / "period-report.schema.json").read_text())
                         ).validate(doc)
    by = {i["instance"]: i for i in doc["instances"]}
    assert by["claim-2"]["hold"] == "litigation hold LH-12"
    assert [e["field"] for e in by["claim-1"]["payloads_erased_in_period"]] == ["output"]
    assert "keeps llm.* payloads 30 days" in by["claim-1"]["payloads_erased_in_period"][0][
        "reason"]
    assert (by["claim-1"]["payloads_stored"], by["claim-2"]["payloads_stored"]) == (1, 2)
    assert doc["checkpoints_covering_period"] == [{"size": 11, "cosignatures": 0,
                                                   "quorum_met": None}]
    # the page, as a browser builds it
    dom = chromium(out / "report.html", "--dump-dom", profile=rig["tmp"] / "profile").stdout
    assert "3 instance(s), 11 entries in the period" in dom
    assert "litigation hold LH-12" in dom and "claim-1 entry 3 output" in dom
    assert "<script" not in (out / "report.html").read_text()
    # a second report into the same directory is refused, the first kept
    one_error_line(cli("report", "--since", _later(-1), "--until", _later(1), "--out", out,
                       "--db", rig["url"], "--trust", rig["pub"], cwd=rig["tmp"]),
                   "already exists")
    # a chain someone edited: the report says so, and exits 1
    with LedgerDb(rig["url"]) as db:
        db.lift_guards()
        db.set_entry("other-1", 1, body=b'{"forged":true}')
        db.restore_guards()
    r = cli("report", "--since", _later(-1), "--until", _later(1), "--out",
            rig["tmp"] / "again", "--db", rig["url"], "--trust", rig["pub"], cwd=rig["tmp"])
    assert r.returncode == 1 and "2 verified, 1 failing" in r.stdout, r.stderr


def test_an_erasure_after_the_end_leaves_the_workflow_ended(db_url: str, tmp_path: Path
                                                            ) -> None:
    """``payload.erased`` (and ``dapr.history_captured``) follow a workflow's end without
    being its doing: ``list`` and the report still say how it ended."""
    key, pub, signer = generate_keypair(tmp_path / "keys", name="ops")
    ref, stored = committed(b'{"answer":"private"}')
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "done-1", "workflow.started", {"workflow": "claims"},
                     signer=signer)
        chain.append(ledger, "done-1", "llm.call", {"output": {**ref, "k": True}},
                     signer=signer, payloads=stored)
        chain.append(ledger, "done-1", "workflow.completed", {"workflow": "claims"},
                     signer=signer)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"version": 1, "payloads": [{"kinds": ["*"], "keep_days": 0}]}))
    exits(cli("retention", "apply", "--policy", policy, "--db", db_url, "--key", key,
              cwd=tmp_path))
    assert read_entries(db_url, "done-1")[-1].kind == "payload.erased"
    listed = cli("list", "--db", db_url, "--json", cwd=tmp_path)
    exits(listed)
    (row,) = json.loads(listed.stdout)
    assert (row["last_kind"], row["workflow"]) == ("payload.erased", "completed")
    exits(cli("report", "--since", _later(-1), "--until", _later(1), "--out", tmp_path / "r",
              "--db", db_url, "--trust", pub, cwd=tmp_path))
    (instance,) = json.loads((tmp_path / "r" / "report.json").read_text())["instances"]
    assert instance["state"] == "completed"


def _report(rig: dict[str, Any], name: str) -> Any:
    return cli("report", "--since", _later(-1), "--until", _later(1), "--out",
               rig["tmp"] / name, "--db", rig["url"], "--trust", rig["pub"], cwd=rig["tmp"])


def test_the_report_fails_where_verify_fails_though_no_row_of_a_chain_parses(
        rig: dict[str, Any]) -> None:
    """Issue #50 item 1: the report is built from every row, parseable or not. An
    instance none of whose bodies parses, and one that is a single unsigned row whose
    timestamp does not read, are failing instances of the report (exit 1, as ``verify
    --all``), not absent from it."""
    with LedgerDb(rig["url"]) as db:
        db.lift_guards()
        for seq in (1, 2, 3):
            db.set_entry("other-1", seq, body=b"not an entry %d" % seq)
        db.restore_guards()
    assert cli("verify", "--all", "--db", rig["url"], "--trust", rig["pub"],
               cwd=rig["tmp"]).returncode == 1
    r = _report(rig, "broken")
    assert r.returncode == 1 and "3 instance(s)" in r.stdout \
        and "2 verified, 1 failing" in r.stdout, (r.stdout, r.stderr)
    doc = json.loads((rig["tmp"] / "broken" / "report.json").read_text())
    Draft202012Validator(json.loads((SCHEMAS / "period-report.schema.json").read_text())
                         ).validate(doc)
    (broken,) = [i for i in doc["instances"] if not i["verified"]]
    assert broken["instance"] == "other-1" and broken["entries"] == 3
    assert "entry-malformed" in broken["findings"]
    # one unsigned row, its timestamp no date at all, as the only entry of an instance
    body = json.dumps({"type": "entry", "v": 1, "instance": "ghost", "seq": 1, "leaf": 9,
                       "prev": "0" * 64, "kind": "workflow.started",
                       "ts": "2026-13-45T99:99:99.000000Z", "kid": "0" * 16,
                       "data": {}}).encode()
    with LedgerDb(rig["url"]) as db:
        db.append_raw("ghost", body)
    r = _report(rig, "ghost")
    assert r.returncode == 1 and "4 instance(s)" in r.stdout \
        and "2 verified, 2 failing" in r.stdout, (r.stdout, r.stderr)
    # and one whose timestamp is not even shaped like one (the row does not parse)
    with LedgerDb(rig["url"]) as db:
        db.append_raw("ghost-2", body.replace(b'"ghost"', b'"ghost-2"').replace(
            b"2026-13-45T99:99:99.000000Z", b"yesterday").replace(b'"leaf": 9', b'"leaf": 10'))
    r = _report(rig, "ghost-2")
    assert r.returncode == 1 and "2 verified, 3 failing" in r.stdout, (r.stdout, r.stderr)


def test_a_hold_is_exact_unless_it_asks_for_a_glob(db_url: str, tmp_path: Path) -> None:
    """Issue #50 item 2: instance ids may hold ``[``, ``*`` and ``?``; a hold names an
    instance exactly (``case[7]`` holds ``case[7]``, not ``case7``) and globs only behind
    ``glob:``. A hold that matches no instance is named, so a mistyped id is seen."""
    key, pub, signer = generate_keypair(tmp_path / "keys", name="ops")
    with Ledger.open(db_url, create=True) as ledger:
        for instance in ("case[7]", "case7", "claim-9", "other-3"):
            ref, rows = committed(b'{"prompt":"private"}')
            chain.append(ledger, instance, "llm.call", {"output": {**ref, "k": True}},
                         signer=signer, payloads=rows)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"version": 1,
                                  "payloads": [{"kinds": ["*"], "keep_days": 0}],
                                  "holds": [{"instances": ["case[7]"], "reason": "LH-7"},
                                            {"instances": ["glob:claim-*"], "reason": "LH-9"},
                                            {"instances": ["case[8]", "other-*"],
                                             "reason": "typo"}]}))
    r = cli("retention", "apply", "--policy", policy, "--db", db_url, "--key", key,
            "--json", cwd=tmp_path)
    exits(r)
    doc = json.loads(r.stdout)
    assert doc["held"] == {"case[7]": "LH-7", "claim-9": "LH-9"}
    assert {e["instance"] for e in doc["erased"]} == {"case7", "other-3"}
    assert doc["unmatched_holds"] == [{"hold": 3, "instances": ["case[8]", "other-*"],
                                       "reason": "typo"}]
    assert not [e for e in read_entries(db_url, "case[7]") if e.kind == "payload.erased"]
    text = cli("retention", "apply", "--policy", policy, "--db", db_url, "--key", key,
               "--dry-run", cwd=tmp_path)
    exits(text)
    assert "hold 3 (typo) matches no instance: case[8], other-*" in text.stdout
    report = cli("report", "--since", _later(-1), "--until", _later(1), "--out",
                 tmp_path / "report", "--retention-policy", policy, "--db", db_url,
                 "--trust", pub, cwd=tmp_path)
    exits(report)
    assert "hold 3 (typo) matches no instance: case[8], other-*" in report.stdout
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["unmatched_holds"] == [{"hold": 3, "instances": ["case[8]", "other-*"],
                                       "reason": "typo"}]
    assert {i["instance"]: i["hold"] for i in doc["instances"]} == {
        "case[7]": "LH-7", "case7": None, "claim-9": "LH-9", "other-3": None}
