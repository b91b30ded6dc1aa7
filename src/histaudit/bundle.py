"""Compliance export: a self-contained bundle an auditor verifies offline.

A bundle is a directory (zip it to send it)::

    manifest.dsse.json   the manifest, in a DSSE envelope signed by the exporting key
    checkpoint.note      a signed checkpoint of the whole ledger (C2SP tlog-checkpoint)
    entries.jsonl        the exact signed entries, each with its RFC 9162 inclusion proof
    heads.jsonl          the signed head of every exported instance
    keys.json            the public keys, with their validity windows
    payloads.jsonl       kept payloads (salt + bytes), only with --with-payloads
    report.html          a human report, one file, no network

Instances are exported whole (seq 1 to the signed head): only a whole chain can prove
that nothing is missing. ``--since``/``--until`` choose which instances, by the times of
their entries. docs/bundle.md is the spec; verification needs no database and no Dapr.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from . import format as fmt
from . import merkle
from .checkpoint import Checkpoint, make_checkpoint, parse_note
from .errors import FormatError, InputError, UsageError
from .findings import Finding
from .keys import PublicKey, Signer, TrustStore, parse_time
from .store import Ledger, StoredEntry, StoredHead
from .verify import Report, verify_chain

BUNDLE_VERSION = 1
MANIFEST_TYPE = "application/vnd.histaudit.bundle-manifest+json"
MAX_MANIFEST = 64 << 20
FILES = ("checkpoint.note", "entries.jsonl", "heads.jsonl", "keys.json")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: object, what: str) -> bytes:
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


# --- export ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportResult:
    path: Path
    instances: int
    entries: int
    bytes: int


def export(ledger: Ledger, instances: Iterable[str], out: str | os.PathLike[str], *,
           signer: Signer, trust: TrustStore, since: str | None = None,
           until: str | None = None, with_payloads: bool = False,
           html: bool = True) -> ExportResult:
    """Write a bundle of ``instances`` (all instances when empty) to directory ``out``."""
    out_dir = Path(out)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UsageError(f"{out_dir} exists and is not empty; refusing to overwrite")
    wanted = list(instances) or ledger.instance_ids()
    chosen = [i for i in wanted if _in_window(ledger, i, since, until)]
    if not chosen:
        raise UsageError("no instance has entries in the chosen time window")
    # Heads are read before the checkpoint is signed: the entry a head names was committed
    # before the head could be read, so it lies below the checkpoint. Entries appended
    # meanwhile stay out of this bundle; a head read later could name one of them, and
    # the bundle would then look cut (tail-truncated) without anything being wrong.
    heads = {instance: ledger.head(instance) for instance in chosen}
    cp = make_checkpoint(ledger, signer)
    tree = merkle.Tree([merkle.leaf_hash(body) for _, body in ledger.leaves(below=cp.size)])
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {"checkpoint.note": cp.note}
    entry_lines, head_lines, payload_lines = [], [], []
    summaries, kids = [], {signer.kid}
    reports: list[Report] = []
    timelines: dict[str, list[tuple[int, str, str, str]]] = {}
    for instance in chosen:
        head = heads[instance]
        upto = fmt.parse_head(head.body).leaf if head is not None else -1
        rows = [r for r in ledger.entries(instance) if r.leaf < cp.size and r.leaf <= upto]
        if head is None or not rows:
            raise InputError(f"instance {instance!r} has no signed head or no entries")
        for r in rows:
            proof = tree.inclusion_proof(r.leaf, cp.size)
            entry_lines.append(orjson.dumps({
                "leaf": r.leaf, "instance": r.instance, "seq": r.seq, "body": _b64(r.body),
                "sig": _b64(r.sig), "inclusion": [_b64(p) for p in proof]}))
            entry = fmt.parse_entry(r.body)
            kids.add(entry.kid)
            timelines.setdefault(instance, []).append((entry.seq, entry.ts, entry.kind,
                                                        _detail(entry.data)))
            if with_payloads:
                payload_lines.extend(_payload_lines(ledger, entry))
        kids.add(fmt.parse_head(head.body).kid)
        head_lines.append(orjson.dumps({"instance": instance, "body": _b64(head.body),
                                        "sig": _b64(head.sig)}))
        summaries.append({"instance": instance, "entries": len(rows),
                          "last_seq": max(r.seq for r in rows)})
        reports.append(verify_chain(instance, iter(rows), head, trust=trust))
    keys = [k.to_json() for k in trust if k.kid in kids]
    missing = kids - {k["kid"] for k in keys}
    if missing:
        raise UsageError(f"keys {sorted(missing)} signed exported records but are not in the "
                         f"trust store; add their public keys")
    files["entries.jsonl"] = b"\n".join(entry_lines) + b"\n"
    files["heads.jsonl"] = b"\n".join(head_lines) + b"\n"
    files["keys.json"] = orjson.dumps({"keys": keys}, option=orjson.OPT_INDENT_2)
    if with_payloads:
        files["payloads.jsonl"] = b"".join(line + b"\n" for line in payload_lines)
    if html:
        from .report import render_html
        files["report.html"] = render_html(reports, origin=cp.origin, checkpoint=cp,
                                           entries=timelines)
    manifest = {
        "format": "histaudit-bundle", "version": BUNDLE_VERSION, "origin": cp.origin,
        "created": fmt.now_ts(), "exporter": signer.kid,
        "checkpoint": {"size": cp.size, "root": _b64(cp.root)},
        "window": {"since": since, "until": until}, "instances": summaries,
        "files": {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                  for name, data in sorted(files.items())},
    }
    payload = orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    envelope = {"payloadType": MANIFEST_TYPE, "payload": _b64(payload),
                "signatures": [{"keyid": signer.kid,
                                "sig": _b64(signer.sign(pae(MANIFEST_TYPE, payload)))}]}
    files["manifest.dsse.json"] = orjson.dumps(envelope, option=orjson.OPT_INDENT_2)
    total = 0
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
        total += len(data)
    return ExportResult(out_dir, len(chosen), len(entry_lines), total)


def _detail(data: Mapping[str, Any]) -> str:
    parts = []
    for key in sorted(data):
        value = data[key]
        if isinstance(value, dict) and "c" in value:
            value = "<committed payload>"
        parts.append(f"{key}={value}")
    return " ".join(parts)[:400]


def _in_window(ledger: Ledger, instance: str, since: str | None, until: str | None) -> bool:
    if since is None and until is None:
        return True
    # Compared as instants, not strings: "…:00.5Z" sorts before "…:00Z" as text.
    try:
        lo, hi = (None if t is None else parse_time(t) for t in (since, until))
    except ValueError as exc:
        raise UsageError(f"time window: {exc}") from None
    for row in ledger.entries(instance):
        ts = parse_time(fmt.parse_entry(row.body).ts)
        if (lo is None or ts >= lo) and (hi is None or ts <= hi):
            return True
    return False


def _payload_lines(ledger: Ledger, entry: fmt.Entry) -> list[bytes]:
    lines = []
    for ref in entry.data.values():
        if isinstance(ref, dict) and isinstance(ref.get("c"), str):
            kept = ledger.payload(ref["c"])
            if kept is not None:
                lines.append(orjson.dumps({"commitment": ref["c"], "salt": _b64(kept[0]),
                                           "data": _b64(kept[1])}))
    return lines


# --- offline verification --------------------------------------------------------------

@dataclass(frozen=True)
class BundleReport:
    """The outcome of verifying a bundle: bundle-level findings plus one report per instance."""

    checkpoint: Checkpoint
    findings: tuple[Finding, ...]
    reports: tuple[Report, ...]

    @property
    def ok(self) -> bool:
        return not self.findings and all(r.ok for r in self.reports)

    def all_reports(self) -> list[Report]:
        bundle = Report(instance_id="(bundle)", entries=sum(r.entries for r in self.reports),
                        mode="bundle", findings=self.findings)
        return [bundle, *self.reports]


def _read(path: Path, limit: int | None = None) -> bytes:
    try:
        with path.open("rb") as fh:
            data = fh.read() if limit is None else fh.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"bundle file {path.name} is missing") from None
    except OSError as exc:
        raise InputError(f"bundle file {path.name}: {exc.strerror}") from None
    if limit is not None and len(data) > limit:
        raise InputError(f"bundle file {path.name} is larger than {limit} bytes")
    return data


def _json(data: bytes, what: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON ({exc.msg} at byte {exc.pos})") from None


def _jsonl(data: bytes, name: str) -> list[dict[str, Any]]:
    if data and not data.endswith(b"\n"):
        raise InputError(f"bundle file {name} is truncated (last line has no newline)")
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        doc = _json(line, f"bundle file {name} line {n}")
        if not isinstance(doc, dict):
            raise InputError(f"bundle file {name} line {n} is not a JSON object")
        out.append(doc)
    return out


def load_manifest(root: Path, trust: TrustStore) -> tuple[dict[str, Any], str]:
    """Read and authenticate the DSSE-wrapped manifest; return (manifest, signer kid)."""
    if not root.is_dir():
        raise InputError(f"bundle {root} is not a directory")
    env = _json(_read(root / "manifest.dsse.json", MAX_MANIFEST), "bundle manifest")
    if not isinstance(env, dict) or env.get("payloadType") != MANIFEST_TYPE:
        raise InputError("bundle manifest is not a histaudit DSSE envelope")
    try:
        payload = _unb64(env.get("payload"), "manifest payload")
        sigs = env["signatures"]
        if not isinstance(sigs, list):
            raise KeyError
    except (FormatError, KeyError):
        raise InputError("bundle manifest envelope is malformed") from None
    signer_kid = None
    for s in sigs:
        kid = s.get("keyid") if isinstance(s, dict) else None
        key = trust.get(kid) if isinstance(kid, str) else None
        try:
            sig = _unb64(s.get("sig"), "manifest signature") if key else b""
        except FormatError:
            continue
        if key is not None and key.verify(sig, pae(MANIFEST_TYPE, payload)):
            signer_kid = key.kid
            break
    if signer_kid is None:
        raise InputError("bundle manifest is not signed by a trusted key (wrong --trust, "
                         "or the manifest was altered)")
    manifest = _json(payload, "bundle manifest payload")
    if not isinstance(manifest, dict) or manifest.get("format") != "histaudit-bundle":
        raise InputError("bundle manifest is not a histaudit bundle manifest")
    version = manifest.get("version")
    if type(version) is not int or version != BUNDLE_VERSION:  # not true, not 1.0
        raise InputError(f"bundle has unknown version {manifest.get('version')!r} "
                         f"(this histaudit reads {BUNDLE_VERSION})")
    return manifest, signer_kid


def verify_bundle(path: str | os.PathLike[str], trust: TrustStore, *,
                  full: bool = True) -> BundleReport:
    """Verify a bundle offline: manifest, files, checkpoint, inclusion proofs, every chain."""
    root = Path(path)
    manifest, _ = load_manifest(root, trust)
    findings: list[Finding] = []
    declared = manifest.get("files")
    if not isinstance(declared, dict):
        raise InputError("bundle manifest has no file list")
    contents: dict[str, bytes] = {}
    for name in sorted(set(declared) | set(FILES)):
        if name not in declared:
            raise InputError(f"bundle manifest does not list {name}")
        if "/" in name or name.startswith("."):
            raise InputError(f"bundle manifest names an unsafe path {name!r}")
        data = _read(root / name)
        meta = declared[name]
        if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            findings.append(Finding.make(
                "bundle-file-changed", "(bundle)", None,
                f"{name} does not match the signed manifest ({len(data)} bytes, manifest says "
                f"{meta.get('bytes') if isinstance(meta, dict) else '?'})"))
        contents[name] = data
    # The signed records below prove themselves; a changed file is reported above and
    # then verified anyway, so the finding says what was changed inside it.
    cp = parse_note(contents["checkpoint.note"], trust, source="bundle checkpoint.note")
    named = manifest.get("checkpoint")
    named = named if isinstance(named, dict) else {}
    if (cp.origin != manifest.get("origin") or cp.size != named.get("size")
            or _b64(cp.root) != named.get("root")):
        findings.append(Finding.make("bundle-file-changed", "(bundle)", None,
                                     "checkpoint.note is not the checkpoint the manifest names"))
    bundle_keys = _bundle_keys(contents["keys.json"])
    for kid, key in bundle_keys.items():
        trusted = trust.get(kid)
        if trusted is None or trusted.raw != key.raw:
            findings.append(Finding.make("key-untrusted", "(bundle)", None,
                                         f"bundle key {kid} is not in the trust store"))
    payloads = {}
    if "payloads.jsonl" in contents:
        for p in _jsonl(contents["payloads.jsonl"], "payloads.jsonl"):
            try:
                payloads[str(p["commitment"])] = (_unb64(p.get("salt"), "payload salt"),
                                                  _unb64(p.get("data"), "payload data"))
            except (KeyError, FormatError) as exc:
                raise InputError(f"bundle payloads.jsonl: {exc}") from None
    rows: dict[str, list[StoredEntry]] = defaultdict(list)
    for n, e in enumerate(_jsonl(contents["entries.jsonl"], "entries.jsonl"), 1):
        row = _entry_row(e, n)
        inclusion = e.get("inclusion", [])
        if not isinstance(inclusion, list):
            raise InputError(f"bundle entries.jsonl line {n}: inclusion is not a list")
        proof = [_unb64(p, f"entries.jsonl line {n} proof") for p in inclusion]
        if not merkle.verify_inclusion(row.leaf, cp.size, merkle.leaf_hash(row.body), proof,
                                       cp.root):
            findings.append(Finding.make(
                "inclusion-invalid", row.instance, row.seq,
                f"entry {row.seq} (leaf {row.leaf}) is not in the signed checkpoint's tree"))
        elif (claimed := _body_leaf(row.body)) is not None and claimed != row.leaf:
            findings.append(Finding.make(
                "inclusion-invalid", row.instance, row.seq,
                f"entry {row.seq} says it is leaf {claimed}, but its proof puts it at leaf "
                f"{row.leaf}"))
        rows[row.instance].append(row)
    heads = {}
    for n, h in enumerate(_jsonl(contents["heads.jsonl"], "heads.jsonl"), 1):
        try:
            heads[str(h["instance"])] = StoredHead(str(h["instance"]), 0,
                                                   _unb64(h.get("body"), "head body"),
                                                   _unb64(h.get("sig"), "head signature"))
        except (KeyError, FormatError) as exc:
            raise InputError(f"bundle heads.jsonl line {n}: {exc}") from None
    listed = manifest.get("instances")
    if not isinstance(listed, list):
        raise InputError("bundle manifest has no instance list")
    names = [str(i.get("instance")) for i in listed if isinstance(i, dict)]
    for extra in sorted(set(rows) - set(names)):
        findings.append(Finding.make("bundle-file-changed", extra, None,
                                     f"entries for instance {extra!r}, which the manifest "
                                     f"does not list"))
    reports = []
    for name in names:
        reports.append(verify_chain(name, iter(rows.get(name, [])), heads.get(name),
                                    trust=trust, full=full, workers=1,
                                    payload_lookup=payloads.get if payloads else None))
    return BundleReport(checkpoint=cp, findings=tuple(findings), reports=tuple(reports))


def _entry_row(e: Mapping[str, Any], n: int) -> StoredEntry:
    try:
        leaf, seq, instance = e["leaf"], e["seq"], e["instance"]
        body = _unb64(e.get("body"), "body")
        sig = _unb64(e.get("sig"), "signature")
    except (KeyError, FormatError) as exc:
        raise InputError(f"bundle entries.jsonl line {n}: {exc}") from None
    if type(leaf) is not int or type(seq) is not int or not isinstance(instance, str):
        raise InputError(f"bundle entries.jsonl line {n}: leaf, seq or instance has the "
                         f"wrong type")
    return StoredEntry(leaf, instance, seq, fmt.sha256_hex(body), body, sig)


def _body_leaf(body: bytes) -> int | None:
    """The ``leaf`` a body claims, or None when it has none (verify_chain reports that)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    leaf = doc.get("leaf") if isinstance(doc, dict) else None
    return leaf if type(leaf) is int else None


def _bundle_keys(data: bytes) -> dict[str, PublicKey]:
    doc = _json(data, "bundle keys.json")
    items = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise InputError("bundle keys.json has no key list")
    from .errors import KeyProblem
    try:
        keys = [PublicKey.from_json(k, source=f"bundle keys.json key {i}")
                for i, k in enumerate(items)]
    except KeyProblem as exc:
        raise InputError(str(exc)) from None
    return {k.kid: k for k in keys}
