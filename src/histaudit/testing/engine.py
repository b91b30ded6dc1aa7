"""Run the Dapr workflow engine (durabletask-go) as a child process.

The crash matrix and the integration tests need a real engine they can start, SIGKILL
like a power cut, and bring back on the same port with the same SQLite state file. This
module owns that life cycle so callers never juggle ``subprocess`` handles or guess
whether the sidecar is ready yet.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from histaudit.errors import EngineError

from .sidecar import Sidecar

__all__ = ["BINARY_NAME", "ENV_BINARY", "EngineProcess", "find_engine_binary", "free_port"]

BINARY_NAME = "durabletask-go"
"""File name of the engine binary that ``make engine`` builds."""


ENV_BINARY = "HISTAUDIT_ENGINE_BIN"
"""Environment variable naming the engine binary explicitly."""

READY_LINE = b"server listening at"
"""What the engine prints once its gRPC server accepts connections."""

_HINT = "run `make engine` to build it"
_LOOPBACK = "127.0.0.1"
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "localhost"})

# Engines still running when the interpreter exits are killed, so a failed test run or a
# crashed benchmark does not leave sidecars behind holding ports and state files. The daprd
# stack's processes (daprd.py: daprd, placement, scheduler, sentry) are registered here too.
# Strong references on purpose: an EngineProcess object dropped without stop() must not take
# the only handle on a still-running process with it.
_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill_live_engines() -> None:
    """Kill every engine process this interpreter started and did not stop (atexit hook)."""
    for proc in list(_LIVE):
        try:
            proc.kill()
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass
    _LIVE.clear()


atexit.register(_kill_live_engines)


def _repo_root() -> Path:
    """The checkout this package lives in (``src/histaudit/testing/`` → root)."""
    return Path(__file__).resolve().parents[3]


def find_engine_binary() -> Path:
    """Locate the durabletask-go binary.

    Order: ``$HISTAUDIT_ENGINE_BIN``, then ``<repo>/.tools/bin/durabletask-go``, then
    ``PATH``. An explicit environment variable that points nowhere is an error rather
    than a silent fallback, so a typo cannot make a run use a different engine.
    """
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
        raise EngineError(f"{ENV_BINARY}={explicit} is not an executable file; {_HINT}")
    local = _repo_root() / ".tools" / "bin" / BINARY_NAME
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(BINARY_NAME)
    if found:
        return Path(found)
    raise EngineError(f"workflow engine binary {BINARY_NAME} not found; {_HINT}")


def end_process(proc: subprocess.Popen[bytes] | None, *, sig: int = signal.SIGTERM,
                grace: float = 10.0) -> None:
    """Ask ``proc`` to exit with ``sig``, SIGKILL it if it has not after ``grace`` s, and
    reap it (nothing when it is None or has exited already)."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def free_port(host: str = _LOOPBACK) -> int:
    """Ask the kernel for a currently unused TCP port on ``host``.

    The port is free when this returns; another process could still take it before the
    caller binds, which :meth:`EngineProcess.start` handles by retrying on a fresh port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _accepts_tcp(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts a TCP connection on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class EngineProcess(Sidecar):
    """One durabletask-go sidecar process with its SQLite state file.

    The port is fixed at construction (picked free when not given) so ``env()`` and
    ``address`` are valid before ``start()``, and ``restart()`` comes back on the same
    port and the same database, which is what a restarted Dapr sidecar looks like to an app.
    """

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        db_path: str | os.PathLike[str] | None = None,
        host: str = _LOOPBACK,
        port: int | None = None,
        log_file: str | os.PathLike[str] | None = None,
        start_timeout: float = 20.0,
        lock_timeout: float | None = None,
    ) -> None:
        """Configure, but do not start, an engine.

        ``state_dir`` holds the database and log unless ``db_path``/``log_file`` say
        otherwise; with neither given a fresh temporary directory is used (and kept, since
        the state must outlive restarts). ``port=None`` picks a free port.
        """
        self._binary = Path(binary) if binary is not None else find_engine_binary()
        if state_dir is None:
            state_dir = (
                Path(db_path).parent
                if db_path is not None
                else Path(tempfile.mkdtemp(prefix="histaudit-engine-"))
            )
        self._state_dir = Path(state_dir)
        self._db_path = Path(db_path) if db_path is not None else self._state_dir / "engine.sqlite"
        self._log_path = Path(log_file) if log_file is not None else self._state_dir / "engine.log"
        self._host = host
        self._connect_host = _LOOPBACK if host in _WILDCARD_HOSTS else host
        self._port_was_picked = port is None
        self._port = port if port is not None else free_port(self._connect_host)
        self._start_timeout = start_timeout
        self._extra_args: list[str] = []
        if lock_timeout is not None:
            # upstream locks a dispatched work item for two minutes, so after the *engine*
            # is killed mid-step a restarted one waits that long to re-dispatch it
            self._extra_args = ["--lock-timeout", f"{int(lock_timeout * 1000)}ms"]
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_once = False

    # -- read-only facts -------------------------------------------------------------

    @property
    def port(self) -> int:
        """The gRPC port the engine listens on (stable across restarts)."""
        return self._port

    @property
    def host(self) -> str:
        """The host address the engine binds to."""
        return self._host

    @property
    def address(self) -> str:
        """``host:port`` an app connects to, e.g. ``127.0.0.1:40123``."""
        return f"{self._connect_host}:{self._port}"

    @property
    def binary(self) -> Path:
        """Path of the engine binary being run."""
        return self._binary

    @property
    def db_path(self) -> Path:
        """The engine's SQLite state file (survives kill and restart)."""
        return self._db_path

    @property
    def log_path(self) -> Path:
        """File receiving the engine's stdout and stderr, appended across restarts."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """Process id of the running engine, or None when not running."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the engine process is alive."""
        return self._proc is not None and self._proc.poll() is None  # pid asks this

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for an app process that should talk to this engine.

        Starts from ``base`` (default ``os.environ``), sets ``DAPR_RUNTIME_HOST`` and
        ``DAPR_GRPC_PORT``, and drops ``DAPR_GRPC_ENDPOINT``, which the SDK would
        otherwise prefer over the host/port pair.
        """
        env = dict(os.environ if base is None else base)
        env.pop("DAPR_GRPC_ENDPOINT", None)
        env["DAPR_RUNTIME_HOST"] = self._connect_host
        env["DAPR_GRPC_PORT"] = str(self._port)
        return env

    def log_tail(self, max_bytes: int = 4000) -> str:
        """The last ``max_bytes`` of the engine log, for error messages."""
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> EngineProcess:
        """Spawn the engine and wait until it is ready to serve gRPC.

        Ready means both: the process printed its listening line and the port accepts
        TCP connections. A port picked automatically that turns out to be taken is
        replaced by a fresh one, but only before the first successful start, because
        after that apps rely on the port staying put.
        """
        if self.running:
            raise EngineError(f"engine already running at {self.address} (pid {self.pid})")
        attempts = 3 if (self._port_was_picked and not self._started_once) else 1
        for attempt in range(attempts):
            try:
                self._spawn_and_wait()
            except _PortBusyError:
                if attempt + 1 >= attempts:
                    raise EngineError(
                        f"engine could not bind {self.address}: port in use"
                    ) from None
                self._port = free_port(self._connect_host)
                continue
            self._started_once = True
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def kill(self) -> None:
        """SIGKILL the engine, as a power cut would, and reap it. No-op when not running."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        self._proc = None
        _LIVE.discard(proc)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the engine to exit (SIGTERM); SIGKILL it if it has not after ``timeout``s."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"EngineProcess({self.address}, db={self._db_path}, {state})"

    # -- internals -------------------------------------------------------------------

    def _spawn_and_wait(self) -> None:
        """Start one process and block until ready; raise _PortBusyError or EngineError."""
        if self._proc is not None:  # a previous process that died on its own
            self._proc.wait()
            _LIVE.discard(self._proc)
            self._proc = None
        self._db_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            offset = log.tell()
            argv = [
                str(self._binary),
                "--host",
                self._host,
                "--port",
                str(self._port),
                "--db",
                str(self._db_path),
                *self._extra_args,
            ]
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                )
            except OSError as exc:
                raise EngineError(f"cannot run {self._binary}: {exc}; {_HINT}") from exc
        self._proc = proc
        _LIVE.add(proc)

        deadline = time.monotonic() + self._start_timeout
        said_ready = False
        while True:
            if proc.poll() is not None:
                output = self._log_since(offset)
                self._proc = None
                _LIVE.discard(proc)
                if "address already in use" in output:
                    raise _PortBusyError()
                if "flag provided but not defined: -lock-timeout" in output:
                    raise EngineError(f"{self._binary} has no --lock-timeout (upstream's own "
                                      f"main?): engine-crash points need histaudit's engine; "
                                      f"{_HINT}")
                raise EngineError(
                    f"engine exited with status {proc.returncode} before it was ready; "
                    f"log {self._log_path}:\n{output[-2000:]}"
                )
            if not said_ready:
                said_ready = READY_LINE in self._log_since(offset).encode()
            if said_ready and _accepts_tcp(self._connect_host, self._port):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise EngineError(
                    f"engine not ready on {self.address} after {self._start_timeout:.0f}s; "
                    f"log {self._log_path}:\n{self._log_since(offset)[-2000:]}"
                )
            time.sleep(0.02)

    def _log_since(self, offset: int) -> str:
        """Log text written since byte ``offset`` (this start's output)."""
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


class _PortBusyError(Exception):
    """Internal: the engine exited because its port was already bound."""
