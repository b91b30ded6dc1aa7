"""The audited app of tests/integration/test_dapr_crosscheck.py, run as its own process.

Workflow ``gated_pair``: activity ``greet``, then activity ``shout``, which, when the input
says ``gate``, writes ``shout.started`` in APP_DATA and waits for the test to create
``release`` there — so the test can copy daprd's store while the instance is half done.
Workflow ``awaits_approval``: ``greet``, then it waits for the event ``approved`` (the
test terminates it instead).
The signing key and ledger come from HISTAUDIT_KEY / HISTAUDIT_DB, the engine from
DAPR_RUNTIME_HOST / DAPR_GRPC_PORT. Prints ``APP READY`` once the worker is started.
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

    @wfr.workflow(name="gated_pair")
    def gated_pair(ctx: wf.DaprWorkflowContext, inp: dict[str, Any]) -> Any:
        first = yield ctx.call_activity(greet, input=inp["name"])
        second = yield ctx.call_activity(shout, input={"text": first, "gate": inp.get("gate")})
        return {"first": first, "second": second}

    @wfr.activity(name="greet")
    def greet(ctx: wf.WorkflowActivityContext, name: str) -> str:
        return f"hello {name}"

    @wfr.activity(name="shout")
    def shout(ctx: wf.WorkflowActivityContext, inp: dict[str, Any]) -> str:
        if inp.get("gate"):
            (data / "shout.started").write_text(ctx.workflow_id)
            deadline = time.monotonic() + 120
            while not (data / "release").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never released shout")
                time.sleep(0.02)
        return str(inp["text"]).upper() + "!"

    @wfr.workflow(name="awaits_approval")
    def awaits_approval(ctx: wf.DaprWorkflowContext, _: Any) -> Any:
        first = yield ctx.call_activity(greet, input="approver")
        decision = yield ctx.wait_for_external_event("approved")
        return {"first": first, "decision": decision}

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL/SIGTERM


if __name__ == "__main__":
    serve()
