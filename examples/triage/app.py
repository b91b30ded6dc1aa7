"""Ticket triage: a two-step agent as a Dapr Workflow, audited by histaudit.

``summarize`` stands in for the LLM call, ``post_comment`` for the tool that writes to
the ticket. Both leave something countable in ``$DATA_DIR``: one line per LLM call in
``llm_calls.txt``, one line per posted comment in ``comments.txt``.

Usage (the Dapr sidecar address comes from ``DAPR_GRPC_PORT`` / ``DAPR_RUNTIME_HOST``;
the ledger from ``HISTAUDIT_DB``, the signing key from ``HISTAUDIT_KEY``)::

    python app.py worker        # serve workflows and activities until killed
    python app.py start ID      # start ticket ID, wait, print STATUS=<status>

``HISTAUDIT_CRASH_AT=before_post`` or ``after_post`` ends the worker like a power cut at
that point; ``IDEMPOTENT=1`` makes ``post_comment`` ask the ledger whether the comment
was already posted. See README.md next to this file.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime, crash_point, side_effect

DATA_DIR = Path(os.getenv("DATA_DIR", "."))
IDEMPOTENT = os.getenv("IDEMPOTENT") == "1"

wfr = AuditedWorkflowRuntime()  # was: wf.WorkflowRuntime()


def append_line(name: str, line: str) -> None:
    with open(DATA_DIR / name, "a") as fh:
        fh.write(line + "\n")


@wfr.workflow(name="triage")
def triage(ctx: wf.DaprWorkflowContext, ticket: dict[str, Any]) -> Any:
    summary = yield ctx.call_activity(summarize, input=ticket)
    yield ctx.call_activity(post_comment, input={"ticket": ticket["id"], "summary": summary})
    return "done"


@wfr.activity(name="summarize")
def summarize(ctx: wf.WorkflowActivityContext, ticket: dict[str, Any]) -> str:
    append_line("llm_calls.txt", ctx.workflow_id)  # your LLM call goes here
    return f"Summary: {ticket['title']}"


@wfr.activity(name="post_comment")
def post_comment(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
    crash_point("before_post")
    # The key is the ticket's: one comment per ticket, whichever attempt posts it.
    with side_effect(ctx, "post-comment", key=req["ticket"]) as effect:
        if IDEMPOTENT and effect.already_done:
            effect.skip()  # an earlier attempt posted it: the signed ledger says so
        else:
            append_line("comments.txt", f"{req['ticket']}: {req['summary']}")
            effect.result = "posted"
    # Here effect.done (or effect.skipped) is signed, but the engine has not yet heard
    # that the activity finished: a crash now makes Dapr run post_comment again.
    crash_point("after_post")
    return "already posted" if effect.skipped else "posted"


def worker() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    wfr.start()
    print("worker ready", flush=True)
    while not stop.wait(0.5):
        pass
    wfr.shutdown()


def start(instance_id: str) -> None:
    client = wf.DaprWorkflowClient()
    # start_at: queue the instance and return at once, even while no worker is connected.
    client.schedule_new_workflow(triage, input={"id": instance_id, "title": "Login page 500s"},
                                 instance_id=instance_id, start_at=datetime.now(UTC))
    state = client.wait_for_workflow_completion(instance_id, timeout_in_seconds=120)
    print(f"STATUS={state.runtime_status.name if state else 'UNKNOWN'}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker()
    elif len(sys.argv) == 3 and sys.argv[1] == "start":
        start(sys.argv[2])
    else:
        sys.exit("usage: app.py worker | app.py start INSTANCE_ID")
