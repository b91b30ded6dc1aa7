"""The C2SP tlog-witness ``add-checkpoint`` request, over HTTP, to one witness.

The body is ``old <size>\\n``, one base64 consistency-proof hash per line, an empty line,
then the signed checkpoint note; the witness answers 200 with its cosignature lines, 409
with the size it has seen (``text/x.tlog.size``), 404 for a log it does not know, 403 for
a checkpoint whose signature it cannot verify, 422 for a proof that does not verify, 400
for a request it cannot read. Only the standard library's ``urllib`` is used.
"""

from __future__ import annotations

import base64
import http.client
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Answer", "add_checkpoint", "request_body"]

_MAX_ANSWER = 64 * 1024


@dataclass(frozen=True)
class Answer:
    """What a witness answered: the HTTP ``status`` (0: no answer) and its body, or the
    reason it could not be reached."""

    status: int
    body: bytes
    unreachable: str = ""


def request_body(old_size: int, proof: Sequence[bytes], note: bytes) -> bytes:
    lines = [f"old {old_size}\n".encode()]
    lines += [base64.b64encode(h) + b"\n" for h in proof]
    return b"".join(lines) + b"\n" + note


def add_checkpoint(url: str, body: bytes, *, timeout: float) -> Answer:
    """POST ``body`` to ``{url}add-checkpoint``; never raises for network trouble.

    ``timeout`` bounds the whole exchange — connecting, sending, the status line, the
    headers and the body — not each socket operation: a witness that trickles its answer
    a byte at a time is given up at the deadline. The exchange runs in a daemon thread
    that is left to its socket's own timeout once the deadline has passed.
    """
    done: queue.SimpleQueue[Answer] = queue.SimpleQueue()
    threading.Thread(target=lambda: done.put(_exchange(url, body, timeout)), daemon=True,
                     name="histaudit-witness").start()
    try:
        return done.get(timeout=timeout)
    except queue.Empty:
        return Answer(0, b"", f"no complete answer within {timeout:g}s")


def _exchange(url: str, body: bytes, timeout: float) -> Answer:
    req = urllib.request.Request(url + "add-checkpoint", data=body, method="POST",
                                 headers={"Content-Type": "text/plain; charset=utf-8"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # policy URLs are http(s)
            return Answer(resp.status, resp.read(_MAX_ANSWER))
    except urllib.error.HTTPError as exc:
        try:
            data = exc.read(_MAX_ANSWER)
        except (OSError, http.client.HTTPException):
            data = b""
        return Answer(exc.code, data)
    except urllib.error.URLError as exc:
        reason = exc.reason
        return Answer(0, b"", str(getattr(reason, "strerror", None) or reason))
    except http.client.HTTPException as exc:  # a status line, header or chunk not HTTP
        return Answer(0, b"", f"not an HTTP answer: {type(exc).__name__}"
                              + (f" ({str(exc)[:80]!r})" if str(exc) else ""))
    except (OSError, ValueError) as exc:  # timeouts, resets, a bad URL
        return Answer(0, b"", str(exc) or type(exc).__name__)
