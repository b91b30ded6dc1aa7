"""A 100-step financial research agent as a Dapr Workflow, audited by histaudit.

The agent of "When your agent crashes at step 87": 99 research steps (market data,
financials, competitors, news, filings, an LLM analysis after each batch), then step 100
sends the report to the stakeholders — the one thing the outside world sees, guarded by
``side_effect`` so a re-run of that step cannot send it twice unnoticed.

Every step is one activity, so step N is the N-th activity the workflow schedules (its
task id N in the engine's history). Each execution leaves a countable line in
``$DATA_DIR``: ``executions.txt`` (``<step> <activity>`` per execution, replays write
nothing), ``llm_calls.txt`` (one per LLM stand-in call) and ``reports_sent.txt`` (one per
report sent).

Usage (the sidecar address from ``DAPR_GRPC_PORT``; the ledger from ``HISTAUDIT_DB``, the
signing key from ``HISTAUDIT_KEY``)::

    python app.py worker             # serve until SIGTERM
    python app.py start ID [STEPS]   # run one agent (default 100 steps), print STATUS=...

``STEPS`` below 100 makes a shorter agent of the same shape (the crash matrix uses 10 and
30); the last step always sends the report.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime, side_effect

# The plan lives beside this file (the demo reads it without loading a runtime); a
# crash-matrix worker loads this file by path, so its directory may not be importable yet.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from steps import STEPS, plan

DATA_DIR = Path(os.getenv("DATA_DIR", "."))
wfr = AuditedWorkflowRuntime()


def _note(name: str, line: str) -> None:
    with open(DATA_DIR / name, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


@wfr.workflow(name="financial_agent")
def financial_agent(ctx: wf.DaprWorkflowContext, job: dict[str, Any]) -> Any:
    steps = int(job.get("steps", STEPS))
    findings: list[str] = []
    for step, activity in enumerate(plan(steps)[:-1], start=1):
        req = {"step": step, "ticker": job["ticker"], "so_far": findings[-3:]}
        findings.append((yield ctx.call_activity(ACTIVITIES[activity], input=req)))
    report = {"ticker": job["ticker"], "steps": steps, "findings": _digest(findings)}
    receipt = yield ctx.call_activity(send_report, input={"step": steps, "report": report})
    return {"ticker": job["ticker"], "steps": steps, "report": report["findings"],
            "receipt": receipt}


def _research(ctx: wf.WorkflowActivityContext, req: dict[str, Any], what: str) -> str:
    _note("executions.txt", f"{req['step']} {what}")
    return f"{what}:{req['ticker']}:{_digest(what, req['step'], req['so_far'])}"


@wfr.activity(name="market_data")
def market_data(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    return _research(ctx, req, "market_data")


@wfr.activity(name="financials")
def financials(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    return _research(ctx, req, "financials")


@wfr.activity(name="competitors")
def competitors(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    return _research(ctx, req, "competitors")


@wfr.activity(name="news")
def news(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    return _research(ctx, req, "news")


@wfr.activity(name="filings")
def filings(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    return _research(ctx, req, "filings")


@wfr.activity(name="analyze")
def analyze(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    _note("llm_calls.txt", str(req["step"]))  # your LLM call goes here
    return _research(ctx, req, "analyze")


@wfr.activity(name="send_report")
def send_report(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    _note("executions.txt", f"{req['step']} send_report")
    report = req["report"]
    # Keyed by what is sent: one report per ticker and findings, whichever attempt sends it.
    with side_effect(ctx, "send-report", key=f"{report['ticker']}:{report['findings']}") as fx:
        if fx.already_done:
            fx.skip()  # the signed ledger says an earlier attempt sent it
        else:
            _note("reports_sent.txt", f"{report['ticker']} {report['findings']}")
            fx.result = "sent"
    # One receipt whichever attempt sent it: the workflow's output must not depend on
    # which delivery of this step did the sending (the crash matrix checks that it does not).
    return "sent"


ACTIVITIES = {"market_data": market_data, "financials": financials,
              "competitors": competitors, "news": news, "filings": filings,
              "analyze": analyze}


def worker() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    wfr.start()
    print("worker ready", flush=True)
    while not stop.wait(0.5):
        pass
    wfr.shutdown()


def start(instance_id: str, steps: int) -> None:
    client = wf.DaprWorkflowClient()
    client.schedule_new_workflow(financial_agent, input={"ticker": "ACME", "steps": steps},
                                 instance_id=instance_id, start_at=datetime.now(UTC))
    state = client.wait_for_workflow_completion(instance_id, timeout_in_seconds=600)
    print(f"STATUS={state.runtime_status.name if state else 'UNKNOWN'}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker()
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "start":
        start(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else STEPS)
    else:
        sys.exit("usage: app.py worker | app.py start INSTANCE_ID [STEPS]")
