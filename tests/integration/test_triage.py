"""The triage example (examples/triage) crashed three ways on the real engine, then audited.

Each case runs ``app.py worker`` with a crash switch, lets it die inside ``post_comment``
like a power cut, starts it again without the switch and waits for the workflow to
complete. The counts in the data directory are the outcome any Dapr user sees (comment
lines 1, 2, 1; the LLM stand-in exactly once every time, because a finished activity is
replayed from history, never re-run). The ``histaudit verify`` CLI must report what
happened: nothing worth a warning after a crash before the post, ``effect-duplicate``
(exit 1) when the post ran twice, ``effect-deduplicated`` (exit 0) when the idempotent
activity skipped it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import DAPRD, DURABLETASK, Sidecar
from histaudit.testing.daprd_binaries import find_daprd_bin_dir
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.ledgers import read_entries

pytestmark = [pytest.mark.engine, pytest.mark.crash]


@pytest.fixture
def engine(any_engine: Sidecar) -> Sidecar:
    """Every engine test here runs twice: on durabletask-go and on real daprd (conftest)."""
    return any_engine

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "triage"
APP = EXAMPLE / "app.py"
DEMO = EXAMPLE / "demo.py"
READY = "worker ready"
READY_TIMEOUT_S = 30.0
WORKFLOW_TIMEOUT_S = 60


@dataclass(frozen=True)
class Case:
    crash_at: str
    idempotent: bool
    comments: int  # comment lines after recovery


BEFORE_POST = Case("before_post", idempotent=False, comments=1)
AFTER_POST = Case("after_post", idempotent=False, comments=2)  # at-least-once, no check
AFTER_POST_IDEMPOTENT = Case("after_post", idempotent=True, comments=1)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class Triage(AppRig):
    """The example app's worker processes, its data directory, ledger and key."""

    def __init__(self, engine: EngineProcess, tmp: Path, db_url: str, *, idempotent: bool) -> None:
        super().__init__(engine)
        self.tmp = tmp
        self.data = tmp / "data"
        self.data.mkdir()
        self.keys = tmp / "keys"
        key, _pub, _signer = generate_keypair(self.keys, name="triage")
        self.db_url = db_url
        self.app_env = {"DATA_DIR": str(self.data), "HISTAUDIT_DB": db_url,
                        "HISTAUDIT_KEY": str(key), "PYTHONUNBUFFERED": "1",
                        "IDEMPOTENT": "1" if idempotent else "0"}
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        self.env = engine.env({**base, **self.app_env})  # for the app's own commands

    def worker(self, name: str, **extra: str) -> AppProcess:
        """Start ``app.py worker`` and wait for its ready line."""
        worker = AppProcess(self.engine, [APP, "worker"], log=self.tmp / f"{name}.log",
                            env=self.app_env, ready=READY, ready_timeout=READY_TIMEOUT_S,
                            exit_timeout=WORKFLOW_TIMEOUT_S)
        self.add_app(worker).start(**extra)
        return worker

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def schedule(self) -> str:
        instance = f"ticket-{uuid.uuid4().hex[:8]}"
        self.client.schedule_new_workflow("triage", instance_id=instance,
                                          input={"id": instance, "title": "Login page 500s"},
                                          start_at=datetime.now(UTC))
        return instance

    def status(self, instance: str) -> str:
        """Wait for ``instance`` to finish; its runtime status."""
        return str(self.wait(instance, WORKFLOW_TIMEOUT_S).runtime_status.name)

    def verify(self, instance: str, *extra: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a user runs it."""
        return cli("verify", instance, "--db", self.db_url, "--trust", self.keys, "--full",
                   *extra, cwd=self.tmp)

    def entries(self, instance: str) -> list[fmt.Entry]:
        return read_entries(self.db_url, instance)


@pytest.fixture
def make_triage(engine: EngineProcess, tmp_path: Path) -> Iterator[Any]:
    made: list[Triage] = []

    def make(db_url: str, *, idempotent: bool = False) -> Triage:
        made.append(Triage(engine, tmp_path, db_url, idempotent=idempotent))
        return made[-1]

    yield make
    for t in made:
        t.close()


@pytest.mark.parametrize(("case", "store"), [
    pytest.param(BEFORE_POST, "sqlite", id="before_post-sqlite"),
    pytest.param(AFTER_POST, "sqlite", id="after_post-sqlite"),
    pytest.param(AFTER_POST_IDEMPOTENT, "sqlite", id="after_post-idempotent-sqlite"),
    pytest.param(AFTER_POST_IDEMPOTENT, "postgres", id="after_post-idempotent-postgres",
                 marks=pytest.mark.postgres),
])
def test_crash_recovery_and_what_histaudit_reports(case: Case, store: str,
                                                   make_triage: Any,
                                                   request: pytest.FixtureRequest) -> None:
    db_url = str(request.getfixturevalue("sqlite_url" if store == "sqlite" else "pg_url"))
    app: Triage = make_triage(db_url, idempotent=case.idempotent)
    comments, llm_calls = app.data / "comments.txt", app.data / "llm_calls.txt"

    crashing = app.worker("crash", HISTAUDIT_CRASH_AT=case.crash_at)
    instance = app.schedule()
    rc = crashing.wait_exit()  # fails the test with the log when it does not crash
    assert rc == CRASH_EXIT_CODE, app.log("crash")[-3000:]
    assert f"crash point '{case.crash_at}' reached" in app.log("crash")
    # before_post dies before the comment, after_post after it (and after its done record).
    assert count_lines(comments) == (0 if case.crash_at == "before_post" else 1)

    app.worker("resume")  # same environment, no crash switch
    assert app.status(instance) == "COMPLETED", app.log("resume")[-3000:]

    # What the seed's test counts: the ticket system and the LLM bill.
    assert count_lines(comments) == case.comments
    assert llm_calls.read_text().splitlines() == [instance]  # the LLM ran exactly once
    entries = app.entries(instance)
    starts = [e.data["activity"] for e in entries if e.kind == "activity.started"]
    assert starts == ["summarize", "post_comment", "post_comment"]
    assert sum(e.kind == "effect.done" for e in entries) == (2 if case.comments == 2 else 1)

    # What histaudit says about it: the real CLI's exit status and JSON report.
    result = app.verify(instance, "--json")
    (report,) = json.loads(result.stdout)["reports"]
    codes = {f["code"] for f in report["findings"]}
    severities = {f["code"]: f["severity"] for f in report["findings"]}
    assert report["entries"] == len(entries)
    assert "activity-reexecuted" in codes and severities["activity-reexecuted"] == "info"
    assert "effect-uncertain" not in codes
    if case is BEFORE_POST:
        assert result.returncode == 0 and report["ok"], result.stdout
        assert not [f for f in report["findings"] if f["severity"] != "info"], result.stdout
        assert codes == {"activity-reexecuted"}
        assert app.verify(instance, "--fail-on", "warning").returncode == 0
    elif case is AFTER_POST:
        assert result.returncode == 1 and not report["ok"], result.stdout
        assert severities["effect-duplicate"] == "error"
        (dup,) = [f for f in report["findings"] if f["code"] == "effect-duplicate"]
        assert dup["effect"] == {"name": "post-comment", "key": instance}
        assert len(dup["entries"]) == 2 and dup["seq"] == dup["entries"][1]
        human = app.verify(instance)
        assert human.returncode == 1
        # The table names the duplicated effect by its key, the ticket.
        assert "effect-duplicate" in human.stdout
        assert f"post-comment [{instance}] done 2 times" in human.stdout, human.stdout
    else:
        assert result.returncode == 0 and report["ok"], result.stdout
        assert "effect-duplicate" not in codes
        assert severities["effect-deduplicated"] == "info"
        assert [e.kind for e in entries if e.kind.startswith("effect.")] == [
            "effect.intent", "effect.done", "effect.intent", "effect.skipped"]


def test_start_command_runs_a_ticket_to_completion(make_triage: Any, sqlite_url: str) -> None:
    """``app.py start ID`` (the README's command) schedules, waits and prints the status."""
    app: Triage = make_triage(sqlite_url, idempotent=True)
    app.worker("worker")
    instance = f"ticket-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, str(APP), "start", instance], env=app.env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "STATUS=COMPLETED" in done.stdout
    assert count_lines(app.data / "comments.txt") == 1
    assert (app.data / "llm_calls.txt").read_text().splitlines() == [instance]
    result = app.verify(instance, "--fail-on", "info")  # a clean run: no finding at all
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("kind", [DURABLETASK, pytest.param(DAPRD, marks=pytest.mark.daprd)])
def test_demo_runs_end_to_end(kind: str, tmp_path: Path, engine_binary: Path) -> None:
    """`make demo` and `make demo-daprd`: every outcome as expected, exit 0, the summary
    table printed, and the engine it ran on named."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env.update({"HISTAUDIT_ENGINE_BIN": str(engine_binary), "COLUMNS": "100"})
    if kind == DAPRD:  # and a standalone engine that cannot start, so none is used
        env.update({"HISTAUDIT_DAPRD_BIN_DIR": str(find_daprd_bin_dir()),
                    "HISTAUDIT_ENGINE_BIN": str(tmp_path / "no-durabletask-here")})
    began = time.monotonic()
    run = subprocess.run([sys.executable, str(DEMO), "--out", str(tmp_path / "demo-out"),
                          "--engine", kind],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
                         check=False)
    took = time.monotonic() - began
    out = run.stdout
    assert run.returncode == 0, out[-6000:] + run.stderr[-3000:]
    assert "triage agent: three crashes, resumed and audited" in out
    assert f"all outcomes as expected on {kind} " in out
    assert f"engine: {kind}" in out  # the summary's caption
    first = out.splitlines()[0]
    if kind == DAPRD:
        assert first.startswith("workflow engine: real daprd (pid ") and "placement pid" in first
        assert "engine SIGKILLed (daprd pid " in out
        assert not (tmp_path / "demo-out" / "engine" / "etcd").exists()  # 120 MB, removed
    else:
        assert first.startswith("workflow engine: standalone durabletask-go pid "), first
        assert "engine SIGKILLed (engine pid " in out
    assert "ticket-101 is PENDING" in out
    for code in ("effect-duplicate", "effect-deduplicated", "activity-reexecuted"):
        assert code in out
    assert out.count("crashed at ") == 3
    assert (tmp_path / "demo-out" / "ledger.db").stat().st_size > 0
    print(f"\ndemo on {kind}: {took:.1f}s")


def test_demo_refuses_an_unknown_engine(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env["HISTAUDIT_DEMO_ENGINE"] = "dapr"
    run = subprocess.run([sys.executable, str(DEMO), "--out", str(tmp_path / "out")], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    assert "HISTAUDIT_DEMO_ENGINE=dapr: expected one of durabletask, daprd" in run.stderr
    assert not (tmp_path / "out").exists()
