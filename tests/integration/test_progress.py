"""Progress bars of long commands (docs/guide.md): drawn on a terminal, never in pipes.

The contract a script relies on: with stderr a pipe (CI, ``2>log``) nothing is drawn and
stdout and ``--json`` are byte for byte what they are without progress. With stderr a
pseudo-terminal the bar is drawn there — and only there — once the work has run ~0.5 s,
and ``HISTAUDIT_PROGRESS=0`` turns it off. The ledger is big enough (20,000 entries,
checked with ``--full --workers 1``) that every command here runs past the delay.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from histaudit.ledger import chain
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import HISTAUDIT, TIMEOUT, cli, exits

INSTANCES, STEPS = 40, 500
# one xdist worker builds the module fixtures (big) once (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("progress")

ENTRIES = INSTANCES * STEPS


@dataclass(frozen=True)
class Big:
    tmp: Path
    url: str
    key: Path
    trust: Path
    bundle: Path


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Big:
    """A SQLite ledger of 40 instances × 500 entries, and its exported bundle."""
    tmp = tmp_path_factory.mktemp("progress")
    key, trust, signer = generate_keypair(tmp / "keys", name="ops")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    items = []
    for i in range(INSTANCES):
        instance = f"job-{i}"
        items.append(chain.Item(instance, "workflow.started", {"workflow": "batch"}))
        items += [chain.Item(instance, "activity.started", {"task_id": t, "activity": "step"})
                  for t in range(1, STEPS)]
    with Ledger.open(url, create=True) as ledger:
        chain.append_many(ledger, items, signer=signer, durable=False)
    exits(cli("export", "--out", tmp / "bundle", "--db", url, "--key", key, "--trust", trust,
              cwd=tmp))
    return Big(tmp, url, key, trust, tmp / "bundle")


def on_pty(*args: str | os.PathLike[str], cwd: Path,
           env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``histaudit ARGS`` with stdout a pipe and stderr a pseudo-terminal; return the
    result (stdout) and everything written to the terminal."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    full_env.update({"COLUMNS": "120", "NO_COLOR": "1", "PYTHONUTF8": "1", "TERM": "xterm"})
    full_env.update(env or {})
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*HISTAUDIT, *map(str, args)], cwd=cwd, env=full_env,
                                stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    finally:
        os.close(slave)
    # Drain the terminal while the child runs: a full pty buffer would block its writes.
    seen = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], TIMEOUT)
        if not ready:
            proc.kill()
            raise AssertionError("histaudit wrote nothing for too long")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal (exited)
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    proc.wait(TIMEOUT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), seen.decode(
        "utf-8", "replace")


VERIFY_ALL = ("verify", "--all", "--full", "--workers", "1", "--json")


def test_verify_all_draws_a_bar_on_a_terminal_and_not_on_stdout(big: Big) -> None:
    piped = cli(*VERIFY_ALL, "--db", big.url, "--trust", big.trust, cwd=big.tmp)
    exits(piped)
    result, terminal = on_pty(*VERIFY_ALL, "--db", big.url, "--trust", big.trust, cwd=big.tmp)
    assert result.returncode == 0
    assert "verifying (full)" in terminal
    assert f"/{ENTRIES} entries" in terminal, terminal[-500:]
    assert "Traceback" not in terminal
    # stdout is the same JSON document, untouched by the bar.
    assert result.stdout == piped.stdout
    assert "verifying" not in result.stdout and "\x1b" not in result.stdout


def test_verify_of_one_instance_counts_its_entries_on_a_terminal(
        tmp_path: Path) -> None:
    """One instance of 20,000 entries: the bar counts entries against the instance's size
    (not a spinner), and stdout is the same JSON as in a pipe."""
    _key, trust, signer = generate_keypair(tmp_path / "keys", name="ops")
    url = f"sqlite:///{tmp_path / 'one.db'}"
    items = [chain.Item("long-job", "workflow.started", {"workflow": "batch"})]
    items += [chain.Item("long-job", "activity.started", {"task_id": t, "activity": "step"})
              for t in range(1, ENTRIES)]
    with Ledger.open(url, create=True) as ledger:
        chain.append_many(ledger, items, signer=signer, durable=False)
    args = ("verify", "long-job", "--full", "--workers", "1", "--json", "--db", url,
            "--trust", trust)
    piped = cli(*args, cwd=tmp_path)
    exits(piped)
    result, terminal = on_pty(*args, cwd=tmp_path)
    assert result.returncode == 0
    assert "verifying long-job (full)" in terminal, terminal[-500:]
    assert f"/{ENTRIES} entries" in terminal, terminal[-500:]
    assert result.stdout == piped.stdout and "\x1b" not in result.stdout


def test_histaudit_progress_0_silences_the_bar_on_a_terminal(big: Big) -> None:
    result, terminal = on_pty(*VERIFY_ALL, "--db", big.url, "--trust", big.trust, cwd=big.tmp,
                              env={"HISTAUDIT_PROGRESS": "0"})
    assert result.returncode == 0
    assert terminal == ""
    assert result.stdout.startswith('{\n  "ok": true,\n  "reports": [')


@pytest.mark.parametrize("args", [
    pytest.param(("verify", "--all", "--full", "--workers", "1", "--json"), id="verify-all-json"),
    pytest.param(("verify", "--all"), id="verify-all"),
    pytest.param(("verify", "job-3", "--full", "--workers", "1"), id="verify-one"),
    pytest.param(("show", "job-3", "--compact"), id="show"),
], )
def test_ledger_commands_are_silent_in_pipes(big: Big, args: tuple[str, ...]) -> None:
    result = cli(*args, "--db", big.url, "--trust", big.trust, cwd=big.tmp)
    exits(result)  # exit 0 and nothing at all on stderr
    assert "\x1b" not in result.stdout and "━" not in result.stdout


def test_export_and_bundle_verify_are_silent_in_pipes(big: Big) -> None:
    exported = cli("export", "--out", big.tmp / "again", "--db", big.url, "--key", big.key,
                   "--trust", big.trust, cwd=big.tmp)
    exits(exported)
    assert exported.stdout.startswith(f"exported {INSTANCES} instance(s), {ENTRIES} entries")
    checked = cli("verify", "--bundle", big.bundle, "--trust", big.trust, "--json",
                  cwd=big.tmp)
    exits(checked)
    assert checked.stdout.lstrip().startswith("{")
    shown = cli("show", "job-3", "--bundle", big.bundle, "--trust", big.trust, "--compact",
                cwd=big.tmp)
    exits(shown)
    assert len(shown.stdout.splitlines()) == STEPS


def test_export_and_bundle_verify_draw_on_a_terminal(big: Big) -> None:
    exported, terminal = on_pty("export", "--out", big.tmp / "on-tty", "--db", big.url,
                                "--key", big.key, "--trust", big.trust, cwd=big.tmp)
    assert exported.returncode == 0, terminal[-2000:]
    assert exported.stdout.startswith(f"exported {INSTANCES} instance(s)")
    assert "exporting to" in terminal and " entries" in terminal, terminal[-500:]

    piped = cli("verify", "--bundle", big.bundle, "--trust", big.trust, "--json", cwd=big.tmp)
    checked, terminal = on_pty("verify", "--bundle", big.bundle, "--trust", big.trust,
                               "--json", cwd=big.tmp)
    assert checked.returncode == 0, terminal[-2000:]
    assert "verifying bundle" in terminal and f"/{2 * ENTRIES}" in terminal, terminal[-500:]
    assert checked.stdout == piped.stdout
