"""Real Dapr workflow engines for tests: your crash tests, histaudit's own and its crash
matrix start them the same way.

    from histaudit.testing import start_engine, teardown

    engine = start_engine("daprd", tmp_path / "engine")   # or "durabletask"
    try:
        env = engine.env()          # DAPR_RUNTIME_HOST / DAPR_GRPC_PORT for the app
        ...                         # start the app, crash it: engine.kill(), .restart()
    finally:
        teardown(engine)

* :class:`EngineProcess` (:mod:`.engine`) — durabletask-go, the engine inside daprd, as a
  standalone sidecar on a free loopback port (``HISTAUDIT_ENGINE_BIN`` or
  ``.tools/bin/durabletask-go``);
* :class:`DaprdStack` (:mod:`.daprd`) — real daprd with placement and scheduler, its actor
  state store in its own directory (``HISTAUDIT_DAPRD_BIN_DIR`` or ``.tools/daprd/bin``),
  and :meth:`DaprdStack.add_replica` for a second replica of the app
  (:mod:`.daprd_replica`; its ports in :mod:`.daprd_ports`);
* both are a :class:`Sidecar` (:mod:`.sidecar`), what a test drives: ``address``,
  ``env()``, ``start``/``kill``/``restart``/``stop``/``teardown``, ``running``, ``pid``,
  ``log_tail``, and a ``with`` block;
* :class:`~.witness.Witness` (:mod:`.witness`) — a real C2SP tlog-witness (litewitness)
  with its own key, database and port, and :func:`~.witness.write_policy` for a policy
  file naming the witnesses started (``HISTAUDIT_WITNESS_BIN_DIR`` or ``.tools/bin``);
* :mod:`.daprd_wait` reads daprd's log for what it is doing (a stranded actor type);
  :mod:`.daprd_binaries` and :mod:`.daprd_components` say where the binaries are and
  which components a stack gets.
"""

from __future__ import annotations

from pathlib import Path

from histaudit.errors import EngineError

from .daprd import TRUST_DOMAIN, DaprdStack
from .daprd_binaries import find_daprd_bin_dir
from .engine import EngineProcess, find_engine_binary
from .sidecar import Sidecar

__all__ = ["DAPRD", "DURABLETASK", "ENGINES", "TRUST_DOMAIN", "DaprdStack", "EngineError",
           "EngineProcess", "Sidecar", "find_daprd_bin_dir", "find_engine_binary",
           "start_engine", "teardown"]

DURABLETASK = "durabletask"
DAPRD = "daprd"
ENGINES = (DURABLETASK, DAPRD)
"""The engines an app can run on here: durabletask-go alone, or the daprd stack."""



def start_engine(kind: str, state_dir: Path, *, engine_binary: Path | None = None) -> Sidecar:
    """Start an engine of ``kind`` (one of :data:`ENGINES`) with its state under
    ``state_dir``; EngineError when it cannot come up (nothing is left running then)."""
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
    """SIGKILL every process of ``sidecar`` and reap them (a stack's replicas too, and
    its etcd directory: :meth:`Sidecar.teardown`)."""
    sidecar.teardown()
