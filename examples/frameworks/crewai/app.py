"""A CrewAI travel agent run durably on Dapr by Diagrid's runner, audited with one line
(``audit_runner``).

Its tools: ``search_flights`` (reads only; declared read-only), ``book_flight`` and
``book_hotel`` (each appends a line to ``$DATA_DIR/<tool>.txt``: the side effects), which
the LLM asks for in one turn (Diagrid's CrewAI runner runs them one after the other);
``book_hotel`` fails when asked for 0 nights (no rooms), as the LLM's first hotel call
does, and the LLM asks for it again. The LLM is the scripted stub at ``$STUB_LLM_URL``
(``python -m examples.frameworks.stub_llm``: no network); diagrid calls
``litellm.completion`` with only the model's name, so the stub is named through
``OPENAI_BASE_URL``.

A runner asks its sidecar for metadata when it is built, so it is built at start
(:func:`build_runner`), not at import. ``python app.py`` serves beside daprd, prints
``ready`` once its worker is connected, and serves until killed; the workflow
``dapr.crewai.Travel.workflow`` starts with ``{"task": "book a trip to Lisbon"}``.
``histaudit crashtest app.py:dapr.crewai.Travel.workflow`` finds the audited runtime
through :func:`build_runtime`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

os.environ.setdefault("DO_NOT_TRACK", "1")  # diagrid's anonymous usage event
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else fetched at import
os.environ.setdefault("OPENAI_BASE_URL", os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"))
os.environ.setdefault("OPENAI_API_KEY", "stub")

from crewai import Agent
from crewai.tools import tool
from diagrid.agent.crewai import (
    AgentWorkflowInput,
    DaprWorkflowAgentRunner,
    Message,
    MessageRole,
    TaskConfig,
)
from diagrid.agent.crewai.workflow import set_default_workflow_input_factory

from histaudit import AuditedWorkflowRuntime
from histaudit.contrib.crewai import audit_runner

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


def build_runner() -> DaprWorkflowAgentRunner:
    """The agent's runner, audited: the one line, then the input a client may send."""
    agent = Agent(role="travel agent", goal="book trips", backstory="books what is asked",
                  llm="openai/stub-travel", tools=[search_flights, book_flight, book_hotel])
    runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name="travel"),
                          read_only=["search_flights"])
    # A client that starts the workflow by name sends {"task": ...}, as to diagrid's
    # serve(); the conversation it opens is the same in every replay (serve()'s own
    # factory draws a new session id each time the workflow code runs).
    set_default_workflow_input_factory(lambda task: workflow_input(runner, task))
    return runner


def workflow_input(runner: DaprWorkflowAgentRunner, task: str) -> dict[str, Any]:
    """What ``runner.run_async(Task(description=task, ...), session_id="travel")``
    schedules (the agent's configuration as the runner describes it to the LLM)."""
    expected = "what was booked"
    return AgentWorkflowInput(
        agent_config=runner._get_agent_config(),
        task_config=TaskConfig(description=task, expected_output=expected),
        messages=[Message(role=MessageRole.USER, content=(
            f"Please complete the following task:\n\n{task}\n\nExpected output: {expected}"))],
        session_id="travel", max_iterations=10).to_dict()


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
