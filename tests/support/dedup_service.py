"""A payment service stand-in that deduplicates requests by their ``Idempotency-Key``
header, as Stripe-style APIs do: the first request with a key charges, a later one with
the same key gets the first answer back and charges nothing. It runs in a thread of the
test process on 127.0.0.1 and counts what reached it, so a test can tell a request
repeated by a crash from a charge made twice.

``POST /charge`` with a JSON body ``{"amount": N}``: 200 ``{"charge": "ch-<n>"}``, or 402
``{"error": "card declined"}`` when N is negative (a failed effect).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class DedupService:
    """The service and its counts: ``requests`` received, ``charges`` made, by key."""

    def __init__(self) -> None:
        self.requests = 0
        self.charges: dict[str, dict[str, Any]] = {}
        self.unkeyed = 0
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = service.charge(self.headers.get("Idempotency-Key"),
                                                int(body["amount"]))
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/charge"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def charge(self, key: str | None, amount: int) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests += 1
            if amount < 0:
                return 402, {"error": "card declined"}
            if key is None:
                self.unkeyed += 1
                return 200, {"charge": f"ch-unkeyed-{self.unkeyed}"}
            if key not in self.charges:
                self.charges[key] = {"charge": f"ch-{len(self.charges) + 1}"}
            return 200, self.charges[key]

    def __enter__(self) -> DedupService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
