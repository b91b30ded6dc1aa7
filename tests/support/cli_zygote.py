"""A fork server for the ``histaudit`` command in tests: import once, fork per command.

Started by :mod:`support.cli` (one per test process): it imports ``histaudit.cli`` and what
its commands load, then serves requests on a Unix socket. Each request carries the command
line, working directory, environment, an optional RLIMIT_FSIZE, and three file
descriptors (SCM_RIGHTS) for stdin, stdout and stderr. The server forks; the child takes
those as fds 0–2, the request's directory and environment, and runs the console script's
two lines (``sys.exit(main())``) — the exit, ``atexit`` handlers, thread shutdown and a
traceback for an uncaught exception are the interpreter's own, as for ``histaudit`` run
from a shell. The server answers each request with the child's pid, then its exit status
(negative: the signal that ended it) and CPU seconds, and exits when its parent closes its stdin.

What a forked command skips is only the interpreter's start and the imports (≈ 0.22 s of
CPU of a 0.3 s ``verify``); ``HISTAUDIT_TEST_CLI=exec`` runs every command as a new
process instead, and ``tests/integration/test_cli_runner.py`` shows both give the same
bytes and exit status.
"""

from __future__ import annotations

import io
import json
import os
import resource
import selectors
import signal
import socket
import sys
from typing import Any

# Run by path, so sys.path[0] is tests/support; a command must not import from there.
del sys.path[0]

# What the commands import lazily, loaded here once so a forked command does not.
import histaudit.cli  # noqa: E402
import histaudit.ledger.store  # noqa: E402
import histaudit.verify  # noqa: E402
from histaudit.cli import main  # noqa: E402

del histaudit

_MAX_REQUEST = 1 << 20


def _stdio(fd: int, mode: str, errors: str) -> io.TextIOWrapper:
    """A standard stream as a UTF-8-mode interpreter opens it at start-up."""
    raw = io.FileIO(fd, mode, closefd=False)
    tty = raw.isatty()
    buffered: io.BufferedIOBase = (io.BufferedWriter(raw) if "w" in mode
                                   else io.BufferedReader(raw))
    return io.TextIOWrapper(buffered, encoding="utf-8", errors=errors,  # type: ignore[arg-type]
                            line_buffering=tty and "w" in mode, write_through=fd == 2)


def _become_command(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the request's stdio, place and environment."""
    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    limit = request.get("fsize")
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The server's own streams stay referenced by sys.__stdout__ & co. and are closed at
    # exit, after these are flushed, as an interpreter closes its standard streams.
    sys.stdin = _stdio(0, "r", "strict")
    sys.stdout = _stdio(1, "w", "strict")
    sys.stderr = _stdio(2, "w", "backslashreplace")
    sys.argv = [request["argv0"], *request["args"]]
    sys.path.insert(0, os.path.dirname(request["argv0"]))  # as for the console script


def serve(path: str) -> bool:
    """Serve until the parent goes (False); in a forked child, set up the command and
    return True."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, its asker)
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return False
            elif key.data == "accept":
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST, 3)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for pidfd, (_, other) in running.items():
                        os.close(pidfd)
                        other.close()
                    _become_command(json.loads(message), fds)
                    return True
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                running[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ)
                conn.send(f"{pid}".encode())
            else:
                pid, conn = running.pop(key.fd)
                _, status, usage = os.wait4(pid, 0)
                selector.unregister(key.fd)
                os.close(key.fd)
                try:
                    cpu = usage.ru_utime + usage.ru_stime
                    conn.send(f"{os.waitstatus_to_exitcode(status)} {cpu}".encode())
                except OSError:  # the asker gave up (timed out) and closed its end
                    pass
                conn.close()


if __name__ == "__main__":
    if serve(sys.argv[1]):
        # The forked command: exactly the console script's body.
        sys.exit(main())
