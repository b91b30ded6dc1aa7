"""The travel example of a framework (``examples/frameworks/<framework>/app.py``) on one
daprd stack, run once clean and once per crash case, each case its own instance.

One app process serves every case: each case's crash point is scoped to its instance
(``<point>@trip-<case>/<task id>``, :func:`histaudit.crash.scoped_name`), so a crash costs
one app start that serves both the resumed case and the next one. The clean case runs
first. The stub LLM
(:class:`examples.frameworks.stub_llm.ScriptedLLM`) keeps its own bill, which each
:class:`Run` carries for its instance.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from examples.frameworks.stub_llm import ScriptedLLM

from histaudit.crash import CRASH_EXIT_CODE, scoped_name
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig
from support.cli import cli

__all__ = ["Run", "TravelRig", "cost", "misuse", "travel_rig", "warnings"]

TASK = {"task": "book a trip to Lisbon"}


class Run:
    """What one case left: its instance, the stub's log of its requests, the bookings it
    made, and (read on demand) its ledger entries and findings."""

    def __init__(self, rig: TravelRig, instance: str, log: list[tuple[str, int]],
                 booked: dict[str, int]) -> None:
        self.rig, self.instance, self.log, self.booked = rig, instance, log, booked

    def entries(self) -> list[dict[str, Any]]:
        r = cli("show", self.instance, "--json", "--db", self.rig.url, cwd=self.rig.tmp)
        assert r.returncode == 0, r.stderr
        return list(json.loads(r.stdout)["entries"])

    def findings(self) -> list[dict[str, Any]]:
        r = cli("verify", self.instance, "--json", "--db", self.rig.url, "--trust",
                self.rig.trust, cwd=self.rig.tmp)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
        return list(json.loads(r.stdout)["reports"][0]["findings"])

    def effects(self, name: str) -> list[dict[str, Any]]:
        return [e["data"] | {"kind": e["kind"]} for e in self.entries()
                if e["kind"].startswith("effect.") and e["data"].get("name") == name]

    def about(self, effect: str) -> list[dict[str, Any]]:
        """The findings that name the effect ``effect`` (``tool:book_flight``)."""
        return [f for f in self.findings() if (f.get("effect") or {}).get("name") == effect]


class TravelRig(AppRig):
    """One daprd stack, the stub LLM and the example's app on it."""

    def __init__(self, tmp: Path, engine: DaprdStack, llm: ScriptedLLM, app: Path, *,
                 workflow: str, crashes: Mapping[str, tuple[str, int]],
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(engine)
        self.tmp, self.llm, self.workflow = tmp, llm, workflow
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="agent")
        self.app = self.add_app(AppProcess(
            engine, [app], log=tmp / "app.log", ready="ready", ready_timeout=120,
            env={"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key), "DATA_DIR": str(tmp),
                 "PYTHONUNBUFFERED": "1", "DO_NOT_TRACK": "1", "STUB_LLM_URL": llm.url,
                 **(env or {})}))
        self.crashes = dict(crashes)
        # every crash case's point, scoped to its instance; a case that fired is dropped
        # before the app starts again, so its resumed instance runs through
        self.pending = {scoped_name(point, f"trip-{case}/{task}")
                        for case, (point, task) in self.crashes.items()}
        self.runs: dict[str, Run] = {}

    def booked(self, what: str) -> int:
        path = self.tmp / f"{what}.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def _serve(self) -> None:
        if not self.app.running:
            self.app.env["HISTAUDIT_CRASH_AT"] = ",".join(sorted(self.pending))
            self.app.start()

    def case(self, case: str) -> Run:
        """Run ``case`` (``clean`` or one of the crash cases) once; its :class:`Run`."""
        if case in self.runs:
            return self.runs[case]
        self._serve()
        before = {what: self.booked(what) for what in ("book_flight", "book_hotel")}
        start = len(self.llm.log)
        instance = f"trip-{case}"
        self.client.schedule_new_workflow(self.workflow, input=TASK, instance_id=instance)
        if case in self.crashes:
            assert self.app.wait_exit(120) == CRASH_EXIT_CODE, self.app.tail()
            self.pending = {p for p in self.pending if f"@{instance}/" not in p}
            self._serve()
        state = self.wait(instance, 180)
        assert state.runtime_status.name == "COMPLETED", self.app.tail()
        self.runs[case] = Run(self, instance, self.llm.log[start:],
                              {w: self.booked(w) - n for w, n in before.items()})
        return self.runs[case]


@contextmanager
def travel_rig(tmp: Path, app: Path, *, workflow: str, crashes: Mapping[str, tuple[str, int]],
               env: Mapping[str, str] | None = None) -> Iterator[TravelRig]:
    """A started daprd stack, the stub LLM and the rig, the clean case run first."""
    engine = DaprdStack(state_dir=tmp / "engine")
    engine.start()
    try:
        with ScriptedLLM() as llm, TravelRig(tmp, engine, llm, app, workflow=workflow,
                                             crashes=crashes, env=env) as rig:
            rig.case("clean")
            yield rig
    finally:
        teardown(engine)


def cost(message: str) -> tuple[int, int]:
    """(calls, tokens) a cost finding states: '... cost N LLM call(s) and T tokens ...'."""
    words = message.split(" cost ", 1)[1].split()
    return int(words[0]), int(words[4]) if words[3] == "and" else 0


def warnings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings that are warnings or errors."""
    return [f for f in findings if f["severity"] in ("warning", "error")]


def misuse(rig: TravelRig, framework: str) -> dict[str, str | None]:
    """Run tests/frameworks2/apps/misuse.py for ``framework`` beside the rig's daprd: each
    case's error (``<type>: <message>``, None when it was accepted)."""
    script = Path(__file__).resolve().parents[1] / "frameworks2" / "apps" / "misuse.py"
    env = rig.engine.env({**os.environ, "DO_NOT_TRACK": "1", "HISTAUDIT_DB": rig.url})
    done = subprocess.run([sys.executable, str(script), framework], env=env, cwd=rig.tmp,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {row["case"]: row["error"] for row in rows}
