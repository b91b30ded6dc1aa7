"""The research-report example (examples/research_report) on the real engine.

A 10+ step agent workflow — plan, a fan-out of fetches, a fan-out of extractions, a child
workflow, draft, a review with a deliberate retry, a published side effect — run as its
own process so it can crash at a named crash point and be started again. Each test reads
the signed ledger back and runs the verifier, through the library and through the
``histaudit`` CLI a user would run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf
import pytest

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import generate_keypair
from histaudit.testing.engine import EngineProcess
from histaudit.verify.findings import Severity
from histaudit.verify.report import Report
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli
from support.ledgers import only, read_entries, stored_payload, verify_url
from support.repo import REPO

APP = REPO / "examples" / "research_report" / "app.py"
APP_READY = "RESEARCH APP READY"  # what app.py prints once its worker is started
APP_READY_TIMEOUT_S = 45.0
WORKFLOW_TIMEOUT_S = 60

REQUEST = {"topic": "solid-state batteries", "sources": ["arxiv", "news", "filings", "patents"]}
N = len(REQUEST["sources"])
CHILD_ACTIVITIES = ("cluster_claims", "score_evidence", "summarize_findings")
ONCE = ("plan_research", "draft_report", "publish_report", *CHILD_ACTIVITIES)


class Lab(AppRig):
    """One engine, one ledger, one key, one data directory, one app."""

    def __init__(self, engine: EngineProcess, tmp: Path) -> None:
        super().__init__(engine)
        self.data = tmp / "data"
        self.data.mkdir()
        self.keys = tmp / "keys"
        key_path, _pub, self.signer = generate_keypair(self.keys, name="app")
        self.tmp = tmp
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.app = self.add_app(AppProcess(engine, [APP, "serve"], log=tmp / "app.log",
                              env={"DATA_DIR": str(self.data), "HISTAUDIT_DB": self.url,
                                   "HISTAUDIT_KEY": str(key_path), "PYTHONUNBUFFERED": "1"},
                              ready=APP_READY, ready_timeout=APP_READY_TIMEOUT_S,
                              exit_timeout=WORKFLOW_TIMEOUT_S))

    def schedule(self) -> str:
        instance = f"report-{uuid.uuid4().hex[:8]}"
        self.client.schedule_new_workflow(workflow="research_report", input=REQUEST,
                                          instance_id=instance)
        return instance

    def finish(self, instance: str) -> Any:
        """Wait for ``instance`` to complete; return its decoded output.

        Polls the state: the engine's SQLite backend answers wait_for_workflow_completion
        by polling with a back-off of up to 10 s, which would add seconds to every test.
        """
        running = (wf.WorkflowStatus.PENDING, wf.WorkflowStatus.RUNNING)
        state = self.client.get_workflow_state(instance)
        deadline = time.monotonic() + WORKFLOW_TIMEOUT_S
        while state is None or state.runtime_status in running:
            if time.monotonic() > deadline:
                pytest.fail(f"{instance} not done after {WORKFLOW_TIMEOUT_S}s:\n"
                            f"{self.app.output()[-3000:]}")
            time.sleep(0.1)
            state = self.client.get_workflow_state(instance)
        assert state.runtime_status == wf.WorkflowStatus.COMPLETED, \
            f"{instance}: {state.runtime_status} {state.failure_details}\n" \
            f"{self.app.output()[-3000:]}"
        return json.loads(state.serialized_output)

    def entries(self, instance: str) -> list[fmt.Entry]:
        return read_entries(self.url, instance)

    def payload(self, ref: dict[str, Any] | None) -> bytes | None:
        """The stored payload behind a reference, checked against its commitment."""
        return stored_payload(self.url, ref)

    def runs(self, instance: str) -> Counter[str]:
        """How often each activity body ran for ``instance`` and its child (runs.log)."""
        path = self.data / "runs.log"
        lines = path.read_text().splitlines() if path.exists() else []
        ours = (instance, f"{instance}-analyze")
        return Counter(name for name, iid, _pid in (x.split(" ") for x in lines)
                       if iid in ours)

    def published(self, instance: str) -> list[str]:
        path = self.data / "published.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        return [x for x in lines if x.split(" ", 1)[0] == instance]

    def verify(self, instance: str) -> Report:
        """The library verifier, full mode (every signature and payload)."""
        return verify_url(self.url, instance, self.signer, full=True)

    def cli_verify(self, *args: str) -> tuple[int, Any]:
        """``histaudit verify ... --json`` as a user runs it: (exit status, its reports)."""
        proc = cli("verify", *args, "--db", self.url, "--trust", self.keys, "--full", "--json",
                   cwd=self.tmp)
        assert proc.returncode in (0, 1), proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["since_checkpoint"] is None
        assert doc["ok"] is all(r["ok"] for r in doc["reports"])
        return proc.returncode, doc["reports"]


@pytest.fixture
def lab(engine: EngineProcess, tmp_path: Path) -> Iterator[Lab]:
    with Lab(engine, tmp_path) as lab:
        yield lab


def reexecuted(entries: list[fmt.Entry]) -> Counter[str]:
    """Activity name per task (task id + execution id) that started more than once."""
    starts = Counter((e.data["task_id"], e.data["execution_id"], e.data["activity"])
                     for e in only(entries, "activity.started"))
    return Counter(name for (_t, _x, name), n in starts.items() if n > 1)


def check_child(lab: Lab, instance: str, parent: list[fmt.Entry]) -> None:
    """The child workflow's records are in its own chain, complete, and verify clean."""
    child_id = f"{instance}-analyze"
    (sched,) = only(parent, "workflow.scheduled_child")
    assert sched.data["child_workflow"] == "analyze"
    assert sched.data["child_instance"] == child_id
    assert not [e for e in parent if e.data.get("activity") in CHILD_ACTIVITIES]
    child = lab.entries(child_id)
    assert {e.instance for e in child} == {child_id}
    assert [e.kind for e in child] == (
        ["workflow.started"]
        + ["workflow.scheduled_activity", "activity.started", "activity.completed"] * 3
        + ["workflow.completed"])
    assert [e.data["activity"] for e in only(child, "activity.started")] == \
        list(CHILD_ACTIVITIES)
    # The child committed to the exact text the parent committed to when it scheduled it
    # (digests are keyed per instance, so it is the stored payloads that are compared).
    assert lab.payload(only(child, "workflow.started")[0].data["input"]) == \
        lab.payload(sched.data["input"]) is not None
    report = lab.verify(child_id)
    assert report.ok and not report.findings, [f.to_json() for f in report.findings]


def check_review_retry(entries: list[fmt.Entry]) -> None:
    """review_draft: failed once, retried by the RetryPolicy as a new task of one call."""
    review = [e for e in entries if e.data.get("activity") == "review_draft"]
    assert [e.kind for e in review] == ["workflow.scheduled_activity", "activity.started",
                                        "activity.failed", "activity.started",
                                        "activity.completed"]
    sched, first, failed, second, done = review
    assert sched.data["retry_policy"]["max_number_of_attempts"] == 3
    assert failed.data["error_type"] == "ReviewerBusy"
    assert (first.data["attempt"], second.data["attempt"]) == (1, 2)
    assert first.data["execution_id"] == second.data["execution_id"] == \
        sched.data["execution_id"]
    assert first.data["task_id"] == sched.data["task_id"] != second.data["task_id"]
    assert done.data["started_seq"] == second.seq


# --- clean run --------------------------------------------------------------------------

@pytest.mark.engine
def test_clean_run_verifies_clean_including_the_deliberate_retry(lab: Lab) -> None:
    lab.app.start()
    instance = lab.schedule()
    output = lab.finish(instance)

    assert output["title"] == "Research report: solid-state batteries"
    assert output["receipt"]["channel"] == "published.txt"
    runs = lab.runs(instance)
    assert runs == {**dict.fromkeys(ONCE, 1), "fetch_source": N, "extract_notes": N,
                    "review_draft": 2}
    assert sum(runs.values()) >= 10
    assert lab.published(instance) == \
        [f"{instance} {output['receipt']['report_id']} {output['title']}"]

    entries = lab.entries(instance)
    starts = Counter(e.data["activity"] for e in only(entries, "activity.started"))
    assert starts == {"plan_research": 1, "fetch_source": N, "extract_notes": N,
                      "draft_report": 1, "review_draft": 2, "publish_report": 1}
    assert not reexecuted(entries)
    check_review_retry(entries)
    assert [e.kind for e in entries if e.kind.startswith("effect.")] == \
        ["effect.intent", "effect.done"]
    assert [e.kind for e in entries].count("workflow.completed") == 1
    check_child(lab, instance, entries)

    # The retry is neither a re-execution nor a failure finding: nothing at all is found.
    report = lab.verify(instance)
    assert report.ok and not report.findings, [f.to_json() for f in report.findings]
    rc, doc = lab.cli_verify("--all", "--fail-on", "info")
    assert rc == 0, doc
    assert sorted(r["instance"] for r in doc) == sorted([instance, f"{instance}-analyze"])
    assert all(r["ok"] and not r["findings"] for r in doc), doc


# --- a crash inside the fan-out ---------------------------------------------------------

@pytest.mark.engine
@pytest.mark.crash
@pytest.mark.parametrize("crash_at", ["fetched#2", "after:fetch_source#2"])
def test_crash_inside_the_fanout_resumes_to_the_same_report(lab: Lab, crash_at: str) -> None:
    """The app dies in the middle of the parallel fetches; a new app finishes the job.

    Fetches that had not reported back run again (signed as re-executions, info), nothing
    that had completed before the fan-out runs again, the report is published once, and
    the output equals a clean run's.
    """
    lab.app.start(HISTAUDIT_CRASH_AT=crash_at)
    instance = lab.schedule()
    assert lab.app.wait_exit() == CRASH_EXIT_CODE
    assert f"crash point {crash_at.split('#')[0]!r} reached" in lab.app.output()
    crashed = lab.entries(instance)
    fetch_done = only(crashed, "activity.completed", activity="fetch_source")
    assert len(only(crashed, "activity.started", activity="fetch_source")) >= 2
    assert len(fetch_done) < N  # died with fetches in flight ...
    assert not only(crashed, "workflow.scheduled_activity", activity="extract_notes")

    lab.app.start()
    output = lab.finish(instance)
    entries = lab.entries(instance)

    # Only fetches re-ran; plan_research had completed and was replayed from history.
    again = reexecuted(entries)
    assert set(again) == {"fetch_source"} and again["fetch_source"] >= 1
    runs = lab.runs(instance)
    # The crashed fetch ran its body and runs again; another re-delivered fetch may have
    # died between its signed start and its body.
    assert N + 1 <= runs["fetch_source"] <= N + again["fetch_source"]
    assert {a: runs[a] for a in ONCE} == dict.fromkeys(ONCE, 1)
    assert runs["extract_notes"] == N and runs["review_draft"] == 2
    for task in only(entries, "activity.started", activity="fetch_source"):
        assert task.data["attempt"] in (1, 2)
    assert len(only(entries, "activity.completed", activity="fetch_source")) >= N
    check_review_retry(entries)

    # Published exactly once, and the ledger agrees: one intent, one done, no skip needed.
    assert len(lab.published(instance)) == 1
    assert [e.kind for e in entries if e.kind.startswith("effect.")] == \
        ["effect.intent", "effect.done"]
    check_child(lab, instance, entries)

    report = lab.verify(instance)
    assert report.ok, [f.to_json() for f in report.findings]
    assert report.codes() == {"activity-reexecuted"}
    assert all(f.severity == Severity.INFO and "activity fetch_source" in f.message
               for f in report.findings)
    assert len(report.findings) == again["fetch_source"]
    rc, (doc,) = lab.cli_verify(instance, "--fail-on", "warning")
    assert rc == 0 and doc["ok"], doc
    assert {(f["code"], f["severity"]) for f in doc["findings"]} == \
        {("activity-reexecuted", "info")}

    # A clean run on the restarted app writes the very same report.
    clean = lab.schedule()
    assert lab.finish(clean) == output
    assert len(lab.published(clean)) == 1


@pytest.mark.engine
@pytest.mark.crash
def test_a_crash_after_a_failing_body_reruns_it_before_its_failure_is_signed(lab: Lab) -> None:
    """``after:review_draft`` is reached when the body raises too (issue #39): the first
    review raises ReviewerBusy, the app dies before the failure is signed or reported, and
    the engine delivers the same task again — which now succeeds, so the RetryPolicy never
    needs its retry."""
    lab.app.start(HISTAUDIT_CRASH_AT="after:review_draft")
    instance = lab.schedule()
    assert lab.app.wait_exit() == CRASH_EXIT_CODE
    crashed = [e.kind for e in lab.entries(instance) if e.data.get("activity") == "review_draft"]
    assert crashed == ["workflow.scheduled_activity", "activity.started"]
    lab.app.start()
    lab.finish(instance)
    review = [e for e in lab.entries(instance) if e.data.get("activity") == "review_draft"]
    assert [e.kind for e in review] == ["workflow.scheduled_activity", "activity.started",
                                        "activity.started", "activity.completed"]
    assert review[1].data["task_id"] == review[2].data["task_id"]
    assert (review[1].data["attempt"], review[2].data["attempt"]) == (1, 2)
    report = lab.verify(instance)
    assert report.ok and report.codes() == {"activity-reexecuted"}


# --- the engine dies while the workflow waits on the fan-out ----------------------------

LOCK_TIMEOUT_S = 5.0


@pytest.fixture
def short_lock_lab(engine_binary: Path, tmp_path: Path) -> Iterator[Lab]:
    """A lab whose engine re-dispatches a lost work item after seconds, not two minutes."""
    engine = EngineProcess(binary=engine_binary, state_dir=tmp_path / "engine",
                    lock_timeout=LOCK_TIMEOUT_S)
    engine.start()
    try:
        with Lab(engine, tmp_path) as lab:
            yield lab
    finally:
        engine.kill()


@pytest.mark.engine
@pytest.mark.crash
def test_engine_restart_during_the_fanout_still_completes(short_lock_lab: Lab,
                                                          tmp_path: Path) -> None:
    """SIGKILL the engine while all fetches are in flight; same port and state file carry on.

    The app survives the outage and reconnects by itself. The restarted engine refuses
    results of work items the old one dispatched and dispatches them again once their
    lock expires: each fetch runs twice (signed re-executions, info), everything else
    once, and the report is published once.
    """
    lab = short_lock_lab
    gate = tmp_path / "fetch-gate"
    lab.app.start(RESEARCH_FETCH_GATE=str(gate))
    instance = lab.schedule()
    wait_until(lambda: lab.runs(instance)["fetch_source"] >= N, WORKFLOW_TIMEOUT_S,
               "all fetches to be in flight")

    port, db = lab.engine.port, lab.engine.db_path
    lab.engine.kill()
    lab.engine.start()
    assert (lab.engine.port, lab.engine.db_path) == (port, db)
    gate.touch()

    # A fresh client: the old channel may sit in reconnect back-off after the outage.
    lab.client.close()
    lab.client = lab.new_client()
    output = lab.finish(instance)
    assert lab.app.proc is not None and lab.app.proc.poll() is None, "the app must survive"

    runs = lab.runs(instance)
    assert runs["fetch_source"] == 2 * N
    assert {a: runs[a] for a in ONCE} == dict.fromkeys(ONCE, 1)
    assert len(lab.published(instance)) == 1
    entries = lab.entries(instance)
    assert reexecuted(entries) == {"fetch_source": N}
    # Counted by the same process before and after the outage: attempt 2 of each fetch.
    assert sorted(e.data["attempt"] for e in only(entries, "activity.started",
                                                  activity="fetch_source")) == [1] * N + [2] * N
    assert [e.kind for e in entries if e.kind.startswith("effect.")] == \
        ["effect.intent", "effect.done"]
    check_review_retry(entries)
    check_child(lab, instance, entries)
    report = lab.verify(instance)
    assert report.ok and report.codes() == {"activity-reexecuted"}, \
        [f.to_json() for f in report.findings]
    assert lab.published(instance) == \
        [f"{instance} {output['receipt']['report_id']} {output['title']}"]
