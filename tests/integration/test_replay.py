"""Replay, engine cross-check and the live replay check, on the real engine.

The app (apps/replay_app.py) is an ``AuditedWorkflowRuntime`` serving the example
workflows of ``examples/nondeterminism/workflows.py``, in its own process. The tests record
histories with it, fetch them back with GetInstanceHistory, replay them offline against the
same and against changed code, cross-check them against the signed ledger
(``histaudit verify --engine``), and alter the engine's own SQLite state — the protobuf
``TaskCompleted`` event in durabletask-go's ``History`` table — to prove both the
cross-check and the interceptor's live check notice.

Cost: ≈ 60 s of CPU in all (about a third of it the daprd-only tests at the end: a rerun
from an event, which the standalone engine does not implement, and a propagated history,
which it never delivers; each starts its own daprd stack).

Every test runs on both engines — the standalone durabletask-go and real daprd (the
module's ``engine`` is ``any_engine``) — except the two that alter the engine's stored
history (``durabletask_rig``): they rewrite a row of durabletask-go's own SQLite schema
(``History.EventPayload``), which daprd does not have (its actor state store keeps
history as ``history-NNNNNN`` keys of the ``state.*`` component, and a running daprd
holds the instance's state in memory), so they stay durabletask-only.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from examples.nondeterminism import v2, workflows

from histaudit.errors import EngineError
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.replay import DIFFERENT_ACTIVITY, DIFFERENT_INPUT, History, replay
from histaudit.testing import DAPRD, DURABLETASK, Sidecar, start_engine, teardown
from histaudit.testing.engine import EngineProcess, free_port
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli, one_error_line
from support.dapr_audit import put as daprd_put
from support.dapr_audit import rows as daprd_rows
from support.dapr_audit import value as daprd_value
from support.ledgers import only, read_entries, verify_url
from support.repo import REPO, app_env

APP = Path(__file__).resolve().parent / "apps" / "replay_app.py"
APP_READY = "APP READY"  # what apps/replay_app.py prints once its worker is started
TIMEOUT_S = 60.0
ORDER = {"id": "B-5", "items": ["chair"], "amount": 30}


# --- harness ----------------------------------------------------------------------------

class Rig(AppRig):
    """Engine (durabletask-go or daprd) + audited app + ledger + workflow client."""

    def __init__(self, engine: Sidecar, tmp: Path) -> None:
        super().__init__(engine)  # type: ignore[arg-type]  # the EngineProcess interface
        self.tmp = tmp
        key, self.pub, self.signer = generate_keypair(tmp / "keys", name="app")
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.app = self.add_app(AppProcess(self.engine, [APP], log=tmp / "app.log",
                                           ready=APP_READY, ready_timeout=TIMEOUT_S,
                              env={"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key),
                                   "PYTHONUNBUFFERED": "1", **app_env()}))

    def start_app(self) -> None:
        self.app.start()

    def kill_app(self) -> None:
        self.app.kill()

    def output(self) -> str:
        return self.app.tail()

    def until(self, cond: Callable[[], bool], what: str) -> None:
        wait_until(cond, TIMEOUT_S, what, poll=0.05, details=self.output)

    def run(self, workflow: Any, payload: Any = None) -> str:
        instance = self.schedule(workflow, payload)
        self.wait(instance)
        return instance

    def wait(self, instance: str, timeout: float = TIMEOUT_S) -> Any:
        state = super().wait(instance, timeout)
        assert state.runtime_status.name == "COMPLETED", f"{state}\n{self.output()}"
        return state

    def history(self, instance: str) -> list[Any]:
        return History.fetch(self.engine.address, instance).events

    def entries(self, instance: str) -> list[fmt.Entry]:
        return read_entries(self.url, instance)

    def verify(self, instance: str) -> Any:
        return verify_url(self.url, instance, self.signer, full=True)

    def cli(self, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        """The command from the checkout's root, this rig's ledger and key by environment."""
        return cli(*args, cwd=REPO, env={"COLUMNS": "250", "HISTAUDIT_DB": self.url,
                                         "HISTAUDIT_TRUST": str(self.pub)})

    def alter_engine_completion(self, instance: str, task_id: int, *,
                                result: str | None = None, new_task_id: int | None = None
                                ) -> str:
        """Rewrite one TaskCompleted event in the engine's SQLite state; return the old result.

        durabletask-go's sqlite backend keeps each history event as a serialized
        ``HistoryEvent`` protobuf in ``History.EventPayload``, keyed by
        (InstanceID, SequenceNumber): decode with the SDK's classes, change, re-encode.
        """
        from dapr.ext.workflow._durabletask.internal import history_events_pb2 as hpb

        assert isinstance(self.engine, EngineProcess), "durabletask-go's schema only"

        db = sqlite3.connect(self.engine.db_path, timeout=30)
        try:
            rows = db.execute("SELECT SequenceNumber, EventPayload FROM History "
                              "WHERE InstanceID = ? ORDER BY SequenceNumber", (instance,))
            for seq, payload in rows.fetchall():
                event = hpb.HistoryEvent()
                event.ParseFromString(payload)
                if event.HasField("taskCompleted") and \
                        event.taskCompleted.taskScheduledId == task_id:
                    old = event.taskCompleted.result.value
                    if result is not None:
                        event.taskCompleted.result.value = result
                    if new_task_id is not None:
                        event.taskCompleted.taskScheduledId = new_task_id
                    db.execute("UPDATE History SET EventPayload = ? WHERE InstanceID = ? "
                               "AND SequenceNumber = ?", (event.SerializeToString(), instance,
                                                          seq))
                    db.commit()
                    return old
        finally:
            db.close()
        raise AssertionError(f"no TaskCompleted of task {task_id} in {instance}")


@pytest.fixture
def engine(any_engine: Sidecar) -> Sidecar:
    """Both engines: durabletask-go alone and real daprd (tests/conftest.py)."""
    return any_engine


@pytest.fixture
def rig(engine: Sidecar, tmp_path: Path) -> Iterator[Rig]:
    with Rig(engine, tmp_path) as r:
        yield r


def _rig_on(kind: str, tmp_path: Path, **start: Any) -> Iterator[Rig]:
    """A rig on one engine only (``start_engine``'s ``kind``), torn down afterwards."""
    try:
        sidecar = start_engine(kind, tmp_path / "engine", **start)
    except EngineError as exc:
        pytest.fail(f"cannot start the {kind} engine: {exc}", pytrace=False)
    try:
        with Rig(sidecar, tmp_path) as r:
            yield r
    finally:
        teardown(sidecar)


@pytest.fixture
def durabletask_rig(engine_binary: Path, tmp_path: Path) -> Iterator[Rig]:
    """A rig on the standalone engine only, for the tests that rewrite its SQLite rows."""
    yield from _rig_on(DURABLETASK, tmp_path, engine_binary=engine_binary)


def task_of(entries: list[fmt.Entry], activity: str) -> int:
    (done,) = only(entries, "activity.completed", activity=activity)
    return int(done.data["task_id"])


# --- offline replay of histories fetched from the engine ---------------------------------

@pytest.mark.engine
def test_recorded_history_replays_clean_and_changed_code_diverges(rig: Rig) -> None:
    rig.start_app()
    instance = rig.run(workflows.order, ORDER)
    events = rig.history(instance)
    assert [e.WhichOneof("eventType") for e in events].count("taskScheduled") == 3

    result = replay(events, workflows.order, instance)
    assert result.ok, result.explain()
    assert result.outcome == "completed" and result.events == len(events)
    for variant, kind in v2.VARIANTS.items():
        changed = replay(events, getattr(v2, variant), instance)
        if kind is None:
            assert changed.ok, changed.explain()
            continue
        d = changed.divergence
        assert d is not None and d.kind == kind, changed.explain()
        assert d.expected != d.actual and d.expected in changed.explain()

    # The history saved to a file replays the same way; the CLI says so in its exit code.
    saved = History.of(events).save(rig.tmp / "order.json")
    assert replay(History.load(saved).events, workflows.order).ok
    out = rig.cli("replay", instance, "--workflow", "examples.nondeterminism.workflows:order",
                  "--engine", rig.engine.address, "--save", rig.tmp / "cli.json")
    assert out.returncode == 0 and "OK" in out.stdout, out
    assert (rig.tmp / "cli.json").read_bytes() == saved.read_bytes()
    out = rig.cli("replay", instance, "--workflow", "examples.nondeterminism.v2:order_new_input",
                  "--engine", rig.engine.address)
    assert out.returncode == 1 and out.stderr == "", out
    assert "different-input" in out.stdout and '"amount": 3000}' in out.stdout


@pytest.mark.engine
def test_nondeterministic_workflows_diverge_on_replay(rig: Rig) -> None:
    rig.start_app()
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    clock = rig.run(workflows.wall_clock, {"deadline": deadline.isoformat()})
    dice = rig.run(workflows.dice)
    rolled = replay(rig.history(dice), workflows.dice).divergence
    assert rolled is not None and rolled.kind == DIFFERENT_INPUT
    time.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 0.1)
    d = replay(rig.history(clock), workflows.wall_clock).divergence
    assert d is not None and d.kind == DIFFERENT_ACTIVITY
    assert "fast_path" in d.expected and "slow_path" in d.actual


@pytest.mark.engine
def test_replay_bad_input_from_the_engine(rig: Rig) -> None:
    rig.start_app()
    instance = rig.run(workflows.order, ORDER)
    for args, needle in [
        (["nope-" + instance, "--workflow", "examples.nondeterminism.workflows:order",
          "--engine", rig.engine.address], "no instance"),
        ([instance, "--workflow", "examples.nondeterminism.workflows:dice",
          "--engine", rig.engine.address], "history is of workflow 'order'"),
        ([instance, "--workflow", "examples.nondeterminism.workflows:order",
          "--engine", f"127.0.0.1:{free_port()}", "--timeout", "1"], "did not answer within 1s"),
    ]:
        one_error_line(rig.cli("replay", *args), needle)


# --- replay against the signed ledger, and many instances at once ---------------------------

ORDER_REF = "examples.nondeterminism.workflows:order"


@pytest.mark.engine
def test_replay_compares_the_replayed_output_with_the_signed_one(rig: Rig) -> None:
    """A history is the engine's copy; a forged one that replays cleanly to another output
    than the app signed is a replay-mismatch (exit 1) once the ledger is given."""
    rig.start_app()
    first, second = rig.run(workflows.order, ORDER), rig.run(workflows.order, ORDER)

    # Every instance the engine knows, each compared with its signed output ($HISTAUDIT_DB).
    out = rig.cli("replay", "--all", "--engine", rig.engine.address, "--workflow", ORDER_REF,
                  "--json")
    assert out.returncode == 0 and out.stderr == "", out
    doc = json.loads(out.stdout)
    assert sorted(r["replay"]["instance"] for r in doc["results"]) == sorted([first, second])
    assert {r["output_check"]["status"] for r in doc["results"]} == {"same"}
    assert doc["summary"]["ok"] == 2 and doc["ok"] is True
    out = rig.cli("replay", first, second, "--engine", rig.engine.address,
                  "--workflow", ORDER_REF)
    assert out.returncode == 0 and out.stdout.count("output: same") == 2, out

    # Forge the saved history: charge "returned" another receipt, and the recorded end
    # is what today's code makes of it — so the history alone replays cleanly.
    events = rig.history(first)
    charged = next(e for e in events if e.HasField("taskCompleted")
                   and e.taskCompleted.taskScheduledId == 2)
    charged.taskCompleted.result.value = '"charged 0"'
    before = replay(events, workflows.order).divergence
    assert before is not None  # the recorded end still holds the signed output
    end = next(e for e in events if e.HasField("executionCompleted"))
    end.executionCompleted.result.value = replay_output(events)
    forged = History.of(events).save(rig.tmp / "forged.json")
    assert replay(History.load(forged), workflows.order).ok

    out = cli("replay", "--history", forged, "--workflow", ORDER_REF, cwd=REPO)
    assert out.returncode == 0, out  # no ledger: nothing to compare with
    assert "output not compared with the signed one: no ledger given (--db)" in out.stdout
    out = rig.cli("replay", "--history", forged, "--workflow", ORDER_REF, "--db", rig.url)
    assert out.returncode == 1 and out.stderr == "", out
    assert "OUTPUT MISMATCH; replay OK" in out.stdout and "replay-mismatch" in out.stdout
    doc = json.loads(rig.cli("replay", "--history", forged, "--workflow", ORDER_REF,
                             "--json").stdout)
    # the item failed, while the replay itself went cleanly: both said, apart
    assert doc["status"] == "mismatch" and doc["ok"] is False and doc["replay"]["ok"] is True
    check = doc["output_check"]
    assert check["status"] == "different"
    entries = rig.entries(first)
    (completed,) = only(entries, "workflow.completed")
    (charge,) = only(entries, "activity.completed", activity="charge")
    assert sorted((f["code"], f["seq"]) for f in check["findings"]) == sorted(
        [("replay-mismatch", charge.seq), ("replay-mismatch", completed.seq)])


def replay_output(events: list[Any]) -> str:
    """The output today's order code completes ``events`` with."""
    result = replay(events, workflows.order)
    assert result.output is not None
    return result.output


# --- verify --engine: the engine's history against the signed ledger ---------------------

def _verify_engine(rig: Rig, instance: str, *extra: str) -> tuple[int, dict[str, Any]]:
    """(exit status, the instance's report)."""
    out = rig.cli("verify", instance, "--engine", rig.engine.address, "--json", *extra)
    assert out.stderr == "" and out.returncode in (0, 1), out
    (report,) = json.loads(out.stdout)["reports"]
    return out.returncode, report


def _codes(doc: dict[str, Any]) -> list[str]:
    return [f["code"] for f in doc["findings"]]


@pytest.mark.engine
def test_verify_engine_cross_check_clean_then_altered_engine_state(
        durabletask_rig: Rig) -> None:
    """durabletask-go only: it rewrites rows of that engine's own SQLite schema (see the
    module's docstring); the clean cross-check runs on both engines below."""
    rig = durabletask_rig
    rig.start_app()
    instance = rig.run(workflows.order, ORDER)
    rc, doc = _verify_engine(rig, instance)
    assert rc == 0 and doc["ok"] and _codes(doc) == [], doc
    assert doc["mode"] == "default+engine"
    rig.kill_app()
    entries = rig.entries(instance)

    # Erase the signed output of reserve: the engine's copy can no longer be compared.
    (reserved,) = only(entries, "activity.completed", activity="reserve")
    out = rig.cli("redact", instance, "--seq", str(reserved.seq), "--field", "output",
                  "--key", rig.tmp / "keys" / "app.key")
    assert out.returncode == 0, out
    rc, doc = _verify_engine(rig, instance)
    assert rc == 0 and _codes(doc) == ["engine-completion-unverifiable"], doc
    assert "unverifiable (payload erased)" in doc["findings"][0]["message"]
    rc, _ = _verify_engine(rig, instance, "--fail-on", "info")
    assert rc == 1

    # Change charge's result in the engine: the stored payload proves it differs.
    charge = task_of(entries, "charge")
    old = rig.alter_engine_completion(instance, charge, result='"charged 0"')
    assert old == '"charged 30 for order B-5"'
    rc, doc = _verify_engine(rig, instance)
    assert rc == 1 and "replay-mismatch" in _codes(doc), doc
    (mismatch,) = [f for f in doc["findings"] if f["code"] == "replay-mismatch"]
    assert mismatch["seq"] == only(entries, "activity.completed", activity="charge")[0].seq
    assert "activity charge" in mismatch["message"]
    assert (mismatch["task_id"], mismatch["activity"]) == (charge, "charge")
    assert mismatch["entries"] == [mismatch["seq"]]

    # A different size proves a difference even for the erased output.
    rig.alter_engine_completion(instance, task_of(entries, "reserve"), result='{"x": 1}')
    rc, doc = _verify_engine(rig, instance)
    assert _codes(doc).count("replay-mismatch") == 2, doc

    # A completion moved to another task: unsigned in the engine, missing from it.
    rig.alter_engine_completion(instance, task_of(entries, "ship"), new_task_id=99)
    rc, doc = _verify_engine(rig, instance)
    codes = _codes(doc)
    assert "engine-unsigned-completion" in codes and "engine-missing-completion" in codes, doc


@pytest.mark.engine
def test_verify_engine_usage(rig: Rig) -> None:
    one_error_line(rig.cli("verify", "--all", "--engine", rig.engine.address),
                   "--engine cross-checks one instance")


# --- the live check: the interceptor compares replayed results with signed ones ----------

@pytest.mark.engine
def test_verify_engine_cross_check_is_clean_on_the_engines_own_history(rig: Rig) -> None:
    """The engine's untouched history (GetInstanceHistory from durabletask-go or daprd)
    tells the signed ledger's story."""
    rig.start_app()
    instance = rig.run(workflows.order, ORDER)
    rc, doc = _verify_engine(rig, instance)
    assert rc == 0 and doc["ok"] and _codes(doc) == [], doc
    assert doc["mode"] == "default+engine"


@pytest.mark.engine
@pytest.mark.crash
def test_live_check_is_silent_when_the_result_is_untouched_between_crash_and_resume(
        rig: Rig) -> None:
    _live_check(rig, alter=False)


@pytest.mark.engine
@pytest.mark.crash
def test_live_check_notices_a_result_altered_in_the_engine_between_crash_and_resume(
        durabletask_rig: Rig) -> None:
    """durabletask-go only: the quote's result is rewritten in that engine's own SQLite
    schema while the app is down (see the module's docstring)."""
    _live_check(durabletask_rig, alter=True)


def _live_check(rig: Rig, *, alter: bool) -> None:
    """Quote completes, the workflow waits for an event, the app dies; while it is down
    the engine's stored quote result is changed (``alter``); the resumed app replays it."""
    rig.start_app()
    instance = f"approval-{uuid.uuid4().hex[:8]}"
    rig.client.schedule_new_workflow(workflows.approval, input="lamp", instance_id=instance)
    rig.until(lambda: any(e.HasField("timerCreated") for e in rig.history(instance)),
               "the workflow to wait for its event")
    rig.kill_app()  # a crash while the workflow waits
    entries = rig.entries(instance)
    (quoted,) = only(entries, "activity.completed", activity="quote")
    if alter:
        old = rig.alter_engine_completion(instance, quoted.data["task_id"],
                                          result='{"item": "lamp", "price": 1}')
        assert old == '{"item": "lamp", "price": 42}'

    rig.start_app()
    rig.client.raise_workflow_event(instance, "approve", data=True)
    rig.wait(instance)
    state = rig.client.get_workflow_state(instance)
    assert state is not None
    assert state.serialized_output == ('"booked lamp at 1"' if alter else '"booked lamp at 42"')

    entries = rig.entries(instance)
    mismatches = only(entries, "replay.mismatch")
    report = rig.verify(instance)
    if not alter:
        assert mismatches == [] and report.ok and report.findings == (), report
        assert rig.cli("verify", instance, "--engine", rig.engine.address).returncode == 0
        return
    (m,) = mismatches  # once, though the altered result was replayed more than once
    assert m.data["task_id"] == quoted.data["task_id"] and m.data["activity"] == "quote"
    assert m.data["completed_seq"] == quoted.seq
    assert m.data["expected_digest"] == quoted.data["output_digest"]
    assert m.data["seen_digest"] not in (None, quoted.data["output_digest"])
    assert m.kid == rig.signer.kid
    with Ledger.open(rig.url) as ledger:
        stored = ledger.payload(m.data["seen"]["c"])
    assert stored is not None and stored[1] == b'{"item": "lamp", "price": 1}'
    assert not report.ok
    (finding,) = [f for f in report.findings if f.code == "replay-mismatch"]
    assert finding.seq == m.seq and "activity quote" in finding.message
    out = rig.cli("verify", instance)
    assert out.returncode == 1 and "replay-mismatch" in out.stdout, out



# --- a patched workflow -----------------------------------------------------------------

@pytest.mark.engine
def test_a_patch_decision_is_signed_and_a_replay_without_it_names_it(rig: Rig) -> None:
    """``refund`` asks ``is_patched("refund-v2")`` on its first run: the ledger signs the
    branch taken (``workflow.patch``, once, not again on the replays of later turns), the
    history carries the patch, ``show --json`` lists it, and the code with the patch
    taken out replays to the old rule's activity, the divergence naming the patch."""
    rig.start_app()
    instance = rig.run(workflows.refund, {"amount": 40})
    state = rig.client.get_workflow_state(instance)
    assert json.loads(state.serialized_output) == {"refund": 40, "rule": "refund_rule_v2"}
    (patch,) = only(rig.entries(instance), "workflow.patch")
    assert {k: patch.data[k] for k in ("patch", "taken", "version")} == {
        "patch": "refund-v2", "taken": True, "version": None}
    assert rig.verify(instance).ok

    shown = rig.cli("show", instance, "--json")
    assert shown.returncode == 0, shown.stderr
    kinds = [e["kind"] for e in json.loads(shown.stdout)["entries"]]
    assert kinds.count("workflow.patch") == 1

    events = rig.history(instance)
    assert replay(events, workflows.refund, instance).ok
    changed = replay(events, v2.refund_unpatched, instance)
    d = changed.divergence
    assert d is not None and d.kind == DIFFERENT_ACTIVITY, changed.explain()
    assert "refund_rule_v2" in d.expected and "refund_rule_v1" in d.actual
    assert "took patch 'refund-v2'" in d.message, d.message
    out = rig.cli("replay", instance, "--workflow", "examples.nondeterminism.v2:refund_unpatched",
                  "--engine", rig.engine.address)
    assert out.returncode == 1 and "refund-v2" in out.stdout, out


@pytest.mark.engine
def test_a_versioned_workflow_signs_its_version(rig: Rig) -> None:
    """``billing`` has two versions; a new run is the latest, ``billing_v2``: its start
    and its patch decision name it."""
    rig.start_app()
    instance = rig.schedule("billing", {"amount": 40})
    state = rig.wait(instance)
    assert json.loads(state.serialized_output) == 40  # fee-waiver taken: the full amount
    entries = rig.entries(instance)
    (started,) = only(entries, "workflow.started")
    (patch,) = only(entries, "workflow.patch")
    assert started.data["version"] == "billing_v2"
    assert (patch.data["patch"], patch.data["taken"], patch.data["version"]) == (
        "fee-waiver", True, "billing_v2")
    assert rig.verify(instance).ok


# --- a rerun from an event (daprd only: the standalone engine answers UNIMPLEMENTED) ----

@pytest.fixture
def daprd_rig(tmp_path: Path) -> Iterator[Rig]:
    yield from _rig_on(DAPRD, tmp_path)


def _alter_copied_result(stack: Any, instance: str, task_id: int, result: str) -> None:
    """Rewrite one TaskCompleted of ``instance`` in daprd's (stopped) SQLite actor store."""
    from dapr.ext.workflow._durabletask.internal import history_events_pb2 as hpb

    for key, _value, _binary in daprd_rows(stack.db_path, instance, "history-%"):
        event = hpb.HistoryEvent()
        event.ParseFromString(daprd_value(stack.db_path, key))
        if event.HasField("taskCompleted") and event.taskCompleted.taskScheduledId == task_id:
            event.taskCompleted.result.value = result
            daprd_put(stack.db_path, key, event.SerializeToString())
            return
    raise AssertionError(f"no TaskCompleted of task {task_id} in {instance}")


@pytest.mark.engine
@pytest.mark.daprd
def test_a_rerun_links_to_its_source_and_its_copied_prefix_is_checked_there(
        daprd_rig: Rig) -> None:
    """``order`` rerun from its second activity (event 2, ``charge``): daprd copies the
    first result and runs charge and ship again. The new chain signs where it came from
    (``workflow.rerun``: source, event, the source's scheduling entry and head); the
    copied result is checked against the source's signed one, live and by ``verify
    --engine`` — clean. Then the source's stored result is altered (daprd stopped) and
    the source rerun again: the copy carries the altered result, and both the live check
    (a signed ``replay.mismatch`` naming the source) and ``--engine``
    (``rerun-prefix-mismatch``) catch it."""
    from histaudit.replay.history import rerun_from_event

    rig = daprd_rig
    rig.start_app()
    source = rig.run(workflows.order, ORDER)
    new = rerun_from_event(rig.engine.address, source, 2, new_instance_id=f"{source}-rerun")
    rig.wait(new)
    entries = rig.entries(new)
    (link,) = only(entries, "workflow.rerun")
    scheduled = only(rig.entries(source), "workflow.scheduled_activity", activity="charge")
    head = rig.entries(source)[-1]
    assert (link.data["source"], link.data["event_id"], link.data["source_entry"]) == (
        source, 2, scheduled[0].seq)
    assert link.data["source_head"] == {"seq": head.seq, "hash": head.hash}
    assert [e.data["activity"] for e in entries if e.kind == "activity.started"] == [
        "charge", "ship"]  # reserve's result was copied, not run again
    assert not only(entries, "replay.mismatch")

    verified = rig.cli("verify", new, "--engine", rig.engine.address, "--json")
    assert verified.returncode == 0, verified.stdout[-3000:]
    assert json.loads(verified.stdout)["reports"][0]["findings"] == []
    tree = rig.cli("verify", new, "--tree", "--json")
    assert tree.returncode == 0, tree.stdout[-3000:]
    (node,) = json.loads(tree.stdout)["tree"]
    assert node["rerun_of"] == {"instance": source, "event_id": 2}
    text = rig.cli("verify", new, "--tree")
    assert f"rerun of {source} from event 2" in text.stdout, text.stdout

    rig.kill_app()
    rig.engine.stop()
    _alter_copied_result(rig.engine, source, 1, '{"items": ["table"]}')
    rig.engine.restart()
    rig.start_app()
    again = rerun_from_event(rig.engine.address, source, 2, new_instance_id=f"{source}-again")
    rig.wait(again)
    (live,) = only(rig.entries(again), "replay.mismatch")
    assert (live.data["task_id"], live.data["source"]) == (1, source)
    plain = rig.cli("verify", again, "--json")
    assert plain.returncode == 1, plain.stdout[-3000:]
    (finding,) = json.loads(plain.stdout)["reports"][0]["findings"]
    assert finding["code"] == "replay-mismatch" and f"the source {source!r}" in finding["message"]
    altered = rig.cli("verify", again, "--engine", rig.engine.address, "--json")
    assert altered.returncode == 1, altered.stdout[-3000:]
    codes = {f["code"]: f for f in json.loads(altered.stdout)["reports"][0]["findings"]}
    assert codes["rerun-prefix-mismatch"]["task_id"] == 1
    assert f"copied from the source {source!r}" in codes["rerun-prefix-mismatch"]["message"]


# --- a propagated history (daprd only: the standalone engine never delivers one) -------

PROPAGATION_APP = Path(__file__).resolve().parent / "apps" / "propagation_app.py"


def _alter_propagated(stack: Any, child: str, old: str, new: str) -> None:
    """Rewrite one result inside the history daprd keeps for ``child`` (its stopped store's
    ``propagated-history`` row: a PropagatedHistory of chunks of serialized events)."""
    from dapr.ext.workflow._durabletask.internal import history_events_pb2 as hpb

    from histaudit import sdk

    [(key, _value, _binary)] = daprd_rows(stack.db_path, child, "propagated-history")
    kept = sdk.protos.PropagatedHistory()
    kept.ParseFromString(daprd_value(stack.db_path, key))
    for chunk in kept.chunks:
        for i, raw in enumerate(chunk.rawEvents):
            event = hpb.HistoryEvent()
            event.ParseFromString(raw)
            if event.HasField("taskCompleted") and event.taskCompleted.result.value == old:
                event.taskCompleted.result.value = new
                chunk.rawEvents[i] = event.SerializeToString()
                daprd_put(stack.db_path, key, kept.SerializeToString())
                return
    raise AssertionError(f"no result {old} in {child}'s propagated history")


@pytest.mark.engine
@pytest.mark.daprd
def test_a_propagated_history_is_checked_against_the_parents_signed_chain(
        daprd_rig: Rig) -> None:
    """The child checks what it was given against its parent's chain and signs the check
    (``workflow.propagated_history``): clean as daprd delivered it; once a result in the
    copy daprd keeps for the child is changed (daprd stopped while the child waits), the
    child's next turn is given the changed copy, signs what it found, and ``verify``
    reports ``propagated-history-mismatch``."""
    rig = daprd_rig
    rig.app = rig.add_app(AppProcess(rig.engine, [PROPAGATION_APP], log=rig.tmp / "family.log",
                                     ready=APP_READY, ready_timeout=TIMEOUT_S,
                                     env=dict(rig.app.env)))
    rig.start_app()
    parent = rig.schedule("family_parent")
    child = f"{parent}-child"
    rig.until(lambda: bool(only(rig.entries(child), "workflow.propagated_history")),
              "the child's check of its propagated history")
    (clean,) = only(rig.entries(child), "workflow.propagated_history")
    assert clean.data["checked"] == [parent] and clean.data["problems"] == []
    assert [c["instance"] for c in clean.data["chunks"]] == [parent]
    assert rig.verify(child).ok

    rig.kill_app()
    rig.engine.stop()
    _alter_propagated(rig.engine, child, '"step-2"', '"step-X"')
    rig.engine.restart()
    rig.start_app()
    rig.client.raise_workflow_event(child, "go", data=True)
    state = rig.wait(parent)
    assert json.loads(state.serialized_output)["again"] == ['"step-1"', '"step-X"']
    checks = only(rig.entries(child), "workflow.propagated_history")
    assert len(checks) == 2 and checks[1].data["problems"] == [
        f"{parent!r}: task 2's result (8 bytes) is not the output signed at entry "
        f"{only(rig.entries(parent), 'activity.completed')[1].seq}"], checks[1].data
    report = rig.verify(child)
    assert [f.code for f in report.findings] == ["propagated-history-mismatch"]
