r"""Canonical JSON bytes for signed ledger records (RFC 8785, restricted domain).

Everything histaudit signs is a JSON object built from strings, integers in the I-JSON
range, booleans, null, arrays and objects. Floats are refused rather than formatted: the
signed envelope never needs them (payloads are committed to as opaque bytes), and
refusing them keeps an independent implementation to a page of code. On this domain the
output is byte-identical to RFC 8785 (JCS); tests/unit/ledger/test_canonical.py proves it
against the ``rfc8785`` package with random documents.

``_slow_bytes`` is the reference emitter: a page of Python, and the only code that
raises. ``canonical_bytes`` first tries orjson and keeps its output only when it is
provably the same bytes (tests/unit/ledger/test_canonical_fast.py checks every claim):

1. ``_plain`` proves every node has the *exact* type str, int, bool, None, list, tuple or
   dict. That rules out floats and everything else orjson would write but the emitter
   refuses or writes otherwise (enums, UUIDs, dataclasses, datetimes, ``orjson.Fragment``,
   subclasses of int/str/list/dict/tuple such as IntEnum, OrderedDict, namedtuple). It
   also bounds nesting to 254 containers, orjson's own limit for lists and dicts: orjson
   does not count tuples, and (3.13.0) a couple of thousand nested tuples crash it.
2. orjson itself raises, and we fall back, on the rest of what the emitter refuses:
   non-str keys (str subclasses too), ints outside ±(2^53-1) (``OPT_STRICT_INTEGER`` is
   exactly that range) and lone surrogates (not UTF-8).
3. What is left orjson writes as §3.2 does: no whitespace, ints in plain decimal, and
   strings escaped as ECMAScript's JSON.stringify does - \" \\ \b \f \n \r \t, other
   U+0000-U+001F as lowercase \u00xx, everything else (DEL, U+2028/2029, "/", non-ASCII)
   as raw UTF-8. The tests check this for every Unicode scalar value.
4. ``OPT_SORT_KEYS`` sorts names by UTF-8 bytes, i.e. by code point, not by UTF-16 code
   unit. The two orders differ only where, at the first difference between two names,
   one has a character in U+E000-U+FFFF and the other one above U+FFFF (a surrogate pair
   in UTF-16). In orjson's (valid UTF-8) output the bytes EE and EF only start the first
   kind and F0-F4 only the second: if either group is absent, the orders agree. If both
   are present, ``_names_in_order`` compares the two orders of every object's names.

So the slow path runs exactly for: anything the emitter refuses; int/str/list/tuple/dict
subclasses; nesting of 255+ containers; and documents holding an object whose names sort
differently by code point than by UTF-16 code unit. At import, orjson is checked against
the emitter on a probe of rules 2-4; if it disagrees, the fast path is off.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

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


def _slow_bytes(value: Any) -> bytes:
    """The reference emitter: the canonical bytes, or the FormatError saying why not."""
    out: list[str] = []
    _emit(value, out, "$")
    return "".join(out).encode("utf-8")


_LEAF = frozenset({str, int, bool, type(None)})
_MAX_DEPTH = 254  # containers nested deeper than this take the slow path
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_HIGH_BMP = re.compile(b"[\xee\xef]")  # lead bytes of U+E000-U+FFFF
_ASTRAL = re.compile(b"[\xf0-\xf4]")  # lead bytes of U+10000-U+10FFFF


def _plain(value: Any, depth: int) -> bool:
    """Is every node exactly a str, int, bool, None, list, tuple or dict, and not too deep?"""
    kind = type(value)
    if kind is dict:
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return kind in _LEAF
    if depth == _MAX_DEPTH:
        return False
    depth += 1
    for item in items:  # noqa: SIM110 - all() over a generator is twice as slow here
        if type(item) not in _LEAF and not _plain(item, depth):
            return False
    return True


def _fast_bytes(value: Any) -> bytes | None:
    """orjson's bytes for ``value`` if they are provably canonical (see above), else None."""
    try:
        if not _plain(value, 0):
            return None
        out = orjson.dumps(value, option=_OPTIONS)
    except (orjson.JSONEncodeError, RecursionError):  # refused, or called too deep already
        return None
    if (out.isascii() or _HIGH_BMP.search(out) is None or _ASTRAL.search(out) is None
            or _names_in_order(value)):
        return out
    return None


def _names_in_order(value: Any) -> bool:
    """Do the names of every object in ``value`` sort alike by code point and by UTF-16?"""
    kind = type(value)
    if kind is dict:
        if not "".join(value).isascii():
            names = sorted(value)
            if names != sorted(names, key=_utf16_key):
                return False
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    else:
        return True
    return all(_names_in_order(item) for item in items)


def _orjson_agrees() -> bool:
    """Does the installed orjson follow rules 2-4 of the module docstring?"""

    class Name(str):
        pass

    text = "".join(map(chr, range(0x80))) + "/\u2028\u2029\xe9\u07ff\ue000\uffff\U0001f600"
    probe = {text: [text, 0, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, True, False, None, ()],
             "\U0010ffff": {}, "\xe9": [], "\U00010000": {"b": 1, "a": 2}, "\u07ff": 3}
    try:
        if orjson.dumps(probe, option=_OPTIONS) != _slow_bytes(probe):
            return False
    except orjson.JSONEncodeError:
        return False
    for refused in (MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**64, "\ud800",
                    {Name("k"): 0}, {1: 0}):
        try:
            orjson.dumps(refused, option=_OPTIONS)
        except orjson.JSONEncodeError:
            continue
        return False
    return True


_ORJSON_AGREES = _orjson_agrees()


def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of ``value`` (no floats allowed)."""
    out = _fast_bytes(value) if _ORJSON_AGREES else None
    # Outside any except block, so a refusal raises exactly as the emitter always did.
    return _slow_bytes(value) if out is None else out


def is_canonical(body: bytes, doc: object = None) -> bool:
    """Do the stored bytes equal the canonical form of what they parse to?

    Signatures hold over any bytes; this catches bodies that two parsers could read
    differently (duplicate keys, whitespace, ``-0``). Checked in full mode. ``doc``:
    ``orjson.loads(body)`` when the caller has it already.
    """
    try:
        return canonical_bytes(orjson.loads(body) if doc is None else doc) == body
    except (FormatError, orjson.JSONDecodeError):
        return False
