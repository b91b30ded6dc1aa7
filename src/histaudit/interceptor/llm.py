"""LLM calls inside activities: one signed ``llm.call`` entry per call, with its cost.

An agent's LLM call is an activity body's side effect that costs money and time: Dapr
delivers the activity at least once, so after a crash the call may be made again. Each
call made inside an audited activity is recorded, once the provider has answered (or
failed), as ``llm.call`` in the activity's instance chain, on stable storage before the
body goes on (a call the ledger lost could not be counted). What the verifier needs to
count is signed in clear: the model, the token counts the provider reported (``None``
where it reported none: structured output, streaming), how many messages were sent, the
names of the tools the answer asked for, the finish reason and the error type of a failed
call. The answer itself is a committed payload — erasable, like every payload — and so
are tool arguments, which stay inside it.

The verifier turns these into ``llm-call-repeated`` (a task whose LLM calls were made by
more than one of its executions: what the crash cost) and ``conversation-restarted`` (a
call that sent fewer messages than an earlier call of the same activity: the agent lost
its conversation). :mod:`histaudit.agents` records the calls of a dapr-agents agent;
other code calls :func:`record_llm_call` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from histaudit.errors import UsageError
from histaudit.ledger.kinds import Kind

from . import tracing
from .activity import ActivityRun, current_activity
from .recorder import sdk_json

__all__ = ["LlmCall", "record_llm_call"]


@dataclass(frozen=True, slots=True)
class LlmCall:
    """What one LLM call cost and asked for, as the provider reported it."""

    model: str | None = None
    messages: int | None = None
    """How many messages the request sent (the conversation as the LLM saw it)."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: Sequence[str] = ()
    """The names of the tools the answer asked for, in its order."""
    finish_reason: str | None = None
    error_type: str | None = None
    """The exception's type name when the call failed (it may still have cost)."""
    answer: Any = field(default=None, compare=False)
    """The answer (JSON-serializable), committed as an erasable payload, never in clear."""
    provider: str | None = None
    """The GenAI provider as the client knows it (``openai``, ``anthropic``,
    ``aws.bedrock``, …): the span's ``gen_ai.provider.name`` under the current GenAI
    conventions (:mod:`.tracing`); not signed."""


def _count(value: Any) -> int | None:
    return value if value.__class__ is int and value >= 0 else None


def record_llm_call(call: LlmCall, run: ActivityRun | None = None, *,
                    started_ns: int | None = None) -> int | None:
    """Sign ``call`` into the running activity's chain (``run``, default the current
    one); return the entry's seq, or None outside an audited activity (nothing to record
    into: a call made outside a workflow is not the ledger's business).

    The call is also a GenAI ``chat`` span (:mod:`.tracing`) naming the entry, from
    ``started_ns`` (``time.time_ns()`` taken before the call; default now) to now."""
    run = run if run is not None else current_activity()
    if run is None:
        return None
    if not all(isinstance(name, str) for name in call.tool_calls):
        raise UsageError("record_llm_call(): tool_calls must be tool names (strings)")
    model = call.model if isinstance(call.model, str) else None
    with tracing.span(*_genai(call, model), client=True, start_ns=started_ns) as traced:
        answer = run.recorder.commit(run.instance, None if call.answer is None
                                     else sdk_json(call.answer))
        entry = run.recorder.append(run.instance, Kind.LLM_CALL, {
            **run.fields(), "started_seq": run.started_seq, "model": model,
            "messages": _count(call.messages),
            "prompt_tokens": _count(call.prompt_tokens),
            "completion_tokens": _count(call.completion_tokens),
            "total_tokens": _count(call.total_tokens),
            "tool_calls": list(call.tool_calls), "finish_reason": call.finish_reason,
            "error_type": call.error_type, "answer": answer.ref,
            "answer_digest": answer.digest,
        }, answer)
        traced.entry(entry, run.recorder.origin)
        if call.error_type is not None:
            traced.failed(call.error_type)
    return entry.seq


def _genai(call: LlmCall, model: str | None) -> tuple[str, dict[str, Any]]:
    """The name and GenAI attributes of the call's inference span (:func:`.tracing.chat`)."""
    provider = call.provider if isinstance(call.provider, str) and call.provider else None
    finish = call.finish_reason if isinstance(call.finish_reason, str) else None
    return tracing.chat(model, provider=provider, input_tokens=_count(call.prompt_tokens),
                        output_tokens=_count(call.completion_tokens), finish_reason=finish)
