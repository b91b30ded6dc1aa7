"""dapr-agents' ``DurableAgent`` audited through the adapter port (:mod:`histaudit.adapters`).

A DurableAgent runs every tool call as the activity ``dapr.agents.<name>.run_tool``, which
Dapr delivers at least once: after a crash a tool that wrote, sent or paid does it again,
and the activity record alone cannot tell that from a tool that ran once. So every tool
of the agent runs as a histaudit side effect named ``tool:<tool name>`` (the name the tool
was defined with, ``tool:write_note``), keyed by the ``run_tool`` call's execution id and
the LLM's tool call id (stable across re-deliveries): a re-delivery that finds it done
returns the recorded result without calling the tool (``effect-deduplicated``); one that
finds only its intent (a crash inside the tool) calls it again and the verifier says so
(``effect-uncertain``).
A tool that fails comes back from dapr-agents as an error result (``isError``), not as an
exception: it is signed ``effect.failed`` with ``ToolError``, never as done. The tool call's
id (the LLM's) is signed with its intent, and inside the tool
``histaudit.current_effect().idempotency_key`` is the key to hand a service that
deduplicates requests. Tools declared ``read_only`` run unguarded. The crash points
``before-effect:tool:<name>`` and ``after-effect:tool:<name>`` follow.

Every call of the agent's LLM client (``agent.llm.generate``) made inside an activity —
``call_llm``, ``summarize``, any other — is signed as ``llm.call`` with the model, token
counts and requested tools (:mod:`histaudit.interceptor.llm`), so ``verify`` reports what
a crash cost in repeated calls and tokens, and a conversation the agent lost. The token
counts are the provider's own: read from the OpenAI client's raw answer
(:func:`histaudit.adapters.claims`; a structured-output call returns only the validated
model), else from the answer's metadata.

The agent's workflows and activities are registered on the returned runtime at once, so
``histaudit replay`` and ``crashtest`` find them without ``start()``. An agent is
crash-safe only with its own state store (a Dapr state component named
``agent-workflow``): without one it restarts its conversation after a crash, and
``audit_agent`` warns. dapr-agents is imported by the caller, not here (it needs dapr
1.18 + dapr-ext-workflow 1.18; ADR 0012).
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from histaudit import adapters
from histaudit.errors import UsageError

__all__ = ["VOLATILE_OUTPUT", "audit_agent"]

VOLATILE_OUTPUT = ("$.id",)
"""Fields of the agent workflow's output (its last assistant message) that differ between
two correct runs: ``id`` is derived from the ``call_llm`` activity's execution id, which
the SDK draws from the run's clock. The crash matrix leaves them out of comparisons."""


def audit_agent(agent: Any, *, read_only: Iterable[str] = (),
                runtime: adapters.AuditedWorkflowRuntime | None = None
                ) -> adapters.AuditedWorkflowRuntime:
    """Register ``agent`` on an audited runtime (``runtime``, or a new one) with every
    tool but the ``read_only`` ones guarded as a side effect; return the runtime.

    ``read_only`` names tools in any spelling the agent resolves (``lookup``,
    ``Lookup``); a name the agent does not have is a UsageError, and so is an agent
    already audited.
    """
    executor = getattr(agent, "tool_executor", None)
    register = getattr(agent, "register", None)
    if executor is None or not callable(register):
        raise UsageError(f"audit_agent(): {type(agent).__name__} is not a dapr-agents "
                         "DurableAgent (it has no tool_executor or register())")
    if hasattr(getattr(executor, "run_tool", None), "_histaudit_unguarded"):
        raise UsageError(f"audit_agent(): agent {getattr(agent, 'name', '?')!r} is already "
                         "audited; use the runtime the first call returned")
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
    adapters.watch_openai()
    if getattr(getattr(agent, "_infra", None), "state_store", False) is None:
        warnings.warn(
            f"audit_agent(): agent {getattr(agent, 'name', '?')!r} has no state store (a "
            "Dapr state component named 'agent-workflow'): after a crash it restarts its "
            "conversation, repeating LLM and tool calls under new ids, which no ledger can "
            "deduplicate", UserWarning, stacklevel=2)
    runtime = runtime if runtime is not None else adapters.AuditedWorkflowRuntime()
    register(runtime)
    workflow = getattr(agent, "agent_workflow_name", None)
    if isinstance(workflow, str):
        runtime.mark_volatile(workflow, *VOLATILE_OUTPUT)
    return runtime


def _guarded(executor: Any, exempt: set[str]) -> Callable[..., Any]:
    """The executor's ``run_tool`` (a coroutine function) with each call of a tool not in
    ``exempt`` guarded as the side effect ``tool:<name>`` of the running activity. The
    name is the tool's own (``write_note``), whichever spelling the LLM asked for
    (``WriteNote``: dapr-agents matches names without case and underscores). A tool that
    raises comes back from dapr-agents' executor as a result with ``isError``: signed as a
    failed call (:func:`histaudit.adapters.result_error`)."""
    run_tool = executor.run_tool

    async def run_guarded(tool_name: str, *args: Any, **kwargs: Any) -> Any:
        found = executor.get_tool(tool_name)
        if found is None or found.name in exempt:  # unknown: dapr-agents says so itself
            return await run_tool(tool_name, *args, **kwargs)
        return await adapters.guarded_acall(
            str(found.name), _tool_call_id(), lambda: run_tool(tool_name, *args, **kwargs),
            failed=adapters.result_error)

    run_guarded._histaudit_unguarded = run_tool  # type: ignore[attr-defined]
    return run_guarded


def _tool_call_id() -> str | None:
    """The id the LLM gave the tool call being run: dapr-agents' ``run_tool`` activity is
    called with ``{"tool_call": {"id": ..., "function": ...}, ...}``."""
    run = adapters.current_activity()
    payload = run.input if run is not None else None
    call = payload.get("tool_call") if isinstance(payload, dict) else None
    found = call.get("id") if isinstance(call, dict) else None
    return found if isinstance(found, str) else None


def _accounted(llm: Any) -> Callable[..., Any]:
    """The client's ``generate`` with each call inside an audited activity signed as
    ``llm.call`` once it answered or failed, with the conversation's length it sent and
    the usage of the provider's raw answers (:func:`histaudit.adapters.claims`: a
    structured-output ``generate`` returns only the validated model). A client shared by
    several agents is wrapped once."""
    generate = llm.generate
    if getattr(generate, "_histaudit_accounted", False):
        return generate  # type: ignore[no-any-return]

    def generate_accounted(*args: Any, **kwargs: Any) -> Any:
        run = adapters.current_activity()
        if run is None:
            return generate(*args, **kwargs)
        messages = kwargs.get("messages", args[0] if args else None)
        sent = len(messages) if isinstance(messages, (list, tuple)) else None
        model = getattr(llm, "model", None)
        started = time.time_ns()
        with adapters.claims() as answers:
            try:
                response = generate(*args, **kwargs)
            except Exception as exc:
                adapters.record_llm_call(
                    _with_usage(adapters.LlmCall(model=model, messages=sent,
                                                 error_type=type(exc).__name__), answers),
                    run, started_ns=started)
                raise
        adapters.record_llm_call(_with_usage(_described(response, model, sent), answers),
                                 run, started_ns=started)
        return response

    generate_accounted._histaudit_accounted = True  # type: ignore[attr-defined]
    return generate_accounted


def _with_usage(call: adapters.LlmCall, answers: list[Any]) -> adapters.LlmCall:
    """``call`` with the token counts and model of the provider's raw answers (summed when
    ``generate`` made several requests), where they reported usage; else as it is."""
    reported = [u for u in map(adapters.answer_usage, answers) if u is not None]
    if not reported:
        return call
    prompt, completion, total = (sum(u[i] for u in reported) for i in range(3))
    model = next((getattr(a, "model", None) for a in answers
                  if isinstance(getattr(a, "model", None), str)), None)
    return dataclasses.replace(call, prompt_tokens=prompt, completion_tokens=completion,
                               total_tokens=total, model=model or call.model)


def _described(response: Any, model: Any, sent: int | None) -> adapters.LlmCall:
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
        return adapters.LlmCall(
            model=metadata.get("model") or model, messages=sent,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"), tool_calls=tools,
            finish_reason=getattr(first, "finish_reason", None),
            answer=message.model_dump() if hasattr(message, "model_dump") else None)
    if hasattr(response, "model_dump"):  # structured output: the validated model
        return adapters.LlmCall(model=model, messages=sent, answer=response.model_dump())
    return adapters.LlmCall(model=model, messages=sent)  # a stream: consumed by the caller
