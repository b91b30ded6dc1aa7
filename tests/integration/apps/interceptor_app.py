"""The audited app of tests/integration/test_interceptor.py, run as its own process.

Workflows ``triage`` (two activities, the second with a side effect), ``flaky`` (fails once,
then retried), ``billing`` (one activity) and ``payment`` (a side effect that hands its
idempotency key to the payment service at PAY_URL, tests/support/dedup_service.py, and
signs a declined card as a failed effect). It reads its signing key and ledger from
HISTAUDIT_KEY / HISTAUDIT_DB, the engine from DAPR_RUNTIME_HOST / DAPR_GRPC_PORT, and
talks to the test through files in APP_DATA: ``<activity>.runs`` (one line per body run),
``notes.jsonl`` (what the side effect saw), ``comments.txt`` (the effect itself). It prints
``APP READY`` once its worker is started, and serves until killed.

Usage: ``python interceptor_app.py``.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime, current_effect, side_effect

APP_READY = "APP READY"


def _bump(data: Path, name: str) -> int:
    """Count one run of ``name`` in a file (the stand-in for a real side effect)."""
    with open(data / f"{name}.runs", "a") as fh:
        fh.write("x\n")
    return len((data / f"{name}.runs").read_text().splitlines())


def _note(data: Path, **fields: Any) -> None:
    """Tell the test something the activity saw (one JSON line)."""
    with open(data / "notes.jsonl", "a") as fh:
        fh.write(json.dumps(fields) + "\n")


def _charge(amount: int) -> tuple[int, dict[str, Any]]:
    """POST a charge to the payment service with the running effect's idempotency key,
    read where a tool would read it: from histaudit, not from its caller."""
    effect = current_effect()
    assert effect is not None
    request = urllib.request.Request(
        os.environ["PAY_URL"], data=json.dumps({"amount": amount}).encode(),
        headers={"Idempotency-Key": effect.idempotency_key,
                 "Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def serve() -> None:
    """The audited app: register workflows, connect to the engine, serve until killed."""
    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    @wfr.workflow(name="triage")
    def triage(ctx: wf.DaprWorkflowContext, ticket: dict[str, Any]) -> Any:
        summary = yield ctx.call_activity(summarize, input=ticket)
        yield ctx.call_activity(post_comment, input={"ticket": ticket["id"], "text": summary})
        return "done"

    @wfr.activity(name="summarize")
    async def summarize(ctx: wf.WorkflowActivityContext, ticket: dict[str, Any]) -> str:
        _bump(data, "summarize")
        return f"Summary: {ticket['title']}"

    @wfr.activity(name="post_comment")
    def post_comment(ctx: wf.WorkflowActivityContext, req: dict[str, Any]) -> str:
        comments = data / "comments.txt"
        with side_effect(ctx, "post-comment", key=f"ticket-{req['ticket']}") as effect:
            _note(data, activity="post_comment", already_done=effect.already_done,
                  uncertain=effect.uncertain, previous_result=effect.previous_result)
            if effect.already_done:
                effect.skip()
                return str(effect.previous_result)
            lines = comments.read_text().splitlines() if comments.exists() else []
            mine = [i for i, line in enumerate(lines) if line.startswith(f"{req['ticket']}:")]
            if effect.uncertain and mine:  # the earlier attempt did post it: confirm only
                effect.result = f"comment-{mine[0] + 1}"
                return str(effect.result)
            with open(comments, "a") as fh:
                fh.write(f"{req['ticket']}: {req['text']}\n")
            effect.result = f"comment-{len(lines) + 1}"
            return str(effect.result)

    @wfr.workflow(name="flaky")
    def flaky(ctx: wf.DaprWorkflowContext) -> Any:
        policy = wf.RetryPolicy(first_retry_interval=timedelta(seconds=1),
                                max_number_of_attempts=3)
        return (yield ctx.call_activity(flaky_step, retry_policy=policy))

    @wfr.activity(name="flaky_step")
    def flaky_step(ctx: wf.WorkflowActivityContext) -> int:
        runs = _bump(data, "flaky_step")
        if runs == 1:
            raise ValueError("transient failure, try again")
        return runs

    @wfr.workflow(name="billing")
    def billing(ctx: wf.DaprWorkflowContext, amount: int) -> Any:
        return (yield ctx.call_activity(charge, input=amount))

    @wfr.activity(name="charge")
    def charge(ctx: wf.WorkflowActivityContext, amount: int) -> str:
        _bump(data, "charge")
        return f"charged {amount}"

    @wfr.workflow(name="payment")
    def payment(ctx: wf.DaprWorkflowContext, amount: int) -> Any:
        return (yield ctx.call_activity(pay, input=amount))

    @wfr.activity(name="pay")
    def pay(ctx: wf.WorkflowActivityContext, amount: int) -> str:
        with side_effect(ctx, "payment") as effect:
            status, answer = _charge(amount)
            if status != 200:
                effect.fail("PaymentDeclined", answer["error"])
                return "declined"
            effect.result = answer["charge"]
        return str(effect.result)

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL/SIGTERM


if __name__ == "__main__":
    serve()
