"""worker_id(): host:pid, made once per process, and a forked child's own."""

from __future__ import annotations

import os
import socket

from histaudit.interceptor.recorder import worker_id


def test_it_names_this_host_and_process() -> None:
    assert worker_id() == f"{socket.gethostname()}:{os.getpid()}"
    assert worker_id() == worker_id()


def test_a_forked_child_reports_its_own_pid() -> None:
    parent = worker_id()  # made, and kept, in the parent before the fork
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's report goes through the pipe
        try:
            os.write(write, worker_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        reported = fh.read().decode()
    os.waitpid(child, 0)
    assert reported == f"{socket.gethostname()}:{child}"
    assert reported != parent and worker_id() == parent
