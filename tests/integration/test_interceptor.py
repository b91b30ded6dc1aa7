"""The interceptor on the real engine: what it signs on clean runs, crashes and failures.

The workflow app is this file run as a script (``python test_interceptor.py``), in its own
process, so it can crash at a named crash point (``HISTAUDIT_CRASH_AT``) like a power cut
and be started again without the crash switch; the test drives workflows through
``DaprWorkflowClient`` and then reads the signed entries back out of the ledger, checks
them against the engine's own history, and runs the verifier over them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger import records as fmt
from histaudit.crash import CRASH_EXIT_CODE, read_trace
from histaudit.crashtest.engine import EngineProcess
from histaudit.ledger.keys import Signer, TrustStore, generate_keypair
from histaudit.ledger.store import Ledger

APP_READY = "APP READY"
APP_READY_TIMEOUT_S = 30.0
WORKFLOW_TIMEOUT_S = 60


# --- the app under test (runs in a child process) ---------------------------------------

def _bump(data: Path, name: str) -> int:
    """Count one run of ``name`` in a file (the stand-in for a real side effect)."""
    with open(data / f"{name}.runs", "a") as fh:
        fh.write("x\n")
    return len((data / f"{name}.runs").read_text().splitlines())


def _note(data: Path, **fields: Any) -> None:
    """Tell the test something the activity saw (one JSON line)."""
    with open(data / "notes.jsonl", "a") as fh:
        fh.write(json.dumps(fields) + "\n")


def serve() -> None:
    """The audited app: register workflows, connect to the engine, serve until killed."""
    import threading

    import dapr.ext.workflow as wf

    from histaudit import side_effect
    from histaudit.dapr import AuditedWorkflowRuntime

    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    @wfr.workflow(name="triage")
    def triage(ctx: wf.DaprWorkflowContext, ticket: dict[str, Any]) -> Any:
        summary = yield ctx.call_activity(summarize, input=ticket)
        yield ctx.call_activity(post_comment, input={"ticket": ticket["id"], "text": summary})
        return "done"

    @wfr.activity(name="summarize")
    async def summarize(ctx: wf.WorkflowActivityContext, ticket: dict[str, Any]) -> str:
        _bump(data, "summarize")
        return f"Summary: {ticket['title']}"

    @wfr.activity(name="post_comment")
    def post_comment(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
        comments = data / "comments.txt"
        with side_effect(ctx, "post-comment", key=f"ticket-{req['ticket']}") as effect:
            _note(data, activity="post_comment", already_done=effect.already_done,
                  uncertain=effect.uncertain, previous_result=effect.previous_result)
            if effect.already_done:
                effect.skip()
                return str(effect.previous_result)
            lines = comments.read_text().splitlines() if comments.exists() else []
            mine = [i for i, line in enumerate(lines) if line.startswith(f"{req['ticket']}:")]
            if effect.uncertain and mine:  # the earlier attempt did post it: confirm only
                effect.result = f"comment-{mine[0] + 1}"
                return str(effect.result)
            with open(comments, "a") as fh:
                fh.write(f"{req['ticket']}: {req['text']}\n")
            effect.result = f"comment-{len(lines) + 1}"
            return str(effect.result)

    @wfr.workflow(name="flaky")
    def flaky(ctx: wf.DaprWorkflowContext) -> Any:
        policy = wf.RetryPolicy(first_retry_interval=timedelta(seconds=1),
                                max_number_of_attempts=3)
        return (yield ctx.call_activity(flaky_step, retry_policy=policy))

    @wfr.activity(name="flaky_step")
    def flaky_step(ctx: wf.WorkflowActivityContext) -> int:
        runs = _bump(data, "flaky_step")
        if runs == 1:
            raise ValueError("transient failure, try again")
        return runs

    @wfr.workflow(name="billing")
    def billing(ctx: wf.DaprWorkflowContext, amount: int) -> Any:
        return (yield ctx.call_activity(charge, input=amount))

    @wfr.activity(name="charge")
    def charge(ctx: wf.WorkflowActivityContext, amount: int) -> str:
        _bump(data, "charge")
        return f"charged {amount}"

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL/SIGTERM


# --- harness ----------------------------------------------------------------------------

class App:
    """One app process connected to ``engine``; output goes to a log file."""

    def __init__(self, engine: EngineProcess, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.engine = engine
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self, **extra: str) -> subprocess.Popen[bytes]:
        # The parent's environment minus any histaudit settings, then this app's own.
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        env = {**self.engine.env({**base, **self.env}), **extra}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__], env=env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        return self.proc

    def start(self, **extra: str) -> float:
        """Spawn and wait for the ready line; return the wall-clock time it was seen."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        proc = self.spawn(**extra)
        deadline = time.monotonic() + APP_READY_TIMEOUT_S
        while APP_READY not in self.log.read_text(errors="replace")[offset:]:
            if proc.poll() is not None:
                pytest.fail(f"app exited with {proc.returncode} before it was ready:\n"
                            f"{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"app not ready after {APP_READY_TIMEOUT_S:.0f}s:\n"
                            f"{self.output()[-3000:]}")
            time.sleep(0.02)
        return time.time()

    def wait_exit(self, timeout: float = WORKFLOW_TIMEOUT_S) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"app still running after {timeout:.0f}s:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Audit:
    """Everything one test needs: key, ledger URL, data dir, app and workflow client."""

    def __init__(self, engine: EngineProcess, tmp: Path, ledger_url: str) -> None:
        import dapr.ext.workflow as wf

        self.engine = engine
        self.data = tmp / "data"
        self.data.mkdir()
        key_path, _pub, self.signer = generate_keypair(tmp / "keys", name="app")
        self.key_path = key_path
        self.url = ledger_url
        self.env = {"APP_DATA": str(self.data), "HISTAUDIT_DB": ledger_url,
                    "HISTAUDIT_KEY": str(key_path), "PYTHONUNBUFFERED": "1"}
        self.app = App(engine, self.env, tmp / "app.log")
        host, port = engine.address.rsplit(":", 1)
        self.client = wf.DaprWorkflowClient(host=host, port=port)

    def schedule(self, workflow: str, payload: Any = None, *, queue: bool = False) -> str:
        """Start a workflow; ``queue`` returns at once even with no app connected.

        (Without a start time the engine holds the call until a worker has begun it.)
        """
        instance = f"{workflow}-{uuid.uuid4().hex[:8]}"
        self.client.schedule_new_workflow(workflow=workflow, input=payload,
                                          instance_id=instance,
                                          start_at=datetime.now(UTC) if queue else None)
        return instance

    def wait(self, instance: str) -> Any:
        state = self.client.wait_for_workflow_completion(instance,
                                                         timeout_in_seconds=WORKFLOW_TIMEOUT_S)
        assert state is not None, f"no state for {instance}:\n{self.app.output()[-3000:]}"
        return state

    def entries(self, instance: str) -> list[fmt.Entry]:
        with Ledger.open(self.url) as ledger:
            return [fmt.parse_entry(row.body) for row in ledger.entries(instance)]

    def payload(self, ref: dict[str, Any] | None) -> str | None:
        """The stored payload text behind a reference, checked against its commitment."""
        if ref is None:
            return None
        with Ledger.open(self.url) as ledger:
            stored = ledger.payload(ref["c"])
        assert stored is not None, f"payload {ref} not stored"
        salt, raw = stored
        assert fmt.commitment_matches(ref["c"], raw, salt)
        assert len(raw) == ref["n"]
        return raw.decode()

    def verify(self, instance: str) -> set[str]:
        """Run the verifier (full: signatures and payloads); return its finding codes."""
        from histaudit.verify.verifier import verify_instance

        with Ledger.open(self.url) as ledger:
            report = verify_instance(ledger, instance, trust=TrustStore([self.signer.public]),
                                     full=True)
        assert report.ok, [f.to_json() for f in report.findings]
        return report.codes()

    def notes(self) -> list[dict[str, Any]]:
        path = self.data / "notes.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def runs(self, name: str) -> int:
        path = self.data / f"{name}.runs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def history(self, instance: str) -> list[Any]:
        """The engine's own history events (protobuf), for cross-checking payloads."""
        from dapr.ext.workflow._durabletask.client import TaskHubGrpcClient

        client = TaskHubGrpcClient(host_address=self.engine.address)
        try:
            return list(client.get_instance_history(instance))
        finally:
            client.close()


@pytest.fixture
def audit(engine: EngineProcess, tmp_path: Path) -> Iterator[Audit]:
    a = Audit(engine, tmp_path, f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        yield a
    finally:
        a.app.kill()
        a.client.close()


def kinds(entries: list[fmt.Entry], activity: str | None = None) -> list[str]:
    """Entry kinds, optionally only those about one activity."""
    return [e.kind for e in entries if activity is None or e.data.get("activity") == activity]


def only(entries: list[fmt.Entry], kind: str, **match: Any) -> list[fmt.Entry]:
    return [e for e in entries
            if e.kind == kind and all(e.data.get(k) == v for k, v in match.items())]


def ts(entry: fmt.Entry) -> float:
    return datetime.fromisoformat(entry.ts).timestamp()


TICKET = {"id": 7, "title": "Login page 500s"}


# --- clean run --------------------------------------------------------------------------

@pytest.mark.engine
def test_clean_run_records_every_activity_and_decision(engine: EngineProcess, tmp_path: Path,
                                                       db_url: str) -> None:
    """Two activities, no crash: one start and one completion each, attempt 1, all signed."""
    audit = Audit(engine, tmp_path, db_url)
    try:
        trace = tmp_path / "crash-points.txt"
        audit.app.start(HISTAUDIT_CRASH_TRACE=str(trace))
        instance = audit.schedule("triage", TICKET)
        state = audit.wait(instance)
        assert state.runtime_status.name == "COMPLETED", audit.app.output()[-3000:]
        entries = audit.entries(instance)
        history = audit.history(instance)
    finally:
        audit.app.kill()
        audit.client.close()

    assert kinds(entries) == [
        "workflow.started",
        "workflow.scheduled_activity", "activity.started", "activity.completed",
        "workflow.scheduled_activity", "activity.started",
        "effect.intent", "effect.done", "activity.completed",
        "workflow.completed"]
    for name in ("summarize", "post_comment"):
        (start,) = only(entries, "activity.started", activity=name)
        (done,) = only(entries, "activity.completed", activity=name)
        (sched,) = only(entries, "workflow.scheduled_activity", activity=name)
        assert start.data["attempt"] == done.data["attempt"] == 1
        assert done.data["started_seq"] == start.seq
        assert start.data["task_id"] == done.data["task_id"] == sched.data["task_id"]
        assert start.data["execution_id"] == sched.data["execution_id"] != ""
        # The activity committed to the text the engine delivered; the workflow to the
        # text it sent: same bytes, so the same keyed digest.
        assert start.data["input_digest"] == sched.data["input_digest"]
        assert start.data["worker"].endswith(f":{audit.app.proc.pid}")  # type: ignore[union-attr]
        assert set(start.data) == {"activity", "task_id", "execution_id", "attempt", "worker",
                                   "input", "input_digest"}
    assert audit.runs("summarize") == 1
    assert (audit.data / "comments.txt").read_text().count("\n") == 1

    # Every committed payload is the exact text the engine holds in its own history.
    by_task = {e.data["task_id"]: e for e in only(entries, "activity.completed")}
    starts = {e.data["task_id"]: e for e in only(entries, "activity.started")}
    seen = 0
    for event in history:
        if event.HasField("taskScheduled"):
            assert audit.payload(starts[event.eventId].data["input"]) == \
                event.taskScheduled.input.value
            seen += 1
        elif event.HasField("taskCompleted"):
            done = by_task[event.taskCompleted.taskScheduledId]
            assert audit.payload(done.data["output"]) == event.taskCompleted.result.value
            seen += 1
        elif event.HasField("executionCompleted"):
            (wf_done,) = only(entries, "workflow.completed")
            assert audit.payload(wf_done.data["output"]) == \
                event.executionCompleted.result.value == '"done"'
            seen += 1
    assert seen == 5
    (effect_done,) = only(entries, "effect.done")
    assert effect_done.data["name"] == "post-comment" and effect_done.data["key"] == "ticket-7"
    assert audit.payload(effect_done.data["result"]) == '"comment-1"'

    with Ledger.open(db_url) as ledger:
        from histaudit.verify.verifier import verify_instance

        report = verify_instance(ledger, instance, trust=TrustStore([audit.signer.public]),
                                 full=True)
    assert report.ok and not report.findings, [f.to_json() for f in report.findings]
    # Every automatic crash point the run passed, in order: what a crash matrix iterates.
    assert read_trace(trace) == ["before:summarize", "after:summarize", "before:post_comment",
                                 "before-effect:post-comment", "after-effect:post-comment",
                                 "after:post_comment"]


# --- crashes ----------------------------------------------------------------------------

@pytest.mark.engine
@pytest.mark.crash
def test_crash_after_activity_body_reexecutes_and_skips_the_done_effect(audit: Audit) -> None:
    """Crash after post_comment's body, before its completion is signed or reported.

    The engine runs it again (attempt 2); the side effect is found done in the ledger
    and skipped, so the comment is posted once.
    """
    audit.app.start(HISTAUDIT_CRASH_AT="after:post_comment")
    instance = audit.schedule("triage", TICKET)
    assert audit.app.wait_exit() == CRASH_EXIT_CODE
    assert "crash point 'after:post_comment' reached" in audit.app.output()
    crashed = audit.entries(instance)
    assert kinds(crashed, "post_comment") == ["workflow.scheduled_activity", "activity.started",
                                              "effect.intent", "effect.done"]

    ready = audit.app.start()
    state = audit.wait(instance)
    assert state.runtime_status.name == "COMPLETED", audit.app.output()[-3000:]
    entries = audit.entries(instance)

    assert kinds(entries, "post_comment") == [
        "workflow.scheduled_activity",
        "activity.started", "effect.intent", "effect.done",       # attempt 1, then the crash
        "activity.started", "effect.intent", "effect.skipped",     # attempt 2
        "activity.completed"]
    first, second = only(entries, "activity.started", activity="post_comment")
    assert (first.data["attempt"], second.data["attempt"]) == (1, 2)
    assert first.data["task_id"] == second.data["task_id"]
    assert first.data["worker"] != second.data["worker"]
    assert first.data["input_digest"] == second.data["input_digest"]
    (done,) = only(entries, "activity.completed", activity="post_comment")
    assert done.data["attempt"] == 2 and done.data["started_seq"] == second.seq
    (skipped,) = only(entries, "effect.skipped")
    assert skipped.data["done_seq"] == only(entries, "effect.done")[0].seq
    assert skipped.data["intent_seq"] == only(entries, "effect.intent")[1].seq
    # summarize had completed before the crash: replayed from history, never re-run.
    assert kinds(entries, "summarize") == ["workflow.scheduled_activity", "activity.started",
                                           "activity.completed"]
    assert audit.runs("summarize") == 1
    assert (audit.data / "comments.txt").read_text().count("\n") == 1
    assert audit.notes()[-1] == {"activity": "post_comment", "already_done": True,
                                 "uncertain": False, "previous_result": "comment-1"}
    assert audit.payload(done.data["output"]) == '"comment-1"'
    assert len(only(entries, "workflow.completed")) == 1
    assert audit.verify(instance) == {"activity-reexecuted", "effect-deduplicated"}
    print(f"\nre-dispatch after restart: {ts(second) - ready:.3f}s "
          f"(app ready -> attempt 2 signed)")


@pytest.mark.engine
@pytest.mark.crash
def test_crash_inside_side_effect_leaves_it_uncertain(audit: Audit) -> None:
    """Crash after the effect happened but before its done record: attempt 2 is told."""
    audit.app.start(HISTAUDIT_CRASH_AT="after-effect:post-comment")
    instance = audit.schedule("triage", TICKET)
    assert audit.app.wait_exit() == CRASH_EXIT_CODE
    audit.app.start()
    assert audit.wait(instance).runtime_status.name == "COMPLETED"
    entries = audit.entries(instance)
    assert kinds(entries, "post_comment") == [
        "workflow.scheduled_activity",
        "activity.started", "effect.intent",                                   # crashed
        "activity.started", "effect.intent", "effect.done", "activity.completed"]
    assert [n["uncertain"] for n in audit.notes()] == [False, True]
    assert (audit.data / "comments.txt").read_text().count("\n") == 1
    (done,) = only(entries, "effect.done")
    assert done.data["attempt"] == 2 and audit.payload(done.data["result"]) == '"comment-1"'
    assert audit.verify(instance) == {"activity-reexecuted", "effect-uncertain"}


@pytest.mark.engine
@pytest.mark.crash
def test_crash_before_activity_body(audit: Audit) -> None:
    """Crash after the start is signed, before the body: attempt 1 left no trace but that."""
    audit.app.start(HISTAUDIT_CRASH_AT="before:summarize")
    instance = audit.schedule("triage", TICKET)
    assert audit.app.wait_exit() == CRASH_EXIT_CODE
    assert audit.runs("summarize") == 0
    audit.app.start()
    assert audit.wait(instance).runtime_status.name == "COMPLETED"
    entries = audit.entries(instance)
    assert kinds(entries, "summarize") == ["workflow.scheduled_activity", "activity.started",
                                           "activity.started", "activity.completed"]
    assert [e.data["attempt"] for e in only(entries, "activity.started",
                                            activity="summarize")] == [1, 2]
    assert audit.runs("summarize") == 1


# --- failures ---------------------------------------------------------------------------

@pytest.mark.engine
def test_failed_activity_is_recorded_then_retried(audit: Audit) -> None:
    """A retry policy re-schedules a failed activity: new task id, same call, attempt 2."""
    audit.app.start()
    instance = audit.schedule("flaky")
    state = audit.wait(instance)
    assert state.runtime_status.name == "COMPLETED", audit.app.output()[-3000:]
    assert state.serialized_output == "2"
    entries = audit.entries(instance)
    assert kinds(entries, "flaky_step") == ["workflow.scheduled_activity", "activity.started",
                                            "activity.failed", "activity.started",
                                            "activity.completed"]
    first, second = only(entries, "activity.started")
    (failed,) = only(entries, "activity.failed")
    (sched,) = only(entries, "workflow.scheduled_activity")
    assert (first.data["attempt"], second.data["attempt"]) == (1, 2)
    assert first.data["task_id"] == sched.data["task_id"] != second.data["task_id"]
    assert first.data["execution_id"] == second.data["execution_id"] == \
        sched.data["execution_id"]
    assert sched.data["retry_policy"] is True and sched.data["input"] is None
    assert failed.data["error_type"] == "ValueError"
    assert failed.data["started_seq"] == first.seq
    assert audit.payload(failed.data["error"]) == "transient failure, try again"
    assert audit.payload(only(entries, "activity.completed")[0].data["output"]) == "2"
    audit.verify(instance)


@pytest.mark.engine
def test_ledger_refusing_the_completion_fails_the_activity(audit: Audit) -> None:
    """The body ran, but its completion could not be signed: the engine hears a failure."""
    with Ledger.open(audit.url, create=True):
        pass
    db = sqlite3.connect(audit.url.removeprefix("sqlite:///"))
    db.execute("""CREATE TRIGGER test_refuse_completions BEFORE INSERT ON histaudit_entries
                  WHEN CAST(NEW.body AS TEXT) LIKE '%"kind":"activity.completed"%'
                  BEGIN SELECT RAISE(ABORT, 'injected: ledger refuses completions'); END""")
    db.commit()
    db.close()

    audit.app.start()
    instance = audit.schedule("billing", 42)
    state = audit.wait(instance)
    assert state.runtime_status.name == "FAILED"
    assert "could not record the completion of activity 'charge'" in \
        state.failure_details.message
    assert audit.runs("charge") == 1  # the body did run ...
    entries = audit.entries(instance)  # ... yet no success was ever signed or reported
    assert kinds(entries) == ["workflow.started", "workflow.scheduled_activity",
                              "activity.started", "activity.failed", "workflow.failed"]
    (failed,) = only(entries, "activity.failed")
    assert failed.data["error_type"] == "StoreError"
    assert "injected: ledger refuses completions" in str(audit.payload(failed.data["error"]))
    assert not any(e.HasField("taskCompleted") for e in audit.history(instance))
    audit.verify(instance)


@pytest.mark.engine
@pytest.mark.parametrize("problem", ["missing key", "readable key", "ledger directory missing"])
def test_unusable_key_or_ledger_stops_the_app_before_any_workflow(audit: Audit, tmp_path: Path,
                                                                  problem: str) -> None:
    """Start-up fails with a one-line histaudit error; a waiting workflow stays untouched."""
    instance = audit.schedule("billing", 5, queue=True)  # waits in the engine for a worker
    extra: dict[str, str] = {}
    if problem == "missing key":
        del audit.app.env["HISTAUDIT_KEY"]
        expected = "KeyMaterialError: AuditedWorkflowRuntime: no signing key"
    elif problem == "readable key":
        audit.key_path.chmod(0o644)
        expected = "is readable by others (mode 0644)"
    else:
        extra["HISTAUDIT_DB"] = f"sqlite:///{tmp_path / 'nowhere' / 'ledger.db'}"
        expected = "StoreError: AuditedWorkflowRuntime: ledger"
    audit.app.spawn(**extra)
    rc = audit.app.wait_exit(timeout=30)
    out = audit.app.output()
    assert rc != 0 and APP_READY not in out
    assert expected in out, out[-3000:]
    state = audit.client.get_workflow_state(instance)
    assert state is not None and state.runtime_status.name == "PENDING"
    assert audit.runs("charge") == 0
    assert not Path(audit.url.removeprefix("sqlite:///")).exists()

    # Fixed configuration: the same waiting workflow now runs, audited.
    audit.key_path.chmod(0o600)
    audit.app.env["HISTAUDIT_KEY"] = str(audit.key_path)
    audit.app.start()
    assert audit.wait(instance).runtime_status.name == "COMPLETED"
    assert kinds(audit.entries(instance), "charge")[-1] == "activity.completed"


# --- without the engine: the recording primitives -------------------------------------

def test_digest_is_keyed_per_instance_and_the_same_in_every_process(tmp_path: Path) -> None:
    """Equal payloads of one instance match; nothing else does, and outsiders cannot test."""
    from histaudit.dapr import AuditRecorder, payload_digest

    _key, _pub, signer = generate_keypair(tmp_path, name="k")
    again = Signer.load(_key)  # another process loading the same key
    other = Signer.generate()
    short = b'"yes"'
    d = payload_digest(signer, "inst-1", short)
    assert d == payload_digest(again, "inst-1", short)
    assert d != payload_digest(signer, "inst-2", short)  # instances are not correlated
    assert d != payload_digest(other, "inst-1", short)  # no key, no guessing
    assert d != payload_digest(signer, "inst-1", b'"no"')
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        recorder = AuditRecorder(ledger, signer)
        a, b = recorder.commit("inst-1", '"yes"'), recorder.commit("inst-1", '"yes"')
    assert a.digest == b.digest == d
    assert a.ref is not None and b.ref is not None
    assert a.ref["c"] != b.ref["c"] and a.ref["n"] == 5  # salted: commitments differ


def test_keep_payloads_false_signs_commitments_but_stores_no_payload(tmp_path: Path) -> None:
    from histaudit.dapr import AuditRecorder

    signer = Signer.generate()
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        recorder = AuditRecorder(ledger, signer, keep_payloads=False)
        p = recorder.commit("inst", '{"card": "4111"}')
        entry = recorder.append("inst", "activity.completed", {"output": p.ref}, p)
        assert p.ref is not None and ledger.payload(p.ref["c"]) is None
        assert entry.data["output"] == p.ref
        assert recorder.commit("inst", None).ref is None  # no payload, no reference


def test_side_effect_outside_an_audited_activity_is_refused() -> None:
    from histaudit import side_effect
    from histaudit.errors import UsageError

    with pytest.raises(UsageError, match="only inside an activity"), \
            side_effect(None, "post-comment", key="ticket-7"):
        pass


if __name__ == "__main__":
    serve()
