"""An audited app whose workflow holds, once, right after signing a decision, so that the
test can kill the engine before the engine has that decision.

Workflow ``resign``: ``first`` then ``second``. On its first pass past scheduling
``second`` (and only when not replaying) the workflow writes ``held`` in APP_DATA and
waits for ``go`` there: the ``activity scheduled`` decision is signed in the ledger, but
the engine has not received it yet. The test SIGKILLs the engine in that window, starts it
again and creates ``go``; the engine re-dispatches the workflow from the history it kept,
which lacks the decision, so the workflow makes and signs it a second time.

Reads HISTAUDIT_KEY / HISTAUDIT_DB and the engine address from the environment; prints
``APP READY`` once its worker is started and serves until killed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

HOLD_TIMEOUT_S = 60.0


def serve() -> None:
    data = Path(os.environ["APP_DATA"])
    wfr = AuditedWorkflowRuntime()

    @wfr.activity(name="first")
    def first(ctx: wf.WorkflowActivityContext, text: str) -> str:
        return text.upper()

    @wfr.activity(name="second")
    def second(ctx: wf.WorkflowActivityContext, text: str) -> str:
        return text + "!"

    @wfr.workflow(name="resign")
    def resign(ctx: wf.DaprWorkflowContext, text: str) -> Generator[Any, Any, str]:
        a = yield ctx.call_activity(first, input=text)
        task = ctx.call_activity(second, input=a)  # the decision is signed here
        held = data / "held"
        if not ctx.is_replaying and not held.exists():
            held.write_text(str(os.getpid()))
            deadline = time.monotonic() + HOLD_TIMEOUT_S
            while not (data / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        b = yield task
        return str(b)

    wfr.start()
    print("APP READY", flush=True)
    try:
        while True:
            time.sleep(1)
    finally:
        wfr.shutdown()


if __name__ == "__main__":
    serve()
