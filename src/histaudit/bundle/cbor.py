"""The CBOR subset COSE needs (RFC 8949), written deterministically and read strictly.

histaudit writes COSE_Sign1 messages (:mod:`.scitt`): integers, byte and text strings,
arrays, maps, tags, null and booleans. :func:`dumps` writes them in RFC 8949 §4.2.1 core
deterministic encoding (shortest heads, definite lengths, map keys sorted by their encoded
bytes), the form verifiers such as scitt-cose insist on. :func:`loads` reads the same
subset and refuses what would let one message have two encodings: indefinite lengths,
heads longer than needed, duplicate map keys, trailing bytes; floats and other simple
values are refused too (COSE headers here never hold them).

Twenty lines of cbor2 would do, but a verifier of bundles should not need a package for a
page of code, and this page is checked against cbor2 and Go's fxamacker/cbor by the tests
that verify histaudit's statements with third-party tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from histaudit.errors import FormatError

__all__ = ["Tag", "dumps", "loads"]

MAX_DEPTH = 16
"""COSE messages nest a few levels; anything deeper is refused before it costs."""


@dataclass(frozen=True)
class Tag:
    """A tagged data item (major type 6), e.g. COSE_Sign1 is tag 18."""

    tag: int
    value: Any


def _head(major: int, n: int) -> bytes:
    if n < 24:
        return bytes([major << 5 | n])
    for extra, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | extra]) + struct.pack(fmt, n)
    raise FormatError(f"CBOR length or integer {n} does not fit 64 bits")


def dumps(value: Any) -> bytes:
    """``value`` in deterministic CBOR. Map keys sort by their encoded bytes (RFC 8949
    §4.2.1), so the same value always gives the same bytes."""
    out = bytearray()
    _emit(value, out, 0)
    return bytes(out)


def _emit(value: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise FormatError("CBOR value nested too deeply")
    if value is None:
        out.append(0xF6)
    elif value is True or value is False:
        out.append(0xF5 if value else 0xF4)
    elif isinstance(value, int):
        out += _head(0, value) if value >= 0 else _head(1, -1 - value)
    elif isinstance(value, bytes | bytearray):
        out += _head(2, len(value)) + bytes(value)
    elif isinstance(value, str):
        data = value.encode("utf-8")
        out += _head(3, len(data)) + data
    elif isinstance(value, list | tuple):
        out += _head(4, len(value))
        for item in value:
            _emit(item, out, depth + 1)
    elif isinstance(value, dict):
        items = sorted((dumps(k), v) for k, v in value.items())
        out += _head(5, len(items))
        for key, item in items:
            out += key
            _emit(item, out, depth + 1)
    elif isinstance(value, Tag):
        out += _head(6, value.tag)
        _emit(value.value, out, depth + 1)
    else:
        raise FormatError(f"cannot write a {type(value).__name__} as CBOR")


def loads(data: bytes, *, what: str = "CBOR") -> Any:
    """The one data item ``data`` holds; FormatError naming ``what`` for anything outside
    the subset, any non-shortest or indefinite encoding, a duplicate map key or bytes
    after the item."""
    reader = _Reader(bytes(data), what)
    value = reader.item(0)
    if reader.pos != len(reader.data):
        raise FormatError(f"{what} has {len(reader.data) - reader.pos} bytes after its "
                          f"CBOR item")
    return value


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _fail(self, problem: str) -> FormatError:
        return FormatError(f"{self.what} is not strict CBOR: {problem} at byte {self.pos}")

    def _take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise self._fail("it ends early")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _arg(self, info: int) -> int:
        if info < 24:
            return info
        if info > 27:
            raise self._fail("an indefinite length or a reserved head")
        size = 1 << (info - 24)
        n = int.from_bytes(self._take(size), "big")
        if n < (24 if size == 1 else 1 << (4 * size)):  # 1 << 8*(size/2): the next smaller
            raise self._fail("a head longer than its value needs")
        return n

    def item(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self._fail("nesting too deep")
        first = self._take(1)[0]
        major, info = first >> 5, first & 0x1F
        if major == 7:
            simple = {20: False, 21: True, 22: None}
            if info not in simple:
                raise self._fail("a float or a simple value other than false, true, null")
            return simple[info]
        n = self._arg(info)
        if major == 0:
            return n
        if major == 1:
            return -1 - n
        if major == 2:
            return self._take(n)
        if major == 3:
            try:
                return self._take(n).decode("utf-8")
            except UnicodeDecodeError:
                raise self._fail("a text string that is not UTF-8") from None
        if major == 4:
            if n > len(self.data) - self.pos:  # each element takes a byte at least
                raise self._fail("an array longer than the message")
            return [self.item(depth + 1) for _ in range(n)]
        if major == 5:
            if 2 * n > len(self.data) - self.pos:
                raise self._fail("a map longer than the message")
            out: dict[Any, Any] = {}
            for _ in range(n):
                key = self.item(depth + 1)
                if not isinstance(key, int | str) or isinstance(key, bool):
                    raise self._fail("a map key that is not an integer or text")
                if key in out:
                    raise self._fail(f"map key {key!r} twice")
                out[key] = self.item(depth + 1)
            return out
        return Tag(n, self.item(depth + 1))  # major 6
