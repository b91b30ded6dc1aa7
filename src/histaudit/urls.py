"""Printing a URL that may hold credentials: every command shows it through here.

A database URL (``postgresql://user:secret@host/db``, ``?password=secret``) or a witness
URL (``https://user:token@w.example/``) may carry a secret. :func:`shown_url` prints it
with the password (and any ``password``/``token``/``secret``/``key`` query parameter) as
``***``; a URL too broken to parse loses its whole ``user:password@`` part. A driver's
error text can repeat the URL or the password: :func:`without_secrets` scrubs both.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["shown_url", "without_secrets"]

_SECRET_PARAM = re.compile(r"((?:^|&)(?:password|passwd|token|secret|key|sslpassword)=)"
                           r"[^&]*", re.IGNORECASE)
_USERINFO = re.compile(r"(?<=://)[^/@?#]*@")
_PASSWORD = re.compile(r"://[^:/@?#]*:([^@/?#]*)@")


def shown_url(url: str) -> str:
    """``url`` with its secrets replaced by ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            user, host = netloc.rsplit("@", 1)
            netloc = f"{user.split(':', 1)[0]}:***@{host}"
        query = _SECRET_PARAM.sub(r"\1***", parts.query)
        if (netloc, query) == (parts.netloc, parts.query):
            return url  # nothing to hide (and urlunsplit would turn sqlite:/// into sqlite:/)
        return urlunsplit(parts._replace(netloc=netloc, query=query))
    except ValueError:  # not parseable (an unclosed IPv6 bracket, a bad port)
        return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub("***@", url))


def without_secrets(text: str, url: str) -> str:
    """``text`` (a driver's error, say) with ``url`` shown by :func:`shown_url`, and the
    URL's password, wherever else it appears, as ``***``."""
    text = text.replace(url, shown_url(url))
    found = _PASSWORD.search(url)
    if found and found.group(1):
        text = text.replace(found.group(1), "***")
    return text
