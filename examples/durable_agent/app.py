"""A dapr-agents DurableAgent with two tools, audited with one line (``audit_agent``).

``lookup`` only reads (declared read-only); ``write_note`` appends a line to
``$DATA_DIR/notes.txt`` — the side effect a crash must not repeat. The LLM is the
OpenAI-compatible stub at ``$STUB_LLM_URL`` (``stub_llm.py`` here: no network). The agent
keeps its conversation in the Dapr state store ``agent-workflow``
(``components/agent-workflow.yaml``), which makes it crash-safe. Run as a process beside
daprd: it prints ``ready`` once its worker is connected and serves until killed
(``demo.py`` does that, and crashes it).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from dapr_agents import DurableAgent, tool
from dapr_agents.llm import OpenAIChatClient

from histaudit import audit_agent

NOTES = Path(os.environ.get("DATA_DIR", ".")) / "notes.txt"


@tool
def lookup(topic: str) -> str:
    """Look a topic up (reads only)."""
    return f"{topic}: nothing new"


@tool
def write_note(text: str) -> str:
    """Append a line to the notes file."""
    with NOTES.open("a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return "written"


agent = DurableAgent(
    name="scribe", role="scribe", goal="keep notes", instructions=["write what you are told"],
    llm=OpenAIChatClient(base_url=os.environ.get("STUB_LLM_URL", "http://127.0.0.1:9/v1"),
                         api_key="stub", model="stub-1"),
    tools=[lookup, write_note])
wfr = audit_agent(agent, read_only=["lookup"])

if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
    # Traces to an OTLP backend (docs/traces.md): each LLM call, tool call and activity is
    # a GenAI span naming its signed entry, which `histaudit prove` turns into a proof.
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "scribe"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(),
                                                   schedule_delay_millis=200))
    trace.set_tracer_provider(provider)

if __name__ == "__main__":
    wfr.start()
    print("ready", flush=True)
    threading.Event().wait()
