"""Compliance export: a self-contained bundle an auditor verifies offline.

A bundle is a directory (zip it to send it)::

    manifest.dsse.json   the manifest, in a DSSE envelope signed by the exporting key
    checkpoint.note      a signed checkpoint of the whole ledger (C2SP tlog-checkpoint)
    entries.jsonl        the exact signed entries, each with its RFC 9162 inclusion proof
    heads.jsonl          the signed head of every exported instance
    keys.json            the public keys, with their validity windows
    payloads.jsonl       kept payloads (salt + bytes), only with --with-payloads
    report.html          a human report, one file, no network
    dapr-rows.jsonl      Dapr's signed workflow rows, exact bytes, only with a DaprSource
    dapr-anchors.pem     the trust anchors of those rows' signatures (bundle/dapr_rows.py)

Instances are exported whole (seq 1 to the signed head): only a whole chain can prove
that nothing is missing. ``--since``/``--until`` choose which instances, by the times of
their entries. docs/bundle.md is the spec; verification needs no database and no Dapr.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from histaudit.errors import FormatError, InputError, UsageError
from histaudit.ledger import merkle, timeline
from histaudit.ledger import records as rec
from histaudit.ledger.chain import make_checkpoint
from histaudit.ledger.checkpoint import Checkpoint, with_lines
from histaudit.ledger.keys import Signer, TrustStore, parse_time
from histaudit.ledger.store import Ledger
from histaudit.verify.progress import Progress, Tally
from histaudit.verify.report import Report
from histaudit.verify.verifier import verify_chain
from histaudit.witness.policy import WitnessPolicy, counted_cosignatures

from .envelope import BUNDLE_VERSION, MANIFEST_TYPE, b64, pae
from .staging import StagedOutput

__all__ = ["DaprSource", "ExportResult", "export"]


@dataclass(frozen=True)
class DaprSource:
    """Where ``export`` reads Dapr's signed rows of the exported instances: daprd's
    actor state store, its table, the app (None: the one app holding each instance),
    and the trust anchors' PEM bytes, which go into the bundle as they are."""

    state: str
    anchors: bytes
    app_id: str | None = None
    table: str = "state"


# --- export ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ExportResult:
    path: Path
    instances: int
    entries: int
    bytes: int
    cosignatures_ignored: tuple[str, ...] = ()
    """Stored cosignature rows of the checkpoint left out, and why (not histaudit's)."""


def export(ledger: Ledger, instances: Iterable[str], out: str | os.PathLike[str], *,
           signer: Signer, trust: TrustStore, since: str | None = None,
           until: str | None = None, with_payloads: bool = False,
           html: bool = True, progress: Progress | None = None,
           dapr: DaprSource | None = None,
           witnesses: WitnessPolicy | None = None,
           files: Mapping[str, bytes] | None = None, scitt: bool = False) -> ExportResult:
    """Write a bundle of ``instances`` (all instances when empty) to directory ``out``.

    The checkpoint note carries the stored witness cosignatures of its size that count
    (:func:`~histaudit.witness.policy.counted_cosignatures`): those that verify under the
    ``witnesses`` policy, or with none every one of a cosignature's shape. ``files`` are
    more files for the bundle (``prove``'s spans.json), listed and hashed in the manifest.
    ``scitt`` adds the ``scitt/`` files (:mod:`.scitt`): every exported entry as a SCITT
    signed statement with its COSE receipt, and a Capsule per guarded call.

    ``progress(done, total)`` is told how far the bundle is: the ledger's leaves hashed
    for the inclusion proofs, then the instances' entries written.

    Nothing is stored unless the bundle is written: the output directory is checked
    first, the files are written beside it and moved into place inside the transaction
    that stores the export's checkpoint (:class:`StagedOutput`); on any failure there is
    no new checkpoint row and no partial bundle.
    """
    wanted = list(instances) or ledger.instance_ids()
    chosen = [i for i in wanted if _in_window(ledger, i, since, until)]
    if not chosen:
        raise UsageError("no instance has entries in the chosen time window")
    # Heads are read before the checkpoint is signed: the entry a head names was committed
    # before the head could be read, so it lies below the checkpoint. Entries appended
    # meanwhile stay out of this bundle; a head read later could name one of them, and
    # the bundle would then look cut (tail-truncated) without anything being wrong.
    heads = {instance: ledger.head(instance) for instance in chosen}
    for instance, head in heads.items():
        if head is None:
            raise InputError(f"instance {rec.shown_id(instance)} has no signed head or no "
                             f"entries")
    counts: dict[str, int] = {}
    ignored: list[str] = []

    def cosigned(cp: Checkpoint) -> bytes:
        # Witness cosignatures stored for this size go with the note (docs/bundle.md
        # §4.4): `checkpoint cosign` just before an export, with no append between, gives
        # them. Only rows that count do: a malformed row written by something else would
        # make a note no verifier reads.
        counted = counted_cosignatures(((w, kh, line) for size, w, kh, line
                                        in ledger.cosignatures() if size == cp.size),
                                       cp.note, witnesses)
        ignored.extend(counted.ignored)
        return with_lines(cp.note, list(counted.lines))

    # Dapr's rows are read before the checkpoint, and outside its transaction: a bad
    # store is refused before anything is written.
    extra = {**(files or {}), **(_dapr_files(dapr, chosen) if dapr is not None else {})}
    staged = StagedOutput(out, lambda cp: _bundle_files(ledger, chosen, heads, cp, signer,
                                                        trust, since, until, with_payloads,
                                                        html, counts, progress, extra,
                                                        cosigned, scitt),
                          what="bundle", directory=True)
    make_checkpoint(ledger, signer, output=staged)
    return ExportResult(Path(out), len(chosen), counts["entries"], staged.written,
                        tuple(ignored))


def _bundle_files(ledger: Ledger, chosen: list[str], heads: Mapping[str, rec.StoredHead | None],
                  cp: Checkpoint, signer: Signer, trust: TrustStore, since: str | None,
                  until: str | None, with_payloads: bool, html: bool,
                  counts: dict[str, int], progress: Progress | None,
                  extra: Mapping[str, bytes],
                  cosigned: Callable[[Checkpoint], bytes],
                  scitt: bool = False) -> dict[str, bytes]:
    """Every file of the bundle, the manifest last, for the signed checkpoint ``cp``;
    ``extra`` (Dapr's rows, prove's spans) is listed and hashed in the manifest like the others;
    ``cosigned(cp)`` is the note with its cosignatures."""
    tally = Tally(progress)
    if progress is not None:
        wanted = set(chosen)
        tally.total = cp.size + sum(s.entries for s in ledger.instances()
                                    if s.instance in wanted)
        tally.tell()
    tree = merkle.Tree([merkle.leaf_hash(body)
                        for _, body in tally.count(ledger.leaves(below=cp.size))])
    files: dict[str, bytes] = {"checkpoint.note": cosigned(cp), **extra}
    entry_lines, head_lines, payload_lines = [], [], []
    summaries, kids = [], {signer.kid}
    reports: list[Report] = []
    exported: dict[str, list[rec.StoredEntry]] = {}
    timelines: dict[str, tuple[timeline.TimelineEntry, ...]] = {}
    for instance in chosen:
        head = heads[instance]
        upto = _head_of(instance, head).leaf if head is not None else -1
        rows = [_exportable(r, cp.size) for r in ledger.entries(instance)
                if r.leaf < cp.size and r.leaf <= upto]
        if head is None or not rows:
            raise InputError(f"instance {rec.shown_id(instance)} has no signed head or no "
                             f"entries")
        exported[instance] = rows
        for r in tally.count(rows):
            proof = tree.inclusion_proof(r.leaf, cp.size)
            entry_lines.append(orjson.dumps({
                "leaf": r.leaf, "instance": r.instance, "seq": r.seq, "body": b64(r.body),
                "sig": b64(r.sig), "inclusion": [b64(p) for p in proof]}))
            entry = _entry_of(r)
            kids.add(entry.kid)
            if with_payloads:
                payload_lines.extend(_payload_lines(ledger, entry))
        if html:  # the report's view: every entry, with its payload values if exported
            timelines[instance] = timeline.build(
                instance, rows, timeline.EntryFilter(),
                payloads=ledger.payload if with_payloads else None).entries
        kids.add(_head_of(instance, head).kid)
        head_lines.append(orjson.dumps({"instance": instance, "body": b64(head.body),
                                        "sig": b64(head.sig)}))
        summaries.append({"instance": instance, "entries": len(rows),
                          "last_seq": max(r.seq for r in rows)})
        reports.append(verify_chain(instance, iter(rows), head, trust=trust))
    tally.tell()
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
    if scitt:
        from .scitt import scitt_files
        files.update(scitt_files(exported, tree, cp, files["checkpoint.note"], signer,
                                 [k for k in trust if k.kid in kids],
                                 ledger.checkpoint_notes()))
    if html:
        from .html import render_html
        files["report.html"] = render_html(reports, origin=cp.origin, checkpoint=cp,
                                           entries=timelines, with_payloads=with_payloads)
    manifest = {
        "format": "histaudit-bundle", "version": BUNDLE_VERSION, "origin": cp.origin,
        "created": rec.now_ts(), "exporter": signer.kid,
        "checkpoint": {"size": cp.size, "root": b64(cp.root)},
        "window": {"since": since, "until": until}, "instances": summaries,
        "files": {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                  for name, data in sorted(files.items())},
    }
    payload = orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    envelope = {"payloadType": MANIFEST_TYPE, "payload": b64(payload),
                "signatures": [{"keyid": signer.kid,
                                "sig": b64(signer.sign(pae(MANIFEST_TYPE, payload)))}]}
    files["manifest.dsse.json"] = orjson.dumps(envelope, option=orjson.OPT_INDENT_2)
    counts["entries"] = len(entry_lines)
    return files


def _exportable(row: rec.StoredEntry, size: int) -> rec.StoredEntry:
    """``row``, unless an edited database gave it a column no bundle can carry: a leaf
    outside the checkpoint's tree (no inclusion proof exists) or a seq beyond 64 bits
    (SQLite keeps any number). Damage a bundle can carry (seq -1, a changed byte of a
    body that still parses) is carried, for the bundle's verifier to report."""
    if not 0 <= row.leaf < size:
        raise _damaged(row.instance, f"a row stored with leaf column {str(row.leaf)[:30]}")
    if not -1 << 63 <= row.seq < 1 << 63:
        raise _damaged(row.instance, f"a row stored with seq column {str(row.seq)[:30]}")
    return row


def _entry_of(row: rec.StoredEntry) -> rec.Entry:
    try:
        return rec.parse_entry(row.body)
    except FormatError as exc:
        raise _damaged(row.instance, f"an entry at leaf {row.leaf} that does not parse "
                                     f"({exc})") from None


def _head_of(instance: str, head: rec.StoredHead) -> rec.Head:
    try:
        return rec.parse_head(head.body)
    except FormatError as exc:
        raise _damaged(instance, f"a signed head that does not parse ({exc})") from None


def _damaged(instance: str, what: str) -> InputError:
    return InputError(f"instance {rec.shown_id(instance)} has {what}, which histaudit "
                      f"cannot export (the database was edited): run `histaudit verify` on it")


def _in_window(ledger: Ledger, instance: str, since: str | None, until: str | None) -> bool:
    if since is None and until is None:
        return True
    # Compared as instants, not strings: "…:00.5Z" sorts before "…:00Z" as text.
    try:
        lo, hi = (None if t is None else parse_time(t) for t in (since, until))
    except FormatError as exc:
        raise UsageError(f"time window: {exc}") from None
    for row in ledger.entries(instance):
        ts = parse_time(_entry_of(row).ts)
        if (lo is None or ts >= lo) and (hi is None or ts <= hi):
            return True
    return False


def _payload_lines(ledger: Ledger, entry: rec.Entry) -> list[bytes]:
    lines = []
    for ref in entry.data.values():
        if isinstance(ref, dict) and isinstance(ref.get("c"), str):
            kept = ledger.payload(ref["c"])
            if kept is not None:
                lines.append(orjson.dumps({"commitment": ref["c"], "salt": b64(kept[0]),
                                           "data": b64(kept[1])}))
    return lines




def _dapr_files(source: DaprSource, instances: list[str]) -> dict[str, bytes]:
    """``dapr-rows.jsonl`` and ``dapr-anchors.pem`` (bundle/dapr_rows.py): the rows of
    each instance as stored, None for one the store holds no state for (the verifier
    reports it as ``dapr-instance-missing``)."""
    from histaudit.verify.dapr_history import DaprWorkflowRows, load_anchors

    from .dapr_rows import DAPR_ANCHORS, DAPR_ROWS, encode_rows
    from .dapr_state import read_workflow_rows

    load_anchors(source.anchors, "given")  # refuse a file without a certificate now
    items: dict[str, DaprWorkflowRows | None] = {}
    for instance in instances:
        try:
            items[instance] = read_workflow_rows(source.state, instance, app_id=source.app_id,
                                                 table=source.table)
        except InputError as exc:
            if "no workflow state for instance" not in str(exc):
                raise
            items[instance] = None
    return {DAPR_ROWS: encode_rows(items, source.app_id), DAPR_ANCHORS: source.anchors}
