"""Find the Dapr binaries a :class:`~histaudit.testing.daprd.DaprdStack` runs.

``make daprd`` (``scripts/install-daprd.sh``, docs/adr/0008-daprd.md) builds daprd,
placement, scheduler and sentry from dapr v1.18.3 into ``.tools/daprd/bin/``;
:func:`find_daprd_bin_dir` locates that directory, or the one ``$HISTAUDIT_DAPRD_BIN_DIR``
names, so every stack and every test runs the same build.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from histaudit.errors import EngineError

from .engine import _repo_root

__all__ = ["BINARIES", "ENV_BIN_DIR", "find_daprd_bin_dir"]

ENV_BIN_DIR = "HISTAUDIT_DAPRD_BIN_DIR"
"""Environment variable naming the directory holding daprd, placement and scheduler."""

BINARIES = ("daprd", "placement", "scheduler")
"""The binaries a stack runs (``make daprd`` also builds sentry, for mTLS)."""

_HINT = "run `make daprd` (scripts/install-daprd.sh) to build it"


def _usable(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in BINARIES)


def find_daprd_bin_dir() -> Path:
    """Locate the directory holding daprd, placement and scheduler.

    Order: ``$HISTAUDIT_DAPRD_BIN_DIR``, then ``<repo>/.tools/daprd/bin``, then the
    directory of ``daprd`` on ``PATH``. An explicit variable that points at a directory
    without all three binaries is an error, not a silent fallback.
    """
    explicit = os.environ.get(ENV_BIN_DIR)
    if explicit:
        path = Path(explicit).expanduser()
        if _usable(path):
            return path.resolve()
        raise EngineError(f"{ENV_BIN_DIR}={explicit} lacks one of {', '.join(BINARIES)}; "
                          f"{_HINT}")
    local = _repo_root() / ".tools" / "daprd" / "bin"
    if _usable(local):
        return local
    found = shutil.which("daprd")
    if found and _usable(Path(found).parent):
        return Path(found).parent
    raise EngineError(f"daprd, placement and scheduler not found; {_HINT}")

