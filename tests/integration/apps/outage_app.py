"""The audited app of tests/integration/test_ledger_outage.py, run as its own process.

Workflow ``chain``: ``step`` ``n`` times in a row (each sleeps ``pause`` seconds and adds
one), returning the sum, so a ledger outage can be made while activities are in flight.
It reads its ledger and key from HISTAUDIT_DB / HISTAUDIT_KEY, the engine from
DAPR_RUNTIME_HOST / DAPR_GRPC_PORT, prints ``APP READY`` once its worker is started, and
serves until killed. Usage: ``python outage_app.py``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

APP_READY = "APP READY"


def serve() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    wfr = AuditedWorkflowRuntime()

    @wfr.activity(name="step")
    def step(ctx: wf.WorkflowActivityContext, job: dict[str, Any]) -> int:
        time.sleep(job["pause"])
        return int(job["x"]) + 1

    @wfr.workflow(name="chain")
    def chain(ctx: wf.DaprWorkflowContext, job: dict[str, Any]) -> Any:
        x = 0
        for _ in range(job["n"]):
            x = yield ctx.call_activity(step, input={"x": x, "pause": job["pause"]})
        return {"x": x}

    wfr.start()
    print(APP_READY, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    serve()
