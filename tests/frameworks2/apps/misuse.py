"""Misuses of ``audit_runner`` (and Strands' ``audit_agent``), each printed as one JSON line
``{"case": ..., "error": "<type>: <message>"}``: run beside daprd (a runner asks its sidecar
for metadata when it is built) by tests/frameworks2, ``python misuse.py strands|crewai``.

Diagrid refuses a second CrewAI runner in one process (its activities are module-level
functions the first one registered), so the CrewAI cases share one runner.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "frameworks"


def attempt(case: str, action: Callable[[], Any]) -> None:
    try:
        action()
        error = None
    except Exception as exc:  # noqa: BLE001 - the test reads the type and message
        error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"case": case, "error": error}), flush=True)


def strands() -> None:
    sys.path.insert(0, str(EXAMPLES / "strands"))
    from app import travel_agent
    from diagrid.agent.strands import DaprWorkflowAgentRunner, DurableAgent

    from histaudit.contrib.strands import audit_agent, audit_runner

    runner = DaprWorkflowAgentRunner(agent=travel_agent(), name="misuse")
    attempt("unknown read_only", lambda: audit_runner(runner, read_only=["book_train"]))
    attempt("audited", lambda: audit_runner(runner, read_only="search_flights"))
    attempt("audited twice", lambda: audit_runner(runner))
    started = DaprWorkflowAgentRunner(agent=travel_agent(), name="started")
    started.start()
    attempt("started", lambda: audit_runner(started))
    started.shutdown()
    attempt("not a runner", lambda: audit_runner(object()))
    durable = DurableAgent(travel_agent(), name="misuse")
    attempt("agent unknown read_only", lambda: audit_agent(durable, read_only=["book_train"]))
    attempt("agent audited", lambda: audit_agent(durable))
    attempt("agent audited twice", lambda: audit_agent(durable))


def crewai() -> None:
    sys.path.insert(0, str(EXAMPLES / "crewai"))
    from app import book_flight, book_hotel, search_flights
    from crewai import Agent
    from diagrid.agent.crewai import DaprWorkflowAgentRunner

    from histaudit.contrib.crewai import audit_runner

    agent = Agent(role="r", goal="g", backstory="b", llm="openai/stub-travel",
                  tools=[search_flights, book_flight, book_hotel])
    runner = DaprWorkflowAgentRunner(agent=agent, name="misuse")
    attempt("unknown read_only", lambda: audit_runner(runner, read_only=["book_train"]))
    attempt("audited", lambda: audit_runner(runner, read_only="search_flights"))
    attempt("audited twice", lambda: audit_runner(runner))
    attempt("not a runner", lambda: audit_runner(object()))


if __name__ == "__main__":
    {"strands": strands, "crewai": crewai}[sys.argv[1]]()
