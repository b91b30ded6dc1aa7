"""What reaches a workflow from outside its code, signed as it arrives (issue #39, item 2):
an external event, a durable timer, a client's suspend, resume and terminate; and the
crash matrix driving an approval path with ``--event``. Cost: ≈ 20 s of CPU (three engines
for the signing tests and two matrices).

The app (``apps/fanout_app.py``, workflow ``approval``) starts a one-second timer, then
waits for the event ``approved``. Each entry carries the engine's timestamp; payloads
(the event's data, a terminate reason) are committed and never shown in clear; the
instance verifies OK against the engine's own history; a terminated one verifies as
terminated, not as unfinished.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.testing import DURABLETASK, start_engine, teardown
from support.cli import cli
from support.fanout import APP, Fanout

pytestmark = [pytest.mark.engine]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Fanout]:
    eng = start_engine(DURABLETASK, tmp_path / "engine")
    try:
        with Fanout(tmp_path, eng, stateful=False) as r:
            r.app.start()
            yield r
    finally:
        teardown(eng)


def _entries(rig: Fanout, instance: str) -> list[dict[str, Any]]:
    r = cli("show", instance, "--json", "--db", rig.url, cwd=rig.tmp)
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout)["entries"])


def _until(predicate: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_timer_a_suspend_a_resume_and_the_approval_are_signed(rig: Fanout) -> None:
    instance = rig.schedule("approval", None)
    _until(lambda: any(e["kind"] == "workflow.timer_fired" for e in _entries(rig, instance)),
           "the timer to fire")
    rig.client.pause_workflow(instance)
    _until(lambda: rig.client.get_workflow_state(instance).runtime_status.name == "SUSPENDED",
           "the suspend")
    rig.client.resume_workflow(instance)
    _until(lambda: rig.client.get_workflow_state(instance).runtime_status.name == "RUNNING",
           "the resume")
    rig.client.raise_workflow_event(instance, "approved", data={"by": "ops-7", "ok": True})
    state = rig.wait(instance, 60)
    assert state.runtime_status.name == "COMPLETED"
    assert json.loads(state.serialized_output) == {"by": "ops-7", "ok": True}
    entries = _entries(rig, instance)
    received = [(e["kind"], e["data"]) for e in entries if e["kind"] in (
        "workflow.timer_fired", "workflow.suspended", "workflow.resumed",
        "workflow.event_received")]
    assert [k for k, _ in received] == ["workflow.timer_fired", "workflow.suspended",
                                        "workflow.resumed", "workflow.event_received"]
    timer, event = received[0][1], received[3][1]
    assert timer["fire_at"].endswith("Z") and isinstance(timer["timer_id"], int)
    assert event["name"] == "approved" and event["received_at"].endswith("Z")
    assert set(event["payload"]) >= {"c", "n"}
    shown = json.dumps(entries)
    assert "ops-7" not in shown  # the approver is in the committed payload, not in clear
    assert entries[-1]["kind"] == "workflow.completed"
    assert rig.verify(instance) == []


def test_a_terminate_is_signed_and_verifies_as_terminated(rig: Fanout) -> None:
    """A client's terminate of a waiting workflow: ``workflow.terminated``, its reason
    committed; the instance verifies OK with the engine's history, not as unfinished."""
    instance = rig.schedule("approval", None)
    _until(lambda: rig.client.get_workflow_state(instance).runtime_status.name == "RUNNING",
           "the workflow to run")
    rig.client.terminate_workflow(instance, output="withdrawn by ops-7")
    assert rig.wait(instance, 60).runtime_status.name == "TERMINATED"
    entries = _entries(rig, instance)
    assert entries[-1]["kind"] == "workflow.terminated", entries
    last = entries[-1]["data"]
    assert last["recurse"] is True and last["received_at"].endswith("Z")  # SDK default
    assert "withdrawn" not in json.dumps(entries) and set(last["payload"]) >= {"c", "n"}
    # with --engine: the engine's history agrees; how it ended is said, as info (exit 0)
    assert rig.verify(instance) == ["workflow-terminated"]
    r = cli("list", "--db", rig.url, "--json", cwd=rig.tmp)
    [row] = [row for row in json.loads(r.stdout) if row["instance"] == instance]
    assert row["workflow"] == "terminated" and row["last_kind"] == "workflow.terminated"


def test_crashtest_drives_the_approval_path_with_an_event(tmp_path: Path) -> None:
    """``crashtest --event NAME=JSON``: the event is raised on every run's instance, so
    the path after the approval is crashed too; without it, the clean run cannot end and
    the error says what to pass."""
    target = f"{APP}:approve_then_order"
    r = cli("crashtest", target, "--input", "null", "--event", 'approved={"by": "ops-7"}',
            "--no-engine-points", "--json", tmp_path / "m.json", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["clean"]["output"] == {"quote": 10, "decision": {"by": "ops-7"}, "order": 20}
    points = {p["point"]: p["outcome"] for p in doc["points"]}
    assert set(points) == {"before:search", "after:search", "before:search#2",
                           "after:search#2", "searched", "searched#2"}, points
    assert set(points.values()) == {"identical"}, points
    assert "--event 'approved={\"by\": \"ops-7\"}'" in doc["points"][0]["rerun"]
    r = cli("crashtest", target, "--input", "null", "--timeout", "4", "--no-engine-points",
            cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "raise it with --event NAME=JSON" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
