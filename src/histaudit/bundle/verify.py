"""Offline verification of an export bundle: only the bundle and a trust store.

Nothing here opens a database or imports the Dapr SDK (a test proves it): the manifest's
DSSE signature, each file's digest, the checkpoint note, every entry's RFC 9162
inclusion proof and every chain (:func:`histaudit.verify.verify_chain`) are checked from
the bundle's bytes alone; given a checkpoint kept earlier, also that the bundle's signed
tree extends it (docs/bundle.md §5.1).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from histaudit.errors import FormatError, InputError, KeyMaterialError, SignatureError
from histaudit.inputs import not_regular, open_nonblocking, read_up_to
from histaudit.ledger import merkle
from histaudit.ledger import records as rec
from histaudit.ledger.checkpoint import Checkpoint, parse_note
from histaudit.ledger.keys import PublicKey, TrustStore
from histaudit.ledger.spans import SPANS_FILE, ProvenSpan, read_spans_file
from histaudit.verify.consistency import ConsistencyResult, signed_tree_extends
from histaudit.verify.dapr_crosscheck import verify_with_ledger
from histaudit.verify.dapr_history import load_anchors
from histaudit.verify.findings import Finding
from histaudit.verify.payloads import PayloadLookup
from histaudit.verify.progress import Progress, Tally
from histaudit.verify.report import Report, Scope
from histaudit.verify.spans import check_spans
from histaudit.verify.verifier import verify_chain

from .dapr_rows import DAPR_ANCHORS, DAPR_ROWS, decode_rows
from .envelope import (
    BUNDLE_VERSION,
    FILE_MAX_BYTES,
    FILES,
    MANIFEST_MAX_BYTES,
    MANIFEST_TYPE,
    OTHER_FILE_MAX_BYTES,
    SLACK_BYTES,
    b64,
    pae,
    unb64,
)
from .scitt import INDEX as SCITT_INDEX
from .scitt import check_scitt

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["BundleResult", "load_manifest", "verify_bundle"]


@dataclass(frozen=True)
class BundleResult:
    """The outcome of verifying a bundle: bundle-level findings plus one report per
    instance, and the proof against a kept checkpoint when one was given."""

    checkpoint: Checkpoint
    findings: tuple[Finding, ...]
    reports: tuple[Report, ...]
    consistency: ConsistencyResult | None = None
    spans: tuple[ProvenSpan, ...] = ()
    """The spans the bundle proves (``spans.json``, written by ``histaudit prove``)."""

    @property
    def ok(self) -> bool:
        return (not self.findings and all(r.ok for r in self.reports)
                and (self.consistency is None or self.consistency.ok))

    def all_reports(self) -> list[Report]:
        bundle = Report(instance_id="(bundle)", entries=sum(r.entries for r in self.reports),
                        mode="bundle", findings=self.findings, scope=Scope.BUNDLE)
        tail = [] if self.consistency is None else [self.consistency.report()]
        return [bundle, *self.reports, *tail]


def _read(root: Path, name: str, limit: int, *, listed: int | None = None) -> bytes:
    """The bytes of bundle file ``name``: a regular file inside ``root``, at most ``limit``
    bytes (docs/bundle.md §9 step 5). FIFOs, devices, sockets, directories and symlinks
    that leave the bundle are refused before a byte is read, so nothing blocks or
    streams forever; ``listed`` is the manifest's byte count, named in the error."""
    if "\x00" in name:
        raise InputError(f"bundle manifest names an unsafe path {name!r}")
    path = root / name
    real, inside = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, inside]) != inside or real == inside:
        raise InputError(f"bundle file {name} is a symlink that leaves the bundle directory")
    try:
        _regular(name, os.stat(real).st_mode)  # names a socket, which open() cannot
        # opening a FIFO must not wait for a writer (it is refused below)
        fd = open_nonblocking(real, follow=False)
    except FileNotFoundError:
        raise InputError(f"bundle file {name} is missing") from None
    except OSError as exc:
        raise InputError(f"bundle file {name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        _regular(name, st.st_mode)  # what was opened, should it have been swapped
        if st.st_size > limit:
            said = f", the signed manifest says {listed}" if listed is not None else ""
            raise InputError(f"bundle file {name} is {st.st_size} bytes{said}: larger than "
                             f"the {limit} bytes this verifier reads")
        data = read_up_to(fd, limit)
    except OSError as exc:
        raise InputError(f"bundle file {name}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise InputError(f"bundle file {name} is larger than {limit} bytes")
    return data


def read_listed(root: Path, name: str, meta: object) -> bytes:
    """Bundle file ``name`` as the manifest lists it (``meta``: its entry in the signed
    file list), read by :func:`_read` under the cap for that name; the caller compares its
    SHA-256 with ``meta`` (``verify --bundle`` reports a difference, ``show`` refuses)."""
    limit, listed = _limit(name, meta)
    return _read(root, name, limit, listed=listed)


def _regular(name: str, mode: int) -> None:
    what = not_regular(mode)
    if what is not None:
        raise InputError(f"bundle file {name} is {what}, not a regular file")


def _limit(name: str, meta: object) -> tuple[int, int | None]:
    """How many bytes of ``name`` are read: its absolute cap, and no more than twice the
    signed byte count plus 1 MiB (room for the tampering a finding should describe)."""
    cap = FILE_MAX_BYTES.get(name, OTHER_FILE_MAX_BYTES)
    listed = meta.get("bytes") if isinstance(meta, dict) else None
    if type(listed) is not int or listed < 0:
        return cap, None
    return min(cap, 2 * listed + SLACK_BYTES), listed


def _json(data: bytes, what: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{what} is not JSON ({exc.msg} at byte {exc.pos})") from None


def read_jsonl(data: bytes, name: str) -> list[dict[str, Any]]:
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
    """Read and authenticate the DSSE-wrapped manifest; return (manifest, signer kid).

    InputError when it cannot be read; SignatureError when it reads but no signature
    verifies with a trusted key.
    """
    if not root.is_dir():
        raise InputError(f"bundle {root} is not a directory")
    env = _json(_read(root, "manifest.dsse.json", MANIFEST_MAX_BYTES), "bundle manifest")
    if not isinstance(env, dict) or env.get("payloadType") != MANIFEST_TYPE:
        raise InputError("bundle manifest is not a histaudit DSSE envelope")
    try:
        payload = unb64(env.get("payload"), "manifest payload")
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
            sig = unb64(s.get("sig"), "manifest signature") if key else b""
        except FormatError:
            continue
        if key is not None and key.verify(sig, pae(MANIFEST_TYPE, payload)):
            signer_kid = key.kid
            break
    if signer_kid is None:
        raise SignatureError("bundle manifest is not signed by a trusted key (wrong --trust, "
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
                  full: bool = True, since: Checkpoint | None = None,
                  progress: Progress | None = None,
                  anchors: Sequence[x509.Certificate] | None = None) -> BundleResult:
    """Verify a bundle offline: manifest, files, checkpoint, inclusion proofs, every chain;
    with ``since`` (a kept checkpoint, already verified), also that the bundle's tree
    extends it.

    Raises InputError for a bundle that cannot be read (docs/bundle.md §9), or that lacks
    leaves ``since`` covers (exported for some instances only: §5.1); SignatureError when
    its manifest or checkpoint note is not signed by a trusted key. ``progress(done,
    total)`` counts each entry twice: its inclusion proof, then its place in its chain.

    A bundle exported with Dapr's rows (``dapr-rows.jsonl``) also has each instance's
    Dapr signatures checked and its signed history cross-checked with its chain
    (:func:`_with_dapr`), against ``anchors`` when given, else the bundle's own
    ``dapr-anchors.pem``.
    """
    root = Path(path)
    manifest, _ = load_manifest(root, trust)
    findings: list[Finding] = []
    contents, changed = _listed_files(root, manifest, findings)
    # The signed records below prove themselves; a changed file is reported above and
    # then verified anyway, so the finding says what was changed inside it.
    cp = parse_note(contents["checkpoint.note"], trust, source="bundle checkpoint.note")
    findings += _checkpoint_and_keys_findings(manifest, cp, contents["keys.json"], trust)
    payloads = _payloads(contents)
    lines = read_jsonl(contents["entries.jsonl"], "entries.jsonl")
    tally = Tally(progress, 2 * len(lines))
    rows, leaves = _proven_rows(tally.count(lines), cp, findings)
    consistency = None
    if since is not None:
        consistency = _extends(since, cp, leaves, altered="entries.jsonl" in changed)
    heads = _heads(contents["heads.jsonl"])
    names = _listed_instances(manifest, rows, findings)
    reports = []
    # Payloads are checked (also that a kept one is present or signed erased) only when the
    # signed manifest lists payloads.jsonl: a bundle exported without them claims none.
    lookup = payloads.get if "payloads.jsonl" in contents else None
    for name in names:
        reports.append(verify_chain(name, iter(tally.count(rows.get(name, []))),
                                    heads.get(name), trust=trust, full=full, workers=1,
                                    payload_lookup=lookup))
    tally.tell()
    if DAPR_ROWS in contents:
        reports = _with_dapr(contents, names, reports, rows, findings, anchors,
                             payloads.get if lookup is not None else _no_payload)
    elif anchors is not None:
        raise InputError("--trust-anchors checks Dapr's rows, and this bundle has none "
                         "(export it with --dapr-state)")
    spans: list[ProvenSpan] = []
    if SPANS_FILE in contents:  # each span's entry is one of the bundle's proven entries
        try:
            spans = read_spans_file(contents[SPANS_FILE])
        except FormatError as exc:
            raise InputError(f"bundle {exc}") from None
        findings.extend(check_spans(spans, cp.origin, rows))
    if SCITT_INDEX in contents:  # the bundle's SCITT statements, receipts and Capsules
        findings.extend(check_scitt(contents, cp, rows, trust))
    return BundleResult(checkpoint=cp, findings=tuple(findings), reports=tuple(reports),
                        consistency=consistency, spans=tuple(spans))


def _listed_files(root: Path, manifest: Mapping[str, Any], findings: list[Finding]
                  ) -> tuple[dict[str, bytes], set[str]]:
    """Every file the signed manifest lists (and every one a bundle must have), read as
    docs/bundle.md §9 says; a file whose digest differs is ``bundle-file-changed``.
    Returns the contents by name and the names that changed."""
    declared = manifest.get("files")
    if not isinstance(declared, dict):
        raise InputError("bundle manifest has no file list")
    contents: dict[str, bytes] = {}
    changed: set[str] = set()
    for name in sorted(set(declared) | set(FILES)):
        if name not in declared:
            raise InputError(f"bundle manifest does not list {name}")
        if not _safe_name(name):
            raise InputError(f"bundle manifest names an unsafe path {name!r}")
        meta = declared[name]
        data = read_listed(root, name, meta)
        if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            changed.add(name)
            findings.append(Finding.make(
                "bundle-file-changed", "(bundle)", None,
                f"{name} does not match the signed manifest ({len(data)} bytes, manifest says "
                f"{meta.get('bytes') if isinstance(meta, dict) else '?'})"))
        contents[name] = data
    return contents, changed


def _checkpoint_and_keys_findings(manifest: Mapping[str, Any], cp: Checkpoint,
                                  keys_json: bytes, trust: TrustStore) -> list[Finding]:
    """The checkpoint note must be the one the manifest names; every key the bundle
    carries must be the trust store's."""
    found = []
    named = manifest.get("checkpoint")
    named = named if isinstance(named, dict) else {}
    if (cp.origin != manifest.get("origin") or cp.size != named.get("size")
            or b64(cp.root) != named.get("root")):
        found.append(Finding.make("bundle-file-changed", "(bundle)", None,
                                  "checkpoint.note is not the checkpoint the manifest names"))
    for kid, key in _bundle_keys(keys_json).items():
        trusted = trust.get(kid)
        if trusted is None or trusted.raw != key.raw:
            found.append(Finding.make("key-untrusted", "(bundle)", None,
                                      f"bundle key {kid} is not in the trust store"))
    return found


def _payloads(contents: Mapping[str, bytes]) -> dict[str, tuple[bytes, bytes]]:
    """``payloads.jsonl`` (when listed): salt and bytes by commitment."""
    payloads = {}
    if "payloads.jsonl" in contents:
        for p in read_jsonl(contents["payloads.jsonl"], "payloads.jsonl"):
            try:
                payloads[str(p["commitment"])] = (unb64(p.get("salt"), "payload salt"),
                                                  unb64(p.get("data"), "payload data"))
            except (KeyError, FormatError) as exc:
                raise InputError(f"bundle payloads.jsonl: {exc}") from None
    return payloads


def _proven_rows(lines: Iterable[Any], cp: Checkpoint, findings: list[Finding]
                 ) -> tuple[dict[str, list[rec.StoredEntry]], dict[int, bytes]]:
    """``entries.jsonl``'s rows by instance, each line's inclusion proof checked against
    the checkpoint (``inclusion-invalid`` where it fails or names another leaf), and the
    leaf hashes by index for the consistency proof (a proven line wins over one that is
    not)."""
    rows: dict[str, list[rec.StoredEntry]] = defaultdict(list)
    leaves: dict[int, bytes] = {}
    for n, e in enumerate(lines, 1):
        row = entry_row(e, n)
        inclusion = e.get("inclusion", [])
        if not isinstance(inclusion, list):
            raise InputError(f"bundle entries.jsonl line {n}: inclusion is not a list")
        proof = [unb64(p, f"entries.jsonl line {n} proof") for p in inclusion]
        leaf_hash = merkle.leaf_hash(row.body)
        if not merkle.verify_inclusion(row.leaf, cp.size, leaf_hash, proof, cp.root):
            findings.append(Finding.make(
                "inclusion-invalid", row.instance, row.seq,
                f"entry {row.seq} (leaf {row.leaf}) is not in the signed checkpoint's tree"))
            leaves.setdefault(row.leaf, leaf_hash)
        elif (claimed := _body_int(row.body, "leaf")) is not None and claimed != row.leaf:
            findings.append(Finding.make(
                "inclusion-invalid", row.instance, row.seq,
                f"entry {row.seq} says it is leaf {claimed}, but its proof puts it at leaf "
                f"{row.leaf}"))
            leaves.setdefault(row.leaf, leaf_hash)
        else:
            leaves[row.leaf] = leaf_hash
        rows[row.instance].append(row)
    return rows, leaves


def _heads(heads_jsonl: bytes) -> dict[str, rec.StoredHead]:
    """``heads.jsonl``: each instance's signed head."""
    heads = {}
    for n, h in enumerate(read_jsonl(heads_jsonl, "heads.jsonl"), 1):
        try:
            body = unb64(h.get("body"), "head body")
            # A bundle has no seq column: the head's own (signed) seq stands in for it.
            heads[str(h["instance"])] = rec.StoredHead(str(h["instance"]),
                                                       _body_int(body, "seq") or 0, body,
                                                       unb64(h.get("sig"), "head signature"))
        except (KeyError, FormatError) as exc:
            raise InputError(f"bundle heads.jsonl line {n}: {exc}") from None
    return heads


def _listed_instances(manifest: Mapping[str, Any], rows: Mapping[str, Any],
                      findings: list[Finding]) -> list[str]:
    """The instances the signed manifest lists; entries of one it does not list are
    ``bundle-file-changed``."""
    listed = manifest.get("instances")
    if not isinstance(listed, list):
        raise InputError("bundle manifest has no instance list")
    names = [str(i.get("instance")) for i in listed if isinstance(i, dict)]
    for extra in sorted(set(rows) - set(names)):
        findings.append(Finding.make("bundle-file-changed", extra, None,
                                     f"entries for instance {extra!r}, which the manifest "
                                     f"does not list"))
    return names


def _safe_name(name: str) -> bool:
    """A listed name is a file name, or a relative path under ``scitt/``
    (``scitt/entries/3.cose``), no part empty or hidden (so no ``..``), no NUL or
    backslash (docs/bundle.md §9 step 5)."""
    parts = name.split("/")
    return (all(part and not part.startswith(".") for part in parts)
            and (len(parts) == 1 or parts[0] == "scitt")
            and "\x00" not in name and "\\" not in name)


def _no_payload(_commitment: str) -> None:
    return None


def _with_dapr(contents: Mapping[str, bytes], names: list[str], reports: list[Report],
               rows: Mapping[str, list[rec.StoredEntry]], findings: list[Finding],
               anchors: Sequence[x509.Certificate] | None, lookup: PayloadLookup
               ) -> list[Report]:
    """Each instance's report with its Dapr findings merged in (mode ``+engine``: Dapr's
    signed history is the engine's): Dapr's own signature checks, then the cross-check
    of the signed events with the instance's chain (``histaudit.verify.dapr_crosscheck``).
    An instance without a line in dapr-rows.jsonl is a bundle finding."""
    if anchors is None:
        if DAPR_ANCHORS not in contents:
            raise InputError(f"bundle has {DAPR_ROWS} but no {DAPR_ANCHORS}: pass "
                             f"--trust-anchors")
        anchors = load_anchors(contents[DAPR_ANCHORS], f"bundle {DAPR_ANCHORS}")
    bundled = decode_rows(contents[DAPR_ROWS])
    out = []
    for name, report in zip(names, reports, strict=True):
        item = bundled.get(name)
        if item is None:
            findings.append(Finding.make("bundle-file-changed", name, None,
                                         f"{DAPR_ROWS} has no line for instance {name!r}"))
            out.append(report)
            continue
        result = verify_with_ledger(name, item.rows, anchors, rows.get(name, []), lookup,
                                    app_id=item.app_id)
        # In a report, seq is a ledger entry: Dapr's own findings name their signature
        # in the message instead of by seq.
        own = [replace(f, seq=None, entries=())
               for f in (result.history.findings if result.history is not None else ())]
        out.append(report.with_findings([*own, *result.crosscheck], "engine"))
    return out


def _extends(old: Checkpoint, cp: Checkpoint, leaves: Mapping[int, bytes], *,
             altered: bool) -> ConsistencyResult | None:
    """The proof that the bundle's tree ``cp`` extends the kept ``old``, from the bundle's
    proven leaves; a bundle without every leaf below ``old.size`` cannot give it.

    That is refused (InputError) for a bundle exported that way (some instances, a time
    window, entries appended while it was exported), and left unproven (None) for one
    whose entries.jsonl was altered: that is already a finding, which must not become an
    input error.
    """
    # Counted, not listed: the kept checkpoint may cover a billion leaves, the bundle few.
    held = sum(1 for i in leaves if 0 <= i < old.size)
    if old.size > cp.size or held == old.size:
        return signed_tree_extends(old, cp, leaves)
    if altered:
        return None
    first = next(i for i in range(old.size) if i not in leaves)
    raise InputError(
        f"the bundle holds {held} of the {old.size} leaves the kept "
        f"checkpoint covers (first missing: leaf {first}), so it cannot prove its "
        f"tree extends that checkpoint: export every instance, or verify the ledger itself "
        f"with `histaudit verify --since-checkpoint FILE --db URL`")


def entry_row(e: Mapping[str, Any], n: int) -> rec.StoredEntry:
    try:
        leaf, seq, instance = e["leaf"], e["seq"], e["instance"]
        body = unb64(e.get("body"), "body")
        sig = unb64(e.get("sig"), "signature")
    except (KeyError, FormatError) as exc:
        raise InputError(f"bundle entries.jsonl line {n}: {exc}") from None
    if type(leaf) is not int or type(seq) is not int or not isinstance(instance, str):
        raise InputError(f"bundle entries.jsonl line {n}: leaf, seq or instance has the "
                         f"wrong type")
    return rec.StoredEntry(leaf, instance, seq, rec.sha256_hex(body), body, sig)


def _body_int(body: bytes, member: str) -> int | None:
    """The integer ``member`` (``leaf``, ``seq``) a body claims, or None when it has none
    (verify_chain reports that)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = doc.get(member) if isinstance(doc, dict) else None
    return value if type(value) is int else None


def _bundle_keys(data: bytes) -> dict[str, PublicKey]:
    doc = _json(data, "bundle keys.json")
    items = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise InputError("bundle keys.json has no key list")
    try:
        keys = [PublicKey.from_json(k, source=f"bundle keys.json key {i}")
                for i, k in enumerate(items)]
    except KeyMaterialError as exc:
        raise InputError(str(exc)) from None
    return {k.kid: k for k in keys}
