"""An audited app whose activity returns as many bytes as it is asked for.

Run as its own process by tests/integration/test_interceptor.py (the payload-size tests).
Workflow ``big`` calls activity ``produce`` with a size and returns its output's length.
Ledger and key come from HISTAUDIT_DB / HISTAUDIT_KEY (and the limit, when set, from
HISTAUDIT_MAX_PAYLOAD_BYTES), the engine from DAPR_RUNTIME_HOST / DAPR_GRPC_PORT; each
body run appends a line to APP_DATA/produce.runs. Prints ``APP READY`` once started.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

APP_READY = "APP READY"


def serve() -> None:
    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    @wfr.workflow(name="big")
    def big(ctx: wf.DaprWorkflowContext, size: int) -> Any:
        out = yield ctx.call_activity(produce, input=size)
        return len(out)

    @wfr.activity(name="produce")
    def produce(ctx: wf.WorkflowActivityContext, size: int) -> str:
        with open(data / "produce.runs", "a") as fh:
            fh.write("x\n")
        return "x" * size

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL/SIGTERM


if __name__ == "__main__":
    serve()
