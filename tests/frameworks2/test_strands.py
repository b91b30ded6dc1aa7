"""A Strands agent run by Diagrid's runner and audited with ``audit_runner``, on real daprd
(examples/frameworks/strands/). Cost: see the end of this docstring.

The travel agent searches (read-only), then books a flight and a hotel (one answer asks
for both; Diagrid's Strands runner runs them one after the other); the hotel raises the
first time (Strands hands the LLM an error result) and the LLM asks again. The stub LLM
bills usage that grows with the prompt and keeps its own log, so the ledger's figures are
compared with the provider's, call by call:

* a clean run: each tool call guarded under the LLM's id, the hotel's error result signed
  ``effect.failed``, every LLM call signed with the stub's exact tokens;
* a crash right after the flight's activity body: booked once, ``effect-deduplicated``;
* a crash inside the flight's tool: ``effect-uncertain`` on that tool only;
* a crash after an LLM call: ``llm-call-repeated`` at the stub's price of it;

One daprd stack and one app serve every case (support/framework_travel.py); the
DurableAgent's app runs last, on the same stack. Cost: ≈ 31 s of CPU, 34 s of wall (one
daprd stack, six app starts at ≈ 4 s of CPU each for importing Strands and diagrid, the
CLI's show/verify).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from support.apps import AppProcess
from support.cli import cli
from support.framework_travel import Run, TravelRig, cost, misuse, travel_rig, warnings
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine,
              pytest.mark.xdist_group("strands")]

APP = REPO / "examples" / "frameworks" / "strands" / "app.py"
DURABLE_APP = APP.with_name("durable_app.py")
# Task ids of the travel workflow: LLM 1, search 2, LLM 3, flight 4, hotel 5, LLM 6,
# hotel again 7, the answer's LLM call 8.
CRASHES = {
    "after-flight": ("after:strands_execute_tool", 4),
    "inside-flight": ("after-effect:tool:book_flight", 4),
    "after-llm": ("after:strands_call_model", 3),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TravelRig]:
    with travel_rig(tmp_path_factory.mktemp("strands"), APP,
                    workflow="dapr.strands.Travel.workflow", crashes=CRASHES) as r:
        yield r


def test_a_clean_run_guards_each_tool_call_signs_the_failure_and_every_llm_call(
        rig: TravelRig) -> None:
    _assert_clean(rig.case("clean"))


def _assert_clean(run: Run) -> None:
    assert run.booked == {"book_flight": 1, "book_hotel": 1}
    entries = run.entries()
    effects = [(e["kind"], e["data"]["name"], e["data"].get("error_type"))
               for e in entries if e["kind"].startswith("effect.")]
    # the hotel's first call raised; Strands made it an error result: signed failed,
    # never done; the LLM's second call booked it
    assert effects == [
        ("effect.intent", "tool:book_flight", None), ("effect.done", "tool:book_flight", None),
        ("effect.intent", "tool:book_hotel", None),
        ("effect.failed", "tool:book_hotel", "ToolError"),
        ("effect.intent", "tool:book_hotel", None), ("effect.done", "tool:book_hotel", None)]
    # each tool call is keyed by the LLM's id; the read-only search is no effect
    intents = [e["data"]["call_id"] for e in entries if e["kind"] == "effect.intent"]
    assert intents == ["call_flight", "call_hotel", "call_hotel_2"]
    calls = [e["data"] for e in entries if e["kind"] == "llm.call"]
    assert len(calls) == len(run.log) == 4  # search, book, the hotel again, the answer
    assert [c["total_tokens"] for c in calls] == [t for _, t in run.log]
    assert {c["model"] for c in calls} == {"stub-travel"}
    assert [c["tool_calls"] for c in calls] == [
        ["search_flights"], ["book_flight", "book_hotel"], ["book_hotel"], []]
    assert not warnings(run.findings())


def test_a_crash_right_after_the_flight_is_booked_books_it_once(rig: TravelRig) -> None:
    run = rig.case("after-flight")
    assert run.booked["book_flight"] == 1
    assert [f["code"] for f in run.about("tool:book_flight")] == ["effect-deduplicated"]
    assert [e["kind"] for e in run.effects("tool:book_flight")] == [
        "effect.intent", "effect.done", "effect.intent", "effect.skipped"]
    assert not [f for f in run.findings() if f["code"] == "llm-call-repeated"]


def test_a_crash_inside_the_flight_tool_is_uncertain_on_that_tool_only(
        rig: TravelRig) -> None:
    run = rig.case("inside-flight")
    assert run.booked["book_flight"] == 2  # the crash came after the booking
    findings = run.findings()
    named = [(f["code"], (f.get("effect") or {}).get("name")) for f in findings
             if f.get("effect")]
    assert named == [("effect-uncertain", "tool:book_flight")], findings
    assert not [f for f in findings if f["code"] == "llm-call-repeated"], findings


def test_a_crash_after_an_llm_call_costs_what_the_provider_billed(rig: TravelRig) -> None:
    run = rig.case("after-llm")
    kinds = [kind for kind, _ in run.log]
    assert kinds.count("turn 1") == 2  # the re-delivered call asked again
    lost = next(tokens for kind, tokens in run.log if kind == "turn 1")
    (repeated,) = [f for f in run.findings() if f["code"] == "llm-call-repeated"]
    assert cost(repeated["message"]) == (1, lost), repeated["message"]


def test_strands_own_durable_agent_is_audited_by_its_one_line(rig: TravelRig) -> None:
    rig.app.kill()  # the runner's app serves the same workflow name
    data = rig.tmp / "durable"
    data.mkdir()
    app = rig.add_app(AppProcess(
        rig.engine, [DURABLE_APP], log=rig.tmp / "durable.log", ready="ready",
        ready_timeout=180, env={**rig.app.env, "DATA_DIR": str(data), "HISTAUDIT_CRASH_AT": ""}))
    start = len(rig.llm.log)
    app.start()  # ready once the agent has answered
    app.kill()
    r = cli("list", "--json", "--db", rig.url, cwd=rig.tmp)
    assert r.returncode == 0, r.stderr
    (instance,) = [row["instance"] for row in json.loads(r.stdout)
                   if row["instance"].startswith("dapr.strands.Travel.workflow_")]
    booked = {what: len((data / f"{what}.txt").read_text().splitlines())
              for what in ("book_flight", "book_hotel")}
    _assert_clean(Run(rig, instance, rig.llm.log[start:], booked))


def test_misuse_is_one_line_each(rig: TravelRig) -> None:
    errors = misuse(rig, "strands")
    assert errors == {
        "unknown read_only": "UsageError: audit_runner(): read_only names 'book_train', which "
                             "the agent has no tool of (its tools: book_flight, book_hotel, "
                             "search_flights)",
        "audited": None,  # a bare name is one tool, not its letters
        "audited twice": "UsageError: audit_runner(): this runner is already audited",
        "started": "UsageError: audit_runner(): the runner has started; audit it before "
                   "runner.start()",
        "not a runner": "UsageError: audit_runner(): object is not Diagrid's Strands runner "
                        "(it has no agent with a tool_registry and a model)",
        "agent unknown read_only": "UsageError: audit_agent(): read_only names 'book_train', "
                                   "which the agent has no tool of (its tools: book_flight, "
                                   "book_hotel, search_flights)",
        "agent audited": None,
        "agent audited twice": "UsageError: audit_agent(): this DurableAgent is already "
                               "audited"}
