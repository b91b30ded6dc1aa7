"""A hostile HTTP service for deadline tests: one local server on 127.0.0.1, in a thread,
that answers every request the way it is told.

* ``trickle-head``: the status line, then one byte of headers every ``interval`` seconds,
  for ever (a service that never finishes its headers);
* ``trickle-body``: whole headers announcing a large body, then one byte of it every
  ``interval`` seconds (each read returns in time; only an overall deadline ends it);
* ``redirect``: ``302`` to :attr:`SlowServer.location`;
* ``answer``: :attr:`SlowServer.body` with :attr:`SlowServer.status`.

``routes`` gives some paths another answer: ``{"/keys/": ("answer", body)}`` answers
``body`` to a request whose path holds ``/keys/`` (a key service's public key) and the
``mode`` to the rest. Every request's path is kept in :attr:`SlowServer.paths`.

Plain Python (no pytest), like the rest of ``support``; each connection is served in its
own daemon thread, and a trickle ends when the client goes away or the server is closed.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

__all__ = ["SlowServer"]


class SlowServer:
    """``with SlowServer("trickle-body") as s: s.url``."""

    def __init__(self, mode: str, *, interval: float = 0.3, body: bytes = b"",
                 status: int = 200, location: str = "",
                 routes: dict[str, tuple[str, bytes]] | None = None) -> None:
        self.mode, self.interval, self.routes = mode, interval, dict(routes or {})
        self.body, self.status, self.location = body, status, location
        self.paths: list[str] = []
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> SlowServer:
        threading.Thread(target=self._accept, daemon=True, name="slow-server").start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    request += chunk
                head, _, rest = request.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                self.paths.append(path)
                length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                while len(rest) < length:  # the request body, read whole
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                mode, body = next(((m, b) for part, (m, b) in self.routes.items()
                                   if part in path), (self.mode, self.body))
                self._answer(conn, mode, body)
            except OSError:
                return

    def _answer(self, conn: socket.socket, mode: str, body: bytes) -> None:
        if mode == "redirect":
            conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {self.location}\r\n"
                         f"Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
        elif mode == "answer":
            conn.sendall(f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                         .encode() + body)
        elif mode == "trickle-head":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            self._trickle(conn, b"X-Slow: " + b"a" * 100_000)
        elif mode == "trickle-body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n")
            self._trickle(conn, b"{" + b" " * 99_999)
        else:
            raise ValueError(mode)

    def _trickle(self, conn: socket.socket, data: bytes) -> None:
        for byte in data:
            if self._stop.wait(self.interval):
                return
            conn.sendall(bytes([byte]))

    def wait_for_request(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.paths and time.monotonic() < deadline:
            time.sleep(0.02)
