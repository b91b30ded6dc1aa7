"""What export and verification share: the bundle's names, versions and encodings.

A bundle's manifest is wrapped in a DSSE envelope (in-toto/DSSE v1: the signature covers
the pre-authentication encoding of the payload type and the exact payload bytes); every
binary field is standard base64. docs/bundle.md is the spec.
"""

from __future__ import annotations

import base64
import binascii

from histaudit.errors import FormatError

BUNDLE_VERSION = 1
MANIFEST_TYPE = "application/vnd.histaudit.bundle-manifest+json"
MANIFEST_MAX_BYTES = 64 << 20
FILE_MAX_BYTES = {
    "checkpoint.note": 1 << 20, "keys.json": 16 << 20, "heads.jsonl": 256 << 20,
    "entries.jsonl": 1 << 30, "payloads.jsonl": 1 << 30, "report.html": 256 << 20,
}
"""Absolute caps on what a verifier reads of each bundle file (docs/bundle.md §9 step 5)."""
OTHER_FILE_MAX_BYTES = 64 << 20
"""The cap for any other file the manifest lists."""
SLACK_BYTES = 1 << 20
"""A listed file is read up to twice its signed byte count plus this (then capped)."""
FILES = ("checkpoint.note", "entries.jsonl", "heads.jsonl", "keys.json")
"""Files every bundle has (payloads.jsonl and report.html are optional)."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise FormatError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{what} is not valid base64") from None


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what a DSSE signature covers."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


