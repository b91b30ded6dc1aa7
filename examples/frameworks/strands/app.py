"""A Strands travel agent run durably on Dapr by Diagrid's runner, audited with one line
(``audit_runner``).

Its tools: ``search_flights`` (reads only; declared read-only), ``book_flight`` and
``book_hotel`` (each appends a line to ``$DATA_DIR/<tool>.txt``: the side effects), which
the LLM asks for in one turn (Diagrid's Strands runner runs them one after the other);
``book_hotel`` fails when asked for 0 nights (no rooms), as the LLM's first hotel call
does, and the LLM asks for it again. The LLM is the scripted stub at ``$STUB_LLM_URL``
(``python -m examples.frameworks.stub_llm``: no network), reached through Strands' own
``OpenAIModel``.

A runner asks its sidecar for metadata when it is built, so it is built at start
(:func:`build_runner`), not at import. ``python app.py`` serves beside daprd, prints
``ready`` once its worker is connected, and serves until killed; the workflow
``dapr.strands.Travel.workflow`` starts with ``{"task": "book a trip to Lisbon"}``.
``histaudit crashtest app.py:dapr.strands.Travel.workflow`` finds the audited runtime
through :func:`build_runtime`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

os.environ.setdefault("DO_NOT_TRACK", "1")  # diagrid's anonymous usage event
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from diagrid.agent.strands import DaprWorkflowAgentRunner
from strands import Agent, tool
from strands.models.openai import OpenAIModel

from histaudit import AuditedWorkflowRuntime
from histaudit.contrib.strands import audit_runner

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
def book_hotel(city: str, nights: int) -> str:
    """Book a hotel room for some nights."""
    if nights < 1:  # the LLM's first hotel call asks for 0 nights (stub_llm.TRAVEL)
        raise RuntimeError("no rooms left, try again")
    return _book("book_hotel", f"{city}, {nights} nights")


def travel_agent() -> Agent:
    """The Strands agent: Strands' own OpenAI model class aimed at the stub (answers not
    streamed: the stub sends whole answers)."""
    model = OpenAIModel(
        client_args={"base_url": os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"),
                     "api_key": "stub"},
        model_id="stub-travel", params={"stream": False})
    return Agent(model=model, system_prompt="Book what is asked.", callback_handler=None,
                 tools=[search_flights, book_flight, book_hotel])


def build_runner() -> DaprWorkflowAgentRunner:
    """The agent's runner, audited: the one line."""
    return audit_runner(DaprWorkflowAgentRunner(agent=travel_agent(), name="travel"),
                        read_only=["search_flights"])


def build_runtime() -> AuditedWorkflowRuntime:
    """For ``histaudit crashtest``, which starts a runtime, not a runner: the audited one
    the runner runs on (``audit_runner`` leaves it on the runner)."""
    runtime: AuditedWorkflowRuntime = build_runner().histaudit_runtime
    return runtime


def serve(runner: DaprWorkflowAgentRunner) -> None:
    """Start the runner, say ``ready``, serve until killed."""
    runner.start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    serve(build_runner())
