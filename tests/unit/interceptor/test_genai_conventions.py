"""GenAI spans in both conventions histaudit follows (issue 53 item 4): the semantic
conventions 1.37.0 by default, and the GenAI conventions v0.1.0 (their own repository)
when ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``.

An audited activity runs in-process on a SQLite ledger, with the OpenTelemetry SDK and an
in-memory exporter standing in for the app's provider; it records one LLM call and one
guarded tool call. Each test asserts the exact attribute set of the ``chat`` span and of
the ``execute_tool`` span (the histaudit attributes unchanged in both), their kinds and
the tracer's schema URL. The variable is read through :class:`histaudit.config.Settings`,
which the runtime hands to :func:`histaudit.interceptor.tracing.follow` when it starts;
``tests/integration/test_traces.py`` checks the same two sets in a real Jaeger.

Cost: ≈ 0.2 s of CPU, measured (no engine, no subprocess; one SQLite ledger per test).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from histaudit.config import Settings
from histaudit.interceptor import tracing
from histaudit.interceptor.activity import audit_activity
from histaudit.interceptor.effects import side_effect
from histaudit.interceptor.llm import LlmCall, record_llm_call
from histaudit.interceptor.recorder import AuditRecorder
from histaudit.ledger import merkle
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger
from support.ledgers import read_entries

INSTANCE = "assist-1"
OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
PROOF = {"histaudit.ledger.origin", "histaudit.instance", "histaudit.entry.seq",
         "histaudit.entry.leaf", "histaudit.entry.leaf_hash", "histaudit.entry.kind"}

CHAT_1_37 = {
    "gen_ai.operation.name": "chat", "gen_ai.request.model": "stub-1",
    "gen_ai.response.model": "stub-1", "gen_ai.usage.input_tokens": 11,
    "gen_ai.usage.output_tokens": 7, "gen_ai.response.finish_reasons": ("tool_calls",)}
CHAT_LATEST = {**CHAT_1_37, "gen_ai.provider.name": "stub"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "write_note",
        "gen_ai.tool.type": "function", "gen_ai.tool.call.id": "call_1",
        "histaudit.effect.name": "tool:write_note", "histaudit.effect.key": "exec-1"}


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The app's tracer provider, for this test only: histaudit asks the API for the
    provider (to start no span while there is none) and its tracer, so both are pointed at
    a private SDK provider (the global one can be set once per process)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    monkeypatch.setattr(tracing._otel, "get_tracer", provider.get_tracer)
    monkeypatch.setattr(tracing._otel, "get_tracer_provider", lambda: provider)
    tracing._tracer.cache_clear()
    try:
        yield memory
    finally:
        tracing._tracer.cache_clear()
        tracing.follow(Settings())
        provider.shutdown()


def run_assist(exporter: InMemorySpanExporter, tmp_path: Path,
               environ: dict[str, str]) -> tuple[list[ReadableSpan], str]:
    """Follow the conventions ``environ`` chooses, as the runtime does when it starts, and
    run one audited activity that calls an LLM and a tool; the spans and the db URL."""
    tracing.follow(Settings.from_env(environ))
    db = f"sqlite:///{tmp_path / 'ledger.db'}"

    def assist(ctx: Any, question: str) -> int:
        record_llm_call(LlmCall(model="stub-1", provider="stub", messages=2,
                                prompt_tokens=11, completion_tokens=7, total_tokens=18,
                                tool_calls=["write_note"], finish_reason="tool_calls",
                                answer={"content": question}))
        with side_effect(ctx, "tool:write_note", call_id="call_1") as effect:
            effect.result = len(question)
        return int(effect.result)

    ctx = SimpleNamespace(orchestration_id=INSTANCE, workflow_id=INSTANCE, task_id=1,
                          task_execution_id="exec-1")
    with Ledger.open(db, create=True) as ledger:
        audited = audit_activity(AuditRecorder(ledger, KeyFileSigner.generate()), assist,
                                 lambda: "assist")
        assert audited(ctx, "call the vendor") == 15
    return list(exporter.get_finished_spans()), db


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    (found,) = [s for s in spans if s.name == name]
    return found


def genai_and_effect(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes besides the proof's, whose keys are checked apart."""
    attributes = dict(span.attributes or {})
    assert attributes.keys() >= PROOF, attributes
    return {k: v for k, v in attributes.items() if k not in PROOF}


def check_proof(span: ReadableSpan, db: str, kind: str) -> None:
    """The proof attributes name the entry the ledger holds (unchanged by the opt-in)."""
    a = dict(span.attributes or {})
    (entry,) = [e for e in read_entries(db, INSTANCE) if e.seq == a["histaudit.entry.seq"]]
    assert (a["histaudit.instance"], a["histaudit.entry.kind"], a["histaudit.entry.leaf"],
            a["histaudit.entry.leaf_hash"]) == (
        INSTANCE, kind, entry.leaf, merkle.leaf_hash(entry.body).hex())
    assert str(a["histaudit.ledger.origin"]).startswith("histaudit/")


@pytest.mark.parametrize(("environ", "chat", "schema_url"), [
    ({}, CHAT_1_37, "https://opentelemetry.io/schemas/1.37.0"),
    ({OPT_IN: "http,database/dup"}, CHAT_1_37, "https://opentelemetry.io/schemas/1.37.0"),
    ({OPT_IN: "gen_ai_latest_experimental"}, CHAT_LATEST, None),
    ({OPT_IN: "http/dup, gen_ai_latest_experimental"}, CHAT_LATEST, None),
], ids=["unset", "others-only", "gen_ai_latest_experimental", "in-a-list"])
def test_chat_and_execute_tool_spans_hold_exactly_the_chosen_conventions(
        exporter: InMemorySpanExporter, tmp_path: Path, environ: dict[str, str],
        chat: dict[str, Any], schema_url: str | None) -> None:
    spans, db = run_assist(exporter, tmp_path, environ)
    assert sorted(s.name for s in spans) == [
        "activity assist", "chat stub-1", "execute_tool write_note"]
    llm, tool = one(spans, "chat stub-1"), one(spans, "execute_tool write_note")
    assert genai_and_effect(llm) == chat
    assert genai_and_effect(tool) == TOOL
    assert (llm.kind, tool.kind) == (SpanKind.CLIENT, SpanKind.INTERNAL)
    check_proof(llm, db, "llm.call")
    check_proof(tool, db, "effect.done")
    for span in spans:
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.schema_url == (schema_url or "")
    # the activity's span is histaudit's own, the same in both
    assert set(one(spans, "activity assist").attributes or {}) - PROOF == {
        "histaudit.activity", "histaudit.task_id", "histaudit.execution_id",
        "histaudit.attempt"}


def test_a_call_without_a_provider_leaves_the_attribute_out(
        exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    """The conventions require ``gen_ai.provider.name``, but histaudit does not guess
    one: a caller that names none (a framework's own client) gets none on its span."""
    tracing.follow(Settings.from_env({OPT_IN: "gen_ai_latest_experimental"}))

    def ask(ctx: Any, question: str) -> str:
        record_llm_call(LlmCall(model="stub-1", prompt_tokens=3, completion_tokens=1))
        return question

    ctx = SimpleNamespace(orchestration_id=INSTANCE, workflow_id=INSTANCE, task_id=1,
                          task_execution_id="exec-1")
    with Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", create=True) as ledger:
        recorder = AuditRecorder(ledger, KeyFileSigner.generate())
        audit_activity(recorder, ask, lambda: "ask")(ctx, "q")
    llm = one(list(exporter.get_finished_spans()), "chat stub-1")
    assert genai_and_effect(llm) == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "stub-1",
        "gen_ai.response.model": "stub-1", "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 1}


@pytest.mark.parametrize(("value", "latest"), [
    (None, False), ("", False), ("gen_ai_latest_experimental", True),
    (" http , gen_ai_latest_experimental ", True), ("http/dup,database", False),
    ("gen_ai_latest_experimental/dup", False), ("GEN_AI_LATEST_EXPERIMENTAL", False),
])
def test_the_setting_reads_opentelemetry_s_opt_in_list(value: str | None,
                                                       latest: bool) -> None:
    """Values meant for other instrumentations are theirs, not errors; OpenTelemetry
    defines no ``/dup`` for GenAI, and matches values exactly."""
    environ = {} if value is None else {OPT_IN: value}
    settings = Settings.from_env({**environ, "UNRELATED": "x"})
    assert settings.genai_latest_experimental is latest
    assert "UNRELATED" not in settings.environ


def test_with_no_provider_set_no_span_is_started_and_the_context_stays_the_callers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the app sets a provider (the API's proxy is the global one) a span would be
    a non-recording one carrying the caller's context, so none is started: the block gets
    the untraced handle and the current span inside is the caller's own. Once a provider
    answers, the same call starts a span."""
    from opentelemetry import trace

    outer = trace.NonRecordingSpan(trace.SpanContext(
        trace_id=0x1234, span_id=0x5678, is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)))
    monkeypatch.setattr(tracing._otel, "get_tracer_provider",
                        lambda: trace.ProxyTracerProvider())
    with trace.use_span(outer), tracing.span("activity ask") as traced:
        assert traced is tracing._NOT_TRACED
        assert trace.get_current_span() is outer
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    monkeypatch.setattr(tracing._otel, "get_tracer_provider", lambda: provider)
    monkeypatch.setattr(tracing._otel, "get_tracer", provider.get_tracer)
    tracing._tracer.cache_clear()
    try:
        with trace.use_span(outer), tracing.span("activity ask") as traced:
            assert traced is not tracing._NOT_TRACED
            assert trace.get_current_span().get_span_context().trace_id == 0x1234
    finally:
        tracing._tracer.cache_clear()
        provider.shutdown()
    assert [s.name for s in memory.get_finished_spans()] == ["activity ask"]
