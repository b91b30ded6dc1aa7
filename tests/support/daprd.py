"""The two engines integration tests run on: durabletask-go alone, and real daprd.

``ENGINES`` names them; :func:`start_engine` brings one up in a test's directory and
returns it started. Both kinds offer the interface tests use (``address``, ``port``,
``env()``, ``kill``/``restart``/``start``, ``running``, ``log_tail``), so a rig written
for :class:`~histaudit.crashtest.engine.EngineProcess` drives a
:class:`~histaudit.crashtest.daprd.DaprdStack` unchanged. :func:`teardown` ends either
completely (for the stack: daprd, every replica's daprd (``add_replica``), scheduler
and placement, and its etcd data).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from histaudit.crashtest.daprd import DaprdStack
from histaudit.crashtest.engine import EngineProcess

__all__ = ["DAPRD", "DURABLETASK", "ENGINES", "Sidecar", "start_engine", "teardown"]

DURABLETASK = "durabletask"
DAPRD = "daprd"
ENGINES = (DURABLETASK, DAPRD)

Sidecar = EngineProcess | DaprdStack
"""What an app connects to: the standalone engine or the daprd stack."""


def start_engine(kind: str, state_dir: Path, *, engine_binary: Path | None = None) -> Sidecar:
    """Start an engine of ``kind`` with its state under ``state_dir``; raise EngineError
    when it cannot come up (the caller turns that into a test failure)."""
    sidecar: Sidecar
    if kind == DURABLETASK:
        sidecar = EngineProcess(binary=engine_binary, state_dir=state_dir)
    elif kind == DAPRD:
        sidecar = DaprdStack(state_dir=state_dir)
    else:
        raise ValueError(f"unknown engine kind {kind!r}; one of {ENGINES}")
    try:
        sidecar.start()
    except BaseException:
        teardown(sidecar)
        raise
    return sidecar


def teardown(sidecar: Sidecar) -> None:
    """SIGKILL every process of ``sidecar`` and reap them (a stack's replicas too).

    A stack's etcd directory (≈ 120 MB, mostly the scheduler's preallocated WAL) goes too:
    pytest keeps the tmp dirs of recent runs, and a run starts dozens of stacks. The logs
    and the actor state store stay for a look after a failure.
    """
    if isinstance(sidecar, DaprdStack):
        sidecar.kill_all()
        shutil.rmtree(sidecar.state_dir / "etcd", ignore_errors=True)
    else:
        sidecar.kill()
