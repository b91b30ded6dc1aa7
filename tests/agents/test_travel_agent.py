"""A travel-booking DurableAgent (tests/agents/apps/travel_app.py) audited with
``audit_agent`` on real daprd: the accounting an auditor relies on (issue 48). Cost: ≈ 30 s
of CPU (four daprd stacks, seven app starts).

The agent searches (read-only), then books a flight and a hotel in parallel in one turn;
the hotel fails once (the tool raises, dapr-agents hands the LLM an error result) and the
LLM asks again. Every answer of the stub LLM reports usage that grows with the prompt, and
the stub keeps its own log of each request's tokens, so the ledger's figures are compared
with the provider's, call by call:

* a failed tool call is signed ``effect.failed`` (``ToolError``), never done;
* every LLM call is signed with the provider's usage, structured output included, and
  the signed totals are the stub's own;
* a crash after ``summarize`` costs exactly the stub's repeated request;
* a crash inside one of two parallel tools names that tool, and no finding words a repeat
  it cannot know;
* without its state store the agent starts its conversation again, and the findings price
  every call it lost, as the stub counted them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from examples.durable_agent.stub_llm import StubLLM

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig
from support.cli import cli
from support.repo import REPO

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]

APP = REPO / "tests" / "agents" / "apps" / "travel_app.py"
COMPONENTS = REPO / "examples" / "durable_agent" / "components"
WORKFLOW = "dapr.agents.travel.workflow"


class TravelLLM(StubLLM):
    """Search, then book a flight and a hotel at once, ask for the hotel again if it
    failed, then answer; usage grows with the prompt. ``log`` holds (kind, total tokens)
    of each request in order, as the provider billed it."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, int]] = []

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        results = [m for m in messages if m.get("role") == "tool"]
        failed_hotel = any(m.get("name") == "BookHotel" and _is_error(m.get("content"))
                           for m in results)
        if "response_format" in body:
            kind, message = "summary", {"role": "assistant",
                                        "content": json.dumps({"summary": "booked"})}
        elif not results:
            kind, message = "search", _calls(("call_search", "SearchFlights",
                                               {"city": "Lisbon"}))
        elif len(results) == 1:
            kind, message = "book", _calls(("call_flight", "BookFlight", {"flight": "LH-1"}),
                                           ("call_hotel", "BookHotel", {"city": "Lisbon"}))
        elif len(results) == 3 and failed_hotel:
            kind, message = "retry", _calls(("call_hotel_2", "BookHotel",
                                             {"city": "Lisbon"}))
        else:
            kind, message = "answer", {"role": "assistant", "content": "booked"}
        prompt, completion = 10 * len(messages) + 3, 5
        with self._lock:
            self.calls += 1
            self.log.append((kind, prompt + completion))
            n = self.calls
        return {"id": f"chat-{n}", "object": "chat.completion", "created": 0,
                "model": "stub-travel",
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if "tool_calls" in message
                             else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
        for cid, name, a in calls]}


def _is_error(content: Any) -> bool:
    try:
        return json.loads(content).get("isError") is True
    except (TypeError, ValueError, AttributeError):
        return False


class Trip(AppRig):
    def __init__(self, tmp: Path, engine: Any, llm: TravelLLM) -> None:
        super().__init__(engine)
        self.tmp, self.llm = tmp, llm
        self.url = f"sqlite:///{tmp / 'ledger.db'}"
        key, self.trust, _ = generate_keypair(tmp / "keys", name="agent")
        self.app = self.add_app(AppProcess(
            engine, [APP], log=tmp / "app.log", ready="ready", ready_timeout=90,
            env={"HISTAUDIT_DB": self.url, "HISTAUDIT_KEY": str(key), "DATA_DIR": str(tmp),
                 "STUB_LLM_URL": llm.url, "PYTHONUNBUFFERED": "1"}))

    def booked(self, what: str) -> int:
        path = self.tmp / f"{what}.txt"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def run(self, crash_at: str | None = None) -> tuple[str, int]:
        """Book a trip, the app crashing at ``crash_at`` and started again; return the
        instance and how many LLM requests the stub had answered at the crash."""
        self.app.start(**({"HISTAUDIT_CRASH_AT": crash_at} if crash_at else {}))
        instance = self.schedule(WORKFLOW, {"task": "book a trip to Lisbon"})
        at_crash = -1
        if crash_at:
            assert self.app.wait_exit(120) == CRASH_EXIT_CODE, self.app.tail()
            at_crash = self.llm.calls
            self.app.start()
        assert self.wait(instance, 180).runtime_status.name == "COMPLETED", self.app.tail()
        return instance, at_crash

    def entries(self, instance: str) -> list[dict[str, Any]]:
        r = cli("show", instance, "--json", "--db", self.url, cwd=self.tmp)
        assert r.returncode == 0, r.stderr
        return list(json.loads(r.stdout)["entries"])

    def findings(self, instance: str) -> list[dict[str, Any]]:
        r = cli("verify", instance, "--json", "--db", self.url, "--trust", self.trust,
                cwd=self.tmp)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
        return list(json.loads(r.stdout)["reports"][0]["findings"])


def _stack(tmp_path: Path, *, agent_store: bool) -> Iterator[Trip]:
    engine = DaprdStack(state_dir=tmp_path / "engine",
                        resources=COMPONENTS if agent_store else None)
    engine.start()
    try:
        with TravelLLM() as llm, Trip(tmp_path, engine, llm) as rig:
            yield rig
    finally:
        teardown(engine)


@pytest.fixture
def trip(tmp_path: Path) -> Iterator[Trip]:
    yield from _stack(tmp_path, agent_store=True)


def _cost(message: str) -> tuple[int, int]:
    """(calls, tokens) a cost finding states: '... cost N LLM call(s) and T tokens ...'."""
    words = message.split(" cost ", 1)[1].split()
    return int(words[0]), int(words[4]) if words[3] == "and" else 0


def test_a_failed_tool_is_signed_failed_and_every_llm_call_carries_the_providers_usage(
        trip: Trip) -> None:
    instance, _ = trip.run()
    assert (trip.booked("book_flight"), trip.booked("book_hotel")) == (1, 1)
    entries = trip.entries(instance)
    effects = [(e["kind"], e["data"]["name"], e["data"].get("error_type"))
               for e in entries if e["kind"].startswith("effect.")]
    hotel = [(kind, error) for kind, name, error in effects if name == "tool:book_hotel"]
    # the first call raised (no rooms): failed, never done; the LLM's second call booked
    assert hotel.count(("effect.failed", "ToolError")) == 1
    assert hotel.count(("effect.done", None)) == 1
    assert sorted(name for kind, name, _ in effects if kind == "effect.done") == [
        "tool:book_flight", "tool:book_hotel"]
    # every tool call names the LLM's id; the read-only search is not an effect
    intents = {e["data"]["call_id"] for e in entries if e["kind"] == "effect.intent"}
    assert intents == {"call_flight", "call_hotel", "call_hotel_2"}
    calls = [e["data"] for e in entries if e["kind"] == "llm.call"]
    assert len(calls) == trip.llm.calls == 5  # search, book, retry, answer, summary
    assert [c["total_tokens"] for c in calls] == [t for _, t in trip.llm.log]
    assert all(c["model"] == "stub-travel" for c in calls)
    findings = trip.findings(instance)
    assert not [f for f in findings if f["severity"] in ("warning", "error")], findings


def test_a_crash_after_summarize_costs_what_the_provider_billed_for_it(trip: Trip) -> None:
    instance, _ = trip.run("after:dapr.agents.travel.summarize")
    kinds = [kind for kind, _ in trip.llm.log]
    assert kinds.count("summary") == 2  # the re-delivered summarize asked again
    lost = next(tokens for kind, tokens in trip.llm.log if kind == "summary")
    (repeated,) = [f for f in trip.findings(instance) if f["code"] == "llm-call-repeated"]
    assert _cost(repeated["message"]) == (1, lost), repeated["message"]


def test_a_crash_inside_one_of_two_parallel_tools_names_that_tool(trip: Trip) -> None:
    instance, _ = trip.run("after-effect:tool:book_flight")
    findings = trip.findings(instance)
    flight = [f for f in findings if (f.get("effect") or {}).get("name") == "tool:book_flight"]
    assert [f["code"] for f in flight] == ["effect-uncertain"], findings
    assert "unknown whether the first attempt got through; the retry did it" in \
        flight[0]["message"]
    intents = {e["data"]["key"]: e["data"]["call_id"] for e in trip.entries(instance)
               if e["kind"] == "effect.intent"}
    assert intents[flight[0]["effect"]["key"]] == "call_flight"
    for f in findings:  # the hotel ran beside it: whatever it shows, no claimed repeat
        assert "did it again" not in f["message"]
        if (f.get("effect") or {}).get("name") == "tool:book_hotel":
            assert f["code"] in ("effect-uncertain", "effect-deduplicated"), f
    assert trip.booked("book_flight") == 2  # the crash came after the booking


def test_without_its_state_store_the_findings_price_every_call_the_agent_lost(
        tmp_path: Path) -> None:
    for rig in _stack(tmp_path, agent_store=False):
        instance, at_crash = rig.run("after-effect:tool:book_flight")
        findings = rig.findings(instance)
        priced = [_cost(f["message"]) for f in findings
                  if f["code"] in ("llm-call-repeated", "conversation-restarted")]
        assert any(f["code"] == "conversation-restarted" for f in findings), findings
        # the conversation before the crash was lost: every request of it, as billed
        lost = rig.llm.log[:at_crash]
        assert (sum(c for c, _ in priced), sum(t for _, t in priced)) == (
            len(lost), sum(t for _, t in lost)), (findings, rig.llm.log, at_crash)


def test_travel_llm_is_single_threaded_per_request() -> None:
    """The stub's log and count move together under its lock (the pricing tests compare
    against both)."""
    llm = TravelLLM()
    threads = [threading.Thread(target=llm.answer, args=({"messages": []},))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert llm.calls == len(llm.log) == 8
