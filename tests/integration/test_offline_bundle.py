"""Offline verification needs the bundle and a public key — not a database driver, not Dapr.

The import graph says so (import-linter's contract in pyproject.toml); this proves it at
run time: ``histaudit verify --bundle`` runs in a fresh interpreter, which then reports
which of SQLAlchemy, psycopg, the Dapr SDK and gRPC it loaded. Verifying a database in
the same way must load SQLAlchemy, or the check would prove nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from histaudit.bundle.export import export
from histaudit.ledger import chain
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger

HEAVY = ("sqlalchemy", "psycopg", "dapr", "grpc", "google.protobuf")

PROBE = """
import json, sys
from histaudit.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] if not m.startswith("google.protobuf") else "google.protobuf"
                for m in sys.modules
                if m.split(".")[0] in ("sqlalchemy", "psycopg", "dapr", "grpc")
                or m.startswith("google.protobuf")})
print(json.dumps({"rc": code, "heavy": heavy}), file=sys.stderr)
"""


def _probe(*args: str | Path, cwd: Path) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    doc: dict[str, object] = json.loads(r.stderr.strip().splitlines()[-1])
    return doc


def test_verify_bundle_loads_no_database_driver_and_no_dapr(tmp_path: Path) -> None:
    _, _, signer = generate_keypair(tmp_path / "keys", name="exporter")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, create=True) as ledger:
        for n in range(5):
            chain.append(ledger, "offline-1", "activity.started", {"n": n}, signer=signer)
        export(ledger, [], tmp_path / "bundle", signer=signer,
               trust=TrustStore.load(tmp_path / "keys"))

    offline = _probe("verify", "--bundle", tmp_path / "bundle", "--trust", tmp_path / "keys",
                     cwd=tmp_path)
    assert offline == {"rc": 0, "heavy": []}

    # The same probe sees the driver when a database is verified: the check can fail.
    online = _probe("verify", "offline-1", "--db", url, "--trust", tmp_path / "keys",
                    cwd=tmp_path)
    assert online["rc"] == 0
    assert "sqlalchemy" in online["heavy"]
    assert set(online["heavy"]) <= set(HEAVY)
