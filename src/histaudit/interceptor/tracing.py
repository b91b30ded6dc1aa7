"""Spans that resolve to proofs: each audited activity, tool call and LLM call is a span
naming the signed entry that records it.

OpenTelemetry's rule for libraries is followed: histaudit uses the API only, and the app
decides where spans go by configuring a tracer provider (the ``otel`` extra brings the SDK
and the OTLP exporter). With no provider configured, or without the API installed, every
span here is a no-op.

Names and attributes follow the OpenTelemetry semantic conventions of
:data:`SEMCONV_VERSION` (the tracer's schema URL says so), or, when the app's
``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental`` (the runtime hands
its :class:`~histaudit.config.Settings` to :func:`follow` when it starts), the GenAI
conventions :data:`GENAI_VERSION` of their own repository (docs/traces.md):

* an LLM call is a CLIENT span ``chat <model>`` (:func:`chat`) with
  ``gen_ai.operation.name = chat``, ``gen_ai.request.model``, ``gen_ai.response.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.response.finish_reasons`` and ``error.type``, and under the opt-in
  ``gen_ai.provider.name`` when the caller named the provider;
* a tool call is an INTERNAL span ``execute_tool <tool>`` (:func:`execute_tool`) with
  ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.type`` and
  ``gen_ai.tool.call.id`` when the agent's call carried one, the same in both;
* an activity (the conventions have no name for it) is ``activity <name>``, and any other
  side effect ``effect <name>``.

Every span whose record was signed carries where that record sits
(:data:`histaudit.ledger.spans.PROOF_ATTRIBUTES`):
the ledger's checkpoint origin, the instance, the entry's seq, its leaf index and its
RFC 9162 leaf hash. That is all ``histaudit prove`` needs to turn the span into an
inclusion proof under a signed checkpoint, and to notice a ledger that no longer holds
the entry the span saw. The checkpoint that covers an entry is found when it is proved:
a span is exported once and cannot name a checkpoint made after it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from histaudit.ledger import merkle
from histaudit.ledger.spans import INSTANCE, KIND, LEAF, LEAF_HASH, ORIGIN, SEQ

if TYPE_CHECKING:
    from histaudit.config import Settings
    from histaudit.ledger.records import Entry

try:
    from opentelemetry import trace as _otel
    _HAVE_OTEL = True
except ImportError:  # pragma: no cover - the otel extra is optional
    _HAVE_OTEL = False

__all__ = ["GENAI_VERSION", "SCHEMA_URL", "SEMCONV_VERSION", "Traced", "annotate", "chat",
           "execute_tool", "follow", "span"]

SEMCONV_VERSION = "1.37.0"
"""The semantic conventions (GenAI included) the spans follow by default."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
GENAI_VERSION = "0.1.0"
"""The release of open-telemetry/semantic-conventions-genai followed under the opt-in. It
names no schema URL of its own, so the tracer then carries none."""


class _Conventions:
    """Which GenAI conventions this process's spans follow: one choice per process, as
    ``OTEL_SEMCONV_STABILITY_OPT_IN`` is one variable per process (OpenTelemetry's own
    instrumentations read it once too) and the tracer provider is one per process."""

    latest = False


def follow(settings: Settings) -> None:
    """Follow the GenAI conventions ``settings`` choose (``genai_latest_experimental``:
    :data:`GENAI_VERSION`, else :data:`SEMCONV_VERSION`) in the spans made from now on."""
    _Conventions.latest = settings.genai_latest_experimental


def chat(model: str | None, *, provider: str | None, input_tokens: int | None,
         output_tokens: int | None, finish_reason: str | None) -> tuple[str, dict[str, Any]]:
    """The name and GenAI attributes of an inference span (None values are left out).

    Both versions name the span ``chat <model>`` and hold the same attributes;
    ``gen_ai.provider.name`` (required since 1.37.0, which renamed ``gen_ai.system`` to
    it) is emitted under the opt-in only, so the default stays what collectors read today.
    """
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
        "gen_ai.response.model": model, "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.response.finish_reasons": None if finish_reason is None else [finish_reason]}
    if _Conventions.latest:
        attributes["gen_ai.provider.name"] = provider
    return (f"chat {model}" if model else "chat"), attributes


def execute_tool(tool: str, call_id: str | None = None) -> tuple[str, dict[str, Any]]:
    """The name and GenAI attributes of a tool execution span: the same in both versions
    (:data:`GENAI_VERSION` made ``gen_ai.tool.name`` required; histaudit always sets it)."""
    return f"execute_tool {tool}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call_id or None}


class Traced:
    """The span of one audited call; :meth:`entry` names the record that proves it."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes (None values are left out, as OpenTelemetry requires)."""
        if self._span is not None:
            self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def entry(self, entry: Entry, origin: str) -> None:
        """Name ``entry`` of the ledger ``origin`` as the record of this span."""
        if self._span is None:
            return
        self._span.set_attributes({
            ORIGIN: origin, INSTANCE: entry.instance, SEQ: entry.seq, LEAF: entry.leaf,
            LEAF_HASH: merkle.leaf_hash(entry.body).hex(), KIND: entry.kind})

    def failed(self, error_type: str) -> None:
        """Mark the span failed with ``error.type`` (a call that raised inside it)."""
        if self._span is not None:
            self._span.set_attribute("error.type", error_type)
            self._span.set_status(_otel.Status(_otel.StatusCode.ERROR))


_NOT_TRACED = Traced(None)
_VERSION = importlib.metadata.version("histaudit")


def annotate(attributes: Mapping[str, Any]) -> None:
    """Add ``attributes`` to the current span, if one is being recorded (a wrapper that
    knows more of the call than the block that opened the span: a tool call's id)."""
    if _HAVE_OTEL:
        current = _otel.get_current_span()
        if current.is_recording():
            Traced(current).set(attributes)


@functools.cache
def _tracer(schema_url: str | None) -> Any:
    """histaudit's tracer, asked for once per schema URL: before the app sets its provider
    it is the API's proxy, which hands each span to the provider set by then."""
    return _otel.get_tracer("histaudit", _VERSION, schema_url=schema_url)


_UNTRACED = contextlib.nullcontext(_NOT_TRACED)


def span(name: str, attributes: Mapping[str, Any] | None = None, *, client: bool = False,
         start_ns: int | None = None) -> contextlib.AbstractContextManager[Traced]:
    """A span ``name``, current inside the block (child spans nest under it); ended when
    the block ends, failed with the exception's type when it raises. ``start_ns`` starts
    it in the past (a call recorded once it has returned).

    While the app has set no tracer provider (the API's proxy, or its no-op one, is the
    global provider), no span is started at all: the API's would be a non-recording span
    that carries the current span's context, i.e. changes nothing, yet costs a context
    switch in and out on every activity, LLM call and tool call (figure 7)."""
    if not _HAVE_OTEL or isinstance(_otel.get_tracer_provider(),
                                    (_otel.ProxyTracerProvider, _otel.NoOpTracerProvider)):
        return _UNTRACED
    return _span(name, attributes, client=client, start_ns=start_ns)


@contextlib.contextmanager
def _span(name: str, attributes: Mapping[str, Any] | None, *, client: bool,
          start_ns: int | None) -> Iterator[Traced]:
    tracer = _tracer(None if _Conventions.latest else SCHEMA_URL)
    kind = _otel.SpanKind.CLIENT if client else _otel.SpanKind.INTERNAL
    with tracer.start_as_current_span(name, kind=kind, start_time=start_ns,
                                      record_exception=False,
                                      set_status_on_exception=False) as current:
        if not current.is_recording():
            yield _NOT_TRACED
            return
        traced = Traced(current)
        traced.set(attributes or {})
        try:
            yield traced
        except BaseException as exc:
            traced.failed(type(exc).__name__)
            raise
