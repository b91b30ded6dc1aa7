"""A SQLite ledger made immutable under a process that appends to it (issue #40, item 10):
each append fails with a StoreError naming the file, and the process lives. Before, no
checkpoint could empty the WAL into the immutable database, the WAL grew past what the
immutable ``-shm`` index could map, and SQLite died of SIGBUS (≈ 4,000 appends in).
Needs ``chattr`` (e2fsprogs) and root on an ext4 or similar /tmp, as on the CI machine.
Cost: ≈ 3 s of CPU and wall.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

APPENDER = """
import subprocess, sys
from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger

db = sys.argv[1]
ledger, signer = Ledger.open(f"sqlite:///{db}", create=True), KeyFileSigner.generate()
refused, last = 0, ""
for i in range(6000):
    if i == 100:
        subprocess.run(["chattr", "+i", db, db + "-shm"], check=True)
    try:
        chain.append(ledger, f"wf-{i % 3}", "step.done", {"i": i}, signer=signer)
    except StoreError as exc:
        refused, last = refused + 1, str(exc)
print(refused)
print(last)
"""


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ledger.db"
    try:
        yield path
    finally:  # an immutable file cannot be removed, not even by the tmp dir's cleanup
        subprocess.run(["chattr", "-i", path, f"{path}-shm"], capture_output=True,
                       check=False)


def test_an_immutable_ledger_refuses_appends_and_the_process_lives(db: Path) -> None:
    run = subprocess.run([sys.executable, "-c", APPENDER, str(db)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])  # -7 was SIGBUS
    refused, last = run.stdout.splitlines()
    assert int(refused) == 5900
    assert last == f"append to 'wf-2' failed: the file {db} cannot be written (read-only or " \
                   f"immutable)"
