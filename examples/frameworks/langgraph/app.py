"""The travel agent as a LangGraph graph, run durably on Dapr by Diagrid's graph runner and
audited with one line (``audit_runner``): the app of tests/agents/test_langgraph.py, run as
its own process beside daprd.

The graph is LangGraph's usual tool loop: an ``agent`` node asks ``ChatOpenAI`` (bound to
the tools; the scripted LLM of examples/frameworks/stub_llm.py at ``$STUB_LLM_URL``) and a
``ToolNode`` runs the tool calls it answered with, until it answers without one. Its
tools: ``search_flights`` (reads only; declared read-only), ``book_flight`` and
``book_hotel`` (each appends a line to ``$DATA_DIR/<tool>.txt``: the side effects), which
the LLM asks for together in one answer; ``book_hotel`` raises when asked for 0 nights (no
rooms), as the LLM's first hotel call does, the ToolNode hands the LLM an error
ToolMessage (``handle_tool_errors=True``: LangGraph 1.2's default would re-raise and fail
the node's activity) and the LLM asks again.

The runner asks the sidecar for its components when it is built, so it is built in
:func:`build_runner`, once the app starts, not at import. Workflows are scheduled from
outside as ``dapr.langgraph.Travel.workflow`` with ``{"task": ...}``. Prints ``ready``
once its worker is connected and serves until killed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

from diagrid.agent.langgraph import DaprWorkflowGraphRunner
from diagrid.agent.langgraph.workflow import set_default_graph_config
from langchain_core.messages import AnyMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from histaudit.adapters import AuditedWorkflowRuntime
from histaudit.contrib.langgraph import audit_runner

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


TOOLS = [search_flights, book_flight, book_hotel]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_graph() -> Any:
    llm = ChatOpenAI(model="stub-travel", api_key="stub",  # type: ignore[arg-type]
                     base_url=os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"),
                     max_retries=0).bind_tools(TOOLS)

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(TOOLS, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def build_runner() -> Any:
    """The graph's runner, audited: search_flights only reads."""
    os.environ.setdefault("DO_NOT_TRACK", "1")  # else diagrid reports usage when built
    runner = DaprWorkflowGraphRunner(graph=build_graph(), name="travel")
    return audit_runner(runner, read_only=["search_flights"])


def build_runtime() -> AuditedWorkflowRuntime:
    """For ``histaudit crashtest``, which starts a runtime, not a runner: the audited one
    the runner runs on (``audit_runner`` leaves it on the runner), taking ``{"task": ...}``
    as the app does."""
    runner = build_runner()
    set_default_graph_config(runner.graph_config)
    runtime: AuditedWorkflowRuntime = runner.histaudit_runtime
    return runtime


if __name__ == "__main__":
    runner = build_runner()
    # As runner.serve() does: a workflow scheduled from outside with {"task": ...} runs
    # this graph (the runner's own invoke() sends the whole graph config instead).
    set_default_graph_config(runner.graph_config)
    runner.start()
    print("ready", flush=True)
    threading.Event().wait()
