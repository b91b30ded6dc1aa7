"""Where things are in the checkout: the golden files, the docs, the example apps.

``examples/`` is not an installed package: pytest's ``pythonpath`` (pyproject.toml) makes
the checkout's root importable here, and :func:`app_env` gives a child process the same
view.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["DOCS", "GOLDEN", "HISTORIES", "ORDER_HISTORY", "REPO", "SCHEMAS", "VECTORS", "app_env",
           "read_json", "write_file"]

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SCHEMAS = REPO / "schemas"
#: Fixed test data several tests share (tests/golden/make_vectors.py writes vectors.json,
#: tests/golden/record_histories.py the histories).
GOLDEN = REPO / "tests" / "golden"
VECTORS = GOLDEN / "vectors.json"
HISTORIES = GOLDEN / "histories"
ORDER_HISTORY = HISTORIES / "order.json"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_file(path: Path, doc: Any) -> Path:
    """Write ``doc`` to ``path``: a str as it is, anything else as JSON; return the path."""
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def app_env() -> dict[str, str]:
    """PYTHONPATH for a child process that imports ``examples.*`` and ``histaudit``."""
    parts = [str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in parts if p)}


def tool_binary(name: str, env: str, script: str) -> Path:
    """A program ``make test`` builds into ``.tools/bin`` (``$env`` names another); a
    RuntimeError saying which script builds it when it is missing."""
    found = Path(os.environ.get(env) or REPO / ".tools" / "bin" / name)
    if not found.is_file():
        raise RuntimeError(f"{found} is missing: run {script} (make test does)")
    return found
