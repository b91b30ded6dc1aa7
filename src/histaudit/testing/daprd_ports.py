"""The loopback ports a daprd listens on, and where its app reaches it: shared by
:class:`~histaudit.testing.daprd.DaprdStack` and each
:class:`~histaudit.testing.daprd_replica.DaprdReplica`."""

from __future__ import annotations

import dataclasses
import socket
from typing import Protocol, Self

__all__ = ["LOOPBACK", "AppPorts", "Endpoint", "PortBusyError", "PortSet", "free_ports"]

LOOPBACK = "127.0.0.1"



@dataclasses.dataclass(frozen=True)
class PortSet:
    """A record of ports; :meth:`pick` gives every field its own free loopback port."""

    @classmethod
    def pick(cls) -> Self:
        return cls(*free_ports(len(dataclasses.fields(cls))))


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports."""
    # Bound all at once so the kernel cannot hand the same port out twice here.
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


class AppPorts(Protocol):
    """The two ports of a daprd its app uses (both ports records have them)."""

    @property
    def grpc(self) -> int: ...
    @property
    def http(self) -> int: ...


class Endpoint:
    """Where an app reaches one daprd: its gRPC and HTTP ports on loopback, fixed once
    picked (stable across restarts). Shared by the stack's daprd and each replica's."""

    _ports: AppPorts

    @property
    def port(self) -> int:
        """daprd's gRPC port, the one its app talks to."""
        return self._ports.grpc

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def address(self) -> str:
        """``host:port`` of daprd's gRPC API, e.g. ``127.0.0.1:40123``."""
        return f"{LOOPBACK}:{self._ports.grpc}"

    @property
    def http_port(self) -> int:
        """daprd's HTTP API port (``/v1.0/healthz``, the workflow HTTP API)."""
        return self._ports.http


class PortBusyError(Exception):
    """A stack process exited because one of its ports was already bound."""
