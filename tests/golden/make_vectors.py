#!/usr/bin/env python3
"""Generate tests/golden/vectors.json, the test vectors of docs/format.md.

Everything is fixed: the signing key comes from a constant seed, timestamps and salts
are constants, and Ed25519 signatures are deterministic (RFC 8032), so running this
script always writes the same bytes. ``tests/unit/ledger/test_records.py`` checks that.

    python tests/golden/make_vectors.py            # rewrite vectors.json beside this file
    python tests/golden/make_vectors.py --out P    # write somewhere else
    python tests/golden/make_vectors.py --check    # exit 1 if vectors.json is stale

The signing key below is public knowledge. Never trust it for anything but these tests.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from histaudit.errors import FormatError
from histaudit.ledger import records as fmt
from histaudit.ledger.canonical import canonical_bytes
from histaudit.ledger.keys import PublicKey, key_id

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "vectors.json"

# 32-byte Ed25519 private key seed, derived from a label so nobody mistakes it for a
# secret.
SEED = hashlib.sha256(b"histaudit golden vectors: signing key seed, v1").digest()
KEY_NAME = "golden-test-key"
NOT_BEFORE = "2025-01-01T00:00:00Z"
NOT_AFTER = "2025-12-31T23:59:59.999999Z"

INSTANCE = "order-2025-0042"
# Leaf indexes are ledger-wide; the gaps are entries of other instances in the same ledger.
LEAVES = (5, 6, 9, 12)
TIMESTAMPS = (
    "2025-03-14T09:26:53.000001Z",
    "2025-03-14T09:26:53.120000Z",
    "2025-03-14T09:26:54.500250Z",
    "2025-03-14T09:26:54.731999Z",
)

SALT_INPUT = hashlib.sha256(b"histaudit golden vectors: salt for the activity input").digest()
SALT_OUTPUT = hashlib.sha256(b"histaudit golden vectors: salt for the activity output").digest()
# The activity input is published in clear (with its salt) so the commitment can be
# recomputed; the output is published as a commitment only, as if it had been erased.
PAYLOAD_INPUT = b'{"amount_cents":1250,"currency":"EUR","customer":"Zo\xc3\xab","token":"tok_4242"}'
PAYLOAD_OUTPUT = b'{"authorization":"AUTH-77613","captured":true}'

# Canonicalization cases: JSON text in, exact canonical text out.
CANONICAL_CASES: list[tuple[str, str]] = [
    ("keys sorted by UTF-16 code units, not by UTF-8 bytes or code points",
     '{"\\uffff":"last in UTF-16","\\ud83d\\ude00":"astral","\\u00e9":2,"a":1,"":0}'),
    ("keys: uppercase before lowercase, prefix before longer key",
     '{"b":1,"B":2,"ba":3,"a":4,"A":5,"aa":6}'),
    ("string escapes: short forms, other C0 controls as lowercase \\u00xx, rest raw",
     '"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f \\" \\\\ \\/ \\u007f \\u2028 \\u00ff"'),
    ("non-ASCII text is emitted as raw UTF-8, escapes in the input are resolved",
     '"caf\\u00e9 \\ud83d\\ude00 \\u0041 \\u20ac"'),
    ("integers: plain decimal, no plus sign, no leading zeros, -0 becomes 0",
     '[0, -0, 7, -7, 9007199254740991, -9007199254740991]'),
    ("whitespace removed, arrays keep their order, nested objects sorted",
     '{ "z" : [ true , false , null , [ ] , { } ] ,\n  "m" : { "y" : "", "x" : [3, 1, 2] } }'),
    ("an entry-shaped object",
     '{"v":1,"type":"entry","data":{"worker":"host:17","activity":"a","task_id":3}}'),
]

# JSON texts the canonical form refuses (floats, unsafe integers, lone surrogates).
REJECTED_CASES: list[tuple[str, str]] = [
    ("a number with a fraction", '1.5'),
    ("a float with an integral value", '1.0'),
    ("exponent notation", '1e3'),
    ("integer above 2^53-1", '9007199254740992'),
    ("integer below -(2^53-1)", '-9007199254740992'),
    ("a float nested in an object", '{"data":{"n":0.1}}'),
    ("lone high surrogate in a string", '"\\ud800"'),
    ("lone low surrogate in an object key", '{"\\udfff":1}'),
]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def build() -> dict[str, Any]:
    private = Ed25519PrivateKey.from_private_bytes(SEED)
    raw_public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    kid = key_id(raw_public)
    public_file = PublicKey(kid=kid, raw=raw_public, name=KEY_NAME, not_before=NOT_BEFORE,
                            not_after=NOT_AFTER).to_json()

    c_input = fmt.commit(PAYLOAD_INPUT, SALT_INPUT)
    c_output = fmt.commit(PAYLOAD_OUTPUT, SALT_OUTPUT)
    worker = "worker-a.internal:4242"
    events: list[tuple[str, dict[str, Any]]] = [
        ("workflow.scheduled_activity", {"activity": "charge_card", "task_id": 3}),
        ("activity.started", {"activity": "charge_card", "task_id": 3, "attempt": 1,
                              "input": {"c": c_input, "n": len(PAYLOAD_INPUT)},
                              "worker": worker}),
        ("activity.completed", {"activity": "charge_card", "task_id": 3, "attempt": 1,
                                "output": {"c": c_output, "n": len(PAYLOAD_OUTPUT)},
                                "worker": worker}),
        ("workflow.completed", {"status": "COMPLETED",
                                "custom_status": "Zahlung bestätigt \u2713"}),
    ]

    entries = []
    prev = fmt.GENESIS_PREV
    for seq, ((kind, data), leaf, ts) in enumerate(zip(events, LEAVES, TIMESTAMPS), start=1):
        body = fmt.entry_body(instance=INSTANCE, seq=seq, leaf=leaf, prev=prev, kind=kind,
                              ts=ts, kid=kid, data=data)
        digest = hashlib.sha256(body).hexdigest()
        entries.append({"seq": seq, "leaf": leaf, "kind": kind,
                        "body": body.decode("utf-8"), "sha256": digest,
                        "signature": _b64(private.sign(body))})
        prev = digest

    last = entries[-1]
    head = fmt.head_body(instance=INSTANCE, seq=last["seq"], leaf=last["leaf"],
                         hash=last["sha256"], ts=TIMESTAMPS[-1], kid=kid)

    canonical = []
    for name, text in CANONICAL_CASES:
        out = canonical_bytes(json.loads(text))
        canonical.append({"name": name, "input": text, "canonical": out.decode("utf-8"),
                          "canonical_hex": out.hex()})
    rejected = []
    for name, text in REJECTED_CASES:
        try:
            canonical_bytes(json.loads(text))
        except FormatError:
            rejected.append({"name": name, "input": text})
        else:  # pragma: no cover - would mean canonical.py lost a check
            raise SystemExit(f"canonical form accepted rejected case {name!r}")

    return {
        "description": ("histaudit format v1 test vectors (docs/format.md, section Test "
                        "vectors). Generated by tests/golden/make_vectors.py; do not edit."),
        "format_version": fmt.FORMAT_VERSION,
        "key": {
            "warning": "TEST KEY: the private seed is public. Never trust this key.",
            "private_seed_hex": SEED.hex(),
            "public_key_raw_hex": raw_public.hex(),
            "kid": kid,
            "public_key_file": public_file,
        },
        "instance": INSTANCE,
        "genesis_prev": fmt.GENESIS_PREV,
        "entries": entries,
        "head": {"body": head.decode("utf-8"), "sha256": hashlib.sha256(head).hexdigest(),
                 "signature": _b64(private.sign(head))},
        "commit_domain_hex": fmt.COMMIT_DOMAIN.hex(),
        "payloads": [
            {"entry_seq": 2, "member": "input", "commitment": c_input,
             "n": len(PAYLOAD_INPUT), "erased": False, "salt_hex": SALT_INPUT.hex(),
             "data_hex": PAYLOAD_INPUT.hex()},
            {"entry_seq": 3, "member": "output", "commitment": c_output,
             "n": len(PAYLOAD_OUTPUT), "erased": True},
        ],
        "canonicalization": canonical,
        "canonicalization_rejected": rejected,
    }


def render() -> bytes:
    """The exact bytes of vectors.json.

    The file is pure ASCII (non-ASCII text appears as JSON escapes), so no editor or
    Unicode normalization can change it; the strings it holds once parsed are exact.
    """
    return (json.dumps(build(), indent=2, ensure_ascii=True) + "\n").encode("ascii")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write")
    parser.add_argument("--check", action="store_true",
                        help="compare with the file at --out instead of writing it")
    args = parser.parse_args(argv)
    data = render()
    if args.check:
        current = args.out.read_bytes() if args.out.exists() else b""
        if current != data:
            print(f"{args.out} is stale; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    args.out.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
