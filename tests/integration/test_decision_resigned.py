"""A workflow decision signed twice, made for real: the engine dies holding it.

The app (apps/resign_app.py) signs "schedule ``second``" and then holds before handing
the decision to the engine. The test SIGKILLs the engine in that window and starts it
again on the same port and state file; once its work-item lock expires the engine
re-dispatches the workflow from the history it kept — which lacks the decision — and the
workflow makes it again, not as a replay. The ledger then holds the decision twice, both
signed by the same worker, and ``histaudit verify`` says so (``decision-resigned``, info)
and still passes: nothing ran twice, the workflow is correct.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dapr.ext.workflow as wf
import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli
from support.ledgers import read_entries

APP = Path(__file__).parent / "apps" / "resign_app.py"
LOCK_TIMEOUT_S = 3.0  # the engine re-dispatches a lost work item after this

pytestmark = [pytest.mark.engine, pytest.mark.crash, pytest.mark.timeout(180)]


class Rig(AppRig):
    def __init__(self, engine: EngineProcess, tmp: Path) -> None:
        super().__init__(engine)
        self.data = tmp / "data"
        self.data.mkdir()
        key, _pub, _signer = generate_keypair(tmp / "keys", name="app")
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        self.env = {"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key),
                    "HISTAUDIT_TRUST": str(tmp / "keys")}
        self.app = self.add_app(AppProcess(engine, [APP], log=tmp / "app.log",
                                           env={**self.env, "APP_DATA": str(self.data),
                                                "PYTHONUNBUFFERED": "1"},
                                           ready="APP READY"))


@pytest.fixture
def rig(engine_binary: Path, tmp_path: Path) -> Iterator[Rig]:
    engine = EngineProcess(binary=engine_binary, state_dir=tmp_path / "engine",
                           lock_timeout=LOCK_TIMEOUT_S)
    engine.start()
    try:
        with Rig(engine, tmp_path) as r:
            yield r
    finally:
        engine.kill()


def test_engine_killed_holding_a_decision_gives_decision_resigned(rig: Rig,
                                                                  tmp_path: Path) -> None:
    rig.app.start()
    instance = rig.schedule("resign", "hi")
    wait_until((rig.data / "held").exists, 60, "the workflow to hold after its decision",
               details=rig.app.tail)
    rig.engine.kill()
    rig.engine.start()
    (rig.data / "go").touch()
    rig.client.close()
    rig.client = rig.new_client()  # the old channel may sit in reconnect back-off
    state = rig.wait(instance)
    assert state.runtime_status == wf.WorkflowStatus.COMPLETED, rig.app.tail()
    assert json.loads(state.serialized_output) == "HI!"
    assert rig.app.running, "the app must survive the engine's outage"

    entries = read_entries(rig.url, instance)
    scheduled = [e for e in entries if e.kind == "workflow.scheduled_activity"]
    by_task = sorted((e.data["activity"], e.data["task_id"]) for e in scheduled)
    # "second" was decided twice with the same task id; "first" once.
    assert by_task.count(("second", by_task[-1][1])) == 2, by_task
    assert [a for a, _t in by_task].count("first") == 1, by_task
    resigned = [e for e in scheduled if e.data["activity"] == "second"]
    assert not any(e.data.get("replayed") for e in resigned), [e.data for e in resigned]
    # Each activity body still ran exactly once.
    started = [e.data["activity"] for e in entries if e.kind == "activity.started"]
    assert sorted(started) == ["first", "second"], started

    out = cli("verify", instance, "--json", cwd=tmp_path, env=rig.env)
    assert out.returncode == 0, out.stdout + out.stderr
    (report,) = json.loads(out.stdout)["reports"]
    found = [(f["code"], f["severity"], f["seq"], f["entries"], f["task_id"], f["activity"])
             for f in report["findings"]]
    assert found == [("decision-resigned", "info", resigned[1].seq,
                      [resigned[0].seq, resigned[1].seq], resigned[0].data["task_id"],
                      "second")], found
    text = cli("verify", instance, cwd=tmp_path, env=rig.env)
    assert text.returncode == 0 and "decision-resigned" in text.stdout, text.stdout
