"""Printing a URL that may hold credentials: every command shows it through here.

A database URL (``postgresql://user:secret@host/db``, ``?password=secret``) or a witness
URL (``https://user:token@w.example/``) may carry a secret. :func:`shown_url` prints it
with the password (and any ``password``/``token``/``secret``/``key`` query parameter) as
``***``; a URL too broken to parse loses its whole ``user:password@`` part. A driver's
error text can repeat the URL or the password: :func:`without_secrets` scrubs both.

An input file's word that an error names is shown by :func:`shown_word`: itself when it
cannot hold a credential, else only what it looks like (a URL put in the wrong field of a
policy line is never echoed). :func:`check_url_text` refuses a URL with a control or
invisible character (a NUL byte passes ``str.split`` and ``urlsplit``) before it is used.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from .errors import InputError

__all__ = ["check_url_text", "secrets_of", "shown_url", "shown_word", "without_secrets"]

_SECRET_PARAM = re.compile(r"((?:^|&)(?:password|passwd|token|secret|key|sslpassword)=)"
                           r"[^&]*", re.IGNORECASE)
_USERINFO = re.compile(r"(?<=://)[^/@?#]*@")
_PASSWORD = re.compile(r"://[^:/@?#]*:([^@/?#]*)@")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._+/=-]+")
"""A word that cannot hold a URL's credentials: no ``:``, ``@``, ``?``, ``&``, ``%``."""


def shown_url(url: str, *, user: bool = True) -> str:
    """``url`` with its secrets replaced by ``***``; with ``user=False`` its whole
    ``user[:password]@`` part too (a service's URL may carry a token as its user name)."""
    if not user:
        url = _USERINFO.sub("***@", url, count=1)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, host = netloc.rsplit("@", 1)
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
        query = _SECRET_PARAM.sub(r"\1***", parts.query)
        if (netloc, query) == (parts.netloc, parts.query):
            return url  # nothing to hide (and urlunsplit would turn sqlite:/// into sqlite:/)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:  # not parseable (an unclosed IPv6 bracket, a bad port)
        return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub("***@", url))


def secrets_of(url: str) -> list[str]:
    """What of ``url`` is secret: its user name and password, and the values of its
    ``password``/``token``/``secret``/``key`` query parameters (for scrubbing a service's
    words that may echo them)."""
    found = [m.group(0).split("=", 1)[1] for m in _SECRET_PARAM.finditer(
        url.partition("?")[2])]
    try:
        parts = urlsplit(url)
        found += [parts.username or "", parts.password or ""]
    except ValueError:
        pass
    return [s for s in found if s]


def without_secrets(text: str, url: str) -> str:
    """``text`` (a driver's error, say) with ``url`` shown by :func:`shown_url`, and the
    URL's password, wherever else it appears, as ``***``."""
    text = text.replace(url, shown_url(url))
    found = _PASSWORD.search(url)
    if found and found.group(1):
        text = text.replace(found.group(1), "***")
    return text


def shown_word(word: str, limit: int = 80) -> str:
    """``word`` (read from an input file) for an error message: quoted, cut to ``limit``,
    when it is a plain name, number or key (letters, digits, ``._+/=-``); else what it
    looks like and its length, none of it: a URL with a password, or a token, written in
    the wrong field is never echoed."""
    if _PLAIN_WORD.fullmatch(word):
        return repr(word[:limit]) + ("…" if len(word) > limit else "")
    return (f"{'a URL' if '://' in word else 'a word'} of {len(word)} "
            f"character{'' if len(word) == 1 else 's'}")


def check_url_text(url: str, what: str) -> None:
    """InputError naming ``what`` when ``url`` holds a control or invisible character
    (NUL, CR, ESC, DEL, C1, bidi overrides, zero-width characters) or a space: none
    belongs in a URL, and a NUL reaches the HTTP client or the resolver as it is."""
    for at, char in enumerate(url, 1):
        if char == " " or not char.isprintable():
            raise InputError(f"{what} holds a control or invisible character (U+"
                             f"{ord(char):04X}) at position {at}")
