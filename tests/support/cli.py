"""Running the real ``histaudit`` console script from tests, and checking how it exits.

The one way tests run the command: :func:`cli` (a clean environment, so no HISTAUDIT_*
setting of the test run leaks in), then :func:`exits` for a verdict (0 clean, 1 findings),
:func:`one_error_line` for bad input (2, one ``histaudit: error:`` line) or
:func:`verification_failed` for a check that stopped verification (1, one
``histaudit: verification failed:`` line).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["HISTAUDIT", "TIMEOUT", "cli", "exits", "one_error_line", "verification_failed"]

_SCRIPT = Path(sys.executable).with_name("histaudit")
#: argv prefix of the command: the installed console script, else ``python -m``.
HISTAUDIT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "histaudit.cli"]
TIMEOUT = 180
_ERROR = "histaudit: error: "
_FAILED = "histaudit: verification failed: "


def cli(*args: str | os.PathLike[str], cwd: Path,
        env: Mapping[str, str] | None = None, file_size_limit: int | None = None,
        timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``histaudit ARGS`` in ``cwd``; ``env`` is added to (or overrides) the clean
    environment: the parent's minus every HISTAUDIT_* variable, plus wide, plain output.
    ``file_size_limit`` sets RLIMIT_FSIZE in the child: a write past that many bytes of any
    file fails with EFBIG, as a full disk would (Python ignores SIGXFSZ)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    full_env.update({"COLUMNS": "200", "NO_COLOR": "1", "PYTHONUTF8": "1"})
    full_env.update(env or {})
    def limit() -> None:
        import resource

        assert file_size_limit is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([*HISTAUDIT, *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=timeout,
                          preexec_fn=None if file_size_limit is None else limit)


def exits(result: subprocess.CompletedProcess[str], code: int = 0) -> None:
    """It ran to its verdict: exit ``code``, quietly on stderr, and without a traceback."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert result.returncode == code, (result.returncode, result.stdout[-2000:],
                                       result.stderr[-2000:])
    assert result.stderr == "", result.stderr[-2000:]


def one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """It exited 2 with nothing on stdout and exactly one ``histaudit: error: ...`` line
    on stderr, which says something and names every needle; returns that line."""
    return _one_line(result, 2, _ERROR, needles)


def verification_failed(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """It exited 1 with nothing on stdout and exactly one ``histaudit: verification
    failed: ...`` line on stderr naming every needle (a signature that does not verify
    with the trust store); returns that line."""
    return _one_line(result, 1, _FAILED, needles)


def _one_line(result: subprocess.CompletedProcess[str], code: int, prefix: str,
              needles: tuple[str, ...]) -> str:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert result.returncode == code, (result.returncode, result.stdout[-2000:],
                                       result.stderr[-2000:])
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(prefix), line
    assert len(line) > len(prefix) + 10, line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert result.stdout == "", result.stdout[-2000:]
    return line
