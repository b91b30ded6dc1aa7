"""The worker process: ``python -m histaudit.crashtest worker --app MODULE_OR_FILE``.

A worker loads the app (:mod:`histaudit.usercode`), finds its ``WorkflowRuntime`` — a
module-level one (usually an ``AuditedWorkflowRuntime``), or the result of a zero-argument
function annotated to return one (``def build_runtime() -> AuditedWorkflowRuntime``) —
starts it, and says so on its output (:data:`WORKER_READY`). The harness reads that output
(:mod:`histaudit.crashtest.sandbox`); the crash switches reach the app through the
environment (:mod:`histaudit.crash`).

``--info FILE`` (the clean run) also writes what is registered and which source files to
read for declared points; ``--hold`` loads the app, says :data:`WORKER_HELD`, and connects
only once a line arrives on stdin (the worker that takes over after a crash);
``--parent PID`` ends the worker when the harness is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from histaudit import usercode
from histaudit.errors import HistauditError

from .results import one_line

__all__ = ["EXIT_WORKER_SETUP", "WORKER_ERROR", "WORKER_HELD", "WORKER_READY", "main",
           "worker_main"]

WORKER_READY = "histaudit-crashtest: worker ready"
WORKER_HELD = "histaudit-crashtest: worker held"
WORKER_ERROR = "histaudit-crashtest: error: "
EXIT_WORKER_SETUP = 3
"""Worker exit status when the app cannot be imported or has no usable runtime."""


def _watch_parent(parent: int) -> None:
    """End this worker when the harness that started it is gone."""
    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, name="crashtest-parent-watch", daemon=True).start()


def _write_info(path: str, module: ModuleType, runtime: Any, target_module: str | None,
                app: str) -> None:
    """What the clean run needs to know of the app: registered names, source files."""
    from histaudit import sdk
    from histaudit.interceptor import AuditedWorkflowRuntime

    workflows, activities = sdk.registered_names(runtime)
    sources = [getattr(module, "__file__", None)]
    if target_module and target_module != app:
        is_file = usercode.is_file_ref(target_module)
        mod = sys.modules.get(Path(target_module).stem if is_file else target_module)
        sources.append(getattr(mod, "__file__", None) if mod else
                       (target_module if is_file else None))
    Path(path).write_text(json.dumps({
        "workflows": workflows, "activities": activities,
        "audited": isinstance(runtime, AuditedWorkflowRuntime) and runtime.audited,
        "sources": [s for s in dict.fromkeys(sources) if s]}), encoding="utf-8")


def worker_main(argv: Sequence[str]) -> int:
    """Run one worker until SIGTERM/SIGINT; :data:`EXIT_WORKER_SETUP` if the app is bad."""
    parser = argparse.ArgumentParser(prog="python -m histaudit.crashtest worker")
    parser.add_argument("--app", required=True)
    parser.add_argument("--info")
    parser.add_argument("--module")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--parent", type=int)
    args = parser.parse_args(argv)
    if args.parent:
        _watch_parent(args.parent)
    import dapr.ext.workflow  # noqa: F401 - the slow import, before anything else

    try:
        module = usercode.load_module(args.app, f"app {args.app!r}")
        runtime = usercode.find_runtime(module, args.app)
    except HistauditError as exc:
        print(f"{WORKER_ERROR}{one_line(str(exc))}", flush=True)
        return EXIT_WORKER_SETUP
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, any error
        print(f"{WORKER_ERROR}cannot import {args.app}: "
              f"{one_line(f'{type(exc).__name__}: {exc}')}", flush=True)
        return EXIT_WORKER_SETUP
    if args.info:
        _write_info(args.info, module, runtime, args.module, args.app)
    if args.hold:
        print(WORKER_HELD, flush=True)
        if not sys.stdin.readline():
            return 0  # the harness went away before releasing us
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        runtime.start()  # an audited runtime opens its key and ledger here
    except HistauditError as exc:
        print(f"{WORKER_ERROR}{one_line(str(exc))}", flush=True)
        return EXIT_WORKER_SETUP
    print(WORKER_READY, flush=True)
    while not stop.wait(0.5):
        pass
    with contextlib.suppress(Exception):
        runtime.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m histaudit.crashtest``: only the ``worker`` subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    print("usage: python -m histaudit.crashtest worker --app MODULE_OR_FILE "
          "(the matrix itself: histaudit crashtest --help)", file=sys.stderr)
    return 2
