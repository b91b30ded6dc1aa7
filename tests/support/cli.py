"""Running the real ``histaudit`` console script from tests, and checking how it exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = Path(sys.executable).with_name("histaudit")
HISTAUDIT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "histaudit.cli"]


def cli(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``histaudit ARGS`` with no HISTAUDIT_* settings leaking in from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env.update({"COLUMNS": "200", "NO_COLOR": "1", "PYTHONUTF8": "1"})
    return subprocess.run([*HISTAUDIT, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", timeout=180)


def exits(result: subprocess.CompletedProcess[str], code: int) -> None:
    """It exited with ``code``, quietly on stderr, and without a traceback."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr == ""


def one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """It exited 2 with exactly one ``histaudit: error:`` line naming every needle."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("histaudit: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert result.stdout == ""
    return lines[0]
