"""Audit a dapr-agents ``DurableAgent`` in one line: ``wfr = audit_agent(agent)``.

A DurableAgent runs every tool call as the activity ``dapr.agents.<name>.run_tool``, which
Dapr delivers at least once: after a crash a tool that wrote, sent or paid does it again,
and the activity record alone cannot tell that from a tool that ran once. So every tool
of the agent runs as a histaudit side effect named ``tool:<tool name>`` (the name the tool
was defined with, ``tool:write_note``), keyed by the ``run_tool`` call's execution id
(stable across re-deliveries): a re-delivery that finds it done returns the recorded
result without calling the tool (``effect-deduplicated``); one that finds only its intent
(a crash inside the tool) calls it again and the verifier says so (``effect-uncertain``).
Tools declared ``read_only`` run unguarded. The crash points ``before-effect:tool:<name>``
and ``after-effect:tool:<name>`` follow.

Every call of the agent's LLM client (``agent.llm.generate``) made inside an activity —
``call_llm``, ``summarize``, any other — is signed as ``llm.call`` with the model, token
counts and requested tools (:mod:`histaudit.interceptor.llm`), so ``verify`` reports what
a crash cost in repeated calls and tokens, and a conversation the agent lost.

The agent's workflows and activities are registered on the returned runtime at once, so
``histaudit replay`` and ``crashtest`` find them without ``start()``. An agent is
crash-safe only with its own state store (a Dapr state component named
``agent-workflow``): without one it restarts its conversation after a crash, and
``audit_agent`` warns. dapr-agents is imported by the caller, not here (it needs dapr
1.18 + dapr-ext-workflow 1.18; ADR 0012).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from histaudit.errors import UsageError
from histaudit.interceptor import tracing
from histaudit.interceptor.activity import current_activity
from histaudit.interceptor.effects import TOOL_EFFECT_PREFIX, side_effect
from histaudit.interceptor.llm import LlmCall, record_llm_call
from histaudit.interceptor.runtime import AuditedWorkflowRuntime

__all__ = ["TOOL_EFFECT_PREFIX", "VOLATILE_OUTPUT", "audit_agent"]

VOLATILE_OUTPUT = ("$.id",)
"""Fields of the agent workflow's output (its last assistant message) that differ between
two correct runs: ``id`` is derived from the ``call_llm`` activity's execution id, which
the SDK draws from the run's clock. The crash matrix leaves them out of comparisons."""


def audit_agent(agent: Any, *, read_only: Iterable[str] = (),
                runtime: AuditedWorkflowRuntime | None = None) -> AuditedWorkflowRuntime:
    """Register ``agent`` on an audited runtime (``runtime``, or a new one) with every
    tool but the ``read_only`` ones guarded as a side effect; return the runtime.

    ``read_only`` names tools in any spelling the agent resolves (``lookup``,
    ``Lookup``); a name the agent does not have is a UsageError.
    """
    executor = getattr(agent, "tool_executor", None)
    register = getattr(agent, "register", None)
    if executor is None or not callable(register):
        raise UsageError(f"audit_agent(): {type(agent).__name__} is not a dapr-agents "
                         "DurableAgent (it has no tool_executor or register())")
    exempt: set[str] = set()
    for name in read_only:
        found = executor.get_tool(name)
        if found is None:
            tools = ", ".join(str(t.name) for t in executor.list_tools())
            raise UsageError(f"audit_agent(): read_only names {name!r}, which the agent has "
                             f"no tool of (its tools: {tools})")
        exempt.add(found.name)
    # The executor is a pydantic model, which refuses attributes that are not fields; the
    # instance attribute set past it shadows the class's run_tool for this agent only.
    object.__setattr__(executor, "run_tool", _guarded(executor, exempt))
    llm = getattr(agent, "llm", None)
    if llm is not None and callable(getattr(llm, "generate", None)):
        object.__setattr__(llm, "generate", _accounted(llm))
    if getattr(getattr(agent, "_infra", None), "state_store", False) is None:
        warnings.warn(
            f"audit_agent(): agent {getattr(agent, 'name', '?')!r} has no state store (a "
            "Dapr state component named 'agent-workflow'): after a crash it restarts its "
            "conversation, repeating LLM and tool calls under new ids, which no ledger can "
            "deduplicate", UserWarning, stacklevel=2)
    runtime = runtime if runtime is not None else AuditedWorkflowRuntime()
    register(runtime)
    workflow = getattr(agent, "agent_workflow_name", None)
    if isinstance(workflow, str):
        runtime.mark_volatile(workflow, *VOLATILE_OUTPUT)
    return runtime


def _guarded(executor: Any, exempt: set[str]) -> Callable[..., Any]:
    """The executor's ``run_tool`` (a coroutine function) with each call of a tool not in
    ``exempt`` inside the side effect ``tool:<name>`` of the running activity. The name is
    the tool's own (``write_note``), whichever spelling the LLM asked for (``WriteNote``:
    dapr-agents matches names without case and underscores). Guarding an executor again
    (``audit_agent`` called twice on one agent) wraps its own ``run_tool`` once more, with
    the new ``exempt`` set: a tool call is never nested in two side effects of one key."""
    run_tool = executor.run_tool
    run_tool = getattr(run_tool, "_histaudit_unguarded", run_tool)

    async def run_guarded(tool_name: str, *args: Any, **kwargs: Any) -> Any:
        found = executor.get_tool(tool_name)
        if found is None or found.name in exempt:  # unknown: dapr-agents says so itself
            return await run_tool(tool_name, *args, **kwargs)
        with side_effect(None, TOOL_EFFECT_PREFIX + str(found.name)) as effect:
            tracing.annotate({"gen_ai.tool.call.id": _tool_call_id()})
            if effect.already_done:  # an earlier delivery of this call ran the tool
                effect.skip()
                return effect.previous_result
            effect.result = await run_tool(tool_name, *args, **kwargs)
        return effect.result

    run_guarded._histaudit_unguarded = run_tool  # type: ignore[attr-defined]
    return run_guarded


def _tool_call_id() -> str | None:
    """The id the LLM gave the tool call being run: dapr-agents' ``run_tool`` activity is
    called with ``{"tool_call": {"id": ..., "function": ...}, ...}``."""
    run = current_activity()
    payload = run.input if run is not None else None
    call = payload.get("tool_call") if isinstance(payload, dict) else None
    found = call.get("id") if isinstance(call, dict) else None
    return found if isinstance(found, str) else None


def _accounted(llm: Any) -> Callable[..., Any]:
    """The client's ``generate`` with each call inside an audited activity signed as
    ``llm.call`` once it answered or failed. A client shared by several agents is wrapped
    once (the wrapper records into whichever activity is running)."""
    generate = llm.generate
    if getattr(generate, "_histaudit_accounted", False):
        return generate  # type: ignore[no-any-return]

    def generate_accounted(*args: Any, **kwargs: Any) -> Any:
        run = current_activity()
        if run is None:
            return generate(*args, **kwargs)
        messages = kwargs.get("messages", args[0] if args else None)
        sent = len(messages) if isinstance(messages, (list, tuple)) else None
        model = getattr(llm, "model", None)
        started = time.time_ns()
        try:
            response = generate(*args, **kwargs)
        except Exception as exc:
            record_llm_call(LlmCall(model=model, messages=sent,
                                    error_type=type(exc).__name__), run, started_ns=started)
            raise
        record_llm_call(_described(response, model, sent), run, started_ns=started)
        return response

    generate_accounted._histaudit_accounted = True  # type: ignore[attr-defined]
    return generate_accounted


def _described(response: Any, model: Any, sent: int | None) -> LlmCall:
    """An ``LlmCall`` from what dapr-agents' client returned: an ``LLMChatResponse``
    (usage and model in ``metadata``, as the OpenAI and Dapr conversation clients put
    them), a structured-output model (no usage reported), or a stream (nothing yet)."""
    results = getattr(response, "results", None)
    metadata = getattr(response, "metadata", None)
    if isinstance(results, list) and isinstance(metadata, dict):
        reported = metadata.get("usage")
        usage: dict[str, Any] = reported if isinstance(reported, dict) else {}
        first = results[0] if results else None
        message: Any = getattr(first, "message", None)
        tools = [str(getattr(getattr(c, "function", None), "name", "?"))
                 for c in (getattr(message, "tool_calls", None) or [])]
        return LlmCall(
            model=metadata.get("model") or model, messages=sent,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"), tool_calls=tools,
            finish_reason=getattr(first, "finish_reason", None),
            answer=message.model_dump() if hasattr(message, "model_dump") else None)
    if hasattr(response, "model_dump"):  # structured output: the validated model
        return LlmCall(model=model, messages=sent, answer=response.model_dump())
    return LlmCall(model=model, messages=sent)  # a stream: consumed by the caller
