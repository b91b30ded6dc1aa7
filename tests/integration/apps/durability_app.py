"""The audited app of tests/integration/test_durability.py, run as its own process.

Workflows ``waiter`` (an activity, then it waits for the external event ``go``, then
another activity and a child workflow ``kid``) and ``generations`` (generation 0 runs an
activity and continues as new; generation 1 starts with ``slow``, which blocks until the
file ``APP_DATA/release`` exists, then runs one more activity). It reads its signing key
and ledger from HISTAUDIT_KEY / HISTAUDIT_DB, the engine from DAPR_RUNTIME_HOST /
DAPR_GRPC_PORT, counts body runs in ``APP_DATA/<activity>.runs``, prints ``APP READY``
once its worker is started, and serves until killed.

Usage: ``python durability_app.py``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

APP_READY = "APP READY"


def serve() -> None:
    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    def bump(name: str) -> None:
        with open(data / f"{name}.runs", "a") as fh:
            fh.write("x\n")

    @wfr.activity(name="step")
    def step(ctx: wf.WorkflowActivityContext, x: int) -> int:
        bump("step")
        return x + 1

    @wfr.activity(name="slow")
    def slow(ctx: wf.WorkflowActivityContext) -> str:
        bump("slow")
        deadline = time.monotonic() + 120
        while not (data / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "slow-ok"

    @wfr.workflow(name="kid")
    def kid(ctx: wf.DaprWorkflowContext, x: int) -> Any:
        return (yield ctx.call_activity(step, input=x))

    @wfr.workflow(name="waiter")
    def waiter(ctx: wf.DaprWorkflowContext, x: int) -> Any:
        a = yield ctx.call_activity(step, input=x)
        yield ctx.wait_for_external_event("go")
        b = yield ctx.call_activity(step, input=a)
        c = yield ctx.call_child_workflow(kid, input=b)
        return [a, b, c]

    @wfr.workflow(name="generations")
    def generations(ctx: wf.DaprWorkflowContext, gen: int) -> Any:
        if gen == 0:
            yield ctx.call_activity(step, input=0)
            ctx.continue_as_new(1)
            return None
        s = yield ctx.call_activity(slow)
        n = yield ctx.call_activity(step, input=gen)
        return [s, n]

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL


if __name__ == "__main__":
    serve()
