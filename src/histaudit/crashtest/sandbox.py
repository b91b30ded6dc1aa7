"""One run's world, and the worker processes in it.

A :class:`Sandbox` is made for every run of a matrix — the clean one and each crash — with
its own engine (:class:`~histaudit.testing.engine.EngineProcess`, or with the spec's
``engine="daprd"`` a :class:`~histaudit.testing.daprd.DaprdStack`: placement, scheduler
and daprd), ledger, key pair and ``DATA_DIR``, so parallel runs never meet. It spawns
workers (:class:`Worker`, each a ``python -m histaudit.crashtest worker`` process logging
to a file), schedules the one workflow instance the run is about, and polls its state.
Closing it kills everything it started and removes its directory.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from histaudit.crash import ENV_CRASH_INSTANCE
from histaudit.errors import EngineError
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_wait import stranded, when_hosted
from histaudit.testing.engine import EngineProcess

from .spec import CrashSpec
from .worker import WORKER_ERROR, WORKER_READY, ZYGOTE_READY

__all__ = ["READY_TIMEOUT_S", "TERMINAL", "RunError", "RunState", "Sandbox", "Worker"]

READY_TIMEOUT_S = 90.0
"""How long a worker may take to import the app and connect (a loaded machine is slow)."""

TERMINAL = ("COMPLETED", "FAILED", "TERMINATED")
"""Workflow runtime statuses after which nothing more happens."""

_POLL_S = 0.1
_STRAND_CHECK_S = 2.0
_STRAND_LOG_BYTES = 256 * 1024
_TAIL_CHARS = 1500

# Workers still running when the interpreter exits are killed (engines are, by engine.py).
_LIVE_WORKERS: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _kill_live_workers() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE_WORKERS)
        _LIVE_WORKERS.clear()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait(timeout=5)


atexit.register(_kill_live_workers)


class RunError(Exception):
    """A run could not go on (worker died, never connected …); becomes ``failed``."""

    def __init__(self, message: str, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


class _Forked:
    """A worker forked by a :class:`Zygote`: the part of ``Popen`` a :class:`Worker` uses
    (its exit status comes from the zygote, whose child it is)."""

    stdin = None

    def __init__(self, zygote: Zygote | None, pid: int | None) -> None:
        self.zygote, self.pid = zygote, pid

    def poll(self) -> int | None:
        if self.zygote is None or self.pid is None:
            return None  # not forked yet (held)
        return self.zygote.exits.get(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if self.pid is None:
                return 0
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked worker", timeout or 0)
            time.sleep(0.01)
        return rc

    def kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """A ``python -m histaudit.crashtest zygote`` process: the app loaded once, a worker
    forked from it per :meth:`fork` (:func:`histaudit.crashtest.worker.zygote_main`)."""

    def __init__(self, app: str, env: Mapping[str, str], log: Path) -> None:
        argv = [sys.executable, "-m", "histaudit.crashtest", "zygote", "--app", app,
                "--parent", str(os.getpid())]
        self.log = log
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=fh, close_fds=True)
        with _LIVE_LOCK:
            _LIVE_WORKERS.add(self.proc)
        self.exits: dict[int, int] = {}
        self._pids: queue.Queue[int] = queue.Queue()
        self._ready = threading.Event()
        self.error: str | None = None
        threading.Thread(target=self._read, name="crashtest-zygote", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            word, _, rest = line.partition(" ")
            if line == ZYGOTE_READY:
                self._ready.set()
            elif line.startswith(WORKER_ERROR):
                self.error = line[len(WORKER_ERROR):]
            elif word == "pid":
                self._pids.put(int(rest))
            elif word == "exit":
                pid, rc = rest.split()
                self.exits[int(pid)] = int(rc)
        self._ready.set()  # ended: wait_ready sees it did not get there

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        """True once the app is loaded and the zygote forks; False if it cannot."""
        return self._ready.wait(timeout) and self.proc.poll() is None and self.error is None

    def fork(self, log: Path, env: Mapping[str, str]) -> _Forked:
        assert self.proc.stdin is not None
        request = json.dumps({"log": str(log), "env": dict(env)}) + "\n"
        try:
            self.proc.stdin.write(request.encode("utf-8"))
            self.proc.stdin.flush()
            return _Forked(self, self._pids.get(timeout=30))
        except (OSError, queue.Empty):
            raise RunError("the worker fork server stopped", self.tail()) from None

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-_TAIL_CHARS:]
        except OSError:
            return ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
            self.proc.wait(timeout=10)
        with _LIVE_LOCK:
            _LIVE_WORKERS.discard(self.proc)


class Worker:
    """One worker process — ``python -m histaudit.crashtest worker``, or a fork of a
    :class:`Zygote` — its output in a log file."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes] | _Forked, log: Path,
                 *, fork: Callable[[], _Forked] | None = None) -> None:
        self.name, self.proc, self.log = name, proc, log
        self._fork = fork
        self.spawned = time.monotonic()
        self.ready_at: float | None = None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, chars: int = _TAIL_CHARS) -> str:
        return self.output()[-chars:]

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def setup_error(self) -> str | None:
        """The worker's one-line reason when it could not load the app."""
        for line in self.output().splitlines():
            if line.startswith(WORKER_ERROR):
                return line[len(WORKER_ERROR):]
        return None

    def wait_for(self, marker: str, timeout: float) -> bool:
        """Wait until the log shows ``marker``; False if the process ended first."""
        deadline = time.monotonic() + timeout
        while marker not in self.output():
            if self.proc.poll() is not None:
                return marker in self.output()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.03)
        return True

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until the worker is connected; RunError if it does not get there."""
        if not self.wait_for(WORKER_READY, timeout):
            raise RunError(self._why_not_ready(timeout), self.tail())
        self.ready_at = time.monotonic()

    def _why_not_ready(self, timeout: float) -> str:
        rc = self.proc.poll()
        error = self.setup_error()
        if error:
            return error
        if rc is None:
            return f"worker {self.name} not connected after {timeout:.0f}s"
        return f"worker {self.name} exited with status {rc} before it was ready"

    def release(self) -> None:
        """Let a held worker connect (a held fork is forked now)."""
        if self._fork is not None:
            self.proc, self._fork = self._fork(), None
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died while held; wait_ready reports that

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        if isinstance(self.proc, subprocess.Popen):
            with _LIVE_LOCK:
                _LIVE_WORKERS.discard(self.proc)


@dataclass(frozen=True)
class RunState:
    """The workflow instance's state as the engine reports it."""

    status: str
    output_text: str | None
    failure: str | None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def _quiet_logger_options() -> Any:
    from dapr.ext.workflow.logger import LoggerOptions

    return LoggerOptions(log_level="CRITICAL",
                         log_handler=logging.NullHandler())


def _create_ledger(url: str) -> None:
    """Create the ledger before any worker opens it: two workers starting side by side
    (the crashing one and the held one) then never race to create one schema."""
    from histaudit.ledger.store import Ledger

    Ledger.open(url, create=True).close()


class _EventRaiser:
    """Raises a run's external events (``--event``), in order, on a thread of its own.

    The run's first crash can come before they are delivered: a worker that dies a few
    milliseconds after the instance is scheduled leaves daprd with no host for the
    workflow actor ("did not find address for actor"), and an engine killed at its first
    point is down. The harness restarts the worker or the engine only after it sees the
    crash, so a raise that waited in line would wait for ever; here each event is asked
    again (:func:`~histaudit.testing.daprd_wait.when_hosted`) while the run goes on, and
    lands once a worker hosts the instance again. :attr:`error` says why one never did.
    """

    def __init__(self, address: str, instance: str, events: tuple[tuple[str, str], ...],
                 timeout: float) -> None:
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._raise_all, daemon=True,
                                        args=(address, instance, events, timeout),
                                        name=f"events-{instance}")
        self._thread.start()

    def _raise_all(self, address: str, instance: str, events: tuple[tuple[str, str], ...],
                   timeout: float) -> None:
        import dapr.ext.workflow as wf

        host, port = address.rsplit(":", 1)
        client = wf.DaprWorkflowClient(host=host, port=port,
                                       logger_options=_quiet_logger_options())
        try:
            for name, text in events:
                try:
                    when_hosted(functools.partial(client.raise_workflow_event, instance, name,
                                                  data=json.loads(text)), timeout, self._stop)
                except Exception as exc:  # noqa: BLE001 - reported as the run's failure
                    if not self._stop.is_set():
                        self.error = f"event {name!r} was never raised: {_one_line(exc)}"
                    return
        finally:
            with contextlib.suppress(Exception):
                client.close()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _one_line(exc: BaseException) -> str:
    details = exc.details() if hasattr(exc, "details") else None
    text = details if isinstance(details, str) and details else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split())[:300]}"


class Sandbox:
    """One run's world: engine, ledger, key pair, data directory, workers, client."""

    def __init__(self, spec: CrashSpec, *, lock_timeout: float | None = None,
                 label: str = "run", fork: bool = False) -> None:
        from histaudit.ledger.keys import generate_keypair

        self.spec = spec
        self.dir = Path(tempfile.mkdtemp(prefix=f"histaudit-crashtest-{label}-"))
        self.workers: list[Worker] = []
        self._client: Any = None
        self._events: _EventRaiser | None = None
        self.engine_restarts: list[float] = []
        """When (``time.monotonic()``) the run restarted a stranded daprd."""
        self._log_start = 0
        self._forking = fork
        self._zygote_proc: Zygote | None = None
        self.fork_refused: str | None = None
        """Why workers are spawned although ``fork=True`` was asked (None: they are not)."""
        try:
            self.data = self.dir / "data"
            self.data.mkdir()
            self.keys = self.dir / "keys"
            key, _pub, _signer = generate_keypair(self.keys, name="crashtest")
            self.db_url = f"sqlite:///{self.dir / 'ledger.db'}"
            _create_ledger(self.db_url)
            self.engine: EngineProcess | DaprdStack
            if spec.engine == "daprd":  # its own re-dispatch timing: no lock to shorten
                self.engine = DaprdStack(state_dir=self.dir / "engine",
                                         resources=spec.resources)
            else:
                self.engine = EngineProcess(binary=spec.engine_binary,
                                            state_dir=self.dir / "engine",
                                            lock_timeout=lock_timeout)
            base = {k: v for k, v in os.environ.items()
                    if not k.startswith("HISTAUDIT_") and k not in ("DATA_DIR",)}
            base.update({"HISTAUDIT_DB": self.db_url, "HISTAUDIT_KEY": str(key),
                         "DATA_DIR": str(self.data), "PYTHONUNBUFFERED": "1"})
            base.update(spec.env)
            self.instance = f"crashtest-{uuid.uuid4().hex[:12]}"
            if spec.rerun_from is not None:  # the source's own passes are not points
                base[ENV_CRASH_INSTANCE] = self.instance
            self._base_env = base
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_engine(self) -> None:
        self.engine.start()

    def kill_engine_and_restart(self, *, frozen: Sequence[Worker] = ()) -> None:
        """SIGKILL the engine like a power cut, and start it on the same port and state
        (on daprd: daprd alone; placement and scheduler keep running, as in a cluster).

        ``frozen`` workers are stopped (SIGSTOP) from before the kill until the engine is
        back, so they notice the lost stream only then and reconnect at the first try. Left
        running, a worker tries once within the restart's ~30 ms, is refused, and the SDK
        backs off 2–3 s (durabletask's worker: 2^attempt s plus jitter) — 1.3 s of the
        1.33 s each engine point of a sweep took. A worker descheduled while its engine
        restarts is an interleaving a real host has too; what it runs afterwards (the
        held step going on, the re-dispatched one) is unchanged.
        """
        self.reset_client()
        pids = [w.proc.pid for w in frozen if w.proc.pid is not None and not w.exited()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            self.engine.kill()
            self._note_log_start()
            self.engine.start()
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def _note_log_start(self) -> None:
        if isinstance(self.engine, DaprdStack):
            with contextlib.suppress(OSError):
                self._log_start = self.engine.log_path.stat().st_size

    @property
    def env(self) -> dict[str, str]:
        """Worker environment; asked after the engine started (its port may have moved)."""
        return self.engine.env(self._base_env)

    def spawn(self, name: str, extra: Mapping[str, str] | None = None, *, hold: bool = False,
              info: Path | None = None) -> Worker:
        """Start a worker; ``hold``: it loads the app, and connects once released.

        In a sandbox made with ``fork=True`` workers are forked from a :class:`Zygote`
        (a held one when released), unless the app cannot be forked from; ``info``
        always spawns.
        """
        log = self.dir / f"worker-{name}.log"
        zygote = self._zygote() if info is None else None
        if zygote is not None:
            env = dict(extra or {})
            worker = Worker(name, _Forked(None, None), log,
                            fork=lambda: zygote.fork(log, env))
            if not hold:
                worker.release()
            self.workers.append(worker)
            return worker
        argv = [sys.executable, "-m", "histaudit.crashtest", "worker",
                "--app", self.spec.app_module, "--parent", str(os.getpid())]
        if info is not None:
            argv += ["--info", str(info), "--module", self.spec.module]
        if hold:
            argv.append("--hold")
        with open(log, "wb") as fh:
            proc = subprocess.Popen(argv, env={**self.env, **(extra or {})},
                                    stdin=subprocess.PIPE if hold else subprocess.DEVNULL,
                                    stdout=fh, stderr=subprocess.STDOUT, close_fds=True)
        with _LIVE_LOCK:
            _LIVE_WORKERS.add(proc)
        worker = Worker(name, proc, log)
        self.workers.append(worker)
        return worker

    def _zygote(self) -> Zygote | None:
        """The sandbox's fork server, started on first use; None if not forking."""
        if not self._forking:
            return None
        if self._zygote_proc is None:
            self._zygote_proc = Zygote(self.spec.app_module, self.env, self.dir / "zygote.log")
            if not self._zygote_proc.wait_ready():
                self._zygote_proc.close()  # the app cannot be forked from: spawn instead
                self.fork_refused = self._zygote_proc.error or "the fork server ended"
                self._forking = False
                return None
        return self._zygote_proc

    def last_tail(self) -> str:
        """The output tail of the worker spawned last ("" if none was)."""
        return self.workers[-1].tail() if self.workers else ""

    @property
    def client(self) -> Any:
        if self._client is None:
            import dapr.ext.workflow as wf

            host, port = self.engine.address.rsplit(":", 1)
            self._client = wf.DaprWorkflowClient(host=host, port=port,
                                                 logger_options=_quiet_logger_options())
        return self._client

    def reset_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        self._client = None

    def schedule(self) -> None:
        # start_at: durabletask-go queues it at once, whether or not a worker is connected;
        # daprd holds the call until one is (ADR 0008), so every caller has a worker
        # ready first.
        if self.spec.rerun_from is not None:
            self._rerun()
        else:
            self.client.schedule_new_workflow(self.spec.workflow, input=self.spec.input,
                                              instance_id=self.instance,
                                              start_at=datetime.now(UTC))
        if self.spec.events:
            self._events = _EventRaiser(self.engine.address, self.instance, self.spec.events,
                                        self.spec.timeout)

    def _rerun(self) -> None:
        """Run the workflow to completion as ``<instance>-source``, then rerun it from
        the spec's event as the run's instance (its crash points gated to it)."""
        from histaudit.replay.history import rerun_from_event

        source = f"{self.instance}-source"
        self.client.schedule_new_workflow(self.spec.workflow, input=self.spec.input,
                                          instance_id=source, start_at=datetime.now(UTC))
        deadline = time.monotonic() + self.spec.timeout
        status = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # daprd settling: ask again
                st = self.client.get_workflow_state(source)
                status = st.runtime_status.name if st is not None else None
            if status in ("COMPLETED", "FAILED", "TERMINATED"):
                break
            time.sleep(0.05)
        if status != "COMPLETED":
            raise EngineError(f"the rerun's source {source} did not complete within "
                              f"{self.spec.timeout:g}s (status {status or 'unknown'})")
        rerun_from_event(self.engine.address, source, int(self.spec.rerun_from or 0),
                         new_instance_id=self.instance)

    def _restart_if_stranded(self, daprd: DaprdStack) -> None:
        """Restart daprd when its log since its last start shows the dapr 1.18.3
        deadlock that strands every workflow (:func:`~.daprd_wait.stranded`, ADR 0008), as
        an operator would; the restart is noted in :attr:`engine_restarts`."""
        try:
            with open(daprd.log_path, "rb") as fh:
                fh.seek(max(self._log_start, fh.seek(0, os.SEEK_END) - _STRAND_LOG_BYTES))
                log = fh.read().decode("utf-8", "replace")
        except OSError:
            return
        if stranded(log):
            self.engine_restarts.append(time.monotonic())
            self.kill_engine_and_restart()

    def state(self) -> RunState | None:
        try:
            st = self.client.get_workflow_state(self.instance, fetch_payloads=True)
        except Exception:  # noqa: BLE001 - engine restarting; ask again
            return None
        if st is None:
            return None
        failure = None
        details = getattr(st, "failure_details", None)
        if details is not None:
            failure = f"{details.error_type}: {details.message}"
        return RunState(st.runtime_status.name, st.serialized_output, failure)

    def wait_terminal(self, timeout: float, *, watch: Callable[[], bool] | None = None
                      ) -> RunState | None:
        """Poll until the instance is terminal (its state) or ``watch()`` is true (None).

        Returns the last state seen when the time runs out (possibly not terminal).
        """
        deadline = time.monotonic() + timeout
        last: RunState | None = None
        next_check = time.monotonic() + _STRAND_CHECK_S
        while True:
            if self._events is not None and self._events.error is not None:
                raise RunError(self._events.error)
            if isinstance(self.engine, DaprdStack) and time.monotonic() >= next_check:
                next_check = time.monotonic() + _STRAND_CHECK_S
                self._restart_if_stranded(self.engine)
            if watch is not None and watch():
                return None
            st = self.state()
            if st is not None:
                last = st
                if st.terminal:
                    return st
            if time.monotonic() > deadline:
                return last
            time.sleep(_POLL_S)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
        for worker in self.workers:
            worker.kill()
        if self._zygote_proc is not None:
            self._zygote_proc.close()
        self.reset_client()
        with contextlib.suppress(Exception):
            if isinstance(self.engine, DaprdStack):
                self.engine.kill_all()  # the control plane too; its etcd data goes below
            else:
                self.engine.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
