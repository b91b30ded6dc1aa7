"""An independent verifier of histaudit bundles, written from the documents alone.

Sources: docs/format.md (canonical JSON, entries, heads, keys, trust stores, payload
commitments, the chain checks of its section 9) and docs/bundle.md (the Merkle tree,
checkpoint notes, the DSSE manifest, the bundle files and the verification order of its
section 9). It deliberately shares no code with histaudit and imports nothing but the
Python standard library and the ``cryptography`` package (for Ed25519), so that a test can
show the documents are enough to check a bundle.

    python tests/independent/verifier.py BUNDLE_DIR TRUST_PATH

prints one problem per line and exits 0 (no problem), 1 (problems, or a manifest or
checkpoint note not signed by a trusted key) or 2 (the bundle could not be read).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

MANIFEST_TYPE = "application/vnd.histaudit.bundle-manifest+json"
REQUIRED_FILES = ("checkpoint.note", "entries.jsonl", "heads.jsonl", "keys.json")
ZERO64 = "0" * 64
MAX_SAFE = 2**53 - 1
COMMIT_DOMAIN = b"histaudit.commit.v1\x00"
ENTRY_MEMBERS = {"v", "type", "instance", "seq", "leaf", "prev", "kind", "ts", "kid", "data"}
HEAD_MEMBERS = {"v", "type", "instance", "seq", "leaf", "hash", "ts", "kid"}
HEX64 = re.compile(r"[0-9a-f]{64}")
KID = re.compile(r"[0-9a-f]{16}")
TIMESTAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z")
BOUND = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?Z")


class Problem(NamedTuple):
    """One thing wrong: a finding code of the documents (or ``input-error``), where, what."""

    code: str
    instance: str
    seq: int | None
    message: str

    def __str__(self) -> str:
        at = "" if self.seq is None else f" entry {self.seq}"
        return f"{self.code}: {self.instance}{at}: {self.message}"


class Unreadable(Exception):
    """An input error: the bundle cannot be read (bundle.md §9)."""


class Untrusted(Exception):
    """An authentication failure: the manifest or checkpoint note reads, but no signature
    on it verifies with the trust store (bundle.md §9)."""


# --- primitives -----------------------------------------------------------------------

def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def h_hex(data: bytes) -> str:
    """format.md §2: H(x) = hex of SHA-256."""
    return hashlib.sha256(data).hexdigest()


def b64(text: Any, what: str) -> bytes:
    """Standard base64 with padding (format.md §2), or an input error."""
    if not isinstance(text, str):
        raise Unreadable(f"{what} is not a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise Unreadable(f"{what} is not base64") from None


def ed25519_ok(raw_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(raw_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def leaf_hash(data: bytes) -> bytes:
    return sha256(b"\x00" + data)


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


def inclusion_ok(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> bool:
    """bundle.md §3.3 (RFC 9162 §2.1.3.2), step by step."""
    if index >= size or index < 0:
        return False
    fn, sn, r = index, size - 1, leaf_hash(leaf)
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def pae(payload_type: str, body: bytes) -> bytes:
    """bundle.md §7.1: DSSE pre-authentication encoding."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(body)).encode() + \
        b" " + body


# --- time (format.md §2, §7.3) --------------------------------------------------------

def _instant(m: re.Match[str]) -> datetime:
    y, mo, d, hh, mm, ss = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "").ljust(6, "0"))
    return datetime(y, mo, d, hh, mm, ss, micro, tzinfo=UTC)  # ValueError if invalid


def parse_timestamp(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    m = TIMESTAMP.fullmatch(text)
    try:
        return _instant(m) if m else None
    except ValueError:
        return None


def parse_bound(text: Any) -> datetime | None:
    m = BOUND.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"bound {text!r} is not an RFC 3339 UTC time")
    return _instant(m)


# --- keys and trust stores (format.md §7) ---------------------------------------------

class Key(NamedTuple):
    kid: str
    raw: bytes
    not_before: datetime | None
    not_after: datetime | None

    def valid_at(self, t: datetime) -> bool:
        return ((self.not_before is None or t >= self.not_before)
                and (self.not_after is None or t <= self.not_after))


def key_from_json(doc: Any, where: str) -> Key:
    if not isinstance(doc, dict) or doc.get("alg") != "ed25519":
        raise ValueError(f"{where}: not an ed25519 public key object")
    raw = b64(doc.get("public_key"), f"{where} public_key")
    if len(raw) != 32:
        raise ValueError(f"{where}: public_key is not 32 bytes")
    try:
        Ed25519PublicKey.from_public_bytes(raw)
    except ValueError:
        raise ValueError(f"{where}: public_key is not an Ed25519 key") from None
    kid = h_hex(raw)[:16]
    if doc.get("kid") != kid:
        raise ValueError(f"{where}: kid does not match the key")
    bounds = [parse_bound(doc[b]) if b in doc else None for b in ("not_before", "not_after")]
    return Key(kid, raw, bounds[0], bounds[1])


def load_trust(path: str | Path) -> dict[str, Key]:
    """A trust store in one of the three forms of format.md §7.4."""
    p = Path(path)
    docs: list[tuple[Any, str]] = []
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(".pub.json"))
        if not files:
            raise ValueError(f"trust store {p} holds no .pub.json file")
        docs = [(json.loads(f.read_bytes()), str(f)) for f in files]
    else:
        doc = json.loads(p.read_bytes())
        if isinstance(doc, dict) and "keys" in doc:
            if not isinstance(doc["keys"], list):
                raise ValueError(f"trust store {p}: keys is not an array")
            docs = [(k, f"{p} key {i}") for i, k in enumerate(doc["keys"])]
        else:
            docs = [(doc, str(p))]
    keys = {}
    for doc, where in docs:
        try:
            key = key_from_json(doc, where)
        except Unreadable as exc:
            raise ValueError(str(exc)) from None
        if key.kid in keys:
            raise ValueError(f"trust store {p} lists key {key.kid} twice")
        keys[key.kid] = key
    return keys


# --- canonical JSON (format.md §3) ----------------------------------------------------

class NotCanonical(Exception):
    pass


def _reject_float(text: str) -> Any:
    raise NotCanonical(f"number {text} is not an integer")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise NotCanonical(f"duplicate member name {name!r}")
        out[name] = value
    return out


def _check_domain(value: Any) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if not -MAX_SAFE <= value <= MAX_SAFE:
            raise NotCanonical(f"integer {value} outside the safe range")
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotCanonical("lone surrogate in a string") from None
    elif isinstance(value, list):
        for item in value:
            _check_domain(item)
    elif isinstance(value, dict):
        for name, item in value.items():
            _check_domain(name)
            _check_domain(item)


def strict_json(body: bytes) -> Any:
    """Parse JSON text in the canonical domain (format.md §3.1), refusing everything else."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=_reject_float,
                           parse_constant=_reject_float)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise NotCanonical(f"not JSON text: {exc}") from None
    _check_domain(value)
    return value


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def canonical(value: Any) -> str:
    """format.md §3.2."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    names = sorted(value, key=lambda n: n.encode("utf-16-be"))  # UTF-16 code units
    return "{" + ",".join(_string(n) + ":" + canonical(value[n]) for n in names) + "}"


# --- records (format.md §4, §5) -------------------------------------------------------

class Malformed(Exception):
    pass


def _int_member(doc: dict[str, Any], name: str, low: int) -> int:
    v = doc[name]
    if type(v) is not int or not low <= v <= MAX_SAFE:
        raise Malformed(f"{name} is not an integer in range")
    return v


def _str_member(doc: dict[str, Any], name: str) -> str:
    v = doc[name]
    if not isinstance(v, str) or not v:
        raise Malformed(f"{name} is not a non-empty string")
    return v


def parse_record(body: bytes, kind: str) -> dict[str, Any]:
    """format.md §9 check 2 (kind "entry") or check 11 (kind "head"), canonical form too."""
    try:
        doc = strict_json(body)
    except NotCanonical as exc:
        raise Malformed(str(exc)) from None
    if not isinstance(doc, dict):
        raise Malformed("body is not a JSON object")
    if type(doc.get("v")) is not int or doc.get("v") != 1:
        raise Malformed(f"unknown format version {doc.get('v')!r}")
    if doc.get("type") != kind:
        raise Malformed(f"type is {doc.get('type')!r}, not {kind!r}")
    if set(doc) != (ENTRY_MEMBERS if kind == "entry" else HEAD_MEMBERS):
        raise Malformed("wrong member names")
    _str_member(doc, "instance")
    _int_member(doc, "seq", 1)
    _int_member(doc, "leaf", 0)
    link = "prev" if kind == "entry" else "hash"
    if not isinstance(doc[link], str) or not HEX64.fullmatch(doc[link]):
        raise Malformed(f"{link} is not 64 hex digits")
    if parse_timestamp(doc["ts"]) is None:
        raise Malformed("ts is not a valid timestamp")
    if not isinstance(doc["kid"], str) or not KID.fullmatch(doc["kid"]):
        raise Malformed("kid is not 16 hex digits")
    if kind == "entry":
        _str_member(doc, "kind")
        if not isinstance(doc["data"], dict):
            raise Malformed("data is not an object")
    if canonical(doc).encode("utf-8") != body:
        raise Malformed("body is not in canonical form")
    return doc


# --- the chain of one instance (format.md §9 with bundle.md §9 step 12) ----------------

class Line(NamedTuple):
    leaf: int
    instance: str
    seq: int
    body: bytes
    sig: bytes


def verify_chain(instance: str, lines: list[Line], head: tuple[bytes, bytes] | None,
                 trust: dict[str, Key], payloads: dict[str, tuple[bytes, bytes]] | None
                 ) -> list[Problem]:
    out: list[Problem] = []

    def report(code: str, seq: int | None, message: str) -> None:
        out.append(Problem(code, instance, seq, message))

    last_seq, last_hash, last_leaf, tip_leaf = 0, ZERO64, -1, -1
    kept_absent: dict[str, int] = {}  # format.md §8.3: kept, no payload line -> first seq
    erasures: set[str] = set()        # commitments named by payload.erased entries
    for line in lines:
        digest = h_hex(line.body)
        try:
            e = parse_record(line.body, "entry")
        except Malformed as exc:
            report("entry-malformed", line.seq, str(exc))
            if line.seq >= last_seq:
                last_seq, last_hash = line.seq, digest
            continue
        seq = e["seq"]
        if e["instance"] != instance:                                     # check 3
            report("instance-mismatch", seq, f"names instance {e['instance']!r}")
        if seq == last_seq + 1:                                           # checks 4, 5
            if e["prev"] != last_hash:
                report("link-broken", seq, "prev is not the hash of the previous entry")
        elif seq > last_seq + 1:
            report("seq-gap", seq, f"entries {last_seq + 1}..{seq - 1} missing")
        elif seq == last_seq:
            report("seq-duplicate", seq, "two entries claim this position")
        else:
            report("seq-reordered", seq, f"stored after entry {last_seq}")
        if e["leaf"] <= last_leaf:                                        # check 6
            report("seq-reordered", seq, f"leaf {e['leaf']} not after {last_leaf}")
        key = trust.get(e["kid"])                                         # check 7
        if key is None:
            report("key-untrusted", seq, f"key {e['kid']} is not trusted")
        else:
            when = parse_timestamp(e["ts"])
            assert when is not None  # parse_record checked it
            if not key.valid_at(when):
                report("key-outside-window", seq, f"key {key.kid} not valid at {e['ts']}")
            if not ed25519_ok(key.raw, line.sig, line.body):              # check 8
                report("signature-invalid", seq, "Ed25519 signature does not verify")
        if e["kind"] == "payload.erased" and isinstance(e["data"].get("commitment"), str):
            erasures.add(e["data"]["commitment"])
        if payloads is not None:                                          # check 9
            for name, ref in e["data"].items():
                if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
                    continue
                if ref["c"] in payloads:
                    salt, data = payloads[ref["c"]]
                    if len(salt) != 32 or h_hex(COMMIT_DOMAIN + salt + data) != ref["c"]:
                        report("payload-mismatch", seq, f"payload {name} does not match")
                elif ref.get("k") is True and ref["c"] not in kept_absent:
                    kept_absent[ref["c"]] = seq
        if seq >= last_seq:
            last_seq, last_hash, tip_leaf = seq, digest, e["leaf"]
        last_leaf = e["leaf"]
    for commitment, seq in kept_absent.items():                           # check 9, §8.3
        if commitment not in erasures:
            report("payload-missing", seq, f"kept payload {commitment[:12]} gone, not erased")

    if head is None:                                                      # check 10
        if lines:
            report("head-missing", last_seq, "entries but no signed head")
        else:
            report("instance-missing", None, "no entries and no head")
        return out
    body, sig = head
    try:                                                                  # check 11
        h = parse_record(body, "head")
    except Malformed as exc:
        report("head-invalid", None, str(exc))
        return out
    key = trust.get(h["kid"])
    if key is None:
        report("key-untrusted", h["seq"], f"head key {h['kid']} is not trusted")
        return out
    if not ed25519_ok(key.raw, sig, body):
        report("head-invalid", h["seq"], "head signature does not verify")
        return out
    when = parse_timestamp(h["ts"])
    assert when is not None
    if not key.valid_at(when):
        report("key-outside-window", h["seq"], f"head key not valid at {h['ts']}")
    if h["instance"] != instance:                                         # check 12
        report("head-mismatch", h["seq"], f"head names instance {h['instance']!r}")
    elif h["seq"] > last_seq:                                             # check 13
        report("tail-truncated", h["seq"], f"head at {h['seq']}, entries end at {last_seq}")
    elif h["seq"] < last_seq:
        report("head-mismatch", last_seq, f"entries after the head's {h['seq']}")
    elif h["hash"] != last_hash or h["leaf"] != tip_leaf:                 # check 14
        report("head-mismatch", h["seq"], "head does not name the last entry")
    return out


# --- checkpoint notes (bundle.md §4.2) ------------------------------------------------

class Note(NamedTuple):
    origin: str
    size: int
    root: bytes
    kid: str


def note_key_hash(name: str, raw: bytes) -> bytes:
    return sha256(name.encode("utf-8") + b"\n" + b"\x01" + raw)[:4]


def read_note(data: bytes, trust: dict[str, Key]) -> Note:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("checkpoint.note is not UTF-8") from None
    cut = text.rfind("\n\n")
    if cut < 0:
        raise Unreadable("checkpoint.note has no empty line")
    body, block = text[:cut + 1], text[cut + 2:]
    lines = body.split("\n")[:-1]
    if len(lines) < 3 or any(not ln for ln in lines):
        raise Unreadable("checkpoint.note text lacks origin, size or root")
    origin, size, root_b64 = lines[:3]
    if not (size.isascii() and size.isdigit()) or (size.startswith("0") and size != "0"):
        raise Unreadable("checkpoint.note size is not decimal")
    root = b64(root_b64, "checkpoint.note root")
    if len(root) != 32:
        raise Unreadable("checkpoint.note root is not 32 bytes")
    if not block or not block.endswith("\n"):
        raise Unreadable("checkpoint.note has no signature lines")
    by_hash = {note_key_hash(origin, k.raw): k for k in trust.values()}
    for sig_line in block[:-1].split("\n"):
        if not sig_line.startswith("\u2014 ") or sig_line.count(" ") != 2:
            raise Unreadable("checkpoint.note has a malformed signature line")
        _, name, field = sig_line.split(" ")
        blob = b64(field, "checkpoint.note signature")
        key = by_hash.get(blob[:4]) if name == origin and len(blob) == 68 else None
        if key is not None and ed25519_ok(key.raw, blob[4:], body.encode("utf-8")):
            return Note(origin, int(size), root, key.kid)
    raise Untrusted("checkpoint.note is not signed by a trusted key")


# --- the bundle (bundle.md §9) --------------------------------------------------------

def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Unreadable(f"{what} is not JSON") from None


def _json_lines(data: bytes, name: str) -> list[dict[str, Any]]:
    if data and not data.endswith(b"\n"):
        raise Unreadable(f"{name} is truncated")
    out = []
    for n, line in enumerate(data.split(b"\n")[:-1], 1):
        doc = _json(line, f"{name} line {n}")
        if not isinstance(doc, dict):
            raise Unreadable(f"{name} line {n} is not an object")
        out.append(doc)
    return out


def _read(path: Path, limit: int | None = None) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise Unreadable(f"{path.name}: {exc.strerror}") from None
    if limit is not None and len(data) > limit:
        raise Unreadable(f"{path.name} is too large")
    return data


def verify_bundle(bundle: str | Path, trust: dict[str, Key]) -> list[Problem]:
    """Every problem found in the bundle; a single ``input-error`` when it is unreadable,
    a single ``untrusted`` when its manifest or checkpoint note does not verify."""
    try:
        return _verify(Path(bundle), trust)
    except Unreadable as exc:
        return [Problem("input-error", "(bundle)", None, str(exc))]
    except Untrusted as exc:
        return [Problem("untrusted", "(bundle)", None, str(exc))]


def _verify(root: Path, trust: dict[str, Key]) -> list[Problem]:
    found: list[Problem] = []

    def bundle_problem(code: str, message: str, where: str = "(bundle)") -> None:
        found.append(Problem(code, where, None, message))

    if not root.is_dir():                                                      # step 1
        raise Unreadable(f"{root} is not a directory")
    env = _json(_read(root / "manifest.dsse.json", 64 << 20), "manifest.dsse.json")
    if not isinstance(env, dict) or env.get("payloadType") != MANIFEST_TYPE:   # step 2
        raise Unreadable("manifest.dsse.json is not a histaudit DSSE envelope")
    payload = b64(env.get("payload"), "manifest payload")
    if not isinstance(env.get("signatures"), list):
        raise Unreadable("manifest envelope has no signature list")
    signed = False
    for s in env["signatures"]:                                                # step 3
        key = trust.get(s.get("keyid")) if isinstance(s, dict) and isinstance(
            s.get("keyid"), str) else None
        if key is None:
            continue
        try:
            sig = b64(s.get("sig"), "manifest signature")
        except Unreadable:
            continue
        if ed25519_ok(key.raw, sig, pae(MANIFEST_TYPE, payload)):
            signed = True
            break
    if not signed:
        raise Untrusted("manifest is not signed by a trusted key")
    manifest = _json(payload, "manifest payload")                              # step 4
    if not isinstance(manifest, dict) or manifest.get("format") != "histaudit-bundle":
        raise Unreadable("not a histaudit bundle manifest")
    if type(manifest.get("version")) is not int or manifest["version"] != 1:
        raise Unreadable(f"unknown bundle version {manifest.get('version')!r}")

    files = manifest.get("files")                                              # step 5
    if not isinstance(files, dict) or any(name not in files for name in REQUIRED_FILES):
        raise Unreadable("manifest does not list the required files")
    content: dict[str, bytes] = {}
    for name in files:
        if "/" in name or name.startswith("."):
            raise Unreadable(f"manifest names an unsafe file {name!r}")
        content[name] = _read(root / name)
    for name, meta in files.items():
        if not isinstance(meta, dict) or h_hex(content[name]) != meta.get("sha256"):
            bundle_problem("bundle-file-changed", f"{name} does not match the manifest")

    note = read_note(content["checkpoint.note"], trust)                        # step 6
    named = manifest.get("checkpoint")
    if not isinstance(named, dict) or (note.origin, note.size, base64.b64encode(
            note.root).decode()) != (manifest.get("origin"), named.get("size"),
                                     named.get("root")):
        bundle_problem("bundle-file-changed", "checkpoint.note is not the one the manifest names")

    keys_doc = _json(content["keys.json"], "keys.json")                        # step 7
    if not isinstance(keys_doc, dict) or not isinstance(keys_doc.get("keys"), list):
        raise Unreadable("keys.json has no keys array")
    for i, k in enumerate(keys_doc["keys"]):
        try:
            key = key_from_json(k, f"keys.json key {i}")
        except (ValueError, Unreadable) as exc:
            raise Unreadable(str(exc)) from None
        mine = trust.get(key.kid)
        if mine is None or mine.raw != key.raw:
            bundle_problem("key-untrusted", f"bundle key {key.kid} is not in the trust store")

    payloads: dict[str, tuple[bytes, bytes]] = {}                              # step 8
    if "payloads.jsonl" in content:
        for p in _json_lines(content["payloads.jsonl"], "payloads.jsonl"):
            if not isinstance(p.get("commitment"), str):
                raise Unreadable("payloads.jsonl line without a commitment")
            payloads[p["commitment"]] = (b64(p.get("salt"), "payload salt"),
                                         b64(p.get("data"), "payload data"))

    chains: dict[str, list[Line]] = {}                                         # step 9
    for n, e in enumerate(_json_lines(content["entries.jsonl"], "entries.jsonl"), 1):
        leaf, seq, instance = e.get("leaf"), e.get("seq"), e.get("instance")
        if type(leaf) is not int or type(seq) is not int or not isinstance(instance, str):
            raise Unreadable(f"entries.jsonl line {n} lacks leaf, seq or instance")
        if not isinstance(e.get("inclusion"), list):
            raise Unreadable(f"entries.jsonl line {n} has no inclusion array")
        line = Line(leaf, instance, seq, b64(e.get("body"), f"entries.jsonl line {n} body"),
                    b64(e.get("sig"), f"entries.jsonl line {n} sig"))
        proof = [b64(p, f"entries.jsonl line {n} proof") for p in e["inclusion"]]
        if not inclusion_ok(leaf, note.size, line.body, proof, note.root):
            found.append(Problem("inclusion-invalid", instance, seq,
                                 f"leaf {leaf} is not in the checkpoint's tree"))
        else:
            try:
                claimed = json.loads(line.body).get("leaf")
            except (ValueError, AttributeError, UnicodeDecodeError):
                claimed = None
            if type(claimed) is int and claimed != leaf:
                found.append(Problem("inclusion-invalid", instance, seq,
                                     f"body says leaf {claimed}, its proof leaf {leaf}"))
        chains.setdefault(instance, []).append(line)

    heads: dict[str, tuple[bytes, bytes]] = {}                                 # step 10
    for n, h in enumerate(_json_lines(content["heads.jsonl"], "heads.jsonl"), 1):
        if not isinstance(h.get("instance"), str):
            raise Unreadable(f"heads.jsonl line {n} has no instance")
        heads[h["instance"]] = (b64(h.get("body"), "head body"), b64(h.get("sig"), "head sig"))

    listed = manifest.get("instances")                                         # step 11
    if not isinstance(listed, list):
        raise Unreadable("manifest has no instance list")
    names = [i.get("instance") for i in listed if isinstance(i, dict)]
    for extra in sorted(set(chains) - set(names)):
        bundle_problem("bundle-file-changed", "entries of an unlisted instance", extra)

    for name in names:                                                         # step 12
        found.extend(verify_chain(str(name), chains.get(name, []), heads.get(name), trust,
                                  payloads if "payloads.jsonl" in content else None))
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: verifier.py BUNDLE_DIR TRUST_PATH", file=sys.stderr)
        return 2
    try:
        trust = load_trust(argv[1])
    except (ValueError, OSError) as exc:
        print(f"trust store: {exc}", file=sys.stderr)
        return 2
    problems = verify_bundle(argv[0], trust)
    for p in problems:
        print(p)
    if any(p.code == "input-error" for p in problems):
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
