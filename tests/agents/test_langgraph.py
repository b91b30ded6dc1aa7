"""A LangGraph travel agent (examples/frameworks/langgraph/app.py) run by Diagrid's
``DaprWorkflowGraphRunner`` on real daprd and audited with ``audit_runner`` (issue 49).
Cost: ≈ 33 s of CPU (three daprd stacks, seven app starts, one more Python).

Each graph node is one activity (``execute_node_activity``): the ``agent`` node's LLM call
is made inside it and the ``tools`` node runs the flight and the hotel of one answer in
one activity. The scripted LLM (examples/frameworks/stub_llm.py) searches, books a
flight and a hotel in one answer, asks for the hotel again (its first booking raises),
then answers; its usage grows with the prompt and its ``log`` is the provider's bill, so
the ledger's figures are compared with it call by call:

* two tool calls of one ToolNode activity are two effects, keyed by their ToolCall ids;
  the hotel's exception is signed ``effect.failed`` with its class; every LLM call is
  signed with the stub's exact tokens, an agent node's activity as its run; a wrong
  ``read_only`` name and a second ``audit_runner`` are one-line errors;
* a crash after the agent node (its LLM call made), then, in the next process, after the
  tools node with the flight booked: ``llm-call-repeated`` at the stub's exact cost, the
  flight booked once and ``effect-deduplicated`` naming ``tool:book_flight`` (two crashes
  in one run: one app start and one daprd stack less than two tests);
* a crash inside ``book_flight``: ``effect-uncertain`` on that tool, and on the hotel
  beside it only when the crash caught the hotel between its intent and its outcome.
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
from examples.frameworks.stub_llm import ScriptedLLM

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]

APP = REPO / "examples" / "frameworks" / "langgraph" / "app.py"
WORKFLOW = "dapr.langgraph.Travel.workflow"
NODE = "execute_node_activity"


class Trip(AppRig):
    def __init__(self, tmp: Path, engine: Any, llm: ScriptedLLM) -> None:
        super().__init__(engine)
        self.tmp, self.llm = tmp, llm
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="agent")
        self.env = {"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key), "DATA_DIR": str(tmp),
                    "STUB_LLM_URL": llm.url, "PYTHONUNBUFFERED": "1", "DO_NOT_TRACK": "1"}
        self.app = self.add_app(AppProcess(engine, [APP], log=tmp / "app.log", ready="ready",
                                           ready_timeout=90, env=self.env))

    def booked(self, what: str) -> int:
        path = self.tmp / f"{what}.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def run(self, *crashes: str) -> str:
        """Book a trip, the app crashing at each of ``crashes`` in turn (each start of it
        given the next) and started again after each."""
        starts = [*crashes, None]
        self.app.start(**_crash_at(starts[0]))
        instance = self.schedule(WORKFLOW, {"task": "book a trip to Lisbon"})
        for then in starts[1:]:
            assert self.app.wait_exit(120) == CRASH_EXIT_CODE, self.app.tail()
            self.app.start(**_crash_at(then))
        state = self.wait(instance, 180)
        assert state.runtime_status.name == "COMPLETED", self.app.tail()
        assert json.loads(state.serialized_output)["status"] == "completed"
        return instance

    def entries(self, instance: str) -> list[dict[str, Any]]:
        r = cli("show", instance, "--json", "--db", self.url, cwd=self.tmp)
        assert r.returncode == 0, r.stderr
        return list(json.loads(r.stdout)["entries"])

    def findings(self, instance: str) -> list[dict[str, Any]]:
        r = cli("verify", instance, "--json", "--db", self.url, "--trust", self.trust,
                cwd=self.tmp)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
        return list(json.loads(r.stdout)["reports"][0]["findings"])


@pytest.fixture
def trip(tmp_path: Path) -> Iterator[Trip]:
    engine = DaprdStack(state_dir=tmp_path / "engine")
    engine.start()
    try:
        with ScriptedLLM() as llm, Trip(tmp_path, engine, llm) as rig:
            yield rig
    finally:
        teardown(engine)


AUDIT_TWICE = """
from app import build_graph
from diagrid.agent.langgraph import DaprWorkflowGraphRunner
from histaudit.contrib.langgraph import audit_runner
from histaudit.errors import UsageError
runner = DaprWorkflowGraphRunner(graph=build_graph(), name="travel")
for read_only in (["search_hotels"], ["search_flights"], []):
    try:
        audit_runner(runner, read_only=read_only)
        print("audited")
    except UsageError as exc:
        print(exc)
"""


def _audit_twice(trip: Trip) -> list[str]:
    """What auditing one runner with a wrong read_only name, then twice, says."""
    r = subprocess.run([sys.executable, "-c", AUDIT_TWICE], cwd=APP.parent,
                       env=trip.engine.env({**os.environ, **trip.env}), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def _crash_at(point: str | None) -> dict[str, str]:
    return {"HISTAUDIT_CRASH_AT": point} if point else {}


def _cost(message: str) -> tuple[int, int]:
    """(calls, tokens) a cost finding states: '... cost N LLM call(s) and T tokens ...'."""
    words = message.split(" cost ", 1)[1].split()
    return int(words[0]), int(words[4]) if words[3] == "and" else 0


def test_tool_calls_are_guarded_by_call_id_and_every_llm_call_carries_the_providers_usage(
        trip: Trip) -> None:
    instance = trip.run()
    assert (trip.booked("book_flight"), trip.booked("book_hotel")) == (1, 1)
    entries = trip.entries(instance)
    intents = {e["data"]["call_id"]: e["data"] for e in entries
               if e["kind"] == "effect.intent"}
    # the read-only search is no effect; the flight and the first hotel ran in one
    # ToolNode activity (one execution id) and are two effects, one per ToolCall id
    assert set(intents) == {"call_flight", "call_hotel", "call_hotel_2"}
    flight, hotel = intents["call_flight"], intents["call_hotel"]
    assert flight["execution_id"] == hotel["execution_id"] and flight["key"] != hotel["key"]
    assert flight["key"] == f"{flight['execution_id']}/call_flight"
    effects = [(e["kind"], e["data"]["name"], e["data"].get("error_type"))
               for e in entries if e["kind"].startswith("effect.") and e["kind"] != "effect.intent"]
    assert sorted(effects) == sorted([
        ("effect.done", "tool:book_flight", None),
        ("effect.failed", "tool:book_hotel", "RuntimeError"),  # no rooms: raised, never done
        ("effect.done", "tool:book_hotel", None)])
    calls = [e["data"] for e in entries if e["kind"] == "llm.call"]
    assert len(calls) == trip.llm.calls == 4  # search, book, the hotel again, answer
    assert [c["total_tokens"] for c in calls] == [t for _, t in trip.llm.log]
    assert all(c["model"] == "stub-travel" and c["activity"] == NODE for c in calls)
    tool_runs = {d["execution_id"] for d in intents.values()}
    assert not tool_runs & {c["execution_id"] for c in calls}  # the agent node's runs
    findings = trip.findings(instance)
    assert not [f for f in findings if f["severity"] in ("warning", "error")], findings
    # a read_only name the graph has no tool of, then auditing the runner again: each a
    # one-line error, the second after one audit that took
    assert _audit_twice(trip) == [
        "audit_runner(): read_only names 'search_hotels', which the agent has no tool of "
        "(its tools: book_flight, book_hotel, search_flights)",
        "audited", "audit_runner(): this runner is already audited"]


def test_crashes_after_the_agent_node_and_after_the_tool_node_are_each_accounted(
        trip: Trip) -> None:
    # first the agent node's first activity, its LLM call made; then, in the next
    # process, the fourth node activity: the tools node that booked the flight (agent,
    # tools, agent, tools)
    instance = trip.run(f"after:{NODE}", f"after:{NODE}#4")
    assert [kind for kind, _ in trip.llm.log][:2] == ["turn 0", "turn 0"]
    findings = trip.findings(instance)
    (repeated,) = [f for f in findings if f["code"] == "llm-call-repeated"]
    assert _cost(repeated["message"]) == (1, trip.llm.log[0][1]), repeated["message"]
    assert trip.booked("book_flight") == 1
    flight = [f for f in findings if (f.get("effect") or {}).get("name") == "tool:book_flight"]
    assert [f["code"] for f in flight] == ["effect-deduplicated"], findings


def test_a_crash_inside_book_flight_is_uncertain_on_that_tool_only(trip: Trip) -> None:
    instance = trip.run("after-effect:tool:book_flight")
    assert trip.booked("book_flight") == 2  # the crash came after the booking
    findings = trip.findings(instance)
    named = {(f["effect"]["name"], f["code"]) for f in findings if f.get("effect")}
    flight = [f for f in findings if (f.get("effect") or {}).get("name") == "tool:book_flight"]
    assert [f["code"] for f in flight] == ["effect-uncertain"], findings
    assert "unknown whether the first attempt got through; the retry did it" in \
        flight[0]["message"]
    # the hotel ran beside it in the same activity (another thread): it is uncertain
    # exactly when the crash caught it between its intent and its outcome
    entries = trip.entries(instance)
    first = next(e for e in entries if e["kind"] == "effect.intent"
                 and e["data"]["call_id"] == "call_hotel")
    settled = any(e["kind"] in ("effect.failed", "effect.done")
                  and e["data"]["intent_seq"] == first["seq"] for e in entries)
    hotel = set() if settled else {("tool:book_hotel", "effect-uncertain")}
    assert named == {("tool:book_flight", "effect-uncertain")} | hotel, findings
