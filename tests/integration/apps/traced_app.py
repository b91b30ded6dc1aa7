"""The audited app of tests/integration/test_traces.py, run as its own process, sending its
spans to a real Jaeger through OpenTelemetry's SDK and OTLP/HTTP exporter, configured as
any app configures them (the endpoint from ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).

Workflow ``assist``: ``ask_llm`` (records one LLM call, as an agent framework's client
would: ``record_llm_call``, naming its provider), ``write_note`` (a tool call: the side
effect ``tool:write_note``, with the LLM's call id) and ``tally`` (a plain activity). Prints
``APP READY`` once its worker is started; on SIGTERM it flushes its spans and exits.
``OTEL_SEMCONV_STABILITY_OPT_IN`` in its environment chooses the GenAI conventions.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import dapr.ext.workflow as wf
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from histaudit.dapr import AuditedWorkflowRuntime, side_effect
from histaudit.interceptor.llm import LlmCall, record_llm_call

APP_READY = "APP READY"
SERVICE = "histaudit-traced-app"


def serve() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(),
                                                   schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    wfr = AuditedWorkflowRuntime()

    @wfr.activity(name="ask_llm")
    def ask_llm(ctx: wf.WorkflowActivityContext, question: str) -> str:
        started = time.time_ns()
        record_llm_call(LlmCall(model="stub-1", messages=2, prompt_tokens=11,
                                completion_tokens=7, total_tokens=18,
                                tool_calls=["write_note"], finish_reason="tool_calls",
                                answer={"content": f"note: {question}"}, provider="stub"),
                        started_ns=started)
        return f"note: {question}"

    @wfr.activity(name="write_note")
    def write_note(ctx: wf.WorkflowActivityContext, note: str) -> int:
        with side_effect(ctx, "tool:write_note", call_id="call_1") as effect:
            if effect.already_done:
                effect.skip()
                return int(effect.previous_result)
            effect.result = len(note)
        return int(effect.result)

    @wfr.activity(name="tally")
    def tally(ctx: wf.WorkflowActivityContext, n: int) -> int:
        return n + 1

    @wfr.workflow(name="assist")
    def assist(ctx: wf.DaprWorkflowContext, question: str) -> Any:
        note = yield ctx.call_activity(ask_llm, input=question)
        size = yield ctx.call_activity(write_note, input=note)
        return (yield ctx.call_activity(tally, input=size))

    def stop(_signum: int, _frame: Any) -> None:
        provider.shutdown()  # flushes the spans still queued
        wfr.shutdown()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    wfr.start()
    print(APP_READY, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    serve()
