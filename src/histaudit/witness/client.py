"""The C2SP tlog-witness ``add-checkpoint`` request, over HTTP, to one witness.

The body is ``old <size>\\n``, one base64 consistency-proof hash per line, an empty line,
then the signed checkpoint note; the witness answers 200 with its cosignature lines, 409
with the size it has seen (``text/x.tlog.size``), 404 for a log it does not know, 403 for
a checkpoint whose signature it cannot verify, 422 for a proof that does not verify, 400
for a request it cannot read. Only the standard library's ``urllib`` is used.
"""

from __future__ import annotations

import base64
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
    """POST ``body`` to ``{url}add-checkpoint``; never raises for network trouble."""
    req = urllib.request.Request(url + "add-checkpoint", data=body, method="POST",
                                 headers={"Content-Type": "text/plain; charset=utf-8"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # policy URLs are http(s)
            return Answer(resp.status, resp.read(_MAX_ANSWER))
    except urllib.error.HTTPError as exc:
        try:
            data = exc.read(_MAX_ANSWER)
        except OSError:
            data = b""
        return Answer(exc.code, data)
    except urllib.error.URLError as exc:
        reason = exc.reason
        return Answer(0, b"", str(getattr(reason, "strerror", None) or reason))
    except (OSError, ValueError) as exc:  # timeouts, resets, a bad URL
        return Answer(0, b"", str(exc) or type(exc).__name__)
