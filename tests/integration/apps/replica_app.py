"""One replica of the audited app of tests/integration/test_daprd_replicas.py.

Two copies run at once, each connected to its own daprd (same app id, placement,
scheduler and PostgreSQL actor store), both appending to one PostgreSQL ledger
(HISTAUDIT_DB) with one signing key (HISTAUDIT_KEY). Workflow ``spread`` fans out
``quick`` activities (input ``quick`` of them), then ``hold`` activities (input ``held``),
which block until the file ``APP_DATA/release`` exists; it returns the sum of their
results. Every body run appends ``<activity> <i> <pid>`` to ``APP_DATA/runs.txt``. Prints
``APP READY`` once its worker is started, and serves until killed.

Usage: ``python replica_app.py``.
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
HOLD_LIMIT_S = 120.0


def serve() -> None:
    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    def ran(name: str, i: int) -> None:
        with open(data / "runs.txt", "a") as fh:
            fh.write(f"{name} {i} {os.getpid()}\n")

    @wfr.activity(name="quick")
    def quick(ctx: wf.WorkflowActivityContext, i: int) -> int:
        ran("quick", i)
        return i

    @wfr.activity(name="hold")
    def hold(ctx: wf.WorkflowActivityContext, i: int) -> int:
        ran("hold", i)
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (data / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("never released")
            time.sleep(0.02)
        return 1000 + i

    @wfr.workflow(name="spread")
    def spread(ctx: wf.DaprWorkflowContext, shape: dict[str, int]) -> Any:
        first = yield wf.when_all([ctx.call_activity(quick, input=i)
                                   for i in range(shape["quick"])])
        second = yield wf.when_all([ctx.call_activity(hold, input=i)
                                    for i in range(shape["held"])])
        return sum(first) + sum(second)

    wfr.start()
    print(APP_READY, flush=True)
    threading.Event().wait()  # serve until SIGKILL


if __name__ == "__main__":
    serve()
