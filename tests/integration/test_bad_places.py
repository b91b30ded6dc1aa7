"""Where the ledger or an output lives is the problem: read-only ledgers (reads work, a
write is refused naming why), a write lock held by another process, hostile instance ids,
outputs that cannot be written or fill the disk — one error line, the ledger unchanged.
Shared helpers: ``support/bad_input.py``.
Cost: ≈ 35 s of CPU (75 tests).
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.errors import FormatError
from histaudit.ledger import chain
from histaudit.ledger.store import Ledger
from support.bad_input import DB_COMMANDS, Ctx, append_kept_payload, keys_for, run
from support.cli import cli, exits, one_error_line
from support.ledgers import LedgerDb, append_order, write_lock_held
from support.repo import REPO

# --- 11. read-only ledgers: reads work, a write is refused naming why -----------------------

READ_COMMANDS = ("verify", "verify --all", "list", "list --trust", "show")


def _sqlite_ctx(tmp: Path) -> tuple[Ctx, Path]:
    """A good SQLite ledger in its own directory ``tmp/db`` (closed: no -wal left)."""
    key, trust, signer = keys_for(tmp)
    (tmp / "db").mkdir()
    path = tmp / "db" / "ledger.db"
    with Ledger.open(f"sqlite:///{path}", create=True) as ledger:
        append_order(ledger, signer, "order-1")
    return Ctx(tmp=tmp, url=f"sqlite:///{path}", key=key, trust=trust, files=tmp / "db"), path


@pytest.mark.parametrize("query", ["?mode=ro&uri=true", "?mode=ro", "?immutable=1&uri=true"])
def test_read_only_sqlite_url(query: str, tmp_path: Path) -> None:
    ctx, path = _sqlite_ctx(tmp_path)
    ctx.url += query
    data = path.read_bytes()
    for command in READ_COMMANDS:
        exits(run(DB_COMMANDS[command](ctx), cwd=tmp_path), 0)
    one_error_line(run(DB_COMMANDS["redact"](ctx), cwd=tmp_path), "cannot be written",
                   "mode=ro" if "mode" in query else "immutable=1")
    assert path.read_bytes() == data
    # SQLite's own -wal/-shm index files may remain; no stray "ledger.db?mode=ro" file.
    assert {p.name for p in path.parent.iterdir()} <= {
        "ledger.db", "ledger.db-wal", "ledger.db-shm"}, list(path.parent.iterdir())


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """``chattr +i``: not even root may write (file modes do not stop root)."""
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode:
        pytest.fail(f"cannot make {path} immutable: {made.stderr.strip()}", pytrace=False)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("what", ["directory", "file"])
def test_ledger_in_read_only_directory_or_file(what: str, tmp_path: Path) -> None:
    ctx, path = _sqlite_ctx(tmp_path)
    before = ctx.state()
    with _immutable(path.parent if what == "directory" else path):
        for command in READ_COMMANDS:
            exits(run(DB_COMMANDS[command](ctx), cwd=tmp_path), 0)
        r = run([*DB_COMMANDS["verify"](ctx), "--full", "--json"], cwd=tmp_path)
        exits(r, 0)
        assert json.loads(r.stdout)["reports"][0]["entries"] == 4
        needles = (str(path.parent), "directory") if what == "directory" else (
            str(path), "read-only")
        one_error_line(run(DB_COMMANDS["redact"](ctx), cwd=tmp_path), *needles)
    assert ctx.state()[0]["ledger.db"] == before[0]["ledger.db"]
    if what == "directory":
        assert ctx.state() == before


# --- 12. the write lock is held by another process ------------------------------------------

WRITE_COMMANDS: dict[str, Callable[[Ctx], list[str]]] = {
    "redact": DB_COMMANDS["redact"],
    "checkpoint": lambda c: ["checkpoint", "--db", c.url, "--key", str(c.key)],
    "export": lambda c: ["export", "--out", str(c.tmp / "bundle"), "--db", c.url,
                         "--key", str(c.key), "--trust", str(c.trust)],
}


def _ledger_state(ctx: Ctx) -> tuple[Any, ...]:
    files, *rest = ctx.state()
    return ({k: v for k, v in files.items() if not k.startswith("bundle")}, *rest)


@pytest.mark.parametrize("command", WRITE_COMMANDS)
def test_write_lock_held_by_another_process(command: str, ledger_ctx: Ctx) -> None:
    ctx = ledger_ctx
    before = _ledger_state(ctx)
    with write_lock_held(ctx.url):
        started = time.monotonic()
        r = run(WRITE_COMMANDS[command](ctx), cwd=ctx.tmp, env={"HISTAUDIT_LOCK_WAIT": "2"})
        elapsed = time.monotonic() - started
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("histaudit: waiting for the write lock held by another process")
    assert lines[1].startswith("histaudit: error: ") and "gave up after 2 s" in lines[1], lines
    assert "HISTAUDIT_LOCK_WAIT" in lines[1]
    assert 2 <= elapsed < 60, elapsed
    assert _ledger_state(ctx) == before


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "1e9"])
def test_bad_lock_wait_setting(value: str, ledger_ctx: Ctx) -> None:
    before = ledger_ctx.state()
    r = run(DB_COMMANDS["redact"](ledger_ctx), cwd=ledger_ctx.tmp,
            env={"HISTAUDIT_LOCK_WAIT": value})
    one_error_line(r, "HISTAUDIT_LOCK_WAIT", "seconds")
    assert ledger_ctx.state() == before


# --- 13. hostile instance ids ----------------------------------------------------------------

HOSTILE_IDS = {
    "newline": "order-2\ninstance order-1: 4 entries, default check — OK",
    "carriage return": "order-2\rOK", "NUL": "order\x00-2", "tab": "order\t2",
    "ANSI escape": "order-2\x1b[2J\x1b[32mOK", "DEL": "order-2\x7f", "C1 CSI": "order\x9b2J",
    "bidi override RLO": "order-\u202e2", "bidi embedding LRE": "\u202aorder-2",
    "bidi isolate FSI": "order-\u20682", "pop isolate": "order-2\u2069",
    "line separator": "order-2\u2028OK",
}


@pytest.mark.parametrize("case", HOSTILE_IDS)
def test_hostile_instance_id_is_refused_at_append(case: str, db_url: str, tmp_path: Path
                                                   ) -> None:
    _, _, signer = keys_for(tmp_path)
    with Ledger.open(db_url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
        with pytest.raises(FormatError, match="control or bidi character U\\+") as caught:
            chain.append(ledger, HOSTILE_IDS[case], "workflow.started", {}, signer=signer)
        assert ledger.instance_ids() == ["order-1"]
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)


def test_long_instance_id_is_clipped_in_the_refusal(tmp_path: Path, sqlite_url: str) -> None:
    _, _, signer = keys_for(tmp_path)
    with Ledger.open(sqlite_url, create=True) as ledger, \
            pytest.raises(FormatError) as caught:
        chain.append(ledger, "y" * 10240, "workflow.started", {}, signer=signer)
    assert "(10240 chars)" in str(caught.value) and len(str(caught.value)) < 400


def _printable(text: str) -> bool:
    return all(c == "\n" or c.isprintable() for c in text)


def test_stored_control_characters_never_reach_the_terminal(ledger_ctx: Ctx) -> None:
    """Rows an attacker stored with hostile ids are printed escaped, never raw."""
    ctx = ledger_ctx
    evil = HOSTILE_IDS["newline"] + "\x1b[2J\u202e\x9b"
    with LedgerDb(ctx.url) as db:
        db.insert_entry(leaf=4, instance=evil, seq=1, digest="ab" * 32,
                        body=b'{"kind":"\x1b[31m\\n"}', sig=b"")
    before = ctx.state()
    for args in (DB_COMMANDS["verify --all"](ctx), DB_COMMANDS["list"](ctx),
                 DB_COMMANDS["list --trust"](ctx), ["show", evil, "--db", ctx.url]):
        r = run(args, cwd=ctx.tmp)
        assert "Traceback" not in r.stderr and r.returncode in (0, 1), r.stderr
        assert _printable(r.stdout), repr(r.stdout)
        assert sum(line.startswith("instance order-1: 4 entries") and line.endswith("OK")
                   for line in r.stdout.splitlines()) <= 1, r.stdout
    assert ctx.state() == before



# --- checkpoint --out and export whose output cannot be written: the ledger unchanged ------
# Before the fix each of these stored a new checkpoint row first, then failed. Now the
# output is checked, written beside its target and moved into place inside the transaction
# that stores the checkpoint (histaudit.bundle.staging); ``Ctx.files`` is the whole tmp
# dir, so "byte-identical" also means: no partial file or directory left behind.

def _checkpoint_to(where: Callable[[Path], Path]) -> Callable[[Ctx], list[str]]:
    return lambda c: ["checkpoint", "--db", c.url, "--key", str(c.key), "--out",
                      str(where(c.tmp))]


def _export_to(where: Callable[[Path], Path], *ids: str) -> Callable[[Ctx], list[str]]:
    return lambda c: ["export", *ids, "--out", str(where(c.tmp)), "--db", c.url, "--key",
                      str(c.key), "--trust", str(c.trust)]


def _a_file(tmp: Path) -> Path:
    (tmp / "afile").write_bytes(b"not a directory")
    return tmp / "afile"


def _full(tmp: Path) -> Path:
    (tmp / "full").mkdir()
    (tmp / "full" / "old.txt").write_bytes(b"here before")
    return tmp / "full"


#: name -> (argv, what the error line must say)
UNWRITABLE_OUTPUT: dict[str, tuple[Callable[[Ctx], list[str]], tuple[str, ...]]] = {
    "checkpoint --out in a missing directory": (
        _checkpoint_to(lambda t: t / "nodir" / "cp.note"), ("nodir", "does not exist")),
    "checkpoint --out under a file": (
        _checkpoint_to(lambda t: _a_file(t) / "cp.note"), ("afile", "not a directory")),
    "checkpoint --out a directory": (
        _checkpoint_to(lambda t: _full(t)), ("full", "not a regular file")),
    "checkpoint --out a device": (  # not replaced by a file, even when run as root
        _checkpoint_to(lambda t: Path("/dev/full")), ("/dev/full", "not a regular file")),
    "export of a missing instance": (_export_to(lambda t: t / "b", "ghost"), ("'ghost'",)),
    "export of a good and a missing instance": (
        _export_to(lambda t: t / "b", "order-1", "ghost"), ("'ghost'",)),
    "export into a missing directory": (
        _export_to(lambda t: t / "nodir" / "b"), ("nodir", "does not exist")),
    "export into a path under a file": (
        _export_to(lambda t: _a_file(t) / "b"), ("afile", "not a directory")),
    "export onto a file": (_export_to(_a_file), ("afile", "not a directory")),
    "export onto a non-empty directory": (_export_to(_full), ("full", "not empty")),
    "export of an instance outside the window": (
        lambda c: [*_export_to(lambda t: t / "b")(c), "--since", "2999-01-01T00:00:00Z"],
        ("no instance",)),
}


@pytest.mark.parametrize("case", UNWRITABLE_OUTPUT)
def test_unwritable_output_leaves_the_ledger_unchanged(case: str, ledger_ctx: Ctx) -> None:
    argv, needles = UNWRITABLE_OUTPUT[case]
    args = argv(ledger_ctx)
    before = ledger_ctx.state()
    one_error_line(run(args, cwd=ledger_ctx.tmp), *needles)
    assert ledger_ctx.state() == before, "a failed command changed the ledger or left files"


@pytest.mark.parametrize("command", ["checkpoint", "export"])
def test_output_in_a_read_only_directory_leaves_the_ledger_unchanged(command: str,
                                                                     ledger_ctx: Ctx) -> None:
    ro = ledger_ctx.tmp / "ro"
    ro.mkdir()
    args = (_checkpoint_to if command == "checkpoint" else _export_to)(lambda t: ro / "out")(
        ledger_ctx)
    before = ledger_ctx.state()
    with _immutable(ro):
        one_error_line(run(args, cwd=ledger_ctx.tmp), "cannot write", str(ro / "out"))
    assert ledger_ctx.state() == before
    # And it works once the directory is writable: the failure left nothing in the way.
    exits(run(args, cwd=ledger_ctx.tmp), 0)
    assert (ro / "out").exists() and ledger_ctx.state() != before


def test_export_onto_a_full_disk_leaves_the_ledger_unchanged(ledger_ctx: Ctx) -> None:
    """A real write failure (EFBIG from RLIMIT_FSIZE, what a full disk gives as ENOSPC)
    in the middle of the bundle: payloads.jsonl (a 400 kB payload) passes the limit,
    the smaller files before it were written already."""
    ctx = ledger_ctx
    append_kept_payload(ctx, 2, b"p" * 400_000)
    args = [*_export_to(lambda t: t / "b")(ctx), "--with-payloads"]
    before = ctx.state()
    r = cli(*args, cwd=ctx.tmp, file_size_limit=256 << 10)
    one_error_line(r, "cannot write bundle", "File too large")
    assert ctx.state() == before
    exits(run(args, cwd=ctx.tmp), 0)  # with room, the same export works


@pytest.mark.postgres
def test_checkpoint_note_onto_a_full_disk_leaves_the_ledger_unchanged(pg_url: str,
                                                                      tmp_path: Path) -> None:
    """PostgreSQL only: a note is ~240 bytes, and a SQLite ledger cannot even be opened
    under a file-size limit that small (its 32 kB -shm index); the read-only directory
    case above covers the same failure on SQLite."""
    key, trust, signer = keys_for(tmp_path)
    with Ledger.open(pg_url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
    ctx = Ctx(tmp=tmp_path, url=pg_url, key=key, trust=trust, files=tmp_path)
    args = _checkpoint_to(lambda t: t / "cp.note")(ctx)
    before = ctx.state()
    one_error_line(cli(*args, cwd=tmp_path, file_size_limit=100), "cp.note",
                   "File too large")
    assert ctx.state() == before




# --- small input files that are FIFOs (issue #40, item 5) --------------------------------

FIFO_COMMANDS: dict[str, Callable[[Ctx, Path], list[str]]] = {
    "verify --since-checkpoint": lambda c, f: ["verify", "--all", "--since-checkpoint",
                                               str(f), "--db", c.url, "--trust",
                                               str(c.trust)],
    "checkpoint verify": lambda c, f: ["checkpoint", "verify", str(f), "--trust",
                                       str(c.trust)],
    "checkpoint cosign --witness-policy": lambda c, f: [
        "checkpoint", "cosign", "--witness-policy", str(f), "--db", c.url, "--key",
        str(c.key)],
    "replay --history": lambda c, f: [
        "replay", "--history", str(f), "--workflow",
        f"{REPO / 'examples' / 'nondeterminism' / 'workflows.py'}:order"],
}


@pytest.mark.parametrize("command", sorted(FIFO_COMMANDS))
def test_a_fifo_with_no_writer_is_refused_at_once(command: str, tmp_path: Path) -> None:
    """Each used to wait for a writer for ever; now one line, exit 2, nothing written."""
    import os

    ctx, _ = _sqlite_ctx(tmp_path)
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    before = ctx.state()
    began = time.monotonic()
    r = cli(*FIFO_COMMANDS[command](ctx, fifo), cwd=tmp_path, timeout=30)
    one_error_line(r, "is a FIFO, not a regular file")
    assert time.monotonic() - began < 20
    assert ctx.state() == before
