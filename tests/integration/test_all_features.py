"""Every workflow feature at once (issue #39): the procurement agent of
``apps/procurement_app.py`` — a fan-out under a RetryPolicy, two child workflows, a
durable timer, an approval event raced against a timeout, an order placed once, a monitor
child that continues as new three times — signed, verified, replayed and crash-tested.
Cost: ≈ 25 s of CPU (one engine and app, several CLI runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.testing import DURABLETASK, start_engine, teardown
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.schemas import valid

pytestmark = [pytest.mark.engine]

APPS = Path(__file__).resolve().parent / "apps"
APP = APPS / "procurement_app.py"
V2 = APPS / "procurement_v2.py"


class Procurement(AppRig):
    def __init__(self, tmp: Path, engine: Any) -> None:
        super().__init__(engine)
        self.tmp = tmp
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="procurement")
        self.app = self.add_app(AppProcess(engine, [APP], log=tmp / "app.log", ready="ready",
                                           env={"HISTAUDIT_DB": self.url,
                                                "HISTAUDIT_KEY": str(key),
                                                "DATA_DIR": str(tmp),
                                                "PYTHONUNBUFFERED": "1"}))

    def approved_run(self) -> tuple[str, dict[str, Any]]:
        instance = self.schedule("procurement", {"approval_timeout_s": 60})
        self.client.wait_for_workflow_start(instance, timeout_in_seconds=30)
        self.client.raise_workflow_event(instance, "approved", data={"by": "ops-7"})
        state = self.wait(instance, 60)
        assert state.runtime_status.name == "COMPLETED", self.app.tail()
        return instance, json.loads(state.serialized_output)

    def orders(self) -> list[str]:
        log = self.tmp / "orders.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Procurement, str, Any]]:
    tmp = tmp_path_factory.mktemp("procurement")
    eng = start_engine(DURABLETASK, tmp / "engine")
    try:
        with Procurement(tmp, eng) as rig:
            rig.app.start()
            instance, output = rig.approved_run()
            yield rig, instance, output
    finally:
        teardown(eng)


def test_the_approved_run_orders_once_and_monitors_four_generations(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, output = done
    assert output["decision"] == {"by": "ops-7"} and output["delivery"] == "delivered"
    assert rig.orders() == [f"{instance}:{output['offer']['vendor']} {output['offer']['price']}"]


def test_replay_replays_every_generation_from_the_signed_histories(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, _ = done
    monitor = f"{instance}-monitor"
    r = cli("replay", monitor, "--workflow", f"{APP}:wfr", "--engine", rig.engine.address,
            "--db", rig.url, "--json", cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = valid("replay", json.loads(r.stdout))
    gens = doc["output_check"]["generations"]
    assert [(g["generation"], g["status"]) for g in gens] == [(0, "same"), (1, "same"),
                                                             (2, "same")]


def test_replay_catches_a_change_only_generation_0_makes(
        done: tuple[Procurement, str, Any]) -> None:
    """The engine holds generation 3 alone, which today's code replays unchanged: only
    the signed history of generation 0 shows the change."""
    rig, instance, _ = done
    monitor = f"{instance}-monitor"
    r = cli("replay", monitor, "--workflow", f"{V2}:monitor", "--engine", rig.engine.address,
            "--db", rig.url, cwd=rig.tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "generation 0: DIVERGED from the" in r.stdout, r.stdout
    assert "different-input" in r.stdout
    assert "generation 1: OK" in r.stdout and "generation 2: OK" in r.stdout
    r = cli("replay", monitor, "--workflow", f"{V2}:monitor", "--engine", rig.engine.address,
            cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr  # without the ledger: generation 3 only



def test_a_generation_whose_history_was_erased_or_altered_says_so(
        done: tuple[Procurement, str, Any], tmp_path: Path) -> None:
    """Generation 1's history redacted: not replayed, and said; generation 2's stored row
    rewritten: the replay refuses it as not the signed history."""
    import sqlite3

    rig, instance, _ = done
    monitor = f"{instance}-monitor"
    db = tmp_path / "copy.db"
    with sqlite3.connect(rig.tmp / "ledger.db") as live, sqlite3.connect(db) as copy:
        live.backup(copy)  # the app holds the ledger open, its last writes in the WAL
    url = f"sqlite:///{db}"
    r = cli("show", monitor, "--json", "--db", url, cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    ends = [e for e in json.loads(r.stdout)["entries"]
            if e["kind"] == "workflow.continued_as_new"]
    assert len(ends) == 3 and all(e["data"]["history_events"] == 5 for e in ends)
    r = cli("redact", monitor, "--seq", str(ends[1]["seq"]), "--field", "history",
            "--db", url, "--key", str(rig.tmp / "keys" / "procurement.key"), cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    with sqlite3.connect(db) as conn:  # an attacker with the file drops the guard first
        conn.execute("DROP TRIGGER histaudit_payloads_no_update")
        conn.execute("UPDATE histaudit_payloads SET data = replace(data, 'in transit', "
                     "'in trance!') WHERE commitment = ?", (ends[2]["data"]["history"]["c"],))
    r = cli("replay", monitor, "--workflow", f"{APP}:wfr", "--engine", rig.engine.address,
            "--db", url, "--json", cwd=rig.tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    gens = valid("replay", json.loads(r.stdout))["output_check"]["generations"]
    assert [g["status"] for g in gens] == ["same", "not-replayed", "different"]
    assert "was erased" in gens[1]["message"]
    assert "not the one entry" in gens[2]["message"]


def test_verify_tree_covers_the_parent_its_children_and_every_generation(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, _ = done
    r = cli("verify", instance, "--tree", "--db", rig.url, "--trust", rig.trust, "--engine",
            rig.engine.address, "--json", cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = valid("verify", json.loads(r.stdout))
    neg = sorted(n["instance"] for n in doc["tree"] if n["workflow"] == "negotiate")
    assert [(n["instance"], n["depth"], n["state"], n["generations"]) for n in doc["tree"]] == [
        (instance, 0, "completed", 1), (neg[0], 1, "completed", 1),
        (neg[1], 1, "completed", 1), (f"{instance}-monitor", 1, "completed", 4)]
    assert [rep["instance"] for rep in doc["reports"]] == [n["instance"] for n in doc["tree"]]
    assert all(rep["ok"] and rep["mode"] == "default+engine" for rep in doc["reports"])
    r = cli("verify", instance, "--tree", "--db", rig.url, "--trust", rig.trust, cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"tree of {instance}: 4 instance(s)"
    assert lines[4] == f"    {instance}-monitor  monitor (completed, 4 generations) — OK"


def test_verify_tree_fails_a_child_whose_chain_is_gone(
        done: tuple[Procurement, str, Any], tmp_path: Path) -> None:
    """A child the parent signed it scheduled, with no chain in the ledger: deleted (or
    never audited) — the tree says so and fails with instance-missing."""
    import sqlite3

    rig, instance, _ = done
    db = tmp_path / "copy.db"
    with sqlite3.connect(rig.tmp / "ledger.db") as live, sqlite3.connect(db) as copy:
        live.backup(copy)
    with sqlite3.connect(db) as conn:
        for table in ("histaudit_entries", "histaudit_heads"):
            conn.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
            conn.execute(f"DELETE FROM {table} WHERE instance = ?", (f"{instance}-monitor",))
    r = cli("verify", instance, "--tree", "--db", f"sqlite:///{db}", "--trust", rig.trust,
            "--json", cwd=rig.tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = valid("verify", json.loads(r.stdout))
    gone = doc["tree"][-1]
    assert (gone["instance"], gone["state"], gone["entries"]) == (
        f"{instance}-monitor", "not-recorded", 0)
    assert [f["code"] for f in doc["reports"][-1]["findings"]] == ["instance-missing"]
    r = cli("verify", "--all", "--tree", "--db", f"sqlite:///{db}", "--trust", rig.trust,
            cwd=rig.tmp)
    assert r.returncode == 2 and "--tree starts from one instance" in r.stderr


def _show(rig: Procurement, instance: str) -> list[dict[str, Any]]:
    r = cli("show", instance, "--json", "--db", rig.url, cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return list(valid("show", json.loads(r.stdout))["entries"])


def test_custom_status_retry_policies_and_child_links_are_signed(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, _ = done
    entries = _show(rig, instance)
    statuses = [e for e in entries if e["kind"] == "workflow.custom_status"]
    assert len(statuses) == 2 and all(set(e["data"]["status"]) >= {"c", "n"}
                                      for e in statuses)  # committed, not in clear
    assert "awaiting approval" not in json.dumps(entries)
    quotes = [e["data"] for e in entries if e["kind"] == "workflow.scheduled_activity"
              and e["data"]["activity"] == "quote_vendor"]
    assert len(quotes) == 3 and all(q["retry_policy"] == {
        "max_number_of_attempts": 3, "first_retry_interval_ms": 200,
        "backoff_coefficient": "1.0", "max_retry_interval_ms": None, "retry_timeout_ms": None}
        for q in quotes), quotes
    children = {e["data"]["child_instance"]: e["data"]["task_id"] for e in entries
                if e["kind"] == "workflow.scheduled_child"}
    assert len(children) == 3
    for child, task_id in children.items():
        starts = [e["data"]["parent"] for e in _show(rig, child)
                  if e["kind"] == "workflow.started"]  # the monitor: one per generation
        assert len(starts) == (4 if child.endswith("-monitor") else 1)
        for parent in starts:
            assert (parent["instance"], parent["task_id"]) == (instance, task_id)
            assert isinstance(parent["app_id"], str)  # the engine's app id
    assert [e["data"]["parent"] for e in entries if e["kind"] == "workflow.started"] == [None]
    r = cli("verify", instance, "--tree", "--db", rig.url, "--trust", rig.trust, "--json",
            cwd=rig.tmp)
    tree = json.loads(r.stdout)["tree"]
    assert [n["signed_parent"] for n in tree] == [None, instance, instance, instance]


def test_the_report_names_each_workflow_its_end_its_parent_and_its_events(
        done: tuple[Procurement, str, Any], tmp_path: Path) -> None:
    """The bundle's report.html: a workflow column (name, how it ended, generations,
    parent linked), and per instance a table of what reached it from outside its code."""
    import re

    rig, instance, _ = done
    bundle = tmp_path / "bundle"
    r = cli("export", instance, f"{instance}-monitor", "--out", bundle, "--db", rig.url,
            "--key", rig.tmp / "keys" / "procurement.key", "--trust", rig.trust, cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    html = (bundle / "report.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "procurement completed" in text
    assert f"monitor completed, 4 generations (continue-as-new), child of {instance}" in text
    assert "<a href='#i-" in html and f">{instance}</a>" in html  # the parent is linked
    for words in ("event 'approved' received at", "custom status set (value committed)",
                  "started child 'negotiate' as", "started child 'monitor' as",
                  "continued as new (next input committed"):
        assert words in text.replace("&#x27;", "'"), words
    assert re.search(r"timer \d+ \(due [0-9T:.Z-]+\) fired", text), text[:2000]
    tree = html[html.index("<h3>Workflow tree</h3>"):]
    tree = tree[:tree.index("</section>")]
    # the monitor's item sits inside the parent's, in a nested list
    root, monitor = tree.index(f">{instance}</a>"), tree.index(f">{instance}-monitor</a>")
    assert root < tree.index("<ul>", root) < monitor < tree.rindex("</ul>")


def test_show_compact_aligns_its_columns_whatever_the_names(
        done: tuple[Procurement, str, Any]) -> None:
    """Every line's digest starts in the same column, long kinds and activity names too."""
    rig, instance, _ = done
    r = cli("show", f"{instance}-monitor", "--compact", "--db", rig.url, cwd=rig.tmp)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 20 and any("check_delivery #1" in ln for ln in lines)
    import re

    assert len({ln.rindex("  ") for ln in lines}) == 1, r.stdout  # the digest column
    task_column = {re.match(r" *\d+  \S+ +", ln).end() for ln in lines}  # type: ignore[union-attr]
    assert len(task_column) == 1, r.stdout


def test_durable_timers_are_signed_when_created_and_when_fired(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, _ = done
    entries = _show(rig, instance)
    created = [e["data"] for e in entries if e["kind"] == "workflow.scheduled_timer"]
    fired = [e["data"] for e in entries if e["kind"] == "workflow.timer_fired"]
    # the cooling-off timer, then the approval's timeout (the event won the race)
    assert len(created) == 2 and all(c["fire_at"].endswith("Z") for c in created), created
    assert [f["timer_id"] for f in fired] == [created[0]["task_id"]]
    assert fired[0]["fire_at"] == created[0]["fire_at"]


def test_replay_tree_replays_the_parent_and_every_child(
        done: tuple[Procurement, str, Any]) -> None:
    rig, instance, _ = done
    r = cli("replay", instance, "--tree", "--workflow", f"{APP}:wfr", "--engine",
            rig.engine.address, "--db", rig.url, "--json", cwd=rig.tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = valid("replay", json.loads(r.stdout))
    assert doc["summary"]["histories"] == 4 and doc["summary"]["ok"] == 4
    sources = [x["source"] for x in doc["results"]]  # depth first, in scheduling order
    assert sources[0] == instance and sources[-1] == f"{instance}-monitor"
    assert len(set(sources)) == 4 and all(x.startswith(f"{instance}-neg-") for x in sources[1:3])
    monitor = next(x for x in doc["results"] if x["source"] == f"{instance}-monitor")
    assert len(monitor["output_check"]["generations"]) == 3
    r = cli("replay", instance, "--tree", "--workflow", f"{APP}:wfr", "--engine",
            rig.engine.address, cwd=rig.tmp)
    assert r.returncode == 2 and "--tree replays INSTANCE_ID's children" in r.stderr
