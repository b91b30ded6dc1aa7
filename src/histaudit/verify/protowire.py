"""A minimal protobuf wire-format reader, for the few Dapr messages histaudit checks.

Generated classes are not used: the messages are tiny, only a handful of fields are
needed, and what is hashed or verified must be the exact stored bytes, never a
re-serialisation (docs/dapr-signatures.md). Used by :mod:`.dapr_history`,
:mod:`.dapr_attestations` and :mod:`.dapr_crosscheck`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["WireError", "int32", "read_message", "string_value"]


class WireError(ValueError):
    """Bytes that are not the protobuf message they should be."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            raise WireError("varint longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varint/fixed, bytes for
    length-delimited. Groups (wire types 3, 4) are refused."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 1:
            if pos + 8 > len(data):
                raise WireError("truncated fixed64")
            yield number, int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise WireError("truncated length-delimited field")
            yield number, data[pos:pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > len(data):
                raise WireError("truncated fixed32")
            yield number, int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def read_message(data: bytes, spec: Mapping[int, type]) -> dict[int, Any]:
    """The fields of ``spec`` (number -> int or bytes) found in ``data``; the last
    occurrence wins, as in protobuf; a field of the wrong wire type is an error."""
    out: dict[int, Any] = {}
    for number, value in _fields(data):
        want = spec.get(number)
        if want is None:
            continue
        if not isinstance(value, want):
            raise WireError(f"field {number} has the wrong wire type")
        out[number] = value
    return out


def int32(value: int) -> int:
    """A varint-encoded int32 (negatives are sign-extended to 64 bits on the wire)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def string_value(raw: bytes | None) -> str | None:
    """A ``google.protobuf.StringValue`` message's text (None: the field is absent)."""
    if raw is None:
        return None
    return bytes(read_message(raw, {1: bytes}).get(1, b"")).decode("utf-8")
