"""Run the real Dapr runtime — placement, scheduler and daprd — as child processes.

:class:`~histaudit.testing.engine.EngineProcess` runs the engine core (durabletask-go)
alone; :class:`DaprdStack` runs what a Dapr user deploys: daprd built from dapr v1.18.3
(``scripts/install-daprd.sh``, docs/adr/0008-daprd.md) with the placement and scheduler
services it needs, all on free loopback ports, with a SQLite actor state store in the
stack's own directory. It offers the interface callers use on an ``EngineProcess``
(``address``, ``port``, ``env()``, ``start``/``kill``/``restart``/``stop``, ``running``,
``pid``, ``db_path``, ``log_tail``), so an app connects to either the same way and a
crash test kills and restarts daprd as it would the engine. The control plane
(placement, scheduler) keeps running across :meth:`~DaprdStack.kill` and
:meth:`~DaprdStack.restart`, as it does when a sidecar crashes in a real deployment.

:meth:`DaprdStack.add_replica` starts one more daprd with the same app id, placement,
scheduler and (PostgreSQL) actor state store on ports of its own: the sidecar of a second
replica of the app. Placement then spreads the app's workflow and activity actors over
both; the stack tracks each
:class:`~histaudit.testing.daprd_replica.DaprdReplica` and ends it with the stack.
Where the binaries come from is :mod:`~histaudit.testing.daprd_binaries`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from histaudit.errors import EngineError

from .daprd_binaries import _HINT, BINARIES, _usable, find_daprd_bin_dir
from .daprd_components import SENTRY_CONFIG, SIGNING_CONFIG, state_store
from .daprd_ports import LOOPBACK, Endpoint, PortBusyError, PortSet
from .daprd_replica import DaprdReplica
from .engine import _LIVE
from .sidecar import Sidecar

__all__ = ["TRUST_DOMAIN", "DaprdStack"]

@dataclasses.dataclass(frozen=True)
class _Ports(PortSet):
    """Every port one stack listens on; picked free once, kept across daprd restarts."""

    placement: int
    placement_health: int
    placement_metrics: int
    placement_raft: int
    scheduler: int
    scheduler_health: int
    scheduler_metrics: int
    etcd_client: int
    etcd_peer: int
    grpc: int
    http: int
    internal_grpc: int
    metrics: int
    sentry: int
    sentry_health: int
    sentry_metrics: int


TRUST_DOMAIN = "localhost"
"""The control plane's trust domain when a stack runs sentry (``history_signing``)."""


class DaprdStack(Endpoint, Sidecar):
    """placement + scheduler + daprd on loopback, with their state in ``state_dir``.

    Ports are fixed at construction so ``env()`` and ``address`` are valid before
    ``start()``, and :meth:`restart` brings daprd back on the same ports with the same
    actor state store and the same scheduler, which is what a restarted sidecar looks like
    to an app.
    """

    _ports: _Ports

    def __init__(
        self,
        *,
        bin_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        app_id: str = "histaudit",
        start_timeout: float = 30.0,
        postgres_actor_store: str | None = None,
        history_signing: bool = False,
        resources: str | os.PathLike[str] | None = None,
    ) -> None:
        """Configure, but do not start, a stack (``state_dir=None``: a fresh temp dir,
        kept, since the state must outlive restarts).

        ``postgres_actor_store``, a libpq connection string, keeps daprd's workflow state
        in that PostgreSQL database (``state.postgresql`` v1) instead of the SQLite file.

        ``history_signing`` also runs sentry (its own root and issuer, in
        ``state_dir/sentry``), turns on mTLS for placement, scheduler and daprd, and
        enables daprd's ``WorkflowHistorySigning`` preview feature, so daprd signs the
        workflow history it stores (docs/dapr-signatures.md); ``trust_anchors_path`` is
        then sentry's root certificate.

        ``resources``, a directory of component files (``*.yaml``), adds them beside the
        actor state store (an agent's ``agent-workflow`` state store, say); one named
        ``statestore.yaml`` is refused, as that name is the actor store's. Every process
        runs in ``state_dir``, so a relative path in a component (a SQLite file) lands
        there, kept across restarts like the rest of the stack's state.
        """
        self._bin = Path(bin_dir) if bin_dir is not None else find_daprd_bin_dir()
        if not _usable(self._bin):
            raise EngineError(f"{self._bin} lacks one of {', '.join(BINARIES)}; {_HINT}")
        self._dir = Path(state_dir) if state_dir is not None else Path(
            tempfile.mkdtemp(prefix="histaudit-daprd-"))
        self._app_id = app_id
        self._start_timeout = start_timeout
        if postgres_actor_store is not None and '"' in postgres_actor_store:
            raise EngineError("postgres_actor_store must not contain a double quote")
        self._postgres = postgres_actor_store
        self._signing = history_signing
        self._extra = sorted(Path(resources).glob("*.yaml")) if resources is not None else []
        if resources is not None and not Path(resources).is_dir():
            raise EngineError(f"resources {resources} is not a directory")
        if any(f.name == "statestore.yaml" for f in self._extra):
            raise EngineError(f"resources {resources}: statestore.yaml is the actor state "
                              "store's file; name yours otherwise")
        if history_signing and not os.access(self._bin / "sentry", os.X_OK):
            raise EngineError(f"{self._bin} lacks sentry, which history_signing needs; {_HINT}")
        self._ports = _Ports.pick()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._started_once = False
        self._replicas: dict[str, DaprdReplica] = {}

    # -- read-only facts -------------------------------------------------------------

    @property
    def app_id(self) -> str:
        return self._app_id

    @property
    def state_dir(self) -> Path:
        return self._dir

    @property
    def db_path(self) -> Path:
        """The SQLite actor state store daprd keeps workflow state in (Dapr's schema,
        not durabletask-go's); it survives kill and restart. Unused with
        ``postgres_actor_store``."""
        return self._dir / "actors.sqlite"

    @property
    def actor_store(self) -> str:
        """The Dapr component type of the actor state store: ``state.sqlite`` or
        ``state.postgresql``."""
        return "state.sqlite" if self._postgres is None else "state.postgresql"

    @property
    def history_signing(self) -> bool:
        """True when the stack runs sentry + mTLS and daprd signs workflow history."""
        return self._signing

    @property
    def trust_anchors_path(self) -> Path:
        """Sentry's root certificate (PEM), the trust anchor of every certificate it
        issues; written by sentry on its first start (``history_signing`` only)."""
        return self._dir / "sentry" / "ca.crt"

    @property
    def log_path(self) -> Path:
        """daprd's log, appended across restarts (``log_file(name)`` for the others)."""
        return self.log_file("daprd")

    def log_file(self, name: str) -> Path:
        """The log of ``name`` (``daprd``, ``placement``, ``scheduler`` or ``sentry``)."""
        return self._dir / f"{name}.log"

    @property
    def pid(self) -> int | None:
        """daprd's process id, or None when it is not running."""
        proc = self._procs.get("daprd")
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def replicas(self) -> tuple[DaprdReplica, ...]:
        """Every replica :meth:`add_replica` made, running or not, in order."""
        return tuple(self._replicas.values())

    @property
    def pids(self) -> dict[str, int]:
        """Process id of every stack process now running, by name (a replica's daprd as
        ``daprd-<name>``)."""
        return {n: p.pid for n, p in self._procs.items() if p.poll() is None}

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for an app that should talk to this daprd (as ``dapr run`` sets it).

        Starts from ``base`` (default ``os.environ``), sets ``DAPR_RUNTIME_HOST``,
        ``DAPR_GRPC_PORT`` and ``DAPR_HTTP_PORT``, and drops ``DAPR_GRPC_ENDPOINT``, which
        the SDK would otherwise prefer.
        """
        env = dict(os.environ if base is None else base)
        env.pop("DAPR_GRPC_ENDPOINT", None)
        env["DAPR_RUNTIME_HOST"] = LOOPBACK
        env["DAPR_GRPC_PORT"] = str(self._ports.grpc)
        env["DAPR_HTTP_PORT"] = str(self._ports.http)
        return env

    def log_tail(self, max_bytes: int = 4000, name: str = "daprd") -> str:
        """The last ``max_bytes`` of a process's log, for error messages."""
        try:
            with open(self.log_file(name), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - max_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> DaprdStack:
        """Start whatever is not running (placement, scheduler, then daprd) and wait
        until each is healthy.

        A first start that fails because a port was taken meanwhile is retried on fresh
        ports; after a successful start the ports never change.
        """
        if self.running:
            raise EngineError(f"daprd already running at {self.address} (pid {self.pid})")
        attempts = 1 if self._started_once else 3
        for attempt in range(attempts):
            try:
                self._start_missing()
            except PortBusyError as busy:
                self.kill_all()
                if attempt + 1 >= attempts:
                    raise EngineError(f"{busy}: port in use") from None
                # Nothing was ever stored yet, and etcd's data names its old peer port.
                shutil.rmtree(self._dir / "etcd", ignore_errors=True)
                self._ports = _Ports.pick()
                continue
            self._started_once = True
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def kill(self) -> None:
        """SIGKILL daprd, as a crashed sidecar, and reap it; placement and scheduler keep
        running. No-op when daprd is not running."""
        self._kill("daprd")

    def kill_all(self) -> None:
        """SIGKILL every process of the stack, replicas' daprds included, and reap them."""
        for name in (*self._replica_procs(), "daprd", "scheduler", "placement", "sentry"):
            self._kill(name)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the whole stack: SIGTERM each process (the daprds first), SIGKILL what has
        not exited after ``timeout`` s."""
        for name in (*self._replica_procs(), "daprd", "scheduler", "placement", "sentry"):
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=timeout)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            self._kill(name)

    def add_replica(self, name: str | None = None) -> DaprdReplica:
        """Start the sidecar of one more replica of the app and return it, healthy.

        It is a second daprd with the stack's app id, placement, scheduler and actor
        state store, on free ports of its own: an app connected to it is another replica
        of the same app, and placement spreads the app's workflow and activity actors over
        every daprd whose app has a workflow worker connected. The stack must be running
        (its control plane, at least) and keep its actor state in PostgreSQL
        (``postgres_actor_store``): replicas share one actor store, and a SQLite file is
        one sidecar's. ``name`` (default ``r1``, ``r2``, …) names the process
        (``daprd-<name>`` in :attr:`pids`) and its log (``daprd-<name>.log``).
        """
        if self._postgres is None:
            raise EngineError("replicas share one actor state store: start the stack with "
                              "postgres_actor_store (a SQLite file is one sidecar's)")
        if self._signing:
            raise EngineError("replicas of a history_signing stack are not supported")
        name = name if name is not None else f"r{len(self._replicas) + 1}"
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            raise EngineError(f"replica name {name!r}: letters, digits, - and _ only")
        if name in self._replicas:
            raise EngineError(f"replica {name!r} exists already")

        replica = DaprdReplica(self, name)
        self._replicas[name] = replica
        try:
            return replica.start()
        except BaseException:
            del self._replicas[name]  # its process, if any, is already reaped
            raise

    def leave(self) -> None:
        """A ``with`` block ends the whole stack at once (SIGKILL)."""
        self.kill_all()

    def teardown(self) -> None:
        """SIGKILL every process of the stack and reap them; its etcd directory (≈ 120
        MB, mostly the scheduler's preallocated WAL) goes too: a test run starts dozens
        of stacks. The logs and the actor state store stay for a look after a failure."""
        self.kill_all()
        shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"DaprdStack({self.address}, dir={self._dir}, {state})"

    # -- internals -------------------------------------------------------------------

    def _replica_procs(self) -> list[str]:
        return [r.proc_name for r in self._replicas.values()]

    def _daprd_args(self, grpc: int, http: int, internal_grpc: int, metrics: int,
                    resources: Path) -> list[str]:
        """daprd's arguments for these ports: the stack's app id and control plane."""
        p, loop = self._ports, LOOPBACK
        return [
            "--app-id", self._app_id, "--mode", "standalone",
            "--dapr-grpc-port", str(grpc), "--dapr-http-port", str(http),
            "--dapr-internal-grpc-port", str(internal_grpc),
            "--dapr-listen-addresses", loop, "--metrics-port", str(metrics),
            "--placement-host-address", f"{loop}:{p.placement}",
            "--scheduler-host-address", f"{loop}:{p.scheduler}",
            "--resources-path", str(resources),
        ]

    def _alive(self, name: str) -> bool:
        proc = self._procs.get(name)
        return proc is not None and proc.poll() is None

    def _kill(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        _LIVE.discard(proc)

    def _start_missing(self) -> None:
        p, loop = self._ports, LOOPBACK
        self._dir.mkdir(parents=True, exist_ok=True)
        tls: list[str] = []
        daprd_tls: list[str] = []
        daprd_env: dict[str, str] | None = None
        if self._signing:
            self._start_sentry()
            sentry_addr = f"{loop}:{p.sentry}"
            tls = ["--tls-enabled", "--sentry-address", sentry_addr,
                   "--trust-anchors-file", str(self.trust_anchors_path),
                   "--trust-domain", TRUST_DOMAIN]
            config = self._dir / "signing.yaml"
            config.write_text(SIGNING_CONFIG)
            daprd_tls = ["--enable-mtls", "--sentry-address", sentry_addr,
                         "--control-plane-trust-domain", TRUST_DOMAIN,
                         "--config", str(config)]
            daprd_env = dict(os.environ)
            daprd_env["DAPR_TRUST_ANCHORS"] = self.trust_anchors_path.read_text()
        if not self._alive("placement"):
            self._kill("placement")
            self._spawn("placement", [
                "--port", str(p.placement), "--listen-address", loop,
                "--healthz-port", str(p.placement_health),
                "--metrics-port", str(p.placement_metrics),
                "--initial-cluster", f"dapr-placement-0={loop}:{p.placement_raft}",
                "--id", "dapr-placement-0", *tls,
            ], health=f"http://{loop}:{p.placement_health}/healthz")
        if not self._alive("scheduler"):
            self._kill("scheduler")
            self._spawn("scheduler", [
                "--port", str(p.scheduler), "--listen-address", loop,
                "--healthz-port", str(p.scheduler_health),
                "--metrics-port", str(p.scheduler_metrics),
                "--etcd-data-dir", str(self._dir / "etcd"),
                "--etcd-client-port", str(p.etcd_client),
                "--etcd-initial-cluster",
                f"dapr-scheduler-server-0=http://{loop}:{p.etcd_peer}",
                "--id", "dapr-scheduler-server-0", *tls,
            ], health=f"http://{loop}:{p.scheduler_health}/healthz")
        resources = self._dir / "resources"
        resources.mkdir(exist_ok=True)
        (resources / "statestore.yaml").write_text(
            state_store("statestore", "state.sqlite", str(self.db_path), actor_store=True)
            if self._postgres is None
            else state_store("statestore", "state.postgresql", self._postgres, actor_store=True))
        for extra in self._extra:
            (resources / extra.name).write_bytes(extra.read_bytes())
        self._kill("daprd")
        self._spawn("daprd", [
            *self._daprd_args(p.grpc, p.http, p.internal_grpc, p.metrics, resources),
            *daprd_tls,
        ], health=f"http://{loop}:{p.http}/v1.0/healthz", env=daprd_env)

    def _start_sentry(self) -> None:
        """Start sentry unless it runs; on its first start it writes a root and issuer
        into ``state_dir/sentry`` and keeps them across restarts."""
        if self._alive("sentry"):
            return
        self._kill("sentry")
        p, loop = self._ports, LOOPBACK
        creds = self._dir / "sentry"
        creds.mkdir(exist_ok=True)
        config = self._dir / "sentry.yaml"
        config.write_text(SENTRY_CONFIG)
        self._spawn("sentry", [
            "--port", str(p.sentry), "--listen-address", loop,
            "--healthz-port", str(p.sentry_health), "--healthz-listen-address", loop,
            "--metrics-port", str(p.sentry_metrics), "--metrics-listen-address", loop,
            "--issuer-credentials", str(creds), "--trust-domain", TRUST_DOMAIN,
            "--config", str(config), "--mode", "standalone",
        ], health=f"http://{loop}:{p.sentry_health}/healthz")
        if not self.trust_anchors_path.is_file():
            raise EngineError(f"sentry is healthy but wrote no {self.trust_anchors_path}")

    def _spawn(self, name: str, args: list[str], *, health: str,
               env: Mapping[str, str] | None = None, binary: str | None = None) -> None:
        """Start ``name`` (the binary ``binary``, default ``name``) and block until
        ``health`` answers 2xx; raise on failure."""
        log_path = self.log_file(name)
        program = self._bin / (binary or name)
        with open(log_path, "ab") as log:
            offset = log.tell()
            try:
                proc = subprocess.Popen([str(program), *args],
                                        stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, close_fds=True,
                                        cwd=self._dir,
                                        env=None if env is None else dict(env))
            except OSError as exc:
                raise EngineError(f"cannot run {program}: {exc}; {_HINT}") from exc
        self._procs[name] = proc
        _LIVE.add(proc)
        deadline = time.monotonic() + self._start_timeout
        while not _healthy(health):
            if proc.poll() is not None:
                output = _read_from(log_path, offset)
                self._kill(name)
                if "address already in use" in output:
                    raise PortBusyError(f"{name} could not bind")
                raise EngineError(f"{name} exited with status {proc.returncode} before it "
                                  f"was healthy; log {log_path}:\n{output[-2000:]}")
            if time.monotonic() > deadline:
                self._kill(name)
                raise EngineError(
                    f"{name} not healthy at {health} after {self._start_timeout:.0f}s; "
                    f"log {log_path}:\n{_read_from(log_path, offset)[-2000:]}")
            time.sleep(0.05)


# Health checks go straight to loopback, never through an HTTP(S)_PROXY from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url: str) -> bool:
    """True when ``url`` answers with a 2xx status."""
    try:
        with _DIRECT.open(url, timeout=1.0) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
