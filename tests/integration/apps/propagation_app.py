"""The audited app of the propagated-history test (tests/integration/test_replay.py), run as
its own process on daprd, which propagates history (the standalone engine does not).

``family_parent`` runs ``step`` twice, then ``family_child`` with its own history
propagated (``PropagationScope.OWN_HISTORY``). The child reads what it was given, waits for
the external event ``go``, reads it again (a new turn: daprd hands it the stored copy once
more) and returns the results it saw both times. Reads HISTAUDIT_DB / HISTAUDIT_KEY and the
engine from DAPR_RUNTIME_HOST / DAPR_GRPC_PORT; prints ``APP READY`` once started.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

wfr = AuditedWorkflowRuntime()


@wfr.activity(name="step")
def step(ctx: wf.WorkflowActivityContext, n: int) -> str:
    return f"step-{n}"


def _results(history: Any) -> list[str] | None:
    if history is None:
        return None
    return [e.taskCompleted.result.value for e in history.events
            if e.HasField("taskCompleted")]


@wfr.workflow(name="family_child")
def family_child(ctx: wf.DaprWorkflowContext, _: Any) -> Generator[Any, Any, dict[str, Any]]:
    first = _results(ctx.get_propagated_history())
    yield ctx.wait_for_external_event("go")
    return {"first": first, "again": _results(ctx.get_propagated_history())}


@wfr.workflow(name="family_parent")
def family_parent(ctx: wf.DaprWorkflowContext, _: Any) -> Generator[Any, Any, Any]:
    yield ctx.call_activity(step, input=1)
    yield ctx.call_activity(step, input=2)
    return (yield ctx.call_child_workflow(
        family_child, instance_id=f"{ctx.instance_id}-child",
        propagation=wf.PropagationScope.OWN_HISTORY))


if __name__ == "__main__":
    wfr.start()
    print("APP READY", flush=True)
    threading.Event().wait()
