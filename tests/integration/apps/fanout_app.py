"""An 8-way fan-out behind histaudit's one-line change, in the SDK's two history modes,
and a workflow with a one-second timer that then waits for the event ``approved``
(``approval``), for what reaches a workflow from outside; ``approve_then_order`` puts
activities before and after the event, for the crash matrix.

``STATEFUL_HISTORY`` unset: ``AuditedWorkflowRuntime()`` as the README shows it (histaudit
picks the mode); ``1``: ``disable_stateful_history=False`` (the SDK's history deltas on,
dapr ≥ 1.19). ``search`` writes one line per execution to ``$DATA_DIR/searches.log`` and
passes the crash point ``searched`` after it. Prints ``ready stateful_history=<the mode
histaudit chose>`` once its worker is connected; serves until killed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Generator
from datetime import timedelta
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import sdk
from histaudit.crash import crash_point
from histaudit.interceptor import AuditedWorkflowRuntime

LOG = Path(os.environ.get("DATA_DIR", ".")) / "searches.log"
FAN_OUT = 8

# dapr 1.18's WorkflowRuntime has no such mode, and no such argument
wfr = (AuditedWorkflowRuntime(disable_stateful_history=False)
       if os.environ.get("STATEFUL_HISTORY") == "1" and sdk.has_stateful_history()
       else AuditedWorkflowRuntime())


@wfr.activity(name="search")
def search(ctx: wf.WorkflowActivityContext, vendor: int) -> int:
    with LOG.open("a", encoding="utf-8") as fh:
        fh.write(f"{vendor}\n")
    crash_point("searched")
    return vendor * 10


@wfr.workflow(name="approval")
def approval(ctx: wf.DaprWorkflowContext, _: Any) -> Generator[Any, Any, Any]:
    """A one-second durable timer, then it waits for the event ``approved``."""
    yield ctx.create_timer(timedelta(seconds=1))
    decision = yield ctx.wait_for_external_event("approved")
    return decision


@wfr.workflow(name="approve_then_order")
def approve_then_order(ctx: wf.DaprWorkflowContext, _: Any) -> Generator[Any, Any, Any]:
    """A quote, the event ``approved``, an order: the approval path a crash matrix drives
    with ``--event``."""
    quote = yield ctx.call_activity(search, input=1)
    decision = yield ctx.wait_for_external_event("approved")
    order = yield ctx.call_activity(search, input=2)
    return {"quote": quote, "decision": decision, "order": order}


@wfr.workflow(name="procure")
def procure(ctx: wf.DaprWorkflowContext, _: Any) -> Generator[Any, Any, int]:
    quotes = yield wf.when_all([ctx.call_activity(search, input=v) for v in range(FAN_OUT)])
    return int(sum(quotes))


if __name__ == "__main__":
    wfr.start()
    print(f"ready stateful_history={wfr.stateful_history}", flush=True)
    threading.Event().wait()
