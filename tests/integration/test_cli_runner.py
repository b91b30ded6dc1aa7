"""The tests' command runner (``support/cli.py``): a command forked from the pre-imported
server gives the same bytes and exit status as the console script started from scratch.

Every ``cli()`` call in the suite relies on this, so it is checked on what a command can
do differently: exit 0, 1 and 2; stdout and stderr; the working directory; the
environment (HISTAUDIT_DB); a file-size limit; a traceback-free usage error; and
a timeout that kills the command. Cost: ≈ 3 s of CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from histaudit.ledger import chain
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli
from support.ledgers import write_lock_held


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, str, Path, Path]:
    key, trust, signer = generate_keypair(tmp_path / "keys", name="ops")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger.open(url, create=True) as ledger:
        chain.append_many(ledger, [chain.Item("o-1", "workflow.started", {"workflow": "w"}),
                                   chain.Item("o-1", "activity.started",
                                              {"task_id": 1, "activity": "a"})],
                          signer=signer)
    return tmp_path, url, key, trust


def _both(monkeypatch: pytest.MonkeyPatch, *args: str | os.PathLike[str], cwd: Path,
          **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the command forked and exec'd; assert the two results agree; return one."""
    results = []
    for mode in ("fork", "exec"):
        monkeypatch.setenv("HISTAUDIT_TEST_CLI", mode)
        results.append(cli(*args, cwd=cwd, **kwargs))  # type: ignore[arg-type]
    forked, execd = results
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (execd.returncode, execd.stdout, execd.stderr), args
    return forked


def test_forked_and_execd_commands_agree(world: tuple[Path, str, Path, Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tmp, url, key, trust = world
    ok = _both(monkeypatch, "verify", "o-1", "--db", url, "--trust", trust, cwd=tmp)
    assert ok.returncode == 0 and "2 entries" in ok.stdout and ok.stderr == ""
    doc = _both(monkeypatch, "verify", "--all", "--json", "--db", url, "--trust", trust,
                cwd=tmp)
    assert json.loads(doc.stdout)["ok"] is True
    # The environment and the working directory are the request's own.
    env = _both(monkeypatch, "list", cwd=tmp, env={"HISTAUDIT_DB": url})
    assert env.returncode == 0 and "o-1" in env.stdout
    relative = _both(monkeypatch, "list", "--db", "sqlite:///ledger.db", cwd=tmp)
    assert relative.returncode == 0 and "o-1" in relative.stdout
    # Bad input: exit 2, one line, no traceback.
    bad = _both(monkeypatch, "verify", "--bogus", cwd=tmp)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1
    missing = _both(monkeypatch, "verify", "o-1", "--db", f"sqlite:///{tmp / 'no.db'}",
                    "--trust", trust, cwd=tmp)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    # A finding: exit 1.
    other_key, other_trust, _ = generate_keypair(tmp / "other", name="other")
    del other_key
    untrusted = _both(monkeypatch, "verify", "o-1", "--db", url, "--trust", other_trust,
                      cwd=tmp)
    assert untrusted.returncode == 1
    # RLIMIT_FSIZE reaches the command: an export larger than 1 KiB cannot be written.
    for mode, out in (("fork", "b1"), ("exec", "b2")):
        monkeypatch.setenv("HISTAUDIT_TEST_CLI", mode)
        full = cli("export", "--out", tmp / out, "--db", url, "--key", key, "--trust", trust,
                   cwd=tmp, file_size_limit=1024)
        assert full.returncode == 2 and "Traceback" not in full.stderr, (mode, full.stderr)


def test_a_forked_command_past_its_timeout_is_killed(world: tuple[Path, str, Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tmp, url, key, trust = world
    monkeypatch.setenv("HISTAUDIT_TEST_CLI", "fork")
    # a write lock held elsewhere, and a minute's wait for it: the command blocks
    with write_lock_held(url), pytest.raises(subprocess.TimeoutExpired):
        cli("checkpoint", "--db", url, "--key", key, "--out", tmp / "cp.note", cwd=tmp,
            env={"HISTAUDIT_LOCK_WAIT": "60"}, timeout=2)
    # The server is still there for the next command.
    assert cli("verify", "o-1", "--db", url, "--trust", trust, cwd=tmp).returncode == 0
