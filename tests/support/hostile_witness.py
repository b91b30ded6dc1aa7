"""A witness that answers badly on purpose: a real TCP server on 127.0.0.1 that reads the
``add-checkpoint`` request and answers with one chosen kind of garbage (issue #40)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ANSWERS", "hostile_witness"]

_OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"


def _trickle(conn: socket.socket, data: bytes, every: float) -> None:
    for i in range(len(data)):
        conn.sendall(data[i:i + 1])
        time.sleep(every)


ANSWERS = {
    "not-http": lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"),
    "status-line-70k": lambda c: c.sendall(b"HTTP/1.1 200 " + b"O" * 70_000 + b"\r\n\r\n"),
    "101-headers": lambda c: c.sendall(_OK_HEAD + b"".join(
        b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n"),
    "truncated-chunk": lambda c: c.sendall(_OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
                                           b"40\r\n- w1 abc"),
    "bad-chunk-size": lambda c: c.sendall(_OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
                                          b"zz\r\nhello\r\n0\r\n\r\n"),
    "trickled-headers": lambda c: _trickle(c, _OK_HEAD + b"Content-Length: 5\r\n\r\nhello",
                                           2.0),
}
"""What the witness answers, by name: each was a traceback or an unbounded wait."""


@contextmanager
def hostile_witness(answer: str) -> Iterator[str]:
    """Serve ``ANSWERS[answer]`` to every request; yields the witness URL (ends in /)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                ANSWERS[answer](conn)
            except OSError:
                pass  # the client gave up: what is being tested

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
