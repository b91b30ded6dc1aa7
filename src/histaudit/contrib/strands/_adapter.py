"""Strands agents on Diagrid's runner, audited through the adapter port (:mod:`histaudit.adapters`).

Diagrid's ``diagrid.agent.strands.DaprWorkflowAgentRunner`` (0.5.3) runs a Strands
``Agent`` as one workflow whose activities are ``strands_call_model`` (one LLM call:
``agent.model.stream(...)``) and ``strands_execute_tool`` (one tool call:
``tool.stream(tool_use, {})`` of the tool in ``agent.tool_registry``), one after another.
Dapr delivers each at least once, so after a crash a tool that booked, sent or paid does it
again, and a model call is billed again. What this adapter adds, on the runner's own
agent, before ``runner.start()``:

* every tool but the ``read_only`` ones runs as the side effect ``tool:<name>`` keyed by
  the LLM's tool call id (Strands' ``toolUseId``): a re-delivery that finds it done gets the
  recorded result without calling the tool (``effect-deduplicated``); one that finds only
  its intent calls it again and the verifier says so (``effect-uncertain``). The tool's
  ``stream`` is wrapped on the tool object, so it also guards a tool Strands' own loop runs
  inside some other audited activity; outside one the tool just runs. Inside an activity
  the tool's intermediate stream events are not passed on, only its result (the runner
  keeps only the last event anyway).
* a tool that fails comes back from Strands as a result with ``status: "error"``, not as an
  exception (Strands catches it): it is signed ``effect.failed`` (``ToolError`` and the
  result's text), never done. Diagrid's activity then hands the workflow
  ``status: "success"`` with that text (it does not read Strands 1.6x's ``ToolResultEvent``);
  the ledger, not the workflow's output, is where the failure shows.
* every call of the agent's model (``agent.model.stream``: any Strands model provider) made
  inside an audited activity is signed as ``llm.call`` with the model, the usage the
  provider reported (Strands' ``metadata`` event: streamed answers included), the tools
  the answer asked for and the stop reason. OpenAI answers made inside it are claimed
  (:func:`histaudit.adapters.claims`), so another adapter's :func:`~histaudit.adapters.
  watch_openai` does not sign them twice.
* the runner's ``WorkflowRuntime`` is given over to an audited one
  (:func:`histaudit.contrib._diagrid.take_over_runner`), with the workflow's output fields
  that hold the LLM's tool call ids declared volatile.

Diagrid's other Strands entry, ``diagrid.agent.strands.DurableAgent`` (``durable =
DurableAgent(agent, name=...)``; ``durable("task")``), is no Diagrid runner: its first call
builds ``WorkflowRuntime()`` in ``_initialize_dapr``, registers activities made there
(``dapr.strands.<Name>.call_model`` / ``.execute_tool``, the same bodies as the runner's),
and starts it. :func:`audit_agent` guards and signs the same way and has that first call
build an :class:`~histaudit.adapters.AuditedWorkflowRuntime` instead: the name
``WorkflowRuntime`` that ``_initialize_dapr`` imports is answered, for that one call only,
with the audited runtime (the import is local to the method; nothing is rebound in
``dapr.ext.workflow`` or anywhere else; docs/adr/0013-framework-runtimes.md).
"""

from __future__ import annotations

import builtins
import importlib
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from histaudit import adapters
from histaudit.contrib._diagrid import take_over_runner
from histaudit.errors import UsageError

__all__ = ["VOLATILE_OUTPUT", "audit_agent", "audit_runner"]

VOLATILE_OUTPUT = ("$.tool_calls[*].tool_use_id",)
"""Fields of the runner workflow's output (``{"result", "tool_calls"}``) that differ
between two correct runs: the LLM's tool call ids, which a real model draws anew on every
answer. The crash matrix leaves them out of comparisons."""

_GUARDED = "_histaudit_guarded"
_ACCOUNTED = "_histaudit_accounted"


def audit_runner(runner: Any, *, read_only: Iterable[str] = ()) -> Any:
    """Audit Diagrid's Strands ``DaprWorkflowAgentRunner`` (built, not started): every
    tool of its agent but the ``read_only`` ones guarded, every model call signed, its
    runtime an audited one (``runner.start()`` starts it); return the runner.

    ``read_only`` names tools as the agent's tool registry does; a name it has not is a
    UsageError, and so is a runner already audited or started."""
    agent = getattr(runner, "agent", None)
    registry = getattr(getattr(agent, "tool_registry", None), "registry", None)
    if agent is None or not isinstance(registry, dict) or not hasattr(agent, "model"):
        raise UsageError(f"audit_runner(): {type(runner).__name__} is not Diagrid's Strands "
                         "runner (it has no agent with a tool_registry and a model)")
    exempt = _read_only(registry, read_only)
    runtime = take_over_runner(runner, "audit_runner()")
    _audit_agent_objects(agent, registry, exempt)
    workflow = getattr(runner, "workflow_name", None)
    if isinstance(workflow, str):
        runtime.mark_volatile(workflow, *VOLATILE_OUTPUT)
    return runner


def audit_agent(durable: Any, *, read_only: Iterable[str] = ()) -> Any:
    """Audit Diagrid's Strands ``DurableAgent`` before its first call: every tool of its
    agent but the ``read_only`` ones guarded, every model call signed, and the runtime its
    first call builds and starts an audited one; return it.

    ``read_only`` names tools as the agent's tool registry does; a name it has not, an
    agent already audited or already called, or an object without that shape is a
    UsageError. Like the DurableAgent itself, a restarted process serves (and so resumes)
    its workflow only once the agent is called again."""
    initialize = getattr(durable, "_initialize_dapr", None)
    agent = getattr(durable, "agent", None)
    registry = getattr(getattr(agent, "tool_registry", None), "registry", None)
    if (not callable(initialize) or not isinstance(registry, dict)
            or not isinstance(getattr(durable, "_workflow_name", None), str)):
        raise UsageError(f"audit_agent(): {type(durable).__name__} is not Diagrid's Strands "
                         "DurableAgent (it has no _initialize_dapr, agent or workflow name)")
    if getattr(initialize, _GUARDED, False):
        raise UsageError("audit_agent(): this DurableAgent is already audited")
    if getattr(durable, "_initialized", False):
        raise UsageError("audit_agent(): the DurableAgent has run; audit it before its "
                         "first call")
    exempt = _read_only(registry, read_only, "audit_agent()")
    _audit_agent_objects(agent, registry, exempt)
    durable._initialize_dapr = _initialize_audited(durable, initialize)
    return durable


def _initialize_audited(durable: Any, initialize: Any) -> Any:
    """``durable._initialize_dapr`` run with an audited runtime where it builds
    ``WorkflowRuntime()``: a copy of the method whose ``__import__`` answers ``from
    dapr.ext.workflow import WorkflowRuntime`` with a factory of that runtime."""
    method = getattr(initialize, "__func__", None)
    if not isinstance(method, types.FunctionType):
        raise UsageError("audit_agent(): the DurableAgent's _initialize_dapr is not a method "
                         "histaudit can run (diagrid changed it?)")
    lock = threading.Lock()

    def initialize_audited() -> None:
        with lock:
            if getattr(durable, "_initialized", False):
                return
            runtime = adapters.AuditedWorkflowRuntime()
            runtime.mark_volatile(durable._workflow_name, *VOLATILE_OUTPUT)
            hooked = types.FunctionType(
                method.__code__,
                {**method.__globals__, "__builtins__": _importing_runtime(runtime)},
                method.__name__, method.__defaults__, method.__closure__)
            hooked(durable)
            if durable._workflow_runtime is not runtime:
                raise UsageError("audit_agent(): the DurableAgent did not build its runtime "
                                 "from dapr.ext.workflow.WorkflowRuntime as diagrid 0.5.3 "
                                 "does; it ran unaudited")

    setattr(initialize_audited, _GUARDED, True)
    return initialize_audited


def _importing_runtime(runtime: Any) -> dict[str, Any]:
    """Builtins whose ``__import__`` hands ``from dapr.ext.workflow import ...`` a module
    whose ``WorkflowRuntime`` builds nothing but returns ``runtime``."""
    real = builtins.__import__

    def hooked_import(name: str, scope: Any = None, local: Any = None,
                      fromlist: Any = (), level: int = 0) -> Any:
        module = real(name, scope, local, fromlist, level)
        if name != "dapr.ext.workflow" or level != 0 or not fromlist:
            return module
        view = types.SimpleNamespace(**{n: getattr(module, n) for n in fromlist
                                        if n != "WorkflowRuntime" and hasattr(module, n)})
        view.WorkflowRuntime = lambda *args, **kwargs: runtime
        return view

    return {**vars(builtins), "__import__": hooked_import}


def _read_only(registry: dict[str, Any], read_only: Iterable[str],
               who: str = "audit_runner()") -> set[str]:
    return adapters.read_only_tools(read_only, registry, who)


def _audit_agent_objects(agent: Any, registry: dict[str, Any], exempt: set[str]) -> None:
    for name, tool in registry.items():
        if name not in exempt:
            _guard(tool, name)
    model = agent.model
    stream = model.stream
    if not getattr(stream, _ACCOUNTED, False):  # a model shared by two agents: once
        model.stream = _accounted(model, stream)


def _guard(tool: Any, name: str) -> None:
    """Shadow ``tool.stream`` (an async generator of events, the last one the result) for
    this tool object: inside an audited activity the call is one guarded effect whose
    recorded result is Strands' tool result (``{toolUseId, status, content}``)."""
    stream = tool.stream
    if getattr(stream, _GUARDED, False):
        return

    async def stream_guarded(tool_use: Any, invocation_state: Any, **kwargs: Any
                             ) -> AsyncIterator[Any]:
        if adapters.current_activity() is None:
            async for event in stream(tool_use, invocation_state, **kwargs):
                yield event
            return

        async def run() -> Any:
            last = None
            async for event in stream(tool_use, invocation_state, **kwargs):
                last = event
            return _tool_result(last)

        call_id = tool_use.get("toolUseId") if isinstance(tool_use, dict) else None
        result = await adapters.guarded_acall(
            name, call_id if isinstance(call_id, str) else None, run, failed=_failed)
        yield _result_event(result)

    setattr(stream_guarded, _GUARDED, True)
    tool.stream = stream_guarded


def _tool_result(event: Any) -> Any:
    """The tool result in a tool's last event: Strands' ``ToolResultEvent`` is the dict
    ``{"type": "tool_result", "tool_result": {...}}``; anything else is kept as it is."""
    if isinstance(event, dict) and isinstance(event.get("tool_result"), dict):
        return dict(event["tool_result"])
    return event


def _result_event(result: Any) -> Any:
    """The event the tool's stream ends with, made again from a (recorded) tool result."""
    if not (isinstance(result, dict) and "status" in result):
        return result
    try:  # the caller's Strands: public in 1.6x, private before
        events: Any = importlib.import_module("strands.types.events")
    except ImportError:
        events = importlib.import_module("strands.types._events")
    return events.ToolResultEvent(result)


def _failed(result: Any) -> tuple[str, str] | None:
    """A Strands tool result with ``status: "error"`` (the tool raised; Strands caught it)."""
    if not (isinstance(result, dict) and result.get("status") == "error"):
        return None
    content = result.get("content")
    texts = [b.get("text") for b in (content if isinstance(content, list) else [])
             if isinstance(b, dict)]
    return "ToolError", "\n".join(t for t in texts if isinstance(t, str))


def _accounted(model: Any, stream: Callable[..., Any]) -> Callable[..., Any]:
    """The model's ``stream`` with each call made inside an audited activity signed as
    ``llm.call`` once the stream ended (or failed). Inside an activity the events are
    gathered first and handed on after the call is signed, so a crash after the call
    always finds it in the ledger; outside one they pass straight through."""

    async def stream_accounted(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        run = adapters.current_activity()
        if run is None:
            async for event in stream(*args, **kwargs):
                yield event
            return
        messages = kwargs.get("messages", args[0] if args else None)
        sent = len(messages) if isinstance(messages, list) else None
        started = time.time_ns()
        answer = _Answer()
        with adapters.claims() as raw:
            try:
                async for event in stream(*args, **kwargs):
                    answer.add(event)
            except Exception as exc:
                adapters.record_llm_call(
                    answer.call(_model_id(model, raw), sent, type(exc).__name__), run,
                    started_ns=started)
                raise
        adapters.record_llm_call(answer.call(_model_id(model, raw), sent, None), run,
                                 started_ns=started)
        for event in answer.events:
            yield event

    setattr(stream_accounted, _ACCOUNTED, True)
    return stream_accounted


def _model_id(model: Any, raw: list[Any]) -> str | None:
    """The model the provider said answered (an OpenAI answer's ``model``), else the one
    the Strands model is configured with (``model_id``)."""
    for answer in raw:
        found = getattr(answer, "model", None)
        if isinstance(found, str):
            return found
    config = getattr(model, "config", None)
    found = config.get("model_id") if isinstance(config, dict) else None
    return found if isinstance(found, str) else None


class _Answer:
    """What a Strands model stream said: its events (Strands' ``StreamEvent`` dicts), the
    text, the tool uses in order, the stop reason and the usage of its ``metadata``."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.text: list[str] = []
        self.tools: list[dict[str, Any]] = []
        self.stop: str | None = None
        self.usage: dict[str, Any] = {}

    def add(self, event: Any) -> None:
        self.events.append(event)
        if not isinstance(event, dict):
            return
        start = _at(event, "contentBlockStart", "start", "toolUse")
        if isinstance(start, dict):
            self.tools.append({"name": start.get("name"), "toolUseId": start.get("toolUseId"),
                               "input": ""})
        delta = _at(event, "contentBlockDelta", "delta")
        if isinstance(delta, dict):
            if isinstance(delta.get("text"), str):
                self.text.append(delta["text"])
            tool_input = _at(delta, "toolUse", "input")
            if isinstance(tool_input, str) and self.tools:
                self.tools[-1]["input"] += tool_input
        stop = _at(event, "messageStop", "stopReason")
        if isinstance(stop, str):
            self.stop = stop
        usage = _at(event, "metadata", "usage")
        if isinstance(usage, dict):
            self.usage = usage

    def call(self, model: str | None, sent: int | None, error: str | None
             ) -> adapters.LlmCall:
        prompt, completion = self.usage.get("inputTokens"), self.usage.get("outputTokens")
        return adapters.LlmCall(
            model=model, messages=sent, prompt_tokens=prompt, completion_tokens=completion,
            total_tokens=self.usage.get("totalTokens"),
            tool_calls=[str(t["name"]) for t in self.tools], finish_reason=self.stop,
            error_type=error,
            answer={"text": "".join(self.text), "tool_uses": self.tools,
                    "stop_reason": self.stop})


def _at(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
