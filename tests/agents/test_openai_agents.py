"""An OpenAI Agents SDK agent run by Diagrid's runner and audited with ``audit_runner``, on
real daprd (examples/frameworks/openai_agents/).

The travel agent (``app.py``) searches (read-only), then books a flight and a hotel in
parallel in one turn; the hotel raises the first time (the SDK's FunctionTool hands the
LLM its failure text) and the LLM asks again. The stub LLM (``ScriptedLLM``) bills usage
that grows with the prompt and keeps its own log, so the ledger's figures are compared
with the provider's, call by call:

* a clean run: each tool call guarded under the LLM's id, the hotel's exception signed
  ``effect.failed`` with its class, every LLM call signed with the stub's exact tokens;
* a crash right after the flight's activity body: booked once, ``effect-deduplicated``;
* a crash inside the flight's tool: ``effect-uncertain`` on that tool (the hotel, in
  flight beside it, may be cut too, and then says so; nothing claims a repeat);
* a crash after an LLM call: ``llm-call-repeated`` at the stub's price of it;
* the seed's scenario (``steps.py``): 100 steps crashed right after step 87's tool
  activity, only step 87 run twice;
* ``audit_runner`` on an audited or a started runner: one line.

One daprd stack and one app serve every travel case (module fixture): each case is its own
instance, crashed at a point scoped to it (``<point>@<instance>/<task id>``,
:func:`histaudit.crash.scoped_name`), so one app start per crash serves both the resumed
case and the next one. Cost: 41-46 s of CPU, 46-70 s of wall (three runs at load 2.5-6.5 on
two cores): seven app processes at ≈ 4.5 s of CPU each, mostly importing dapr-agents,
which diagrid's base runner imports (four travel apps, two 100-step apps, the misuse
script); the 100-step scenario is ≈ 17 s of it, ≈ 8 s of that for its 201 activities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.frameworks.stub_llm import ScriptedLLM, steps_script

from histaudit.crash import CRASH_EXIT_CODE, scoped_name
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine,
              pytest.mark.xdist_group("openai_agents")]

EXAMPLE = REPO / "examples" / "frameworks" / "openai_agents"
MISUSE = REPO / "tests" / "agents" / "apps" / "openai_agents_misuse.py"
TRAVEL = "dapr.openai.Travel.workflow"
STEPS = "dapr.openai.Steps.workflow"
# Task ids of the travel workflow (daprd counts from 1): LLM 1, search 2, LLM 3, flight 4
# and hotel 5 (in parallel), LLM 6, the hotel again 7, the answer's LLM call 8.
FLIGHT_TASK, BOOKING_LLM_TASK = 4, 3
CRASHES = {
    "after-flight": ("after:execute_tool_activity", FLIGHT_TASK),
    "inside-flight": ("after-effect:tool:book_flight", FLIGHT_TASK),
    "after-llm": ("after:call_llm_activity", BOOKING_LLM_TASK),
}
"""Each crash case's point and the task it is scoped to (in instance ``trip-<case>``)."""


class Run:
    """What one case left: its instance, the stub's log of its requests, the bookings it
    made, and (read on demand) its ledger entries and findings."""

    def __init__(self, rig: Rig, instance: str, log: list[tuple[str, int]],
                 booked: dict[str, int], output: Any) -> None:
        self.rig, self.instance, self.log, self.booked = rig, instance, log, booked
        self.output = output

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


class Rig(AppRig):
    """One daprd stack, the stub LLMs, and the example's apps on it (one at a time)."""

    def __init__(self, tmp: Path, engine: DaprdStack, travel: ScriptedLLM,
                 steps: ScriptedLLM) -> None:
        super().__init__(engine)
        self.tmp, self.travel, self.steps = tmp, travel, steps
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="agent")
        env = {"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key), "DATA_DIR": str(tmp),
               "PYTHONUNBUFFERED": "1", "DO_NOT_TRACK": "1"}
        self.travel_app = self.add_app(AppProcess(
            engine, [EXAMPLE / "app.py"], log=tmp / "travel.log", ready="ready",
            ready_timeout=120, env={**env, "STUB_LLM_URL": travel.url}))
        self.steps_app = self.add_app(AppProcess(
            engine, [EXAMPLE / "steps.py"], log=tmp / "steps.log", ready="ready",
            ready_timeout=120, env={**env, "STUB_LLM_URL": steps.url}))
        # every crash case's point, scoped to its instance; a case that fired is dropped
        # before the app starts again, so its resumed instance runs through
        self.pending = {scoped_name(point, f"trip-{case}/{task}")
                        for case, (point, task) in CRASHES.items()}
        self.runs: dict[str, Run] = {}

    def counted(self, what: str) -> int:
        path = self.tmp / f"{what}.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def _serve_travel(self) -> None:
        if not self.travel_app.running:
            self.steps_app.kill()
            self.travel_app.env["HISTAUDIT_CRASH_AT"] = ",".join(sorted(self.pending))
            self.travel_app.start()

    def case(self, case: str) -> Run:
        """Run the travel case ``case`` (``clean`` or one of :data:`CRASHES`) once."""
        if case in self.runs:
            return self.runs[case]
        self._serve_travel()
        before = {what: self.counted(what) for what in ("book_flight", "book_hotel")}
        start = len(self.travel.log)
        instance = f"trip-{case}"
        self.schedule_as(TRAVEL, instance, {"task": "book a trip to Lisbon"})
        if case in CRASHES:
            assert self.travel_app.wait_exit(120) == CRASH_EXIT_CODE, self.travel_app.tail()
            self.pending = {p for p in self.pending if f"@{instance}/" not in p}
            self._serve_travel()
        state = self.wait(instance, 180)
        output = json.loads(state.serialized_output)
        # diagrid's workflow completes with status "error" when the LLM call failed
        assert (state.runtime_status.name, output["status"]) == ("COMPLETED", "completed"), \
            self.travel_app.tail()
        self.runs[case] = Run(self, instance, self.travel.log[start:],
                              {w: self.counted(w) - n for w, n in before.items()}, output)
        return self.runs[case]

    def schedule_as(self, workflow: str, instance: str, payload: Any) -> None:
        self.client.schedule_new_workflow(workflow, input=payload, instance_id=instance)

    def hundred_steps(self, crash_at: str) -> Run:
        """The 100-step agent, crashed at ``crash_at`` and started again."""
        self.travel_app.kill()
        self.steps_app.start(HISTAUDIT_CRASH_AT=crash_at)
        self.schedule_as(STEPS, "steps-87", {"task": "report 100 steps"})
        assert self.steps_app.wait_exit(300) == CRASH_EXIT_CODE, self.steps_app.tail()
        self.steps_app.start()
        state = self.wait("steps-87", 300)
        output = json.loads(state.serialized_output)
        assert (state.runtime_status.name, output["status"]) == ("COMPLETED", "completed"), \
            self.steps_app.tail()
        self.steps_app.kill()
        return Run(self, "steps-87", list(self.steps.log), {"report": self.counted("report")},
                   output)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("openai-agents")
    engine = DaprdStack(state_dir=tmp / "engine")
    engine.start()
    try:
        with ScriptedLLM() as travel, ScriptedLLM(steps_script(100)) as steps, \
                Rig(tmp, engine, travel, steps) as r:
            r.case("clean")
            yield r
    finally:
        teardown(engine)


def _cost(message: str) -> tuple[int, int]:
    """(calls, tokens) a cost finding states: '... cost N LLM call(s) and T tokens ...'."""
    words = message.split(" cost ", 1)[1].split()
    return int(words[0]), int(words[4]) if words[3] == "and" else 0


def _warnings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["severity"] in ("warning", "error")]


def test_a_clean_run_guards_each_tool_call_signs_the_failure_and_every_llm_call(
        rig: Rig) -> None:
    run = rig.case("clean")
    assert run.booked == {"book_flight": 1, "book_hotel": 1}
    entries = run.entries()
    effects = [(e["kind"], e["data"]["name"], e["data"].get("error_type"))
               for e in entries if e["kind"].startswith("effect.")]
    # the hotel's first call raised: signed failed with the exception's class, never done;
    # the LLM's second call booked it
    assert sorted(effects) == sorted([
        ("effect.intent", "tool:book_flight", None), ("effect.done", "tool:book_flight", None),
        ("effect.intent", "tool:book_hotel", None),
        ("effect.failed", "tool:book_hotel", "RuntimeError"),
        ("effect.intent", "tool:book_hotel", None), ("effect.done", "tool:book_hotel", None)])
    # each tool call is keyed by the LLM's id; the read-only search is no effect
    intents = {e["data"]["call_id"] for e in entries if e["kind"] == "effect.intent"}
    assert intents == {"call_flight", "call_hotel", "call_hotel_2"}
    # the LLM read the SDK's own failure text, as it would unaudited
    answers = {m["tool_call_id"]: m["content"] for m in run.output["messages"]
               if m["role"] == "tool"}
    assert answers["call_hotel"] == ("An error occurred while running the tool. Please try "
                                     "again. Error: no rooms left, try again")
    assert answers["call_hotel_2"] == "book_hotel booked: Lisbon, 2 nights"
    calls = [e["data"] for e in entries if e["kind"] == "llm.call"]
    assert len(calls) == len(run.log) == 4  # search, book, the hotel again, the answer
    assert [c["total_tokens"] for c in calls] == [t for _, t in run.log]
    assert {c["model"] for c in calls} == {"stub-travel"}
    assert not _warnings(run.findings())


def test_a_crash_right_after_the_flight_is_booked_books_it_once(rig: Rig) -> None:
    run = rig.case("after-flight")
    assert run.booked["book_flight"] == 1
    findings = run.findings()
    flight = [f for f in findings if (f.get("effect") or {}).get("name") == "tool:book_flight"]
    assert [f["code"] for f in flight] == ["effect-deduplicated"], findings
    assert [e["kind"] for e in run.effects("tool:book_flight")] == [
        "effect.intent", "effect.done", "effect.intent", "effect.skipped"]
    assert not [f for f in findings if f["code"] == "llm-call-repeated"], findings


def test_a_crash_inside_the_flight_tool_is_uncertain_on_that_tool(rig: Rig) -> None:
    run = rig.case("inside-flight")
    assert run.booked["book_flight"] == 2  # the crash came after the booking
    findings = run.findings()
    flight = [f for f in findings if (f.get("effect") or {}).get("name") == "tool:book_flight"]
    assert [f["code"] for f in flight] == ["effect-uncertain"], findings
    for f in findings:  # the hotel ran beside it: whatever it shows, no claimed repeat
        effect = (f.get("effect") or {}).get("name")
        assert effect in (None, "tool:book_flight", "tool:book_hotel"), f
        if effect == "tool:book_hotel":
            assert f["code"] in ("effect-uncertain", "effect-deduplicated"), f
    assert not [f for f in findings if f["code"] == "llm-call-repeated"], findings


def test_a_crash_after_an_llm_call_costs_what_the_provider_billed(rig: Rig) -> None:
    run = rig.case("after-llm")
    kinds = [kind for kind, _ in run.log]
    assert kinds.count("turn 1") == 2  # the re-delivered call asked again
    lost = next(tokens for kind, tokens in run.log if kind == "turn 1")
    (repeated,) = [f for f in run.findings() if f["code"] == "llm-call-repeated"]
    assert _cost(repeated["message"]) == (1, lost), repeated["message"]


def test_a_hundred_step_agent_crashed_right_after_step_87_runs_only_step_87_twice(
        rig: Rig) -> None:
    """The seed's scenario: the 87th tool activity (task 174: LLM and tool alternate from
    task 1) crashes right after its body, and resumes on daprd."""
    run = rig.hundred_steps("after:execute_tool_activity#87")
    report = (rig.tmp / "report.txt").read_text().splitlines()
    assert report == [f"step {n}" for n in range(1, 101)]  # each step once, 87 included
    assert len(run.log) == 101  # 100 tool turns and the answer: no LLM call repeated
    findings = run.findings()
    assert not _warnings(findings), findings
    assert sorted((f["code"], f["message"].split(" (task ")[-1].split(")")[0])
                  for f in findings if f["code"] == "activity-reexecuted") == [
        ("activity-reexecuted", "174")], findings
    (dedup,) = [f for f in findings if f["code"] == "effect-deduplicated"]
    assert dedup["effect"]["name"] == "tool:report" and "call_step_87" in dedup["message"]
    entries = run.entries()
    assert sum(e["kind"] == "llm.call" for e in entries) == 101
    assert sum(e["kind"] == "effect.done" for e in entries) == 100


def test_audit_runner_refuses_a_started_or_audited_runner_in_one_line(rig: Rig) -> None:
    rig.travel_app.kill()  # the misuse runner's worker shares the stack's app id
    r = subprocess.run([sys.executable, str(MISUSE)], capture_output=True, text=True,
                       env=rig.engine.env({**os.environ, "DO_NOT_TRACK": "1"}),
                       timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.endswith("done\n"), r.stdout + r.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines()[:-1])
    assert lines == {
        "started": "audit_runner(): the runner has started; audit it before runner.start()",
        "unknown read_only": "audit_runner(): read_only names 'lookupp', which the agent "
                             "has no tool of (its tools: lookup)",
        "first": "no error",
        "twice": "audit_runner(): this runner is already audited"}, r.stdout
