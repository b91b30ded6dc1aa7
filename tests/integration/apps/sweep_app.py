"""The app of tests/integration/test_sweep.py, test_sweep_stops.py and
test_sweep_engine.py: a short workflow with one point that makes the output differ and,
with ``FRAGILE=1``, one whose re-execution kills the worker.

``steps``: ``add`` three times, then ``stamp`` (returns how many times its body has run,
counted in ``$DATA_DIR/stamp.runs``: re-run after an app crash inside it, it returns 2 and
the output differs, with no warning finding — the ledger has one completion only), then ``fragile``
(with ``FRAGILE=1``, a second execution ends the process with status 3: a worker that
dies on its own, not at a crash point; with ``FRAGILE=raise`` it raises, and the workflow
ends FAILED), then ``add`` once more.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

from histaudit import AuditedWorkflowRuntime

wfr = AuditedWorkflowRuntime()


def _runs(name: str) -> int:
    path = Path(os.environ.get("DATA_DIR", ".")) / f"{name}.runs"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("x\n")
    return len(path.read_text(encoding="utf-8").split())


@wfr.activity(name="add")
def add(ctx: wf.WorkflowActivityContext, x: int) -> int:
    return x + 1


@wfr.activity(name="stamp")
def stamp(ctx: wf.WorkflowActivityContext, x: int) -> dict[str, int]:
    return {"x": x, "runs": _runs("stamp")}


@wfr.activity(name="fragile")
def fragile(ctx: wf.WorkflowActivityContext, x: int) -> int:
    again = _runs("fragile") > 1
    if again and os.environ.get("FRAGILE") == "1":
        os._exit(3)
    if again and os.environ.get("FRAGILE") == "raise":
        raise RuntimeError("fragile ran twice")  # no retry policy: the workflow fails
    return x


@wfr.workflow(name="steps")
def steps(ctx: wf.DaprWorkflowContext, x: int) -> Any:
    for _ in range(3):
        x = yield ctx.call_activity(add, input=x)
    stamped = yield ctx.call_activity(stamp, input=x)
    x = yield ctx.call_activity(fragile, input=x)
    x = yield ctx.call_activity(add, input=x)
    return {"x": x, "stamp": stamped}
