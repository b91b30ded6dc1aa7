"""A dapr-agents DurableAgent that books travel, audited with one line: the agent of
tests/agents/test_travel_agent.py, run as its own process beside daprd.

Its tools: ``search_flights`` (reads only; declared read-only), ``book_flight`` and
``book_hotel`` (each appends a line to ``$DATA_DIR/<tool>.txt``: the side effects), which
the LLM asks for in parallel in one turn; ``book_hotel`` fails the first time it is ever
called in ``$DATA_DIR`` (no rooms), and the LLM asks for it again. The LLM is
``TravelLLM`` (test_travel_agent.py) at ``$STUB_LLM_URL``. With ``AGENT_STORE=1`` in its
stack's components the agent keeps its conversation in the state store ``agent-workflow``.
Prints ``ready`` once its worker is connected and serves until killed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dapr_agents import DurableAgent, tool
from dapr_agents.llm import OpenAIChatClient

from histaudit import audit_agent

DATA = Path(os.environ.get("DATA_DIR", "."))


def _book(what: str, detail: str) -> str:
    with (DATA / f"{what}.txt").open("a", encoding="utf-8") as fh:
        fh.write(detail + "\n")
    return f"{what} booked: {detail}"


@tool
def search_flights(city: str) -> str:
    """Search flights to a city (reads only)."""
    return f"{city}: flight LH-1 at 9:00"


@tool
def book_flight(flight: str) -> str:
    """Book a flight."""
    return _book("book_flight", flight)


@tool
def book_hotel(city: str) -> str:
    """Book a hotel room."""
    tried = DATA / "hotel.tried"
    if not tried.exists():
        tried.write_text("once\n")
        raise RuntimeError("no rooms left, try again")
    return _book("book_hotel", city)


agent = DurableAgent(
    name="travel", role="travel agent", goal="book trips", instructions=["book what is asked"],
    llm=OpenAIChatClient(base_url=os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"),
                         api_key="stub", model="stub-travel"),
    tools=[search_flights, book_flight, book_hotel])
wfr = audit_agent(agent, read_only=["search_flights"])

if __name__ == "__main__":
    wfr.start()
    print("ready", flush=True)
    threading.Event().wait()
