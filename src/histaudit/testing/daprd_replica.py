"""The daprd of one more replica of a stack's app: :class:`DaprdReplica`.

:meth:`DaprdStack.add_replica <histaudit.testing.daprd.DaprdStack.add_replica>` makes
one: a second daprd with the stack's app id, placement, scheduler and (PostgreSQL) actor
state store, on loopback ports of its own, started and ended through the stack's own
process handling.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from histaudit.errors import EngineError

from .daprd_ports import LOOPBACK, Endpoint, PortBusyError, PortSet

__all__ = ["DaprdReplica", "ReplicaHost"]


class ReplicaHost(Protocol):
    """What a replica uses of its stack (:class:`~histaudit.testing.daprd.DaprdStack` is
    one): its facts, and the process handling the stack shares with its replicas."""

    @property
    def app_id(self) -> str: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def pids(self) -> dict[str, int]: ...

    def log_file(self, name: str) -> Path: ...

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]: ...

    def log_tail(self, max_bytes: int = 4000, name: str = "daprd") -> str: ...

    def _daprd_args(self, grpc: int, http: int, internal_grpc: int, metrics: int,
                    resources: Path) -> list[str]: ...

    def _alive(self, name: str) -> bool: ...

    def _kill(self, name: str) -> None: ...

    def _spawn(self, name: str, args: list[str], *, health: str,
               env: Mapping[str, str] | None = None, binary: str | None = None) -> None: ...


@dataclasses.dataclass(frozen=True)
class _ReplicaPorts(PortSet):
    """The ports of one more daprd of a stack (the control plane's are the stack's)."""

    grpc: int
    http: int
    internal_grpc: int
    metrics: int


class DaprdReplica(Endpoint):
    """The daprd of one more replica of a stack's app (:meth:`DaprdStack.add_replica`).

    The interface of :class:`DaprdStack` that apps and crash tests use (``address``,
    ``port``, ``env()``, ``start``/``kill``/``restart``, ``running``, ``pid``,
    ``log_tail``), for this daprd only: killing it leaves the stack's own daprd, the
    control plane and every other replica running. Its ports are fixed once it has
    started; the stack's :meth:`~DaprdStack.kill_all` and :meth:`~DaprdStack.stop` end it.
    """

    _ports: _ReplicaPorts

    def __init__(self, stack: ReplicaHost, name: str) -> None:
        self._stack = stack
        self._name = name
        self._ports = _ReplicaPorts.pick()
        self._started_once = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def proc_name(self) -> str:
        """Its key in the stack's :attr:`~DaprdStack.pids` and the stem of its log."""
        return f"daprd-{self._name}"

    @property
    def stack(self) -> ReplicaHost:
        return self._stack

    @property
    def app_id(self) -> str:
        return self._stack.app_id

    @property
    def log_path(self) -> Path:
        return self._stack.log_file(self.proc_name)

    @property
    def pid(self) -> int | None:
        return self._stack.pids.get(self.proc_name)

    @property
    def running(self) -> bool:
        return self.pid is not None

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for the app replica that talks to this daprd (as
        :meth:`DaprdStack.env`)."""
        env = self._stack.env(base)
        env["DAPR_GRPC_PORT"] = str(self._ports.grpc)
        env["DAPR_HTTP_PORT"] = str(self._ports.http)
        return env

    def log_tail(self, max_bytes: int = 4000) -> str:
        return self._stack.log_tail(max_bytes, name=self.proc_name)

    def start(self) -> DaprdReplica:
        """Start this daprd and wait until it is healthy; the stack's placement and
        scheduler must be running. A first start that finds a port taken is retried on
        fresh ports."""
        if self.running:
            raise EngineError(f"replica {self._name} already running at {self.address} "
                              f"(pid {self.pid})")
        stack = self._stack
        if not (stack._alive("placement") and stack._alive("scheduler")):
            raise EngineError(f"replica {self._name}: the stack's placement and scheduler "
                              "are not running; start the stack first")
        resources = stack.state_dir / "resources"
        if not (resources / "statestore.yaml").is_file():
            raise EngineError(f"replica {self._name}: {resources} holds no statestore.yaml; "
                              "start the stack first")
        attempts = 1 if self._started_once else 3
        for attempt in range(attempts):
            p = self._ports
            try:
                stack._spawn(self.proc_name,
                             stack._daprd_args(p.grpc, p.http, p.internal_grpc, p.metrics,
                                               resources),
                             health=f"http://{LOOPBACK}:{p.http}/v1.0/healthz",
                             binary="daprd")
            except PortBusyError as busy:
                if attempt + 1 >= attempts:
                    raise EngineError(f"{busy}: port in use") from None
                self._ports = _ReplicaPorts.pick()
                continue
            self._started_once = True
            return self
        raise AssertionError("unreachable")  # pragma: no cover

    def kill(self) -> None:
        """SIGKILL this daprd, as a crashed sidecar, and reap it (no-op when stopped)."""
        self._stack._kill(self.proc_name)

    def restart(self) -> DaprdReplica:
        """Kill this daprd and start it again on the same ports."""
        self.kill()
        return self.start()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"DaprdReplica({self._name}, {self.address}, {state})"

