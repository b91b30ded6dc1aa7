"""A research-report agent as a Dapr workflow, audited by histaudit.

The shape of a typical "agent" pipeline, with every step a workflow activity::

    plan_research
      -> fetch_source x N        (fan-out, ctx.when_all)
      -> extract_notes x N       (fan-out, ctx.when_all)
      -> analyze                 (child workflow: cluster_claims -> score_evidence
                                                  -> summarize_findings)
      -> draft_report
      -> review_draft            (RetryPolicy; the reviewer is "busy" on the first try)
      -> publish_report          (a side effect, done once per report)

The LLM calls and HTTP fetches are deterministic stand-ins (text derived from the input
by hashing), so a crashed-and-resumed run must end with exactly the output of a clean one.
Every activity body appends a line ``<activity> <instance> <pid>`` to
``$DATA_DIR/runs.log``, so you can count how often each body really ran.

The only histaudit-specific lines: ``AuditedWorkflowRuntime()`` instead of
``WorkflowRuntime()``, the ``side_effect`` guard around publishing, and a few named
``crash_point`` calls (no-ops unless ``HISTAUDIT_CRASH_AT`` names them).

Usage (see README.md for a whole session)::

    python app.py serve                  # worker: serve workflows until killed
    python app.py run --topic "..." [--sources a,b,c] [--instance ID]

Environment: ``HISTAUDIT_KEY`` (signing key, required), ``HISTAUDIT_DB`` (ledger URL),
``DATA_DIR`` (stand-in outputs, default ``./research-data``), ``DAPR_RUNTIME_HOST`` /
``DAPR_GRPC_PORT`` (the engine). ``RESEARCH_FETCH_GATE``: when set, every
``fetch_source`` waits until that file exists before returning — a slow source on
demand, used to hold the fan-out open (e.g. while the engine is restarted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime, crash_point, side_effect

APP_READY = "RESEARCH APP READY"
DEFAULT_SOURCES = ("arxiv", "news", "filings", "patents")
GATE_TIMEOUT_S = 120.0
REVIEW_RETRY = wf.RetryPolicy(first_retry_interval=timedelta(milliseconds=500),
                              max_number_of_attempts=3)


class ReviewerBusy(RuntimeError):  # noqa: N818 - its name is the signed error_type tests read
    """The (stand-in) reviewer model is overloaded; retrying later helps."""


# --- stand-ins for the outside world ----------------------------------------------------

def data_dir() -> Path:
    path = Path(os.environ.get("DATA_DIR", "research-data"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _append_line(path: Path, line: str) -> None:
    """One O_APPEND write: lines from concurrent activities never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def _ran(activity: str, ctx: wf.WorkflowActivityContext) -> None:
    """Count one execution of an activity body."""
    _append_line(data_dir() / "runs.log", f"{activity} {ctx.workflow_id} {os.getpid()}")


def _fingerprint(*parts: Any) -> str:
    """A short, stable stand-in for model output: same input, same text."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def _wait_for_gate() -> None:
    gate = os.environ.get("RESEARCH_FETCH_GATE")
    if not gate:
        return
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"fetch gate {gate} never opened")
        time.sleep(0.05)


# --- activities -------------------------------------------------------------------------

def plan_research(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> dict[str, Any]:
    """Turn the request into one query per source."""
    _ran("plan_research", ctx)
    topic = req["topic"]
    sources = list(req.get("sources") or DEFAULT_SOURCES)
    return {"topic": topic,
            "queries": [{"source": s, "query": f"{topic} site:{s}"} for s in sources]}


def fetch_source(ctx: wf.WorkflowActivityContext, q: dict[str, str]) -> dict[str, Any]:
    """Fetch documents for one query (stand-in for a slow, billable HTTP call)."""
    _ran("fetch_source", ctx)
    _wait_for_gate()
    docs = [f"{q['source']}-doc-{_fingerprint(q['query'], i)}" for i in range(3)]
    crash_point("fetched")  # fetched, not yet returned: the engine will ask again
    return {"source": q["source"], "docs": docs}


def extract_notes(ctx: wf.WorkflowActivityContext, fetched: dict[str, Any]) -> dict[str, Any]:
    """Extract the claims of one source's documents (stand-in for an LLM call)."""
    _ran("extract_notes", ctx)
    claims = [f"claim-{_fingerprint(doc)[:6]}" for doc in fetched["docs"]]
    crash_point("extracted")
    return {"source": fetched["source"], "claims": claims}


def cluster_claims(ctx: wf.WorkflowActivityContext, notes: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Group claims into themes (child workflow, step 1)."""
    _ran("cluster_claims", ctx)
    claims = sorted(c for n in notes for c in n["claims"])
    themes: dict[str, list[str]] = {}
    for c in claims:
        themes.setdefault(f"theme-{int(c[-1], 16) % 3}", []).append(c)
    return [{"theme": t, "claims": cs} for t, cs in sorted(themes.items())]


def score_evidence(ctx: wf.WorkflowActivityContext, themes: list[dict[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Score each theme by its support (child workflow, step 2)."""
    _ran("score_evidence", ctx)
    return [{**t, "score": len(t["claims"])} for t in themes]


def summarize_findings(ctx: wf.WorkflowActivityContext, scored: list[dict[str, Any]]
                       ) -> dict[str, Any]:
    """Keep the best-supported themes (child workflow, step 3)."""
    _ran("summarize_findings", ctx)
    ranked = sorted(scored, key=lambda t: (-t["score"], t["theme"]))
    return {"key_findings": [f"{t['theme']} ({t['score']} claims)" for t in ranked[:2]],
            "themes": len(scored)}


def draft_report(ctx: wf.WorkflowActivityContext, inp: dict[str, Any]) -> dict[str, Any]:
    """Write the report from the analysis (stand-in for an LLM call)."""
    _ran("draft_report", ctx)
    body = [f"Findings on {inp['topic']}:"] + [f"- {f}" for f in
                                               inp["analysis"]["key_findings"]]
    crash_point("drafted")
    return {"title": f"Research report: {inp['topic']}", "body": body,
            "sources": inp["sources"]}


def review_draft(ctx: wf.WorkflowActivityContext, draft: dict[str, Any]) -> dict[str, Any]:
    """Review the draft. The stand-in reviewer is busy on its first call per workflow.

    That first failure is deterministic (counted in ``$DATA_DIR/review-attempts/``), so
    every run exercises the RetryPolicy path: a deliberate retry, not a crash.
    """
    _ran("review_draft", ctx)
    attempts = data_dir() / "review-attempts"
    attempts.mkdir(exist_ok=True)
    mine = attempts / ctx.workflow_id
    _append_line(mine, str(os.getpid()))
    if len(mine.read_text().splitlines()) == 1:
        raise ReviewerBusy("reviewer busy, try again shortly")
    return {**draft, "approved": True, "review": f"ok-{_fingerprint(draft)}"}


def publish_report(ctx: wf.WorkflowActivityContext, report: dict[str, Any]) -> dict[str, Any]:
    """Publish the report once: append it to ``$DATA_DIR/published.txt``.

    The one step with an effect outside the workflow. Re-delivered after a crash, it asks
    the ledger whether this report was already published and skips it if so.
    """
    _ran("publish_report", ctx)
    report_id = _fingerprint(report)
    out = data_dir() / "published.txt"
    receipt = {"report_id": report_id, "channel": "published.txt"}
    with side_effect(ctx, "publish", key=f"report-{ctx.workflow_id}") as effect:
        if effect.already_done:
            effect.skip()
            return dict(effect.previous_result or receipt)
        if effect.uncertain and out.exists() and any(
                line.split(" ", 1)[0] == ctx.workflow_id
                for line in out.read_text().splitlines()):
            # The crashed attempt did publish it: this one did not, so it skips (a done
            # would say this attempt published too, and crashtest would count two).
            effect.skip()
            return receipt
        _append_line(out, f"{ctx.workflow_id} {report_id} {report['title']}")
        crash_point("published")  # published, not yet recorded as done
        effect.result = receipt
    return receipt


ACTIVITIES = (plan_research, fetch_source, extract_notes, cluster_claims, score_evidence,
              summarize_findings, draft_report, review_draft, publish_report)


# --- workflows --------------------------------------------------------------------------

def analyze(ctx: wf.DaprWorkflowContext, inp: dict[str, Any]) -> Any:
    """Child workflow: turn the notes into ranked findings."""
    themes = yield ctx.call_activity(cluster_claims, input=inp["notes"])
    scored = yield ctx.call_activity(score_evidence, input=themes)
    return (yield ctx.call_activity(summarize_findings, input=scored))


def research_report(ctx: wf.DaprWorkflowContext, req: dict[str, Any]) -> Any:
    """Plan, fetch and extract in parallel, analyze, draft, review, publish."""
    plan = yield ctx.call_activity(plan_research, input=req)
    fetched = yield wf.when_all([ctx.call_activity(fetch_source, input=q)
                                 for q in plan["queries"]])
    notes = yield wf.when_all([ctx.call_activity(extract_notes, input=f) for f in fetched])
    analysis = yield ctx.call_child_workflow(
        analyze, input={"topic": plan["topic"], "notes": notes},
        instance_id=f"{ctx.instance_id}-analyze")
    draft = yield ctx.call_activity(draft_report, input={
        "topic": plan["topic"], "analysis": analysis,
        "sources": [f["source"] for f in fetched]})
    reviewed = yield ctx.call_activity(review_draft, input=draft, retry_policy=REVIEW_RETRY)
    receipt = yield ctx.call_activity(publish_report, input=reviewed)
    return {"title": reviewed["title"], "body": reviewed["body"],
            "review": reviewed["review"], "receipt": receipt}


def build_runtime(**kwargs: Any) -> AuditedWorkflowRuntime:
    """The audited runtime with this app's workflows and activities registered.

    Stateful-history delivery is off unless asked for: the pinned standalone engine
    (durabletask-go v0.14.0) can hand a workflow turn to a worker stream that is just
    disconnecting — exactly what a crash does — and then never deliver it again, so the
    instance hangs (fixed upstream in dapr/durabletask-go#129). Without it every turn
    goes through the engine's shared queue with its full history, which a new worker
    picks up after a crash.
    """
    kwargs.setdefault("disable_stateful_history", True)
    wfr = AuditedWorkflowRuntime(**kwargs)
    wfr.register_workflow(research_report, name="research_report")
    wfr.register_workflow(analyze, name="analyze")
    for fn in ACTIVITIES:
        wfr.register_activity(fn, name=fn.__name__)
    return wfr


# --- command line -----------------------------------------------------------------------

def serve() -> None:
    """Start the worker and serve until killed."""
    wfr = build_runtime()
    wfr.start()
    print(APP_READY, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        wfr.shutdown()


def run(topic: str, sources: list[str] | None, instance: str | None, timeout: int) -> int:
    """Schedule one report and wait for it (a worker must be serving)."""
    client = wf.DaprWorkflowClient()
    try:
        iid = client.schedule_new_workflow("research_report", instance_id=instance,
                                           input={"topic": topic, "sources": sources})
        print(f"scheduled {iid}", file=sys.stderr)
        try:
            state = client.wait_for_workflow_completion(iid, timeout_in_seconds=timeout)
        except TimeoutError:
            print(f"{iid}: not finished after {timeout}s (still running)", file=sys.stderr)
            return 1
    finally:
        client.close()
    if state is None or state.runtime_status != wf.WorkflowStatus.COMPLETED:
        print(f"{iid}: {state.runtime_status.name if state else 'not found'}", file=sys.stderr)
        return 1
    print(json.dumps(json.loads(state.serialized_output), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve workflows until killed (default)")
    p_run = sub.add_parser("run", help="schedule one report and wait for it")
    p_run.add_argument("--topic", required=True)
    p_run.add_argument("--sources", help="comma list (default: %(default)s)",
                       default=",".join(DEFAULT_SOURCES))
    p_run.add_argument("--instance", help="instance id (default: random)")
    p_run.add_argument("--timeout", type=int, default=120)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.topic, [s for s in args.sources.split(",") if s], args.instance,
                   args.timeout)
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
