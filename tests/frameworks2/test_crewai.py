"""A CrewAI agent run by Diagrid's runner and audited with ``audit_runner``, on real daprd
(examples/frameworks/crewai/). Cost: see the end of this docstring.

The travel agent searches (read-only), then books a flight and a hotel (one answer asks
for both; Diagrid's CrewAI runner runs them one after the other); the hotel raises the
first time (diagrid hands the LLM the error's text) and the LLM asks again. Diagrid calls
``litellm.completion``, which reaches the stub through the ``openai`` package. The stub
bills usage that grows with the prompt and keeps its own log, so the ledger's figures are
compared with the provider's, call by call:

* a clean run: each tool call guarded under the LLM's id, the hotel's exception signed
  ``effect.failed`` with its class, every LLM call signed with the stub's exact tokens;
* a crash right after the flight's activity body: booked once, ``effect-deduplicated``;
* a crash inside the flight's tool: ``effect-uncertain`` on that tool only;
* a crash after an LLM call: ``llm-call-repeated`` at the stub's price of it;
* ``audit_runner`` on an audited or wrong object, or naming a tool the agent has not: one
  line each (apps/misuse.py).

One daprd stack and one app serve every case (support/framework_travel.py). Cost: ≈ 50 s
of CPU, 57 s of wall (one daprd stack, five app starts at ≈ 8 s of CPU each for importing
CrewAI, litellm and diagrid, the CLI's show/verify).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.framework_travel import TravelRig, cost, misuse, travel_rig, warnings
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine,
              pytest.mark.xdist_group("crewai")]

APP = REPO / "examples" / "frameworks" / "crewai" / "app.py"
# Task ids of the travel workflow: LLM 1, search 2, LLM 3, flight 4, hotel 5, LLM 6,
# hotel again 7, the answer's LLM call 8.
CRASHES = {
    "after-flight": ("after:execute_tool_activity", 4),
    "inside-flight": ("after-effect:tool:book_flight", 4),
    "after-llm": ("after:call_llm_activity", 3),
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TravelRig]:
    with travel_rig(tmp_path_factory.mktemp("crewai"), APP,
                    workflow="dapr.crewai.Travel.workflow", crashes=CRASHES) as r:
        yield r


def test_a_clean_run_guards_each_tool_call_signs_the_failure_and_every_llm_call(
        rig: TravelRig) -> None:
    run = rig.case("clean")
    assert run.booked == {"book_flight": 1, "book_hotel": 1}
    entries = run.entries()
    effects = [(e["kind"], e["data"]["name"], e["data"].get("error_type"))
               for e in entries if e["kind"].startswith("effect.")]
    # the hotel's first call raised: signed failed with the exception's class, never
    # done; the LLM's second call booked it
    assert effects == [
        ("effect.intent", "tool:book_flight", None), ("effect.done", "tool:book_flight", None),
        ("effect.intent", "tool:book_hotel", None),
        ("effect.failed", "tool:book_hotel", "RuntimeError"),
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


def test_misuse_is_one_line_each(rig: TravelRig) -> None:
    errors = misuse(rig, "crewai")
    assert errors == {
        "unknown read_only": "UsageError: audit_runner(): read_only names 'book_train', which "
                             "the agent has no tool of (its tools: book_flight, book_hotel, "
                             "search_flights)",
        "audited": None,  # a bare name is one tool, not its letters
        "audited twice": "UsageError: audit_runner(): this runner is already audited",
        "not a runner": "UsageError: audit_runner(): object is not Diagrid's CrewAI runner "
                        "(it has no agent with tools and no _get_tool_name)"}
