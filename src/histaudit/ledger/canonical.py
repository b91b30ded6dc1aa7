"""Canonical JSON bytes for signed ledger records (RFC 8785, restricted domain).

Everything histaudit signs is a JSON object built from strings, integers in the I-JSON
range, booleans, null, arrays and objects. Floats are refused rather than formatted: the
signed envelope never needs them (payloads are committed to as opaque bytes), and
refusing them keeps an independent implementation to a page of code. On this domain the
output is byte-identical to RFC 8785 (JCS); tests/unit/ledger/test_canonical.py proves it
against the ``rfc8785`` package with random documents.
"""

from __future__ import annotations

import json
from typing import Any

from histaudit.errors import FormatError

MAX_SAFE_INTEGER = 2**53 - 1

# json.dumps on a str with ensure_ascii=False gives exactly ECMAScript's escaping of a
# string: \" \\ \b \f \n \r \t, other C0 controls as lowercase \u00xx, everything else raw.
_encode_str = json.JSONEncoder(ensure_ascii=False).encode


def _utf16_key(key: str) -> bytes:
    # RFC 8785 §3.2.3: properties are sorted by their UTF-16 code units.
    return key.encode("utf-16-be", "surrogatepass")


def _emit(value: Any, out: list[str], path: str) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise FormatError(f"{path}: integer {value} is outside the I-JSON safe range")
        out.append(str(int(value)))
    elif isinstance(value, str):
        _check_text(value, path)
        out.append(_encode_str(value))
    elif isinstance(value, dict):
        out.append("{")
        keys = sorted(value, key=lambda k: _utf16_key(k) if isinstance(k, str) else b"")
        for i, key in enumerate(keys):
            if not isinstance(key, str):
                raise FormatError(f"{path}: object key {key!r} is not a string")
            _check_text(key, path)
            if i:
                out.append(",")
            out.append(_encode_str(key))
            out.append(":")
            _emit(value[key], out, f"{path}.{key}")
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _emit(item, out, f"{path}[{i}]")
        out.append("]")
    elif isinstance(value, float):
        raise FormatError(f"{path}: floats are not allowed in signed records")
    else:
        raise FormatError(f"{path}: {type(value).__name__} is not a JSON value")


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FormatError(f"{path}: string holds a lone surrogate") from None


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of ``value`` (no floats allowed)."""
    out: list[str] = []
    _emit(value, out, "$")
    return "".join(out).encode("utf-8")
