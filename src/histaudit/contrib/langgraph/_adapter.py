"""A LangGraph graph run by Diagrid's ``DaprWorkflowGraphRunner``, audited through the
adapter port (:mod:`histaudit.adapters`).

Diagrid runs each graph node as one call of the activity ``execute_node_activity``; an
LLM call inside a node is not an activity, and a ``ToolNode`` runs every tool call of one
AI message in that one activity (in a thread pool). So:

* the runner's own runtime is given over to an audited one
  (:func:`histaudit.contrib._diagrid.take_over_runner`, ADR 0013);
* every LangChain tool of the graph's ``ToolNode``\\ s (subgraphs' included) but the
  ``read_only`` ones runs as the side effect ``tool:<name>`` keyed by the node activity's
  execution id and the ToolCall id, so two tool calls of one node activity are two
  effects. What is guarded is the tool's own function (``BaseTool._run`` / ``_arun``),
  not its ``invoke``: a re-delivery that finds the call done gets the function's recorded
  return value back and LangChain builds the ``ToolMessage`` around it as usual (a
  recorded ``ToolMessage`` would come back as a dict, which ``ToolNode`` rejects and the
  workflow fails). The ToolCall id reaches the function through the tool's ``run`` /
  ``arun``, wrapped only to put it in a context variable. A tool that raises is signed
  ``effect.failed`` with the exception's class; what happens next is the ToolNode's
  ``handle_tool_errors`` (LangGraph 1.2's default re-raises everything but invalid
  arguments: the node activity fails and Dapr retries it);
* every OpenAI chat completion made inside a node activity (``ChatOpenAI``, which calls
  ``with_raw_response.create``) is signed as ``llm.call`` with the provider's model and
  usage (:func:`histaudit.adapters.watch_openai`), the node's activity as its run;
* the workflow output's fields that differ between two correct runs are declared
  volatile (:data:`VOLATILE_OUTPUT`), so the crash matrix compares the rest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from histaudit import adapters
from histaudit.contrib._diagrid import take_over_runner
from histaudit.errors import UsageError

__all__ = ["VOLATILE_OUTPUT", "audit_runner"]

VOLATILE_OUTPUT = ("$..messages[*].id", "$..messages[*].response_metadata.id",
                   "$..messages[*].tool_calls[*].id",
                   "$..messages[*].additional_kwargs.tool_calls[*].id",
                   "$..messages[*].tool_call_id")
"""Fields of the graph workflow's output (``GraphWorkflowOutput``: the output channels and
the channel state, each holding the conversation) that differ between two correct runs:
a message's ``id`` (an AI message's is LangChain's run id, a human or tool message's a
uuid ``add_messages`` draws), the provider's response id (``chat-…``), the ids of the
tool calls an AI message asks for (the provider's) and the ``tool_call_id`` a
ToolMessage answers."""

_CALL_ID: ContextVar[str | None] = ContextVar("histaudit_langgraph_tool_call", default=None)
"""The ToolCall id of the tool call being run (set by the tool's wrapped ``run``)."""

_GUARDING: ContextVar[object | None] = ContextVar("histaudit_langgraph_guarding",
                                                  default=None)
"""The tool whose call is being guarded: LangChain's default ``_arun`` runs ``_run`` in an
executor (context copied), which must not guard the same call a second time."""

_GUARDED = "_histaudit_guarded"


def audit_runner(runner: Any, *, read_only: Iterable[str] = ()) -> Any:
    """Audit ``runner`` (a ``DaprWorkflowGraphRunner``, built and not started); return it.

    Its workflow and activities move to an audited runtime; every tool of its graph's
    ToolNodes but the ``read_only`` ones is guarded as a side effect; OpenAI chat
    completions inside its nodes are signed. A ``read_only`` name that is no tool of the
    graph, a runner already audited or started, and an object that is no Diagrid runner
    are one-line UsageErrors.
    """
    graph = getattr(runner, "graph", None)
    if graph is None or not hasattr(graph, "nodes"):
        raise UsageError(f"audit_runner(): {type(runner).__name__} is not a Diagrid "
                         "DaprWorkflowGraphRunner (it has no graph with nodes)")
    tools = list(_tools_of(graph))
    names = {str(t.name) for t in tools}
    exempt = adapters.read_only_tools(read_only, names, "audit_runner()")
    runtime = take_over_runner(runner, "audit_runner()")
    for tool in tools:
        if str(tool.name) not in exempt:
            _guard(tool)
    adapters.watch_openai()
    workflow = getattr(runner, "workflow_name", None)
    if isinstance(workflow, str):
        runtime.mark_volatile(workflow, *VOLATILE_OUTPUT)
    return runner


def _tools_of(graph: Any, seen: set[int] | None = None) -> Iterator[Any]:
    """Every LangChain tool of ``graph``'s ToolNodes (anything with ``tools_by_name``), and
    of the graphs its nodes are (a compiled subgraph added as a node), each once."""
    seen = set() if seen is None else seen
    for spec in dict(getattr(graph, "nodes", None) or {}).values():
        node = getattr(spec, "bound", spec)
        if id(node) in seen:
            continue
        seen.add(id(node))
        by_name = getattr(node, "tools_by_name", None)
        if isinstance(by_name, dict):
            for tool in by_name.values():
                if id(tool) not in seen:
                    seen.add(id(tool))
                    yield tool
        elif node is not graph and isinstance(getattr(node, "nodes", None), dict):
            yield from _tools_of(node, seen)


def _guard(tool: Any) -> None:
    """Guard ``tool``'s ``_run`` / ``_arun`` as ``tool:<name>``, keyed by the ToolCall id
    its wrapped ``run`` / ``arun`` hands on. A tool shared by two graphs is guarded once.
    A BaseTool is a pydantic model, which refuses attributes that are not fields: the
    instance attributes are set past it and shadow the class's methods for this tool."""
    if getattr(tool.__dict__.get("_run"), _GUARDED, False):
        return
    name = str(tool.name)
    artifact = getattr(tool, "response_format", None) == "content_and_artifact"
    run, arun, sync, coro = tool.run, tool.arun, tool._run, tool._arun

    @functools.wraps(run)
    def run_with_id(*args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(_call_id(kwargs))
        try:
            return run(*args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    @functools.wraps(arun)
    async def arun_with_id(*args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(_call_id(kwargs))
        try:
            return await arun(*args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    @functools.wraps(sync)
    def guarded_run(*args: Any, **kwargs: Any) -> Any:
        if _GUARDING.get() is tool:
            return sync(*args, **kwargs)
        token = _GUARDING.set(tool)
        try:
            return _as_returned(adapters.guarded_call(
                name, _CALL_ID.get(), lambda: sync(*args, **kwargs)), artifact)
        finally:
            _GUARDING.reset(token)

    @functools.wraps(coro)
    async def guarded_arun(*args: Any, **kwargs: Any) -> Any:
        if _GUARDING.get() is tool:
            return await coro(*args, **kwargs)
        token = _GUARDING.set(tool)
        try:
            return _as_returned(await adapters.guarded_acall(
                name, _CALL_ID.get(), lambda: coro(*args, **kwargs)), artifact)
        finally:
            _GUARDING.reset(token)

    setattr(guarded_run, _GUARDED, True)
    replaced: dict[str, Callable[..., Any]] = {
        "run": run_with_id, "arun": arun_with_id, "_run": guarded_run, "_arun": guarded_arun}
    for attr, wrapper in replaced.items():
        object.__setattr__(tool, attr, wrapper)


def _call_id(kwargs: dict[str, Any]) -> str | None:
    found = kwargs.get("tool_call_id")
    return found if isinstance(found, str) and found else None


def _as_returned(result: Any, artifact: bool) -> Any:
    """A recorded ``(content, artifact)`` pair comes back from JSON as a list; a tool with
    ``response_format="content_and_artifact"`` must return a tuple."""
    if artifact and isinstance(result, list) and len(result) == 2:
        return tuple(result)
    return result
