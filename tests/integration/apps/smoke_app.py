"""A tiny Dapr workflow app, run as its own process by tests/integration/test_engine_smoke.py.

It must be a separate process so a test can SIGKILL it mid-activity, exactly like a crashed
app container, and then start a fresh one. It connects to the engine named by
DAPR_RUNTIME_HOST/DAPR_GRPC_PORT and talks to the test only through files in the
directory named by SMOKE_DIR:

* ``ready.<pid>``           written once the runtime's work-item stream is up;
* ``executions.log``        one line ``<activity> <pid> <instance>`` per activity start;
* ``started.<pid>``         written by a gated ``step_two`` when it begins waiting;
* ``release``               created by the test to let a gated ``step_two`` finish.

Usage: ``python smoke_app.py`` (blocks until SIGTERM/SIGINT).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import dapr.ext.workflow as wf

SMOKE_DIR = Path(os.environ["SMOKE_DIR"])
GATE_TIMEOUT_S = 120.0

wfr = wf.WorkflowRuntime()


def _record(activity: str, ctx: wf.WorkflowActivityContext) -> None:
    """Append one execution line; O_APPEND keeps concurrent writers line-atomic."""
    line = f"{activity} {os.getpid()} {ctx.workflow_id}\n".encode()
    fd = os.open(SMOKE_DIR / "executions.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _touch(name: str) -> None:
    """Create a marker file atomically (write under a temp name, then rename)."""
    tmp = SMOKE_DIR / f".{name}.tmp"
    tmp.write_text(str(os.getpid()))
    tmp.replace(SMOKE_DIR / name)


@wfr.activity(name="step_one")
def step_one(ctx: wf.WorkflowActivityContext, name: str) -> str:
    """First activity: greet."""
    _record("step_one", ctx)
    return f"hello {name}"


@wfr.activity(name="step_two")
def step_two(ctx: wf.WorkflowActivityContext, inp: dict[str, Any]) -> str:
    """Second activity: shout; when gated, hold until the test creates ``release``."""
    _record("step_two", ctx)
    if inp.get("gate"):
        _touch(f"started.{os.getpid()}")
        deadline = time.monotonic() + GATE_TIMEOUT_S
        while not (SMOKE_DIR / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("step_two gate was never released")
            time.sleep(0.02)
    return str(inp["text"]).upper() + "!"


@wfr.workflow(name="two_steps")
def two_steps(ctx: wf.DaprWorkflowContext, inp: dict[str, Any]) -> Generator[Any, Any, Any]:
    """step_one then step_two; input ``{"name": str, "gate": bool}``."""
    first = yield ctx.call_activity(step_one, input=inp["name"])
    second = yield ctx.call_activity(step_two, input={"text": first, "gate": inp.get("gate")})
    return {"first": first, "second": second}


@wfr.workflow(name="pause_between")
def pause_between(ctx: wf.DaprWorkflowContext, inp: dict[str, Any]) -> Generator[Any, Any, Any]:
    """step_one, then wait for external event ``go``, then step_two.

    Sets custom status ``waiting`` just before the wait: the engine persists it with the
    same commit that records the wait, so the test can tell when it is safe to kill the
    engine without an orchestration work item being in flight.
    """
    first = yield ctx.call_activity(step_one, input=inp["name"])
    ctx.set_custom_status("waiting")
    approval = yield ctx.wait_for_external_event("go")
    second = yield ctx.call_activity(step_two, input={"text": f"{first} {approval}"})
    return {"first": first, "second": second}


def main() -> int:
    """Start the runtime, announce readiness, and block until told to stop."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    wfr.start()
    _touch(f"ready.{os.getpid()}")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        wfr.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
