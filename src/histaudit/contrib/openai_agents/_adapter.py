"""An OpenAI Agents SDK agent run by Diagrid's ``DaprWorkflowAgentRunner``, audited through
the adapter port (:mod:`histaudit.adapters`).

Diagrid's runner (diagrid 0.5.3) runs the agent as the workflow
``dapr.openai.<Name>.workflow``: each LLM turn is the activity ``call_llm_activity``,
which calls ``openai.OpenAI().chat.completions.create`` itself, and each tool call of the
turn is an ``execute_tool_activity`` (in parallel under ``when_all``), which looks the tool
up in diagrid's module-level tool registry and calls its ``on_invoke_tool`` with a
``ToolContext`` carrying the LLM's tool call id. What this adapter does to it:

* the runner's own runtime is given over to an audited one
  (:func:`histaudit.contrib._diagrid.take_over_runner`);
* every tool of the registry not declared ``read_only`` is replaced there by a copy whose
  ``on_invoke_tool`` runs as the side effect ``tool:<name>`` keyed by the activity call
  and the tool call id (:func:`histaudit.adapters.guarded_acall`); the agent's own tools
  are left as they were;
* the SDK's ``FunctionTool`` catches a tool's exception and returns its failure
  formatter's text, which diagrid hands the LLM as an ordinary result: the copy's formatter
  (``set_function_tool_failure_error_function``) first tells the running effect that it
  failed, with the exception's class and text, then returns the original formatter's text,
  so the ledger signs ``effect.failed`` and the LLM reads what it always did;
* every chat completion inside an activity is signed with the provider's usage
  (:func:`histaudit.adapters.watch_openai`): diagrid's ``CallLlmOutput`` keeps no usage;
* the LLM's tool call ids in the workflow's output are marked volatile
  (:data:`VOLATILE_OUTPUT`).
"""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from histaudit import adapters
from histaudit.contrib._diagrid import take_over_runner
from histaudit.errors import UsageError

__all__ = ["VOLATILE_OUTPUT", "audit_runner"]

VOLATILE_OUTPUT = ("$..tool_calls[*].id", "$..tool_call_id")
"""Fields of the agent workflow's output (``AgentWorkflowOutput``: the conversation) that
differ between two correct runs: the ids a real LLM gives its tool calls, in the assistant
messages and in the tool results answering them. The crash matrix leaves them out."""

_WHO = "audit_runner()"
_GUARDED = "_histaudit_guarded"


def audit_runner(runner: Any, *, read_only: Iterable[str] = ()) -> Any:
    """Audit a ``DaprWorkflowAgentRunner`` built and not yet started; return it.

    ``runner = audit_runner(DaprWorkflowAgentRunner(agent=agent, name="travel"),
    read_only=["search_flights"])``. Every tool but the ``read_only`` ones (named as the
    agent names them) is guarded. A name the agent has no tool of, a runner already
    audited or started, or an object that is not such a runner is a one-line UsageError.
    """
    workflow = _workflow_module(runner)
    tools = _registered_tools(runner, workflow)
    exempt = adapters.read_only_tools(read_only, tools, _WHO)
    runtime = take_over_runner(runner, _WHO)
    tool_module: Any = importlib.import_module("agents.tool")
    for name, tool in tools.items():
        if name not in exempt and callable(getattr(tool, "on_invoke_tool", None)):
            workflow.register_tool(name, _guarded(tool, name, tool_module))
    adapters.watch_openai()
    runtime.mark_volatile(runner.workflow_name, *VOLATILE_OUTPUT)
    return runner


def _workflow_module(runner: Any) -> Any:
    """diagrid's OpenAI Agents workflow module, once ``runner`` is known to be its runner."""
    try:
        package: ModuleType = importlib.import_module("diagrid.agent.openai_agents")
        workflow: ModuleType = importlib.import_module("diagrid.agent.openai_agents.workflow")
    except ImportError as exc:
        raise UsageError(f"{_WHO}: needs diagrid's OpenAI Agents runner "
                         f"(pip install diagrid openai-agents): {exc}") from None
    runner_class = getattr(package, "DaprWorkflowAgentRunner", None)
    if not isinstance(runner_class, type) or not isinstance(runner, runner_class):
        raise UsageError(f"{_WHO}: {type(runner).__name__} is not diagrid's "
                         "openai_agents.DaprWorkflowAgentRunner")
    return workflow


def _registered_tools(runner: Any, workflow: Any) -> dict[str, Any]:
    """{name: tool} as diagrid's registry holds the agent's tools (the runner registered
    them under ``tool.name`` when it was built)."""
    tools: dict[str, Any] = {}
    for tool in getattr(runner.agent, "tools", None) or []:
        name = getattr(tool, "name", None)
        if isinstance(name, str) and (found := workflow.get_registered_tool(name)) is not None:
            tools[name] = found
    return tools


def _guarded(tool: Any, name: str, tool_module: Any) -> Any:
    """A copy of the ``FunctionTool`` whose calls are guarded as ``tool:<name>`` and whose
    handled failures are signed failed (the module docstring). ``FunctionTool.__copy__``
    binds the copy's failure handling to the copy, so its formatter is the one consulted."""
    if getattr(tool, _GUARDED, False):
        return tool
    guarded = copy.copy(tool)
    invoke = guarded.on_invoke_tool

    async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
        async def call() -> Any:
            result = invoke(ctx, arguments)
            return await result if inspect.isawaitable(result) else result

        call_id = getattr(ctx, "tool_call_id", None)
        return await adapters.guarded_acall(
            name, call_id if isinstance(call_id, str) else None, call)

    guarded.on_invoke_tool = on_invoke_tool
    if isinstance(guarded, tool_module.FunctionTool):  # its failure formatter too
        tool_module.set_function_tool_failure_error_function(
            guarded, _signing_formatter(tool, tool_module))
    setattr(guarded, _GUARDED, True)
    return guarded


def _signing_formatter(tool: Any, tool_module: Any) -> Any:
    """A failure formatter that marks the running effect failed with the exception's class
    and text, then answers what ``tool``'s own formatter answers (None — no formatter —
    lets the exception through, which the guard signs failed by itself)."""
    def formatter(ctx: Any, error: Exception) -> Any:
        original = tool_module.resolve_function_tool_failure_error_function(tool, ctx)
        if original is None:
            return None
        effect = adapters.current_effect()
        if effect is not None:
            effect.fail(type(error).__name__, str(error))
        return original(ctx, error)

    return formatter
