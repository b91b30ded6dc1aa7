"""The pinned engine (durabletask-go) and the pinned SDK (dapr 1.19) work together.

Each test runs the workflow app in its own process (tests/integration/apps/smoke_app.py)
so it can be SIGKILLed like a crashed container, and drives it from this process with
DaprWorkflowClient. The crash tests also prove the recovery facts the crash matrix relies
on: a killed app's in-flight activity is re-dispatched to the next app, and a killed and
restarted engine (same port, same state file) carries a waiting workflow to completion.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import dapr.ext.workflow as wf
import pytest

from histaudit.testing import Sidecar
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, wait_until

pytestmark = pytest.mark.engine


@pytest.fixture
def engine(any_engine: Sidecar) -> Sidecar:
    """Every engine test here runs twice: on durabletask-go and on real daprd (conftest)."""
    return any_engine

APP_SCRIPT = Path(__file__).resolve().parent / "apps" / "smoke_app.py"
APP_READY_TIMEOUT_S = 20.0
WORKFLOW_TIMEOUT_S = 20


def smoke_app(engine: EngineProcess, workdir: Path, number: int) -> AppProcess:
    """One smoke_app.py process connected to ``engine``, talking to us through ``workdir``
    (``number`` only names its log file); it is ready once its work-item stream is up."""
    return AppProcess(engine, [APP_SCRIPT], log=workdir / f"app.{number}.log",
                      env={"SMOKE_DIR": str(workdir), "PYTHONUNBUFFERED": "1"},
                      ready=lambda pid: (workdir / f"ready.{pid}").exists(),
                      ready_timeout=APP_READY_TIMEOUT_S)


@pytest.fixture
def smoke_dir(tmp_path: Path) -> Path:
    """Directory through which the smoke apps and the test exchange marker files."""
    path = tmp_path / "smoke"
    path.mkdir()
    return path


@pytest.fixture
def start_app(engine: EngineProcess, smoke_dir: Path) -> Iterator[Callable[[], AppProcess]]:
    """Factory starting smoke apps; every app it started is killed at teardown."""
    started: list[AppProcess] = []

    def factory() -> AppProcess:
        app = smoke_app(engine, smoke_dir, len(started) + 1)
        started.append(app)
        app.start()
        return app

    yield factory
    for app in started:
        app.kill()


def make_client(engine: EngineProcess) -> wf.DaprWorkflowClient:
    """A workflow client aimed explicitly at ``engine``."""
    return wf.DaprWorkflowClient(host="127.0.0.1", port=str(engine.port))


@pytest.fixture
def client(engine: EngineProcess) -> Iterator[wf.DaprWorkflowClient]:
    """Workflow client for the test's engine, closed afterwards."""
    c = make_client(engine)
    yield c
    c.close()


def executions(smoke_dir: Path) -> list[tuple[str, int, str]]:
    """Activity executions recorded by the apps: (activity, pid, instance id)."""
    path = smoke_dir / "executions.log"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        name, pid, iid = line.split(" ", 2)
        rows.append((name, int(pid), iid))
    return rows


def finished_output(client: wf.DaprWorkflowClient, iid: str) -> object:
    """Wait for ``iid`` to finish, assert it COMPLETED, and return its decoded output."""
    state = client.wait_for_workflow_completion(iid, timeout_in_seconds=WORKFLOW_TIMEOUT_S)
    assert state is not None, f"workflow {iid} not found"
    assert state.runtime_status == wf.WorkflowStatus.COMPLETED, (
        f"workflow {iid} ended {state.runtime_status}: {state.failure_details}"
    )
    return json.loads(state.serialized_output)


@pytest.mark.timeout(60)
def test_two_activity_workflow_completes(
    start_app: Callable[[], AppProcess], client: wf.DaprWorkflowClient, smoke_dir: Path
) -> None:
    """EngineProcess + SDK + separate app process run a two-activity workflow to the end."""
    app = start_app()
    iid = client.schedule_new_workflow("two_steps", input={"name": "ledger"}, instance_id="smoke-1")
    assert iid == "smoke-1"

    assert finished_output(client, iid) == {"first": "hello ledger", "second": "HELLO LEDGER!"}
    assert executions(smoke_dir) == [("step_one", app.pid, iid), ("step_two", app.pid, iid)]


@pytest.mark.crash
@pytest.mark.timeout(90)
def test_app_killed_mid_activity_is_redispatched_to_restarted_app(
    start_app: Callable[[], AppProcess], client: wf.DaprWorkflowClient, smoke_dir: Path
) -> None:
    """SIGKILL the app inside step_two; a new app gets step_two again and finishes."""
    first_app = start_app()
    iid = client.schedule_new_workflow(
        "two_steps", input={"name": "crash", "gate": True}, instance_id="smoke-crash"
    )
    wait_until(
        lambda: (smoke_dir / f"started.{first_app.pid}").exists(),
        WORKFLOW_TIMEOUT_S,
        "step_two to start in the first app",
    )
    first_app.kill()

    second_app = start_app()
    redispatch_s = wait_until(
        lambda: (smoke_dir / f"started.{second_app.pid}").exists(),
        WORKFLOW_TIMEOUT_S,
        "step_two to be re-dispatched to the restarted app",
    )
    print(f"\nre-dispatch after app restart (ready -> activity start): {redispatch_s:.2f}s")
    (smoke_dir / "release").touch()

    assert finished_output(client, iid) == {"first": "hello crash", "second": "HELLO CRASH!"}
    runs = executions(smoke_dir)
    # step_one's result was already in the history: replay must not run it again.
    assert Counter(name for name, _, _ in runs) == {"step_one": 1, "step_two": 2}
    assert [pid for name, pid, _ in runs if name == "step_two"] == [first_app.pid, second_app.pid]


@pytest.mark.crash
@pytest.mark.timeout(90)
def test_engine_killed_while_workflow_waits_then_restarted(
    engine: EngineProcess,
    start_app: Callable[[], AppProcess],
    client: wf.DaprWorkflowClient,
    smoke_dir: Path,
) -> None:
    """SIGKILL the engine between two activities; same port + same db carries on."""
    app = start_app()
    iid = client.schedule_new_workflow(
        "pause_between", input={"name": "engine"}, instance_id="smoke-engine"
    )

    def waiting() -> bool:
        state = client.get_workflow_state(iid, fetch_payloads=True)
        return state is not None and "waiting" in (state.serialized_custom_status or "")

    wait_until(waiting, WORKFLOW_TIMEOUT_S, "the workflow to wait for its event")
    port, db = engine.port, engine.db_path
    engine.kill()
    restarted_at = time.monotonic()
    engine.start()
    assert (engine.port, engine.db_path) == (port, db)

    # A fresh client: the old channel may sit in reconnect back-off after the outage.
    after = make_client(engine)
    try:
        state = after.get_workflow_state(iid)
        assert state is not None and state.runtime_status == wf.WorkflowStatus.RUNNING
        after.raise_workflow_event(iid, "go", data="approved")
        output = finished_output(after, iid)
    finally:
        after.close()
    print(f"\nengine restart -> workflow completed: {time.monotonic() - restarted_at:.2f}s")

    assert output == {"first": "hello engine", "second": "HELLO ENGINE APPROVED!"}
    runs = executions(smoke_dir)
    assert [name for name, _, _ in runs] == ["step_one", "step_two"]
    assert {pid for _, pid, _ in runs} == {app.pid}, "the same app process must have reconnected"
    assert app.proc is not None and app.proc.poll() is None
    assert os.path.exists(db)
