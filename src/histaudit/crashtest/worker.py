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

``python -m histaudit.crashtest zygote --app …`` is a fork server (:func:`zygote_main`):
it loads the app once and forks a worker for each request, so a sweep's hundreds of
restarts do not each pay for importing Python, the SDK and the app.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
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

__all__ = ["EXIT_WORKER_SETUP", "WORKER_ERROR", "WORKER_HELD", "WORKER_READY", "ZYGOTE_READY",
           "main", "worker_main", "zygote_main"]

WORKER_READY = "histaudit-crashtest: worker ready"
WORKER_HELD = "histaudit-crashtest: worker held"
WORKER_ERROR = "histaudit-crashtest: error: "
ZYGOTE_READY = "histaudit-crashtest: zygote ready"
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
        "volatile": dict(getattr(runtime, "volatile_output", {})),
        "sources": [s for s in dict.fromkeys(sources) if s]}), encoding="utf-8")


def _load(app: str) -> tuple[ModuleType, Any] | int:
    """The app's module and runtime, or :data:`EXIT_WORKER_SETUP` (reason printed)."""
    import dapr.ext.workflow  # noqa: F401 - the slow import, before anything else

    try:
        module = usercode.load_module(app, f"app {app!r}")
        return module, usercode.find_runtime(module, app)
    except HistauditError as exc:
        print(f"{WORKER_ERROR}{one_line(str(exc))}", flush=True)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, any error
        print(f"{WORKER_ERROR}cannot import {app}: "
              f"{one_line(f'{type(exc).__name__}: {exc}')}", flush=True)
    return EXIT_WORKER_SETUP


def _serve(runtime: Any) -> int:
    """Start the runtime, say so, and serve until SIGTERM/SIGINT."""
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
    loaded = _load(args.app)
    if isinstance(loaded, int):
        return loaded
    module, runtime = loaded
    if args.info:
        _write_info(args.info, module, runtime, args.module, args.app)
    if args.hold:
        print(WORKER_HELD, flush=True)
        if not sys.stdin.readline():
            return 0  # the harness went away before releasing us
    return _serve(runtime)


def zygote_main(argv: Sequence[str]) -> int:
    """A fork server: load the app once, then fork a worker per request.

    Requests are JSON lines on stdin, ``{"log": FILE, "env": {...}}``; it answers
    ``pid N`` for each, and ``exit N STATUS`` as each worker ends. A worker is a fork of
    this process after the app's import and before anything connects, so the app must
    not have started a thread at import: then the zygote refuses (a setup error) and the
    harness spawns workers the usual way.
    """
    parser = argparse.ArgumentParser(prog="python -m histaudit.crashtest zygote")
    parser.add_argument("--app", required=True)
    parser.add_argument("--parent", type=int)
    args = parser.parse_args(argv)
    loaded = _load(args.app)
    if isinstance(loaded, int):
        return loaded
    _module, runtime = loaded
    if threading.active_count() != 1:
        print(f"{WORKER_ERROR}{args.app} starts threads when imported: workers cannot be "
              f"forked from it", flush=True)
        return EXIT_WORKER_SETUP
    print(ZYGOTE_READY, flush=True)
    children: set[int] = set()
    pending = b""
    try:
        while True:
            if args.parent and os.getppid() != args.parent:
                return 1  # the harness is gone
            _reap(children)
            ready, _, _ = select.select([0], [], [], 0.02)
            if not ready:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return 0
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    rc = 1
                    try:
                        rc = _forked(json.loads(line), runtime)
                    finally:
                        os._exit(rc)  # never back into this loop
                children.add(pid)
                print(f"pid {pid}", flush=True)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _reap(children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        print(f"exit {pid} {os.waitstatus_to_exitcode(status)}", flush=True)


def _forked(request: dict[str, Any], runtime: Any) -> int:
    """In the forked child: output to the log, the request's environment, serve."""
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
    os.environ.update(request["env"])
    _watch_parent(os.getppid())
    try:
        return _serve(runtime)
    except Exception:  # noqa: BLE001 - the app's error, into the worker's log
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m histaudit.crashtest``: only the ``worker`` subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    if argv[:1] == ["zygote"]:
        return zygote_main(argv[1:])
    print("usage: python -m histaudit.crashtest worker --app MODULE_OR_FILE "
          "(the matrix itself: histaudit crashtest --help)", file=sys.stderr)
    return 2
