"""An app that starts a thread when imported: workers cannot be forked from it safely
(tests/integration/test_zygote.py)."""

from __future__ import annotations

import threading
import time

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

wfr = AuditedWorkflowRuntime()
threading.Thread(target=lambda: time.sleep(3600), name="app-poller", daemon=True).start()


@wfr.activity(name="one")
def one(ctx: wf.WorkflowActivityContext, x: int) -> int:
    return x + 1


@wfr.workflow(name="single")
def single(ctx: wf.DaprWorkflowContext, x: int) -> int:
    return (yield ctx.call_activity(one, input=x))
