"""The audited app of tests/integration/test_replay.py, run as its own process.

An ``AuditedWorkflowRuntime`` serving the example workflows of
``examples/nondeterminism/workflows.py`` (so PYTHONPATH must hold the checkout's root). It
reads its signing key and ledger from HISTAUDIT_KEY / HISTAUDIT_DB and the engine from
DAPR_RUNTIME_HOST / DAPR_GRPC_PORT, prints ``APP READY`` once its worker is started, and
serves until killed.

Usage: ``python replay_app.py``.
"""

from __future__ import annotations

import threading

from examples.nondeterminism import workflows

from histaudit import AuditedWorkflowRuntime

APP_READY = "APP READY"


def serve() -> None:
    runtime = AuditedWorkflowRuntime()
    assert runtime.checks_replayed_results, "the live replay check is not hooked"
    workflows.register(runtime)
    runtime.start()
    print(APP_READY, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    serve()
