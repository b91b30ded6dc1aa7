"""Talking to a service over HTTP: the key service that signs (transit), the trace backend
``prove --jaeger`` reads, the witnesses that cosign. Each exchange here is bounded and
what a service says is shown without secrets (issue #50):

* :class:`Connection` makes one request at a time to one origin, on a kept-alive
  connection, within an **overall deadline**: connecting, sending, the status line, the
  headers and the body together. A socket's own timeout bounds each read only, and a
  service that trickles a byte a second never lets one expire; so a watchdog shuts the
  socket down when the deadline passes, and the waiting read returns at once.
* :func:`fetch` follows a redirect only within the origin asked (scheme, host and port),
  a few hops at most, under the same deadline: a backend cannot send the request — or
  the operator's trust in the answer — to another host.
* :func:`service_words` is what a message may quote of a service's answer: one line,
  clipped, with every secret the caller holds (a token, a URL's password), any run of
  8 or more of its characters, and every word shaped like a token (``hvs.…``, a JWT,
  ``Bearer …``) as ``***``. A service may echo the token it was sent in its error.

Only the standard library's ``http.client`` is used.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from .errors import HistauditError
from .urls import check_url_text, shown_url

__all__ = ["Answer", "Connection", "ExchangeError", "fetch", "service_words"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_HOPS = 5
_FRAGMENT = 8
"""A run of this many characters of a secret, anywhere in a service's words, hides the
word holding it: a service may quote a token in part."""
_SHORT = 4
"""A secret shorter than this (a user name ``w``) hides only a word that is exactly it:
its letters are in too many other words."""
_TOKEN_SHAPES = re.compile(
    r"\b(?:hv[sbr]|[sbr])\.[A-Za-z0-9_-]{8,}"          # Vault / OpenBao tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)*"      # a JWT
    r"|(?i:bearer|token|basic)[ :=]+(?P<value>[^\s,;]{8,})")  # an Authorization value


class ExchangeError(HistauditError):
    """No complete answer: the service could not be reached, closed the connection,
    answered what is not HTTP, did not finish within the deadline (``timed_out``), or
    redirected where it may not. The message says why, naming no URL (the caller names
    the service)."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    """At most the ``limit`` asked for plus one byte: one more shows it is too large."""
    headers: Mapping[str, str]


class _Watchdog:
    """Shuts ``conn``'s socket down ``seconds`` from now, unless cancelled first."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.fired = False
        self._conn = conn
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self._conn.sock
        if sock is not None:
            try:  # the plain socket's shutdown: a TLS socket's would drop its state first
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


class Connection:
    """Requests to one origin, one at a time, each bounded by an overall deadline (module
    docstring). Not shared across threads (callers hold a lock) or a fork (callers open
    their own)."""

    def __init__(self, scheme: str, host: str, port: int, *,
                 context: ssl.SSLContext | None = None) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self._context = context
        self._conn: http.client.HTTPConnection | None = None

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self._context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, *, body: bytes | None = None,
                headers: Mapping[str, str] | None = None, deadline: float,
                limit: int) -> Answer:
        """One exchange that ends by ``deadline`` (a ``time.monotonic()`` value); a
        kept-alive connection the service had closed is replaced once, within the same
        deadline. ExchangeError when no complete answer came."""
        for attempt in (1, 2):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            fresh = self._conn is None
            if self._conn is None:
                self._conn = self._new(left)
            conn = self._conn
            dog = _Watchdog(conn, left)
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(max(left, 0.001))
                conn.request(method, path, body, dict(headers or {}))
                response = conn.getresponse()
                data = response.read(limit + 1)
                if dog.fired:  # the shut socket read as an end: headers or body cut short
                    self.close()
                    break
                if len(data) <= limit and response.length:
                    self.close()
                    raise ExchangeError("the answer ended before the length it announced")
                answer = Answer(response.status, data,
                                {k.lower(): v for k, v in response.getheaders()})
                if response.will_close or not response.isclosed():
                    self.close()  # not read to its end, or the service closes: not kept
                return answer
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.close()
                if dog.fired or time.monotonic() >= deadline:
                    break
                # a kept-alive connection the service closed meanwhile: once more
                retry = (attempt == 1 and not fresh
                         and isinstance(exc, (ConnectionError, http.client.RemoteDisconnected,
                                              http.client.BadStatusLine)))
                if not retry:
                    raise ExchangeError(_reason(exc)) from None
            finally:
                dog.cancel()
        raise ExchangeError("no complete answer within the deadline", timed_out=True)


def _reason(exc: BaseException) -> str:
    """Why an exchange failed, in words that hold nothing the service sent."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted ({exc.verify_message})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer ({type(exc).__name__})"
    return type(exc).__name__


def fetch(url: str, *, timeout: float, limit: int, method: str = "GET",
          body: bytes | None = None, headers: Mapping[str, str] | None = None,
          redirects: int = _MAX_HOPS, context: ssl.SSLContext | None = None) -> Answer:
    """One exchange with ``url`` (http or https) within ``timeout`` seconds in all,
    following at most ``redirects`` redirects, each within the origin of ``url``.
    ExchangeError when there is no complete answer; the message says why, and names a
    redirect's target without its secrets."""
    check_url_text(url, "the service URL")
    deadline = time.monotonic() + timeout
    origin = _origin(url)
    hops = 0
    while True:
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn = Connection(*origin, context=context)
        try:
            answer = conn.request(method, path, body=body, headers=headers,
                                  deadline=deadline, limit=limit)
        except ExchangeError as exc:
            if exc.timed_out:
                raise ExchangeError(f"no complete answer within {timeout:g}s",
                                    timed_out=True) from None
            raise
        finally:
            conn.close()
        location = answer.headers.get("location")
        if answer.status not in _REDIRECTS or location is None or redirects == 0:
            return answer
        hops += 1
        if hops > redirects:
            raise ExchangeError(f"more than {redirects} redirects")
        target = urljoin(url, location)
        check_url_text(target, "a redirect's target")
        if _origin(target) != origin:
            shown = shown_url(target, user=False)[:120]
            raise ExchangeError(f"redirected to another host ({shown}); not followed")
        url = target


def _origin(url: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ExchangeError("the URL's port is not a number from 0 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExchangeError("not an http(s) URL with a host")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def service_words(text: str, secrets: Iterable[str] = (), *, limit: int = 200) -> str:
    """What a message may quote of a service's answer ``text`` (module docstring)."""
    text = " ".join(text[:limit * 20].split())
    hidden = [False] * len(text)
    secrets = [s for s in secrets if s]
    short = {s for s in secrets if len(s) < _SHORT}  # hidden where a whole word is one
    for secret in secrets:
        if secret in short:
            continue
        width = min(_FRAGMENT, len(secret))
        pieces = {secret[i:i + width] for i in range(len(secret) - width + 1)}
        for i in range(len(text) - width + 1):
            if text[i:i + width] in pieces:
                hidden[i:i + width] = [True] * width
    for found in _TOKEN_SHAPES.finditer(text):
        start, end = found.span("value") if found.group("value") else found.span()
        hidden[start:end] = [True] * (end - start)
    out = []
    at = 0
    for word in text.split(" "):
        out.append("***" if word in short or any(hidden[at:at + len(word)]) else word)
        at += len(word) + 1
    shown = " ".join(out)
    return shown if len(shown) <= limit else shown[:limit] + "…"
