"""LLM calls made through the OpenAI Python client, signed wherever a framework makes them.

Agent frameworks reach an OpenAI-compatible model in many ways (dapr-agents' client,
Diagrid's OpenAI Agents runner calling ``openai.OpenAI().chat.completions.create`` itself,
LangChain's ``ChatOpenAI`` inside a LangGraph node, a CrewAI or Strands model class), but
most of them end in one place: the ``openai`` package's chat completions resource. So the
one mechanism here is to watch that resource: :func:`watch_openai` wraps
``Completions.create`` / ``.parse`` and their async twins once per process (as
OpenTelemetry's instrumentors do), and each call made inside an audited activity is signed
as ``llm.call`` (:mod:`.llm`) with the model, the usage the provider reported in its answer
(structured output included), the tools the answer asked for and the finish reason. Calls
made outside an audited activity are left alone.

A framework adapter that knows more than the raw request (dapr-agents' ``generate``: the
conversation it sent) records the call itself and :func:`claims` the raw answers made
inside it, which are then handed to it instead of being signed twice.

A streamed answer (``stream=True``) is signed with no token counts: its usage arrives in
the stream, which the caller consumes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from .activity import current_activity
from .llm import LlmCall, record_llm_call

__all__ = ["answer_usage", "claims", "described", "watch_openai"]

_CLAIM: ContextVar[list[Any] | None] = ContextVar("histaudit_llm_claim", default=None)
_WATCHED = "_histaudit_watched"


@contextlib.contextmanager
def claims() -> Iterator[list[Any]]:
    """Inside the block, OpenAI answers are collected into the yielded list (parsed
    ``ChatCompletion`` objects) and not signed: the caller records the call itself."""
    answers: list[Any] = []
    token = _CLAIM.set(answers)
    try:
        yield answers
    finally:
        _CLAIM.reset(token)


def watch_openai() -> bool:
    """Sign every chat completion made inside an audited activity (idempotent). False when
    the ``openai`` package is not installed: nothing to watch."""
    try:  # the openai package is the user's (an agent framework's), not histaudit's
        module: Any = importlib.import_module("openai.resources.chat.completions.completions")
    except ImportError:
        return False
    for cls in (module.Completions, module.AsyncCompletions):
        for name in ("create", "parse"):
            original = cls.__dict__.get(name)
            if original is None or getattr(original, _WATCHED, False):
                continue
            watched = (_watched_async(original) if cls is module.AsyncCompletions
                       else _watched(original))
            setattr(watched, _WATCHED, True)
            setattr(cls, name, watched)
    return True


def _watched(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = current_activity()
        if run is None:
            return original(self, *args, **kwargs)
        claim, started = _CLAIM.get(), time.time_ns()
        try:
            answer = original(self, *args, **kwargs)
        except Exception as exc:
            if claim is None:
                record_llm_call(_failed(kwargs, exc), run, started_ns=started)
            raise
        _settle(answer, kwargs, claim, run, started)
        return answer
    return create


def _watched_async(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = current_activity()
        if run is None:
            return await original(self, *args, **kwargs)
        claim, started = _CLAIM.get(), time.time_ns()
        try:
            answer = await original(self, *args, **kwargs)
        except Exception as exc:
            if claim is None:
                record_llm_call(_failed(kwargs, exc), run, started_ns=started)
            raise
        _settle(answer, kwargs, claim, run, started)
        return answer
    return create


def _settle(answer: Any, request: dict[str, Any], claim: list[Any] | None, run: Any,
            started: int) -> None:
    """Hand the parsed answer to a claim, or sign it."""
    parsed = _parsed(answer)
    if claim is not None:
        if parsed is not None:
            claim.append(parsed)
        return
    record_llm_call(described(parsed, request), run, started_ns=started)


def _parsed(answer: Any) -> Any:
    """The ``ChatCompletion`` in an answer: itself, or parsed from a raw response
    (``with_raw_response``; the client caches the parse); None for a stream."""
    if hasattr(answer, "choices"):
        return answer
    parse = getattr(answer, "parse", None)
    if callable(parse) and hasattr(answer, "http_response"):
        try:
            parsed = parse()
        except Exception:  # noqa: BLE001 - the caller's parse will raise it again
            return None
        return parsed if hasattr(parsed, "choices") else None
    return None


PROVIDER = "openai"
"""The provider a call through the OpenAI client names on its span (under the current
GenAI conventions): the client's best knowledge, which the conventions allow to differ
from the provider actually behind its base URL."""


def _failed(request: dict[str, Any], exc: Exception) -> LlmCall:
    return LlmCall(model=_str(request.get("model")), messages=_sent(request),
                   error_type=type(exc).__name__, provider=PROVIDER)


def described(answer: Any, request: dict[str, Any]) -> LlmCall:
    """An ``LlmCall`` from a ``ChatCompletion`` (None: a stream, nothing known yet) and
    the request's keyword arguments."""
    if answer is None:
        return LlmCall(model=_str(request.get("model")), messages=_sent(request),
                       provider=PROVIDER)
    usage = answer_usage(answer)
    choices = getattr(answer, "choices", None) or []
    first = choices[0] if choices else None
    message = getattr(first, "message", None)
    tools = [str(getattr(getattr(c, "function", None), "name", "?"))
             for c in (getattr(message, "tool_calls", None) or [])]
    dump = getattr(message, "model_dump", None)
    return LlmCall(
        model=_str(getattr(answer, "model", None)) or _str(request.get("model")),
        messages=_sent(request),
        prompt_tokens=None if usage is None else usage[0],
        completion_tokens=None if usage is None else usage[1],
        total_tokens=None if usage is None else usage[2],
        tool_calls=tools, finish_reason=_str(getattr(first, "finish_reason", None)),
        answer=dump(mode="json") if callable(dump) else None, provider=PROVIDER)


def answer_usage(answer: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, total) tokens an OpenAI answer reports, or None."""
    usage = getattr(answer, "usage", None)
    counts = [getattr(usage, name, None)
              for name in ("prompt_tokens", "completion_tokens", "total_tokens")]
    found = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c >= 0]
    if len(found) != 3:
        return None
    return found[0], found[1], found[2]


def _sent(request: dict[str, Any]) -> int | None:
    messages = request.get("messages")
    return len(messages) if isinstance(messages, (list, tuple)) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
