"""A PostgreSQL ledger that goes away while an audited workflow runs (issue #40, item 10),
on the real engine and a PostgreSQL server of the test's own, shut down and started again.

* A restart of a few seconds in the middle of three 40-step workflows loses nothing and
  fails nothing: every workflow COMPLETED, every activity started and completed once in
  the ledger, ``verify --all --full`` clean, one log line when the ledger went away and
  one when it came back, no traceback.
* An outage longer than ``$HISTAUDIT_STORE_OUTAGE_WAIT`` fails the activity in flight
  with one log line, and the workflow's end, which could not be written then, is written
  once the ledger is back: ledger and engine agree.

Cost: ≈ 16 s of CPU, 28 s of wall.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli, exits
from support.ledgers import read_entries
from support.postgres import PostgresServer

pytestmark = [pytest.mark.engine, pytest.mark.postgres, pytest.mark.crash]

APP = Path(__file__).resolve().parent / "apps" / "outage_app.py"
APP_READY = "APP READY"
STEPS = 40


class Rig(AppRig):
    def __init__(self, engine: EngineProcess, tmp: Path, pg: PostgresServer,
                 env: dict[str, str]) -> None:
        super().__init__(engine)
        self.tmp, self.pg = tmp, pg
        self.url = pg.create_database("ledger")
        Ledger.open(self.url, create=True).close()
        key, self.pub, _ = generate_keypair(tmp / "keys", name="app")
        self.app = self.add_app(AppProcess(
            engine, [APP], log=tmp / "app.log", ready=APP_READY, ready_timeout=60,
            env={"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key),
                 "PYTHONUNBUFFERED": "1", **env}))

    def leaves(self) -> int:
        with Ledger.open(self.url) as ledger:
            return ledger.leaf_count()

    def kinds(self, instance: str) -> Counter[str]:
        return Counter(e.kind for e in read_entries(self.url, instance))

    def verify_clean(self) -> None:
        r = cli("verify", "--all", "--full", "--json", "--db", self.url, "--trust", self.pub,
                cwd=self.tmp)
        exits(r)
        assert json.loads(r.stdout)["ok"] is True


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


def _rig(engine: EngineProcess, tmp: Path, pg: PostgresServer, **env: str) -> Rig:
    rig = Rig(engine, tmp, pg, env)
    rig.app.start()
    return rig


def test_a_postgres_restart_mid_run_loses_nothing(engine: EngineProcess, tmp_path: Path,
                                                  pg: PostgresServer) -> None:
    with _rig(engine, tmp_path, pg) as rig:
        job: dict[str, Any] = {"n": STEPS, "pause": 0.05}
        instances = [rig.schedule("chain", job) for _ in range(3)]
        wait_until(lambda: rig.leaves() >= 40, 60, "40 entries in the ledger",
                   details=rig.app.tail)
        rig.pg.restart(down=3.0)
        for instance in instances:
            state = rig.wait(instance, timeout=120)
            assert state.runtime_status.name == "COMPLETED", rig.app.tail()
            assert json.loads(state.serialized_output) == {"x": STEPS}
            kinds = rig.kinds(instance)
            assert kinds["activity.started"] == STEPS, kinds  # once each: none repeated
            assert kinds["activity.completed"] == STEPS, kinds  # none lost
            assert kinds["workflow.completed"] == 1 and kinds["activity.failed"] == 0, kinds
        rig.verify_clean()
        log = rig.app.tail()
        assert "Traceback" not in log, log
        assert len(re.findall(r"ledger .* is unreachable", log)) == 1, log
        assert len(re.findall(r"ledger .* answers again after", log)) == 1, log


def test_a_longer_outage_fails_the_activity_and_the_end_is_recorded_once_back(
        engine: EngineProcess, tmp_path: Path, pg: PostgresServer) -> None:
    with _rig(engine, tmp_path, pg, HISTAUDIT_STORE_OUTAGE_WAIT="1") as rig:
        instance = rig.schedule("chain", {"n": STEPS, "pause": 0.05})
        wait_until(lambda: rig.leaves() >= 20, 60, "20 entries in the ledger",
                   details=rig.app.tail)
        rig.pg.restart(down=6.0)
        state = rig.wait(instance, timeout=120)
        # the activity in flight could not be recorded: it failed rather than run or
        # succeed unrecorded, and with no retry policy the workflow failed with it
        assert state.runtime_status.name == "FAILED", rig.app.tail()
        assert "the ledger was unreachable for" in state.failure_details.message
        # the failure, made while the ledger was away, is recorded once it is back
        wait_until(lambda: rig.kinds(instance)["workflow.failed"] == 1, 60,
                   "workflow.failed recorded late", details=rig.app.tail)
        log = rig.app.tail()
        assert "Traceback" not in log, log
        assert re.search(r"recorded workflow\.failed for workflow chain-\w+ late", log), log
        assert len(re.findall(r"ledger .* is unreachable", log)) == 1, log
        r = cli("verify", instance, "--full", "--json", "--db", rig.url, "--trust", rig.pub,
                cwd=tmp_path)
        exits(r)  # ledger and engine agree: the instance failed, and nothing is missing
        assert json.loads(r.stdout)["ok"] is True
        assert read_entries(rig.url, instance)[-1].kind == "workflow.failed"
