"""Running the real ``histaudit`` console script from tests, and checking how it exits.

The one way tests run the command: :func:`cli` (a clean environment, so no HISTAUDIT_*
setting of the test run leaks in), then :func:`exits` for a verdict (0 clean, 1 findings),
:func:`one_error_line` for bad input (2, one ``histaudit: error:`` line) or
:func:`verification_failed` for a check that stopped verification (1, one
``histaudit: verification failed:`` line).

Each command is its own process with its own stdio, directory, environment and exit
status. By default it is forked from a server that has already imported histaudit
(:mod:`support.cli_zygote`, one per test process), which saves the ≈ 0.22 s of CPU an
interpreter spends starting and importing — most of the CPU of the suite's ~3,000
commands. A command whose PYTHON* variables (PYTHONPATH …) differ from the server's
starts its own interpreter, as do all with ``HISTAUDIT_TEST_CLI=exec``.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["HISTAUDIT", "TIMEOUT", "cli", "exits", "forked_cpu_s", "one_error_line",
           "verification_failed"]

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
    full_env = {**_server_env(), "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    if os.environ.get("HISTAUDIT_TEST_CLI", "fork") != "exec" and _SCRIPT.exists() \
            and _interpreter_settings(full_env) == _interpreter_settings(_server_env()):
        return _Zygote.get().run([str(a) for a in args], cwd=cwd, env=full_env,
                                 file_size_limit=file_size_limit, timeout=timeout)

    def limit() -> None:
        import resource

        assert file_size_limit is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run([*HISTAUDIT, *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=timeout,
                          preexec_fn=None if file_size_limit is None else limit)


def forked_cpu_s() -> float:
    """CPU seconds of the commands this process had forked so far: children of the fork
    server, so not in its own RUSAGE_CHILDREN (tests/support/timings.py adds them in)."""
    return _Zygote.forked_cpu_s


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


def _server_env() -> dict[str, str]:
    """The clean environment: the parent's minus every HISTAUDIT_* variable, in UTF-8
    mode. The fork server starts with it; :func:`cli` adds wide, plain output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env["PYTHONUTF8"] = "1"
    return env


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The PYTHON* variables: read when an interpreter starts (PYTHONPATH builds sys.path),
    so a command that sets them differently from the server's must start its own."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


class _Zygote:
    """This process's fork server for the command (:mod:`support.cli_zygote`)."""

    _current: _Zygote | None = None
    _lock = threading.Lock()
    forked_cpu_s = 0.0

    @classmethod
    def get(cls) -> _Zygote:
        with cls._lock:
            if cls._current is None or cls._current.pid != os.getpid() \
                    or cls._current.proc.poll() is not None:
                cls._current = cls()
            return cls._current

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.dir = tempfile.mkdtemp(prefix="histaudit-cli-")
        self.path = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_zygote.py")), self.path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_server_env())
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready != b"ready\n":
            self.proc.kill()
            raise RuntimeError(f"the CLI fork server did not start: {ready!r}")
        atexit.register(self.close)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the server exits when its stdin closes
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.rmdir(self.dir)

    def run(self, args: list[str], *, cwd: Path, env: Mapping[str, str],
            file_size_limit: int | None, timeout: float) -> subprocess.CompletedProcess[str]:
        """``histaudit ARGS`` as a forked child; the same result ``subprocess.run`` gives."""
        request = {"argv0": str(_SCRIPT), "args": args, "cwd": str(cwd), "env": dict(env),
                   "fsize": file_size_limit}
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            try:
                conn.connect(self.path)
                socket.send_fds(conn, [json.dumps(request).encode()], [stdin, out_w, err_w])
            finally:
                for fd in (stdin, out_w, err_w):
                    os.close(fd)
            pid = int(conn.recv(64))
            deadline = time.monotonic() + timeout
            chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
            with selectors.DefaultSelector() as selector:
                for fd in chunks:
                    selector.register(fd, selectors.EVENT_READ)
                while selector.get_map():
                    left = deadline - time.monotonic()
                    ready = selector.select(max(left, 0)) if left > 0 else []
                    if not ready:
                        os.kill(pid, signal.SIGKILL)
                        for fd in list(selector.get_map()):
                            selector.unregister(fd)
                            os.close(fd)
                        raise subprocess.TimeoutExpired([*HISTAUDIT, *args], timeout)
                    for key, _ in ready:
                        data = os.read(key.fd, 65536)
                        if data:
                            chunks[key.fd].append(data)
                        else:
                            selector.unregister(key.fd)
                            os.close(key.fd)
            code_text, cpu_text = conn.recv(64).split()
            _Zygote.forked_cpu_s += float(cpu_text)

        def text(fd: int) -> str:  # decoded as subprocess.run(text=True) does
            data = b"".join(chunks[fd]).decode("utf-8", errors="replace")
            return data.replace("\r\n", "\n").replace("\r", "\n")

        return subprocess.CompletedProcess([*HISTAUDIT, *args], int(code_text), text(out_r),
                                           text(err_r))
