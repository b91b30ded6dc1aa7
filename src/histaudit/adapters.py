"""The port agent-framework adapters plug into, and all they use of histaudit.

An adapter (``histaudit.contrib.<framework>``) makes a framework's durable agent as
auditable as any workflow: its tools guarded as side effects keyed by the LLM's tool call,
a tool's error signed as a failed call, its LLM calls signed with the provider's usage,
its workflow runtime an audited one. It imports this module, :mod:`histaudit.errors` and
:mod:`histaudit.config` and nothing else of histaudit (import-linter holds it to that), so
the core can change behind the port; the core never imports an adapter.

What the port offers:

* :func:`guarded_call` / :func:`guarded_acall`: run one tool call as the side effect
  ``tool:<name>`` of the running activity. A re-delivery that finds it done returns the
  recorded result without calling the tool (``effect-deduplicated``); a crash inside it
  leaves it uncertain (``effect-uncertain``); an exception, or a result the adapter's
  ``failed`` says is an error, is signed ``effect.failed``, never done. Outside an audited
  activity the tool just runs.
* :func:`watch_openai` signs every OpenAI chat completion made inside an audited activity
  (:mod:`histaudit.interceptor.openai_client`); :func:`claims` lets an adapter that records
  the call itself take the raw answers; :func:`record_llm_call` / :class:`LlmCall` for a
  model interface that is not OpenAI's.
* :func:`take_over`: give a runtime a framework built itself (and has not started) over
  to an :class:`AuditedWorkflowRuntime`, registering the same workflows and activities.
* :func:`current_effect`, :func:`current_activity`: what the running call is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator
from typing import Any, TypeVar

from histaudit.errors import UsageError
from histaudit.interceptor import tracing
from histaudit.interceptor.activity import ActivityRun, current_activity
from histaudit.interceptor.effects import (
    TOOL_EFFECT_PREFIX,
    SideEffect,
    current_effect,
    side_effect,
)
from histaudit.interceptor.llm import LlmCall, record_llm_call
from histaudit.interceptor.openai_client import answer_usage, claims, watch_openai
from histaudit.interceptor.runtime import AuditedWorkflowRuntime

__all__ = ["TOOL_EFFECT_PREFIX", "ActivityRun", "AuditedWorkflowRuntime", "LlmCall",
           "SideEffect", "answer_usage", "claims", "current_activity", "current_effect",
           "guarded_acall", "guarded_call", "read_only_tools", "record_llm_call",
           "result_error", "take_over", "tool_call", "watch_openai"]

T = TypeVar("T")
Failed = Callable[[Any], "tuple[str, str] | None"]
"""Says whether a tool's result is an error the framework made a value of: (error type,
error text), or None for a success."""


@contextlib.contextmanager
def tool_call(tool: str, *, call_id: str | None = None) -> Iterator[SideEffect]:
    """The side effect ``tool:<tool>`` of the running activity, keyed by the activity
    call's execution id and, when the framework gives one, the LLM's tool call id
    (``<execution id>/<call id>``): stable across re-deliveries and retries of the call,
    distinct for two tool calls one activity runs (a LangGraph tool node), and never
    shared by two calls even where a model repeats its ids. The call id is signed with
    the intent and named on the tool's span."""
    run = current_activity()
    if run is None:
        raise RuntimeError("tool_call() runs inside an audited activity")  # adapters check
    key = run.execution_id or f"task-{run.task_id}"
    if isinstance(call_id, str) and call_id:
        key = f"{key}/{call_id}"
    with side_effect(None, TOOL_EFFECT_PREFIX + tool, key=key, call_id=call_id) as effect:
        tracing.annotate({"gen_ai.tool.call.id": call_id})
        yield effect


def guarded_call(tool: str, call_id: str | None, call: Callable[[], T], *,
                 failed: Failed | None = None) -> T:
    """Run ``call`` as one guarded tool call (see the module docstring); return its
    result, or the recorded one when an earlier delivery did it."""
    if current_activity() is None:
        return call()
    with tool_call(tool, call_id=call_id) as effect:
        if effect.already_done:
            effect.skip()
            return effect.previous_result  # type: ignore[no-any-return]
        result = call()
        _settle(effect, result, failed)
    return result


async def guarded_acall(tool: str, call_id: str | None, call: Callable[[], Awaitable[T]], *,
                        failed: Failed | None = None) -> T:
    """:func:`guarded_call` for a coroutine tool."""
    if current_activity() is None:
        return await call()
    with tool_call(tool, call_id=call_id) as effect:
        if effect.already_done:
            effect.skip()
            return effect.previous_result  # type: ignore[no-any-return]
        result = await call()
        _settle(effect, result, failed)
    return result


def _settle(effect: SideEffect, result: Any, failed: Failed | None) -> None:
    problem = failed(result) if failed is not None else None
    if problem is not None:
        effect.fail(*problem)
    effect.result = result


def read_only_tools(read_only: Iterable[str] | str, tools: Collection[str], who: str
                    ) -> set[str]:
    """The tools an adapter leaves unguarded: ``read_only`` (one name or several), each of
    which must be one of ``tools`` (the names the framework gives them); a name it has not
    is a one-line UsageError that lists the tools there are. ``who`` names the caller."""
    names = {read_only} if isinstance(read_only, str) else set(read_only)
    unknown = sorted(names - set(tools))
    if unknown:
        raise UsageError(f"{who}: read_only names {', '.join(map(repr, unknown))}, which the "
                         f"agent has no tool of (its tools: {', '.join(sorted(tools)) or 'none'})")
    return names


def take_over(register: Callable[[AuditedWorkflowRuntime], None],
              **runtime_args: Any) -> AuditedWorkflowRuntime:
    """A new :class:`AuditedWorkflowRuntime` (``runtime_args`` as ``WorkflowRuntime``
    takes them) on which ``register`` registers what a framework's own runtime had: the
    functions may carry that runtime's registration marks, which are dropped (the old
    runtime must not be started)."""
    runtime = AuditedWorkflowRuntime(**runtime_args)
    with runtime.taking_over():
        register(runtime)
    return runtime


def result_error(result: Any) -> tuple[str, str] | None:
    """The common shape of a tool error made a value: an object or dict with ``isError``
    true (MCP, dapr-agents) and text content blocks. None when ``result`` is no error."""
    flag = (result.get("isError") if isinstance(result, dict)
            else getattr(result, "isError", None))
    if flag is not True:
        return None
    content = (result.get("content") if isinstance(result, dict)
               else getattr(result, "content", None))
    parts = [block.get("text") if isinstance(block, dict) else getattr(block, "text", None)
             for block in (content if isinstance(content, list) else [])]
    return "ToolError", "\n".join(p for p in parts if isinstance(p, str))

