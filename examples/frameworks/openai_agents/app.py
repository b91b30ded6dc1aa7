"""An OpenAI Agents SDK travel agent run durably on Dapr by Diagrid's runner, audited with
one line (``audit_runner``).

Its tools: ``search_flights`` (reads only; declared read-only), ``book_flight`` and
``book_hotel`` (each appends a line to ``$DATA_DIR/<tool>.txt``: the side effects), which
the LLM asks for in parallel in one turn; ``book_hotel`` fails when asked for 0 nights (no
rooms), as the LLM's first hotel call does, and the LLM asks for it again. The LLM is the
scripted stub at ``$STUB_LLM_URL`` (``python -m examples.frameworks.stub_llm``: no
network); diagrid builds ``openai.OpenAI()`` itself, so it is named through
``OPENAI_BASE_URL``.

A runner asks its sidecar for metadata when it is built, so it is built at start
(:func:`build_runner`), not at import. ``python app.py`` serves beside daprd, prints
``ready`` once its worker is connected, and serves until killed; the workflow
``dapr.openai.Travel.workflow`` starts with ``{"task": "book a trip to Lisbon"}``.
``histaudit crashtest app.py:dapr.openai.Travel.workflow`` finds the audited runtime
through :func:`build_runtime`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from diagrid.agent.openai_agents import (
    AgentConfig,
    AgentWorkflowInput,
    DaprWorkflowAgentRunner,
    Message,
    MessageRole,
    ToolDefinition,
)
from diagrid.agent.openai_agents.workflow import set_default_workflow_input_factory

from agents import Agent, function_tool
from histaudit import AuditedWorkflowRuntime
from histaudit.contrib.openai_agents import audit_runner

DATA = Path(os.environ.get("DATA_DIR", "."))
os.environ.setdefault("OPENAI_BASE_URL", os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"))
os.environ.setdefault("OPENAI_API_KEY", "stub")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # the SDK's traces go to OpenAI


def _book(what: str, detail: str) -> str:
    with (DATA / f"{what}.txt").open("a", encoding="utf-8") as fh:
        fh.write(detail + "\n")
    return f"{what} booked: {detail}"


@function_tool
def search_flights(city: str) -> str:
    """Search flights to a city (reads only)."""
    return f"{city}: flight LH-1 at 9:00"


@function_tool
def book_flight(flight: str) -> str:
    """Book a flight."""
    return _book("book_flight", flight)


@function_tool
def book_hotel(city: str, nights: int) -> str:
    """Book a hotel room for some nights."""
    if nights < 1:  # the LLM's first hotel call asks for 0 nights (stub_llm.TRAVEL)
        raise RuntimeError("no rooms left, try again")
    return _book("book_hotel", f"{city}, {nights} nights")


AGENT = Agent(name="travel", instructions="Book what is asked.", model="stub-travel",
              tools=[search_flights, book_flight, book_hotel])


def build_runner(agent: Agent[Any] = AGENT, *, read_only: tuple[str, ...] = ("search_flights",),
                 max_iterations: int = 25) -> DaprWorkflowAgentRunner:
    """The agent's runner, audited: the one line, then the input a client may send."""
    runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name=agent.name,
                                                  max_iterations=max_iterations),
                          read_only=read_only)
    # A client that starts the workflow by name sends {"task": ...}, as to diagrid's
    # serve(); the conversation it opens is the same in every replay (serve()'s own
    # factory draws a new session id each time the workflow code runs).
    set_default_workflow_input_factory(
        lambda task: workflow_input(agent, task, max_iterations=max_iterations))
    return runner


def workflow_input(agent: Agent[Any], task: str, *, max_iterations: int) -> dict[str, Any]:
    """What ``runner.run_async(task, session_id=agent.name)`` schedules."""
    tools = [ToolDefinition(name=t.name, description=t.description,
                            parameters=t.params_json_schema) for t in agent.tools
             if hasattr(t, "params_json_schema")]
    config = AgentConfig(name=agent.name, instructions=str(agent.instructions or ""),
                         model=str(agent.model), tool_definitions=tools)
    return AgentWorkflowInput(agent_config=config, session_id=agent.name,
                              messages=[Message(role=MessageRole.USER, content=task)],
                              max_iterations=max_iterations).to_dict()


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
