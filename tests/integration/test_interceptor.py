"""The interceptor on the real engine: what it signs on clean runs, crashes and failures.

The workflow app (apps/interceptor_app.py) runs in its own process, so it can crash at a
named crash point (``HISTAUDIT_CRASH_AT``) like a power cut and be started again without
the crash switch; the test drives workflows through
``DaprWorkflowClient`` and then reads the signed entries back out of the ledger, checks
them against the engine's own history, and runs the verifier over them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from histaudit.crash import CRASH_EXIT_CODE, read_trace
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing import Sidecar
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig
from support.dedup_service import DedupService
from support.ledgers import LedgerDb, only, read_entries, stored_payload, verify_url

APP_READY = "APP READY"  # what apps/interceptor_app.py prints once its worker is started
APP_READY_TIMEOUT_S = 30.0
WORKFLOW_TIMEOUT_S = 60


@pytest.fixture
def engine(any_engine: Sidecar) -> Sidecar:
    """Every engine test here runs twice: on durabletask-go and on real daprd (conftest)."""
    return any_engine


# --- harness ----------------------------------------------------------------------------

APP = Path(__file__).resolve().parent / "apps" / "interceptor_app.py"


class Audit(AppRig):
    """Everything one test needs: key, ledger URL, data dir, app and workflow client."""

    def __init__(self, engine: EngineProcess, tmp: Path, ledger_url: str) -> None:
        super().__init__(engine)
        self.data = tmp / "data"
        self.data.mkdir()
        key_path, _pub, self.signer = generate_keypair(tmp / "keys", name="app")
        self.key_path = key_path
        self.url = ledger_url
        self.env = {"APP_DATA": str(self.data), "HISTAUDIT_DB": ledger_url,
                    "HISTAUDIT_KEY": str(key_path), "PYTHONUNBUFFERED": "1"}
        self.app = self.add_app(AppProcess(engine, [APP], log=tmp / "app.log", env=self.env,
                              ready=APP_READY, ready_timeout=APP_READY_TIMEOUT_S,
                              exit_timeout=WORKFLOW_TIMEOUT_S))

    def entries(self, instance: str) -> list[fmt.Entry]:
        return read_entries(self.url, instance)

    def payload(self, ref: dict[str, Any] | None) -> str | None:
        """The stored payload text behind a reference, checked against its commitment."""
        raw = stored_payload(self.url, ref)
        return None if raw is None else raw.decode()

    def verify(self, instance: str) -> set[str]:
        """Run the verifier (full: signatures and payloads); return its finding codes."""
        report = verify_url(self.url, instance, self.signer, full=True)
        assert report.ok, [f.to_json() for f in report.findings]
        return report.codes()

    def notes(self) -> list[dict[str, Any]]:
        path = self.data / "notes.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def runs(self, name: str) -> int:
        path = self.data / f"{name}.runs"
        return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def audit(engine: EngineProcess, tmp_path: Path) -> Iterator[Audit]:
    with Audit(engine, tmp_path, f"sqlite:///{tmp_path / 'ledger.db'}") as a:
        yield a


def kinds(entries: list[fmt.Entry], activity: str | None = None) -> list[str]:
    """Entry kinds, optionally only those about one activity."""
    return [e.kind for e in entries if activity is None or e.data.get("activity") == activity]


def ts(entry: fmt.Entry) -> float:
    return datetime.fromisoformat(entry.ts).timestamp()


TICKET = {"id": 7, "title": "Login page 500s"}


# --- clean run --------------------------------------------------------------------------

@pytest.mark.engine
def test_clean_run_records_every_activity_and_decision(engine: EngineProcess, tmp_path: Path,
                                                       db_url: str) -> None:
    """Two activities, no crash: one start and one completion each, attempt 1, all signed."""
    with Audit(engine, tmp_path, db_url) as audit:
        trace = tmp_path / "crash-points.txt"
        audit.app.start(HISTAUDIT_CRASH_TRACE=str(trace))
        instance = audit.schedule("triage", TICKET)
        state = audit.wait(instance)
        assert state.runtime_status.name == "COMPLETED", audit.app.output()[-3000:]
        entries = audit.entries(instance)
        history = audit.history(instance)

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

    report = verify_url(db_url, instance, audit.signer, full=True)
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
@pytest.mark.crash
def test_a_crash_inside_an_effect_told_its_key_is_harmless_to_a_deduplicating_service(
        audit: Audit) -> None:
    """Crash after the charge reached the service, before its done record: the retry sends
    the same request with the same idempotency key, which the service answers without
    charging again. The ledger signs that the attempt was told its key; verify says the
    retry's done is a duplicate only if the service did not deduplicate (issue 48)."""
    with DedupService() as service:
        audit.app.start(HISTAUDIT_CRASH_AT="after-effect:payment", PAY_URL=service.url)
        instance = audit.schedule("payment", 30)
        assert audit.app.wait_exit() == CRASH_EXIT_CODE
        audit.app.start(PAY_URL=service.url)
        state = audit.wait(instance)
        assert state.runtime_status.name == "COMPLETED"
        assert (service.requests, len(service.charges), service.unkeyed) == (2, 1, 0)
        (key,) = service.charges
        first_intent = only(audit.entries(instance), "effect.intent")[0]
        assert key == f"{instance}/payment/{first_intent.data['key']}"
    entries = audit.entries(instance)
    assert kinds(entries, "pay")[1:] == [
        "activity.started", "effect.intent",                                    # crashed
        "activity.started", "effect.intent", "effect.done", "activity.completed"]
    (done,) = only(entries, "effect.done")
    assert done.data["key_told"] is True
    report = verify_url(audit.url, instance, audit.signer, full=True)
    (uncertain,) = [f for f in report.findings if f.code == "effect-uncertain"]
    assert "with the same idempotency key" in uncertain.message
    assert "a duplicate only if the service it called does not deduplicate" in \
        uncertain.message


@pytest.mark.engine
def test_an_effect_that_reports_its_failure_as_a_value_is_signed_failed_not_done(
        audit: Audit) -> None:
    """A declined card comes back as an answer, not an exception: ``effect.fail`` signs
    ``effect.failed`` with the error's type and never a done, and verify counts no
    duplicate (issue 48: a tool's error result was signed as done)."""
    with DedupService() as service:
        audit.app.start(PAY_URL=service.url)
        instance = audit.schedule("payment", -5)
        assert audit.wait(instance).runtime_status.name == "COMPLETED"
    entries = audit.entries(instance)
    assert kinds(entries, "pay")[1:] == [
        "activity.started", "effect.intent", "effect.failed", "activity.completed"]
    (failed,) = only(entries, "effect.failed")
    assert failed.data["error_type"] == "PaymentDeclined"
    assert failed.data["key_told"] is True
    assert audit.payload(failed.data["error"]) == "card declined"
    assert "effect.done" not in kinds(entries)
    assert audit.verify(instance) & {"effect-duplicate", "effect-uncertain"} == set()


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
    assert sched.data["retry_policy"]["max_number_of_attempts"] == 3
    assert sched.data["input"] is None
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
    with LedgerDb(audit.url) as db:
        db.script("""CREATE TRIGGER test_refuse_completions BEFORE INSERT ON histaudit_entries
                     WHEN CAST(NEW.body AS TEXT) LIKE '%"kind":"activity.completed"%'
                     BEGIN SELECT RAISE(ABORT, 'injected: ledger refuses completions'); END""")

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
# Standalone engine only: daprd holds a schedule call until a worker has connected (no app
# hosts the workflow actor yet), so a workflow cannot wait in it for a worker that fails.
@pytest.mark.parametrize("any_engine", ["durabletask"], indirect=True)
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
    again = KeyFileSigner.load(_key)  # another process loading the same key
    other = KeyFileSigner.generate()
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

    signer = KeyFileSigner.generate()
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



# --- payload size: record what the engine was actually given -------------------------------

BIG_APP = Path(__file__).resolve().parent / "apps" / "big_output_app.py"
MIB = 1024 * 1024


def _big_app(audit: Audit, tmp_path: Path, **env: str) -> AppProcess:
    return audit.add_app(AppProcess(audit.engine, [BIG_APP], log=tmp_path / "big.log",
                                    env={**audit.env, **env}, ready=APP_READY,
                                    ready_timeout=APP_READY_TIMEOUT_S,
                                    exit_timeout=WORKFLOW_TIMEOUT_S))


def _engine_codes(audit: Audit, instance: str) -> set[str]:
    from histaudit.verify.verifier import verify_instance

    with Ledger.open(audit.url) as ledger:
        report = verify_instance(ledger, instance, trust=TrustStore([audit.signer.public]),
                                 full=True, engine_history=audit.history(instance))
    return report.codes()


@pytest.mark.engine
@pytest.mark.parametrize(("size", "env"), [(6 * MIB, {}),
                                           (3000, {"HISTAUDIT_MAX_PAYLOAD_BYTES": "2000"})],
                         ids=["over-the-engine-limit", "over-a-configured-limit"])
def test_output_over_the_payload_limit_is_signed_as_the_failure_the_engine_got(
        audit: Audit, tmp_path: Path, size: int, env: dict[str, str]) -> None:
    _big_app(audit, tmp_path, **env).start()
    instance = audit.schedule("big", size)
    state = audit.wait(instance, timeout=WORKFLOW_TIMEOUT_S)
    assert state.runtime_status.name == "FAILED"
    assert "over histaudit's payload limit" in state.failure_details.message
    entries = audit.entries(instance)
    assert kinds(entries, "produce") == ["workflow.scheduled_activity", "activity.started",
                                         "activity.failed"]
    assert kinds(entries)[-1] == "workflow.failed"
    (failed,) = only(entries, "activity.failed")
    assert failed.data["error_type"] == "PayloadTooLargeError"
    assert f"returned {size + 2} bytes" in str(audit.payload(failed.data["error"]))  # JSON ""
    history = audit.history(instance)
    assert not any(e.HasField("taskCompleted") for e in history)
    assert any(e.HasField("taskFailed") for e in history)
    # how it ended is a warning naming the signed end and the failure's message (issue 48)
    assert audit.verify(instance) == {"workflow-failed"}
    (ended,) = verify_url(audit.url, instance, audit.signer).findings
    assert ended.seq == entries[-1].seq and ended.message.startswith(
        f"the workflow failed (workflow.failed at entry {ended.seq}): TaskFailedError: ")
    assert "over histaudit's payload limit" in ended.message, ended.message
    # the ledger's story is the engine's
    assert _engine_codes(audit, instance) == {"workflow-failed"}


@pytest.mark.engine
def test_output_under_the_payload_limit_completes(audit: Audit, tmp_path: Path) -> None:
    size = 2 * MIB
    _big_app(audit, tmp_path).start()
    instance = audit.schedule("big", size)
    state = audit.wait(instance, timeout=WORKFLOW_TIMEOUT_S)
    assert state.runtime_status.name == "COMPLETED" and state.serialized_output == str(size)
    (done,) = only(audit.entries(instance), "activity.completed")
    assert done.data["output"]["n"] == size + 2 and done.data["output"]["k"] is True
    assert audit.verify(instance) == set()
    assert _engine_codes(audit, instance) == set()


@pytest.mark.engine
def test_lifting_the_limit_past_the_engine_shows_why_it_exists(audit: Audit,
                                                               tmp_path: Path) -> None:
    """Limit set above the engine's 4 MiB: the SDK fails the activity after the ledger
    signed its completion. Only the engine cross-check can tell; the default prevents it."""
    _big_app(audit, tmp_path, HISTAUDIT_MAX_PAYLOAD_BYTES=str(64 * MIB)).start()
    instance = audit.schedule("big", 6 * MIB)
    state = audit.wait(instance, timeout=WORKFLOW_TIMEOUT_S)
    assert state.runtime_status.name == "FAILED"
    assert "exceeds gRPC max message size" in state.failure_details.message
    assert "activity.completed" in kinds(audit.entries(instance), "produce")
    assert "engine-missing-completion" in _engine_codes(audit, instance)


def test_payload_limit_setting_is_checked() -> None:
    from histaudit.config import DEFAULT_MAX_PAYLOAD_BYTES, ENGINE_GRPC_LIMIT, Settings
    from histaudit.errors import UsageError

    def max_payload_bytes(env: dict[str, str]) -> int:
        return Settings.from_env(env).max_payload_bytes

    assert DEFAULT_MAX_PAYLOAD_BYTES < ENGINE_GRPC_LIMIT == 4 * MIB
    assert max_payload_bytes({}) == DEFAULT_MAX_PAYLOAD_BYTES
    assert max_payload_bytes({"HISTAUDIT_MAX_PAYLOAD_BYTES": " 1234 "}) == 1234
    for bad in ("0", "-5", "1e6", "lots", "\u0661\u0662", "9" * 5000):
        with pytest.raises(UsageError, match="HISTAUDIT_MAX_PAYLOAD_BYTES"):
            max_payload_bytes({"HISTAUDIT_MAX_PAYLOAD_BYTES": bad})


def test_kept_flag_is_signed_only_when_the_payload_is_stored(tmp_path: Path) -> None:
    from histaudit.dapr import AuditRecorder

    signer = KeyFileSigner.generate()
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        kept = AuditRecorder(ledger, signer).commit("inst", '"x"')
        bare = AuditRecorder(ledger, signer, keep_payloads=False).commit("inst", '"x"')
    assert kept.ref is not None and bare.ref is not None
    assert kept.ref["k"] is True and list(kept.rows.values()) == [(kept.ref["c"], b'"x"')]
    assert "k" not in bare.ref and bare.rows == {}
