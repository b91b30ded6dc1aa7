"""The golden vectors of docs/format.md, checked two ways.

1. ``test_independent_*`` re-derive everything in tests/golden/vectors.json from the
   spec alone, with hashlib, base64, json and cryptography: no histaudit code is used,
   which shows the spec is enough to write a verifier. (histaudit is imported only
   inside the other tests, never at module level.)
2. ``test_histaudit_*`` check that histaudit's own code produces exactly the golden
   bytes, and the script regenerates the identical file.

Last, the JSON Schemas in schemas/ accept every golden record and refuse broken ones.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from jsonschema import Draft202012Validator

from histaudit.ledger.keys import KeyFileSigner
from support.repo import DOCS, GOLDEN, SCHEMAS, VECTORS

VECTORS_PATH = VECTORS
SCRIPT = GOLDEN / "make_vectors.py"
SPEC = DOCS / "format.md"

ENTRY_FIELDS = {"v", "type", "instance", "seq", "leaf", "prev", "kind", "ts", "kid", "data"}
HEAD_FIELDS = {"v", "type", "instance", "seq", "leaf", "hash", "ts", "kid"}
MAX_SAFE = 2**53 - 1
COMMIT_DOMAIN = b"histaudit.commit.v1\x00"


@pytest.fixture(scope="module")
def vectors() -> dict[str, Any]:
    return json.loads(VECTORS_PATH.read_bytes())


# --- an independent reading of docs/format.md (no histaudit imports) ------------------

class Refused(Exception):
    """The value is outside the canonical-JSON domain."""


def _refuse_float(text: str) -> Any:
    raise Refused(f"number {text} has a fraction or exponent")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Refused("duplicate object key")
    return dict(pairs)


def strict_loads(text: str | bytes) -> Any:
    """JSON parse that keeps integers exact and refuses floats, NaN and duplicate keys."""
    return json.loads(text, parse_float=_refuse_float, parse_constant=_refuse_float,
                      object_pairs_hook=_no_duplicates)


def utf16_units(text: str) -> list[int]:
    units = []
    for ch in text:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 | (cp >> 10), 0xDC00 | (cp & 0x3FF)]
        else:
            units.append(cp)
    return units


SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                 "\f": "\\f", "\r": "\\r"}


def quote(text: str) -> str:
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if 0xD800 <= cp <= 0xDFFF:
            raise Refused("lone surrogate")
        if ch in SHORT_ESCAPES:
            out.append(SHORT_ESCAPES[ch])
        elif cp < 0x20:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(value: Any) -> str:
    """Canonical text per docs/format.md §Canonical JSON, written from the spec."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        if abs(value) > MAX_SAFE:
            raise Refused("integer out of range")
        return str(value)
    if type(value) is str:
        return quote(value)
    if type(value) is list:
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if type(value) is dict:
        keys = sorted(value, key=utf16_units)
        return "{" + ",".join(quote(k) + ":" + jcs(value[k]) for k in keys) + "}"
    raise Refused(f"{type(value).__name__} is not in the domain")


def parse_ts(text: str) -> datetime:
    """RFC 3339 UTC ending in Z, with 0 to 6 fractional digits."""
    assert text.endswith("Z"), text
    base, _, frac = text[:-1].partition(".")
    when = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    if frac:
        assert frac.isdigit() and len(frac) <= 6, text
        when = when.replace(microsecond=int(frac.ljust(6, "0")))
    return when


def load_public_key(doc: dict[str, Any]) -> tuple[str, Ed25519PublicKey]:
    assert doc["alg"] == "ed25519"
    raw = base64.b64decode(doc["public_key"], validate=True)
    assert len(raw) == 32
    kid = hashlib.sha256(raw).hexdigest()[:16]
    assert doc["kid"] == kid
    return kid, Ed25519PublicKey.from_public_bytes(raw)


def test_independent_key(vectors: dict[str, Any]) -> None:
    key = vectors["key"]
    kid, public = load_public_key(key["public_key_file"])
    assert kid == key["kid"]
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert raw.hex() == key["public_key_raw_hex"]
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(key["private_seed_hex"]))
    assert private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw) == raw


def test_independent_chain(vectors: dict[str, Any]) -> None:
    """Run every chain rule of docs/format.md §Verification on the golden chain."""
    kid, public = load_public_key(vectors["key"]["public_key_file"])
    window = vectors["key"]["public_key_file"]
    not_before, not_after = parse_ts(window["not_before"]), parse_ts(window["not_after"])
    instance = vectors["instance"]

    prev_hash, prev_seq, prev_leaf = "0" * 64, 0, -1
    assert vectors["genesis_prev"] == prev_hash
    for item in vectors["entries"]:
        body = item["body"].encode("utf-8")
        digest = hashlib.sha256(body).hexdigest()
        assert digest == item["sha256"]
        public.verify(base64.b64decode(item["signature"], validate=True), body)

        doc = strict_loads(body)
        assert jcs(doc).encode("utf-8") == body, "stored body is not canonical"
        assert type(doc["v"]) is int and doc["v"] == 1
        assert doc["type"] == "entry" and set(doc) == ENTRY_FIELDS
        assert doc["instance"] == instance
        assert doc["seq"] == prev_seq + 1 == item["seq"]
        assert doc["prev"] == prev_hash
        assert doc["leaf"] > prev_leaf and doc["leaf"] == item["leaf"]
        assert doc["kind"] == item["kind"]
        assert isinstance(doc["data"], dict)
        assert doc["kid"] == kid
        assert not_before <= parse_ts(doc["ts"]) <= not_after
        assert len(doc["ts"]) == 27
        prev_hash, prev_seq, prev_leaf = digest, doc["seq"], doc["leaf"]

    head = vectors["head"]
    hbody = head["body"].encode("utf-8")
    assert hashlib.sha256(hbody).hexdigest() == head["sha256"]
    public.verify(base64.b64decode(head["signature"], validate=True), hbody)
    hdoc = strict_loads(hbody)
    assert jcs(hdoc).encode("utf-8") == hbody
    assert hdoc["type"] == "head" and hdoc["v"] == 1 and set(hdoc) == HEAD_FIELDS
    assert hdoc["kid"] == kid and not_before <= parse_ts(hdoc["ts"]) <= not_after
    # The head names exactly the newest entry: nothing was cut from the tail.
    assert (hdoc["instance"], hdoc["seq"], hdoc["leaf"], hdoc["hash"]) == (
        instance, prev_seq, prev_leaf, prev_hash)


def test_independent_tampering_is_caught(vectors: dict[str, Any]) -> None:
    """A changed byte breaks the signature; a cut tail disagrees with the signed head."""
    _, public = load_public_key(vectors["key"]["public_key_file"])
    item = vectors["entries"][1]
    body = item["body"].replace('"attempt":1', '"attempt":2').encode("utf-8")
    with pytest.raises(InvalidSignature):
        public.verify(base64.b64decode(item["signature"]), body)
    kept = vectors["entries"][:-1]
    head = strict_loads(vectors["head"]["body"])
    assert head["seq"] > kept[-1]["seq"]
    assert head["hash"] != kept[-1]["sha256"]


def test_independent_payload_commitments(vectors: dict[str, Any]) -> None:
    assert bytes.fromhex(vectors["commit_domain_hex"]) == COMMIT_DOMAIN
    entries = {e["seq"]: strict_loads(e["body"]) for e in vectors["entries"]}
    assert any(p["erased"] for p in vectors["payloads"])
    assert any(not p["erased"] for p in vectors["payloads"])
    for p in vectors["payloads"]:
        ref = entries[p["entry_seq"]]["data"][p["member"]]
        assert ref == {"c": p["commitment"], "n": p["n"]}
        if p["erased"]:
            assert "data_hex" not in p and "salt_hex" not in p
            continue
        salt, data = bytes.fromhex(p["salt_hex"]), bytes.fromhex(p["data_hex"])
        assert len(salt) == 32 and len(data) == p["n"]
        assert hashlib.sha256(COMMIT_DOMAIN + salt + data).hexdigest() == p["commitment"]
        wrong = hashlib.sha256(COMMIT_DOMAIN + salt + data + b" ").hexdigest()
        assert wrong != p["commitment"]


def test_independent_canonicalization(vectors: dict[str, Any]) -> None:
    assert len(vectors["canonicalization"]) >= 5
    for case in vectors["canonicalization"]:
        out = jcs(strict_loads(case["input"])).encode("utf-8")
        assert out == case["canonical"].encode("utf-8"), case["name"]
        assert out.hex() == case["canonical_hex"], case["name"]
    for case in vectors["canonicalization_rejected"]:
        with pytest.raises(Refused):
            jcs(strict_loads(case["input"]))


def test_vectors_cover_utf16_ordering(vectors: dict[str, Any]) -> None:
    """The first case orders keys differently under UTF-16 and under UTF-8/code points."""
    case = vectors["canonicalization"][0]
    keys = list(strict_loads(case["canonical"]))
    assert keys == sorted(keys, key=utf16_units)
    assert keys != sorted(keys, key=lambda k: k.encode("utf-8"))
    assert keys != sorted(keys)


def test_spec_quotes_the_golden_values(vectors: dict[str, Any]) -> None:
    """docs/format.md writes the expected hashes inline; keep them in step with the file."""
    spec = SPEC.read_text(encoding="utf-8")
    expected = [vectors["key"]["kid"], vectors["key"]["public_key_file"]["public_key"],
                vectors["head"]["sha256"], vectors["head"]["signature"]]
    expected += [e["sha256"] for e in vectors["entries"]]
    expected += [e["signature"] for e in vectors["entries"]]
    expected += [p["commitment"] for p in vectors["payloads"]]
    missing = [value for value in expected if value not in spec]
    assert not missing, f"docs/format.md does not quote {missing}"


# --- histaudit's own code produces the golden bytes ----------------------------------

def test_histaudit_builds_identical_records(vectors: dict[str, Any]) -> None:
    from histaudit.ledger import records as fmt

    for item in vectors["entries"]:
        body = item["body"].encode("utf-8")
        doc = json.loads(body)
        rebuilt = fmt.entry_body(instance=doc["instance"], seq=doc["seq"], leaf=doc["leaf"],
                                 prev=doc["prev"], kind=doc["kind"], ts=doc["ts"],
                                 kid=doc["kid"], data=doc["data"])
        assert rebuilt == body
        parsed = fmt.parse_entry(body)
        assert (parsed.seq, parsed.leaf, parsed.kind, parsed.hash) == (
            item["seq"], item["leaf"], item["kind"], item["sha256"])
    hbody = vectors["head"]["body"].encode("utf-8")
    hdoc = json.loads(hbody)
    assert fmt.head_body(instance=hdoc["instance"], seq=hdoc["seq"], leaf=hdoc["leaf"],
                         hash=hdoc["hash"], ts=hdoc["ts"], kid=hdoc["kid"]) == hbody
    head = fmt.parse_head(hbody)
    assert head.hash == vectors["entries"][-1]["sha256"]
    assert vectors["genesis_prev"] == fmt.GENESIS_PREV
    assert fmt.COMMIT_DOMAIN.hex() == vectors["commit_domain_hex"]


def test_histaudit_keys_and_signatures(vectors: dict[str, Any]) -> None:
    from histaudit.ledger.keys import PublicKey, key_id

    key = vectors["key"]
    seed = bytes.fromhex(key["private_seed_hex"])
    signer = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(seed))
    assert signer.kid == key["kid"] == key_id(bytes.fromhex(key["public_key_raw_hex"]))
    public = PublicKey.from_json(key["public_key_file"], source="vectors")
    assert public.to_json() == key["public_key_file"]
    for record in [*vectors["entries"], vectors["head"]]:
        body = record["body"].encode("utf-8")
        assert base64.b64encode(signer.sign(body)).decode() == record["signature"]
        assert public.verify(base64.b64decode(record["signature"]), body)
        assert not public.verify(base64.b64decode(record["signature"]), body + b" ")


def test_histaudit_commitments(vectors: dict[str, Any]) -> None:
    from histaudit.ledger import records as fmt

    for p in vectors["payloads"]:
        if p["erased"]:
            continue
        salt, data = bytes.fromhex(p["salt_hex"]), bytes.fromhex(p["data_hex"])
        assert fmt.commit(data, salt) == p["commitment"]
        assert fmt.commitment_matches(p["commitment"], data, salt)
        assert not fmt.commitment_matches(p["commitment"], data + b"x", salt)


def test_histaudit_canonicalization(vectors: dict[str, Any]) -> None:
    import rfc8785

    from histaudit.errors import FormatError
    from histaudit.ledger.canonical import canonical_bytes

    for case in vectors["canonicalization"]:
        value = json.loads(case["input"])
        assert canonical_bytes(value) == bytes.fromhex(case["canonical_hex"]), case["name"]
        assert rfc8785.dumps(value) == bytes.fromhex(case["canonical_hex"]), case["name"]
    for case in vectors["canonicalization_rejected"]:
        with pytest.raises(FormatError):
            canonical_bytes(json.loads(case["input"]))


def test_script_regenerates_identical_file(tmp_path: Path) -> None:
    out = tmp_path / "vectors.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == VECTORS_PATH.read_bytes()
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr


def test_vectors_file_is_ascii() -> None:
    VECTORS_PATH.read_bytes().decode("ascii")


# --- JSON Schemas ----------------------------------------------------------------------

def _validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_bytes())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_golden_records_match_schemas(vectors: dict[str, Any]) -> None:
    entry, head, key = (_validator("entry.schema.json"), _validator("head.schema.json"),
                        _validator("public-key.schema.json"))
    for item in vectors["entries"]:
        entry.validate(json.loads(item["body"]))
    head.validate(json.loads(vectors["head"]["body"]))
    key.validate(vectors["key"]["public_key_file"])


def _without(field: str) -> Any:
    return lambda d: d.pop(field)


def _set(path: str, value: Any) -> Any:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            doc = doc[p]
        doc[last] = value
    return mutate


HEX64_UPPER = "AB" * 32
ENTRY_BREAKS: dict[str, Any] = {
    "missing kid": _without("kid"),
    "missing data": _without("data"),
    "missing prev": _without("prev"),
    "extra field": _set("extra", 1),
    "float seq": _set("seq", 1.5),
    "string seq": _set("seq", "1"),
    "zero seq": _set("seq", 0),
    "negative leaf": _set("leaf", -1),
    "unsafe leaf": _set("leaf", 2**53),
    "prev too short": _set("prev", "0" * 63),
    "prev uppercase hex": _set("prev", HEX64_UPPER),
    "prev not hex": _set("prev", "g" * 64),
    "version 2": _set("v", 2),
    "version true": _set("v", True),
    "version string": _set("v", "1"),
    "wrong type": _set("type", "head"),
    "empty instance": _set("instance", ""),
    "empty kind": _set("kind", ""),
    "data not an object": _set("data", []),
    "float inside data": _set("data.amount", 0.5),
    "ts without microseconds": _set("ts", "2025-03-14T09:26:53Z"),
    "ts with offset": _set("ts", "2025-03-14T09:26:53.000001+00:00"),
    "ts month 13": _set("ts", "2025-13-14T09:26:53.000001Z"),
    "kid too long": _set("kid", "0" * 17),
    "kid uppercase": _set("kid", "ABCDEF0123456789"),
}
# The subset that histaudit.format.parse_entry refuses as well (it does not yet check
# the form of ts and kid, nor tell true or 1.0 from 1 in "v").
PARSER_ALSO_REFUSES = {
    "missing kid", "missing data", "missing prev", "extra field", "float seq", "string seq",
    "zero seq", "negative leaf", "prev too short", "prev uppercase hex", "prev not hex",
    "version 2", "version string", "wrong type", "empty instance", "empty kind",
    "data not an object",
}

HEAD_BREAKS: dict[str, Any] = {
    "missing hash": _without("hash"),
    "missing ts": _without("ts"),
    "extra field": _set("prev", "0" * 64),
    "float seq": _set("seq", 4.5),
    "zero seq": _set("seq", 0),
    "hash uppercase hex": _set("hash", HEX64_UPPER),
    "hash too long": _set("hash", "0" * 65),
    "version 2": _set("v", 2),
    "wrong type": _set("type", "entry"),
    "ts not a timestamp": _set("ts", "yesterday"),
    "kid not hex": _set("kid", "zzzzzzzzzzzzzzzz"),
}
HEAD_PARSER_ALSO_REFUSES = {"missing hash", "missing ts", "extra field", "float seq",
                            "zero seq", "hash uppercase hex", "hash too long", "version 2",
                            "wrong type"}

KEY_BREAKS: dict[str, Any] = {
    "missing alg": _without("alg"),
    "missing public_key": _without("public_key"),
    "missing kid": _without("kid"),
    "extra field": _set("comment", "x"),
    "other algorithm": _set("alg", "rsa"),
    "key not base64": _set("public_key", "!" * 43 + "="),
    "key too short": _set("public_key", base64.b64encode(b"\x01" * 31).decode()),
    "key unpadded": _set("public_key", "r8dirBSq2Ya39paYjzcQWTxjPnoWZkTdTmEPzhRHxKk"),
    "kid uppercase": _set("kid", "069039DF19CE8E36"),
    "window bound with offset": _set("not_before", "2025-01-01T00:00:00+00:00"),
    "window bound date only": _set("not_after", "2025-12-31"),
    "empty name": _set("name", ""),
}


@pytest.mark.parametrize("name", sorted(ENTRY_BREAKS))
def test_broken_entry_refused(vectors: dict[str, Any], name: str) -> None:
    doc = json.loads(vectors["entries"][1]["body"])
    _validator("entry.schema.json").validate(doc)
    ENTRY_BREAKS[name](doc)
    assert not _validator("entry.schema.json").is_valid(doc)
    if name in PARSER_ALSO_REFUSES:
        from histaudit.errors import FormatError
        from histaudit.ledger import records as fmt

        with pytest.raises(FormatError):
            fmt.parse_entry(json.dumps(doc).encode("utf-8"))


@pytest.mark.parametrize("name", sorted(HEAD_BREAKS))
def test_broken_head_refused(vectors: dict[str, Any], name: str) -> None:
    doc = json.loads(vectors["head"]["body"])
    HEAD_BREAKS[name](doc)
    assert not _validator("head.schema.json").is_valid(doc)
    if name in HEAD_PARSER_ALSO_REFUSES:
        from histaudit.errors import FormatError
        from histaudit.ledger import records as fmt

        with pytest.raises(FormatError):
            fmt.parse_head(json.dumps(doc).encode("utf-8"))


@pytest.mark.parametrize("name", sorted(KEY_BREAKS))
def test_broken_public_key_refused(vectors: dict[str, Any], name: str) -> None:
    doc = copy.deepcopy(vectors["key"]["public_key_file"])
    KEY_BREAKS[name](doc)
    assert not _validator("public-key.schema.json").is_valid(doc)


def test_version_is_checked_before_anything_else(vectors: dict[str, Any]) -> None:
    """An unknown version is refused as such, even when the rest would not parse."""
    from histaudit.errors import FormatError
    from histaudit.ledger import records as fmt

    with pytest.raises(FormatError, match="version"):
        fmt.parse_entry(b'{"v":2,"type":"entry","whatever":true}')
    with pytest.raises(FormatError, match="version"):
        fmt.parse_head(b'{"v":2,"type":"head"}')
