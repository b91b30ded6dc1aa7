"""A throwaway real PostgreSQL server for tests and benchmarks.

The ledger must behave the same on PostgreSQL as on SQLite, and only a real server shows
locking, transaction and type behaviour. This starts a private cluster from the server
binaries in a temporary directory on a free port and deletes it again on ``stop()``.
Plain class, no pytest dependency.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from histaudit.testing.engine import free_port

__all__ = ["PostgresError", "PostgresServer", "find_postgres_bin"]

_HINT = "run `make postgres` (scripts/ensure-postgres.sh) to install the server binaries"
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_OS_USER = "postgres"
_SUPERUSER = "postgres"


class PostgresError(RuntimeError):
    """The throwaway PostgreSQL server could not be found, started or used."""


def _version_key(path: Path) -> tuple[int, ...]:
    """Sort key for ``/usr/lib/postgresql/<version>/bin`` (numeric, so 15 > 9.6)."""
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name)) or (0,)


def find_postgres_bin() -> Path:
    """Directory holding ``initdb`` and ``postgres``.

    Order: ``$HISTAUDIT_PG_BIN``, the newest ``/usr/lib/postgresql/*/bin`` (Debian's
    layout, which keeps server binaries off ``PATH``), then ``initdb`` on ``PATH``.
    """
    explicit = os.environ.get("HISTAUDIT_PG_BIN")
    if explicit:
        if (Path(explicit) / "initdb").is_file():
            return Path(explicit)
        raise PostgresError(f"HISTAUDIT_PG_BIN={explicit} holds no initdb; {_HINT}")
    candidates = [d for d in Path("/usr/lib/postgresql").glob("*/bin") if (d / "initdb").is_file()]
    if candidates:
        return max(candidates, key=_version_key)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise PostgresError(f"PostgreSQL server binaries (initdb, postgres) not found; {_HINT}")


class PostgresServer:
    """One private PostgreSQL cluster: trust auth, 127.0.0.1 only, removed on stop.

    PostgreSQL refuses to run as root, so when we are root the cluster is created and run
    as the ``postgres`` OS user, inside its own temporary directory owned by that user.
    """

    def __init__(
        self,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        port: int | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        """Configure, but do not start, a server (``port=None`` picks a free port)."""
        self._bin_dir = Path(bin_dir) if bin_dir is not None else None
        self._port_was_picked = port is None
        self._port = port if port is not None else free_port()
        self._start_timeout = start_timeout
        self._base: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._user: str | None = None

    # -- facts -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """TCP port the server listens on (127.0.0.1)."""
        return self._port

    @property
    def base_dir(self) -> Path | None:
        """Temporary directory holding data, socket and log (None when not started)."""
        return self._base

    @property
    def running(self) -> bool:
        """True while the postmaster process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def superuser_url(self, dbname: str = "postgres") -> str:
        """SQLAlchemy URL connecting as the superuser to ``dbname`` over TCP."""
        return f"postgresql+psycopg://{_SUPERUSER}@127.0.0.1:{self._port}/{dbname}"

    def conninfo(self, dbname: str = "postgres") -> str:
        """libpq connection string (for psycopg directly) to ``dbname``."""
        return f"host=127.0.0.1 port={self._port} user={_SUPERUSER} dbname={dbname}"

    def log_tail(self, max_chars: int = 3000) -> str:
        """End of the server log, for error messages."""
        if self._base is None:
            return ""
        try:
            return (self._base / "postgres.log").read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""

    # -- databases -------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` and return its SQLAlchemy URL."""
        self._check_name(name)
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # name checked above
        return self.superuser_url(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, disconnecting any sessions still open on it."""
        self._check_name(name)
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @staticmethod
    def _check_name(name: str) -> None:
        """Allow only plain lower-case identifiers, so names never need quoting rules."""
        if not _DB_NAME.match(name):
            raise PostgresError(f"bad database name {name!r}: use [a-z_][a-z0-9_]*")

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """Create the cluster, start the server and wait until it accepts queries."""
        if self.running:
            raise PostgresError(f"PostgreSQL already running on port {self._port}")
        bin_dir = self._bin_dir or find_postgres_bin()
        self._user = _OS_USER if os.geteuid() == 0 else None
        self._base = Path(tempfile.mkdtemp(prefix="histaudit-pg-"))
        try:
            data = self._base / "data"
            sock = self._base / "sock"
            sock.mkdir()
            if self._user is not None:
                try:
                    entry = pwd.getpwnam(self._user)
                except KeyError:
                    raise PostgresError(
                        f"running as root needs the {self._user!r} OS user; {_HINT}"
                    ) from None
                for path in (self._base, sock):
                    os.chown(path, entry.pw_uid, entry.pw_gid)
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    _SUPERUSER,
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",  # initdb's own flush only; the server keeps fsync on
                ],
                "initdb",
            )
            attempts = 3 if self._port_was_picked else 1
            for attempt in range(attempts):
                if self._spawn(bin_dir, data, sock):
                    return self
                if attempt + 1 < attempts:
                    self._port = free_port()
            raise PostgresError(f"PostgreSQL could not bind 127.0.0.1:{self._port}")
        except BaseException:
            self.stop()
            raise

    def restart(self, down: float = 0.0) -> None:
        """Shut the server down (fast: every session is cut) and start it again on the
        same port and data ``down`` seconds later, as a restart or a failover looks to a
        client."""
        proc = self._proc
        if proc is None or self._base is None or proc.poll() is not None:
            raise PostgresError("PostgreSQL is not running")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        time.sleep(down)
        bin_dir = self._bin_dir or find_postgres_bin()
        if not self._spawn(bin_dir, self._base / "data", self._base / "sock"):
            raise PostgresError(f"PostgreSQL could not bind 127.0.0.1:{self._port} again")

    def stop(self, timeout: float = 15.0) -> None:
        """Shut the server down (fast, then immediate, then SIGKILL) and delete its files."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 5.0)):
                proc.send_signal(sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            else:
                proc.kill()
                proc.wait()
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def __enter__(self) -> PostgresServer:
        """Start the server unless it already runs."""
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server and remove its files."""
        self.stop()

    # -- internals -------------------------------------------------------------------

    def _popen_kwargs(self) -> dict[str, Any]:
        """Run as the postgres OS user when we are root (Popen does setuid in C, no hook)."""
        assert self._base is not None
        kwargs: dict[str, Any] = {"cwd": str(self._base), "stdin": subprocess.DEVNULL}
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            env = dict(os.environ, HOME=entry.pw_dir, USER=self._user, LOGNAME=self._user)
            kwargs.update(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], env=env)
        return kwargs

    def _run(self, argv: list[str], what: str) -> None:
        """Run a set-up command to completion; raise with its output on failure."""
        result = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **self._popen_kwargs()
        )
        if result.returncode != 0:
            out = result.stdout.decode("utf-8", "replace")[-2000:]
            raise PostgresError(f"{what} failed with status {result.returncode}:\n{out}")

    def _spawn(self, bin_dir: Path, data: Path, sock: Path) -> bool:
        """Start the postmaster; True once ready, False if the port was taken."""
        assert self._base is not None
        log_path = self._base / "postgres.log"
        argv = [
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(self._port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={sock}",
            "-c",
            "logging_collector=off",
            "-c",
            "max_connections=200",
        ]
        with open(log_path, "ab") as log:
            offset = log.tell()
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, **self._popen_kwargs()
            )
        self._proc = proc
        deadline = time.monotonic() + self._start_timeout
        while True:
            if proc.poll() is not None:
                self._proc = None
                with open(log_path, "rb") as fh:
                    fh.seek(offset)
                    output = fh.read().decode("utf-8", "replace")
                if "could not bind" in output or "already in use" in output:
                    return False
                raise PostgresError(
                    f"postgres exited with status {proc.returncode} while starting:\n"
                    f"{output[-2000:]}"
                )
            try:
                with psycopg.connect(self.conninfo(), connect_timeout=2) as conn:
                    conn.execute("select 1")
                return True
            except psycopg.OperationalError:
                pass
            if time.monotonic() > deadline:
                raise PostgresError(
                    f"postgres not ready on port {self._port} after "
                    f"{self._start_timeout:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.05)
