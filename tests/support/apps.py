"""Running a workflow app as its own process against a real engine, and killing it.

An app under test runs in a child process so a test can crash it at a named crash point
(``HISTAUDIT_CRASH_AT``) or SIGKILL it like a crashed container, and start it again.
:class:`AppProcess` is the one such harness: spawn with the engine's address in the
environment, wait until the app says it is ready, wait for it to exit, kill it, read its
log. Failures raise :class:`AppError` (an ``AssertionError``, so pytest shows the log
tail as the failure), and :func:`wait_until` is the one polling loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from histaudit.testing.daprd_wait import wait_for_completion
from histaudit.testing.engine import EngineProcess

__all__ = ["AppError", "AppProcess", "AppRig", "wait_until"]

_TAIL = 3000


class AppError(AssertionError):
    """The app process did not do what the test waited for."""


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, *,
               poll: float = 0.02, details: Callable[[], str] | None = None) -> float:
    """Poll ``predicate`` until true; return the seconds it took, raise on timeout."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            more = f":\n{details()}" if details is not None else ""
            raise AppError(f"timed out after {timeout:.0f}s waiting for {what}{more}")
        time.sleep(poll)
    return time.monotonic() - start


class AppProcess:
    """One app process connected to ``engine``, its output appended to ``log``.

    ``argv`` is the command after the Python interpreter (a script and its arguments).
    The environment is the parent's minus any HISTAUDIT_* setting, then ``env`` (read at
    each spawn, so a test may change it between runs), then the engine's address.
    ``ready`` is the line the app prints once its worker is connected, or a predicate of
    its pid (for apps that signal readiness through a file).
    """

    def __init__(self, engine: EngineProcess, argv: Sequence[str | os.PathLike[str]], *,
                 log: Path, env: Mapping[str, str] | None = None,
                 ready: str | Callable[[int], bool], ready_timeout: float = 30.0,
                 exit_timeout: float = 60.0) -> None:
        self.engine = engine
        self.argv = [str(a) for a in argv]
        self.log = log
        self.env = dict(env or {})
        self.ready = ready
        self.ready_timeout = ready_timeout
        self.exit_timeout = exit_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """Process id of the latest spawn (the app must have been started)."""
        assert self.proc is not None, "app not started"
        return self.proc.pid

    def spawn(self, **extra: str) -> subprocess.Popen[bytes]:
        """Start the process (``extra``: environment for this run only); do not wait."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        env = {**self.engine.env({**base, **self.env}), **extra}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, *self.argv], env=env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)
        return self.proc

    def start(self, **extra: str) -> float:
        """Spawn and wait until the app is ready; return the wall-clock time it was."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        proc = self.spawn(**extra)

        def ready() -> bool:
            if proc.poll() is not None:
                raise AppError(f"app exited with {proc.returncode} before it was ready:\n"
                               f"{self.tail()}")
            if isinstance(self.ready, str):
                return self.ready in self.log.read_text(errors="replace")[offset:]
            return self.ready(proc.pid)

        wait_until(ready, self.ready_timeout, f"{Path(self.argv[0]).name} to be ready",
                   details=self.tail)
        return time.time()

    def wait_exit(self, timeout: float | None = None) -> int:
        """Wait for the process to end by itself (a crash point); its exit status."""
        assert self.proc is not None, "app not started"
        timeout = self.exit_timeout if timeout is None else timeout
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AppError(f"app still running after {timeout:.0f}s:\n{self.tail()}") from None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the app (a crash: no shutdown, no result sent) and reap it."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()

    def output(self) -> str:
        """Everything the app has written so far, over every run."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self) -> str:
        return self.output()[-_TAIL:]


class AppRig:
    """Base of a test's rig: its engine, app processes and workflow client.

    A context manager: leaving it kills every app process it started (``self.apps``) and
    closes the client, so a fixture reads ``with Rig(...) as rig: yield rig``.
    """

    def __init__(self, engine: EngineProcess) -> None:
        self.engine = engine
        self.apps: list[AppProcess] = []
        self.client = self.new_client()

    def new_client(self) -> Any:
        """A workflow client aimed at the engine (a fresh one after an engine restart)."""
        import dapr.ext.workflow as wf

        host, port = self.engine.address.rsplit(":", 1)
        return wf.DaprWorkflowClient(host=host, port=port)

    def history(self, instance: str) -> list[Any]:
        """The engine's own history events of ``instance`` (protobuf), fetched the way
        ``histaudit verify --engine`` does (the SDK's client has no such call before 1.19)."""
        from histaudit.replay.history import History

        return list(History.fetch(self.engine.address, instance).events)

    def schedule(self, workflow: Any, payload: Any = None, *, queue: bool = False) -> str:
        """Start ``workflow`` (a name or a function) as instance ``<name>-<8 hex>``.

        ``queue`` returns at once even with no app connected (without a start time the
        engine holds the call until a worker has begun it).
        """
        name = workflow if isinstance(workflow, str) else workflow.__name__
        instance = f"{name}-{uuid.uuid4().hex[:8]}"
        self.client.schedule_new_workflow(workflow, input=payload, instance_id=instance,
                                          start_at=datetime.now(UTC) if queue else None)
        return instance

    def wait(self, instance: str, timeout: float = 60.0) -> Any:
        """Wait for ``instance`` to finish; its state (there must be one)."""
        state = wait_for_completion(self.client, instance, timeout)
        tails = "\n".join(app.tail() for app in self.apps)
        assert state is not None, f"no state for {instance}:\n{tails}"
        return state

    def add_app(self, app: AppProcess) -> AppProcess:
        self.apps.append(app)
        return app

    def close(self) -> None:
        for app in self.apps:
            app.kill()
        self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
