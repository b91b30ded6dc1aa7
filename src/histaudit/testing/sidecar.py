"""What an app connects to, run as child processes: the :class:`Sidecar` base.

Two implementations: :class:`~histaudit.testing.engine.EngineProcess` (durabletask-go
alone) and :class:`~histaudit.testing.daprd.DaprdStack` (daprd with placement and
scheduler). Each says how it starts, is killed (a crash) and stopped (a shutdown), and
where an app reaches it; the base gives both the same restart, context manager and
teardown.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import Self

__all__ = ["Sidecar"]


class Sidecar(ABC):
    """An engine as child processes, started and ended by whoever holds it."""

    @property
    @abstractmethod
    def address(self) -> str:
        """``host:port`` of the gRPC API an app connects to."""

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The engine process's id (daprd's, for a stack), None when it is not running."""

    @property
    def running(self) -> bool:
        """True while the engine process is alive (a stack's control plane may run
        without its daprd)."""
        return self.pid is not None

    @abstractmethod
    def start(self) -> Self:
        """Start it and wait until it answers; EngineError when it cannot."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL the engine process, as a crash, and reap it (no-op when stopped)."""

    @abstractmethod
    def stop(self, timeout: float = 5.0) -> None:
        """Shut it down: SIGTERM, then SIGKILL what has not exited after ``timeout`` s."""

    @abstractmethod
    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment an app needs to reach it (``base`` or this process's, plus)."""

    @abstractmethod
    def log_tail(self, max_bytes: int = 4000) -> str:
        """The end of its log, for a failure's message."""

    def restart(self) -> Self:
        """Kill the engine and start it again on the same ports with the same state."""
        self.kill()
        return self.start()

    def teardown(self) -> None:
        """SIGKILL every process it runs and reap them (after a test, or a failed start)."""
        self.kill()

    def __enter__(self) -> Self:
        """Start it unless it already runs."""
        if not self.running:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """End it, whatever happened inside the block."""
        self.leave()

    def leave(self) -> None:
        """How the ``with`` block ends it: a clean stop."""
        self.stop()
