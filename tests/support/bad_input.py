"""What the bad-input tests share: a command runner, byte-identical ledger snapshots, the
one-test world (:class:`Ctx`) and the table of commands that read a ledger.

The rule they check (product brief): a missing or corrupt database, a wrong URL, a
non-JSON body, an unknown schema or format version, a missing, wrong or unreadable key, a
huge payload — each is met with ONE line on stderr, ``histaudit: error: ...``, naming the
problem, and exit status 2; never a traceback; and the ledger is byte-identical afterwards
(SHA-256 of every file next to a SQLite ledger; a dump of every row of every table on
PostgreSQL). The files: ``test_bad_input.py`` (databases, URLs, trust stores, keys,
command lines, corrupt files under the writing commands), ``test_bad_ledger_contents.py``
(broken and huge entries), ``test_bad_columns.py`` (every column × every stored type) and
``test_bad_places.py`` (read-only ledgers, held locks, hostile ids, unwritable outputs).
Everything runs the installed console script (:func:`support.cli.cli`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer, generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli
from support.ledgers import LedgerDb

# --- running the command ----------------------------------------------------------------

HUGE = 50 * 1024 * 1024  # a 50 MB stored body
GARBAGE = bytes(random.Random(20240607).randrange(256) for _ in range(8192))
"""8 KiB of seeded random bytes: a file that is no database, trust store or key."""
# File modes cannot make a file unreadable for root, and CI runs as root: "unreadable"
# is covered by paths that fail for everyone (a directory, a dangling symlink).


def run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``histaudit ARGS``, the argument list built by the tables below."""
    return cli(*args, cwd=cwd, env=env)


# --- byte-identical ledgers ---------------------------------------------------------------

def _digest(value: Any) -> str:
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, bytes):
        return "b:" + hashlib.sha256(value).hexdigest()
    return repr(value)


def snapshot_files(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (a ledger's -wal/-shm/-journal siblings too)."""
    if not root.exists():
        return {}
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "<dir>"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def snapshot_pg(url: str) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table in the database (a dump), bytes by their SHA-256."""
    with LedgerDb(url) as db:
        return {table: sorted(tuple(_digest(v) for v in row)
                              for row in db.rows(f'SELECT * FROM "{table}"'))
                for table in db.tables()}


def snapshot(url: str, files: Path) -> tuple[Any, ...]:
    """The state a command must not touch: the files under ``files``, and PG rows."""
    state: tuple[Any, ...] = (snapshot_files(files),)
    if url.startswith("postgresql"):
        state += (snapshot_pg(url),)
    return state


# --- ledgers and keys --------------------------------------------------------------------

@dataclass
class Ctx:
    """One test's world: a real ledger (4 entries of ``order-1``), its key and trust file."""

    tmp: Path      # working directory of the command
    url: str       # the ledger, or the bad database under test
    key: Path
    trust: Path
    files: Path    # directory whose files must stay byte-identical

    def state(self) -> tuple[Any, ...]:
        return snapshot(self.url, self.files)


def keys_for(tmp: Path) -> tuple[Path, Path, Signer]:
    return generate_keypair(tmp / "keys", name="ops")


def append_kept_payload(ctx: Ctx, task_id: int, payload: bytes) -> None:
    """Append an ``activity.completed`` of ``order-1`` whose output is ``payload``, kept
    (its salted commitment in the entry, the bytes in the payloads table)."""
    salt = fmt.new_salt()
    c = fmt.commit(payload, salt)
    with Ledger.open(ctx.url) as ledger:
        chain.append(ledger, "order-1", "activity.completed",
                     {"task_id": task_id, "output": {"c": c, "n": len(payload)}},
                     signer=KeyFileSigner.load(ctx.key), payloads={salt: (c, payload)})


def raw_sql(url: str, *statements: str) -> None:
    """Run SQL on the ledger's database directly (an operator or attacker with access)."""
    with LedgerDb(url) as db:
        db.script(*statements)


def insert_entry_row(url: str, instance: str, body: bytes) -> int:
    """Append a raw row (INSERT is what the append-only triggers allow); returns its seq."""
    with LedgerDb(url) as db:
        return db.append_raw(instance, body)


def last_body(url: str, instance: str) -> dict[str, Any]:
    with LedgerDb(url) as db:
        return json.loads(db.last_body(instance))


# --- the commands ------------------------------------------------------------------------

#: command name -> argv builder. Every command that reads a ledger.
DB_COMMANDS: dict[str, Callable[[Ctx], list[str]]] = {
    "verify": lambda c: ["verify", "order-1", "--db", c.url, "--trust", str(c.trust)],
    "verify --all": lambda c: ["verify", "--all", "--db", c.url, "--trust", str(c.trust)],
    "list": lambda c: ["list", "--db", c.url],
    "list --trust": lambda c: ["list", "--db", c.url, "--trust", str(c.trust)],
    "show": lambda c: ["show", "order-1", "--db", c.url],
    "redact": lambda c: ["redact", "order-1", "--seq", "1", "--field", "input", "--db", c.url,
                         "--key", str(c.key)],
    "retention apply": lambda c: ["retention", "apply", "--policy", str(_erase_all(c)),
                                  "--now", "2999-01-01T00:00:00Z", "--db", c.url,
                                  "--key", str(c.key)],
}


@functools.cache
def _erase_all_policy() -> Path:
    path = Path(tempfile.mkdtemp(prefix="histaudit-bad-input-")) / "erase-all.policy.json"
    path.write_text('{"version": 1, "payloads": [{"kinds": ["*"], "keep_days": 0}]}')
    return path


def _erase_all(_c: Ctx) -> Path:
    """A retention policy that would erase every payload, written once per process outside
    every test's directory (whose files must stay byte-identical)."""
    return _erase_all_policy()
TRUST_COMMANDS = ("verify", "verify --all", "list --trust")


