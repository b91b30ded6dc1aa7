"""The C2SP tlog-witness ``add-checkpoint`` request, over HTTP, to one witness.

The body is ``old <size>\\n``, one base64 consistency-proof hash per line, an empty line,
then the signed checkpoint note; the witness answers 200 with its cosignature lines, 409
with the size it has seen (``text/x.tlog.size``), 404 for a log it does not know, 403 for
a checkpoint whose signature it cannot verify, 422 for a proof that does not verify, 400
for a request it cannot read. The exchange is :func:`histaudit.services.fetch`'s: bounded
by an overall deadline, no redirect followed.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from histaudit.services import ExchangeError, fetch

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
    a byte at a time is given up at the deadline, its socket shut
    (:class:`histaudit.services.Connection`). A redirect is not followed (C2SP names none;
    its status is the answer, judged as any other)."""
    try:
        answer = fetch(url + "add-checkpoint", timeout=timeout, limit=_MAX_ANSWER,
                       method="POST", body=body, redirects=0,
                       headers={"Content-Type": "text/plain; charset=utf-8"})
    except ExchangeError as exc:
        return Answer(0, b"", str(exc))
    return Answer(answer.status, answer.body[:_MAX_ANSWER])
