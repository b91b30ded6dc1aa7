"""Commands over a ledger: ``list``, ``redact``, ``export`` (``checkpoint`` and ``show``
have their own modules)."""

from __future__ import annotations

import enum
import os
from typing import TYPE_CHECKING, Any

import click

from histaudit.errors import FormatError, HistauditError, InputError, UsageError
from histaudit.ledger import records as rec
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.kinds import AFTERWORD_KINDS, WORKFLOW_STATE
from histaudit.ledger.signers import load_signer
from histaudit.verify.findings import Severity

from . import render
from .progress import Meter

if TYPE_CHECKING:
    from histaudit.ledger.store import Ledger, Snapshot

from .options import (
    EXIT_CLEAN,
    TIMESTAMP,
    db_option,
    key_option,
    read_file,
    run_settings,
    trust_option,
    trust_store,
)


def open_ledger(db: str | None, *, reading: bool = False) -> Ledger:
    """The ledger at ``db``; for a command that writes (not ``reading``), a write lock
    held by another process is said at once on stderr and waited for only as long as
    $HISTAUDIT_LOCK_WAIT says (docs/guide.md, "Using the commands")."""
    # Imported here: only commands that open a database load SQLAlchemy.
    from histaudit.config import LOCK_WAIT_ENV
    from histaudit.ledger.store import Ledger

    settings = run_settings()
    if reading:
        return Ledger.open(db, outage_wait=settings.store_outage_wait)
    wait = settings.lock_wait

    def waiting() -> None:
        click.echo(f"histaudit: waiting for the write lock held by another process (up to "
                   f"{wait:g} s, {LOCK_WAIT_ENV})", err=True)

    return Ledger.open(db, lock_wait=wait, on_lock_wait=waiting,
                       outage_wait=settings.store_outage_wait)


@click.command("list")
@db_option
@trust_option
@click.option("--json", "as_json", is_flag=True)
def list_(db: str | None, trust: str | None, as_json: bool) -> int:
    """Instances in the ledger: entries, last activity, workflow state, verification status."""
    from histaudit.verify.verifier import verify_in

    keys = TrustStore.load(trust) if trust else None
    rows: list[dict[str, Any]] = []
    with open_ledger(db, reading=True) as ledger, ledger.snapshot() as snap:
        for summary in snap.instances():
            last = _last_entry(snap, summary.instance)
            state = _state_entry(snap, last)
            status, counts = ListStatus.NOT_CHECKED, None
            if keys is not None:
                report = verify_in(snap, summary.instance, trust=keys)
                counts = {str(sev): sum(1 for f in report.findings if f.severity is sev)
                          for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO)}
                status = (ListStatus.FAILED if not report.ok else
                          ListStatus.FINDINGS if report.findings else ListStatus.OK)
            rows.append({"instance": summary.instance, "entries": summary.entries,
                         "last_ts": last.ts if last else None,
                         "last_kind": last.kind if last else None,
                         "workflow": WORKFLOW_STATE.get(state.kind, "not-ended") if state
                         else None, "status": str(status), "findings": counts})
    if as_json:
        render.emit_json(rows)
        return EXIT_CLEAN
    render.columns(("instance", "entries", "last activity", "last kind", "workflow", "status"),
                   ((render.clip(r["instance"]), str(r["entries"]),
                     render.clip(r["last_ts"] or "-"), render.clip(r["last_kind"] or "-"),
                     r["workflow"] or "-",
                     _status_text(ListStatus(r["status"]), r["findings"])) for r in rows))
    return EXIT_CLEAN


class ListStatus(enum.StrEnum):
    """An instance's status in ``list`` (its ``--json`` ``status``)."""

    OK = "ok"
    """Verified, no finding."""
    FINDINGS = "findings"
    """Verified, no error: warning or info findings only (a crash's re-execution …)."""
    FAILED = "failed"
    """At least one finding at error severity."""
    NOT_CHECKED = "not-checked"
    """Not verified: no ``--trust`` given."""


def _status_text(status: ListStatus, counts: dict[str, int] | None) -> str:
    """The table's words for a status: the counts the JSON keeps apart."""
    if status is ListStatus.NOT_CHECKED or counts is None:
        return "not checked (no --trust)"
    if status is ListStatus.FAILED:
        return f"FAILED ({counts['error']})"
    if status is ListStatus.FINDINGS:
        return f"ok, {counts['warning'] + counts['info']} warning/info"
    return "ok"


def _last_entry(snap: Snapshot, instance: str) -> rec.Entry | None:
    """The entry the instance's signed head names, if it is stored and parses.

    Found by what is signed — the head's entry hash — not by the unsigned seq or hash
    columns: the row at the head's leaf is taken only if its bytes hash to it, else the
    instance's rows are searched for bytes that do.
    """
    head = snap.head(instance)
    if head is None:
        return None
    try:
        signed = rec.parse_head(head.body)
    except HistauditError:
        return None
    row = snap.entry_at_leaf(signed.leaf)
    if row is None or rec.sha256_hex(row.body) != signed.hash:
        row = next((r for r in snap.entries(instance)
                    if rec.sha256_hex(r.body) == signed.hash), None)
    try:
        return None if row is None else rec.parse_entry(row.body)
    except HistauditError:
        return None


def _state_entry(snap: Snapshot, last: rec.Entry | None) -> rec.Entry | None:
    """The last entry that speaks of the workflow's state: ``last`` (the head's), or,
    past the records that do not (:data:`AFTERWORD_KINDS`: erasures, a captured Dapr
    history), the entry each names as its ``prev``, by hash."""
    entry = last
    while entry is not None and entry.kind in AFTERWORD_KINDS and entry.seq > 1:
        row = snap.entry_at(entry.instance, entry.seq - 1)
        if row is None or rec.sha256_hex(row.body) != entry.prev:
            return None  # the chain is broken there: verify says how
        try:
            entry = rec.parse_entry(row.body)
        except HistauditError:
            return None
    return entry


@click.command()
@click.argument("instance_id")
@click.option("--seq", type=click.IntRange(1, 2**63 - 1), required=True,
              help="Entry holding the payload.")
@click.option("--field", "field_", required=True, help="Payload field, e.g. input or output.")
@click.option("--reason", default="privacy request", show_default=True)
@db_option
@key_option
def redact(instance_id: str, seq: int, field_: str, reason: str, db: str | None,
           key: str | None) -> int:
    """Erase one stored payload; the chain keeps its salted commitment and still verifies."""
    from histaudit.ledger.chain import erase_payload

    signer = load_signer(key, run_settings())
    with open_ledger(db) as ledger:
        entry = _signed_entry(ledger, instance_id, seq)
        ref = entry.data.get(field_)
        if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
            raise InputError(f"entry {seq} of {rec.shown_id(instance_id)} has no committed "
                             f"payload {rec.shown_id(field_)}")
        erased, _ = erase_payload(ledger, instance_id, ref["c"], signer=signer,
                                  record={"entry": seq, "field": field_, "reason": reason})
    click.echo(f"erased {field_} of entry {seq}" if erased
               else f"{field_} of entry {seq} was already erased; erasure recorded")
    return EXIT_CLEAN


def _signed_entry(ledger: Ledger, instance: str, seq: int) -> rec.Entry:
    """The entry whose signed body says it is ``instance``'s entry ``seq``.

    The unsigned ``seq`` column only names the row to blame when none parses; two rows
    whose bodies both claim the position (a forked chain) are refused.
    """
    found: list[rec.Entry] = []
    broken: FormatError | None = None
    for row in ledger.entries(instance):
        try:
            entry = rec.parse_entry(row.body)
        except FormatError as exc:
            if row.seq == seq:
                broken = exc
            continue
        if entry.seq == seq and entry.instance == instance:
            found.append(entry)
    who = rec.shown_id(instance)
    if len(found) > 1:
        raise InputError(f"entry {seq} of {who} is stored {len(found)} times (a forked "
                         f"chain): run `histaudit verify` first")
    if found:
        return found[0]
    if broken is not None:
        raise InputError(f"entry {seq} of {who} is malformed: {broken}")
    raise InputError(f"instance {who} has no entry {seq}")


@click.command("export")
@click.argument("instance_ids", nargs=-1)
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Bundle directory.")
@click.option("--since", type=TIMESTAMP, help="Only instances with entries at or after.")
@click.option("--until", type=TIMESTAMP, help="Only instances with entries at or before.")
@click.option("--with-payloads", is_flag=True, help="Include kept (unerased) payloads.")
@db_option
@key_option
@trust_option
@click.option("--dapr-state", "dapr_state", metavar="PATH",
              help="Also include Dapr's signed workflow rows of the instances from this "
                   "daprd actor state store (docs/dapr-signatures.md; needs "
                   "--trust-anchors).")
@click.option("--trust-anchors", "trust_anchors", metavar="CA.pem",
              help="With --dapr-state: the PEM trust anchors of Dapr's signatures "
                   "(sentry's ca.crt), carried in the bundle.")
@click.option("--dapr-app-id", "dapr_app_id", metavar="ID",
              help="With --dapr-state: the app whose rows to read; its SPIFFE ID must sign.")
@click.option("--dapr-table", "dapr_table", default="state", show_default=True,
              metavar="NAME", help="With --dapr-state: the state table (tableName).")
@click.option("--witness-policy", "witness_policy", metavar="FILE",
              help="Carry only the stored witness cosignatures that verify under this "
                   "policy (without it: every one of a cosignature's shape).")
@click.option("--format", "fmt", type=click.Choice(["bundle", "scitt"]), default="bundle",
              metavar="bundle|scitt", show_default=True,
              help="scitt: the bundle plus scitt/, every entry as a SCITT signed statement "
                   "(COSE_Sign1) with its COSE receipt against the checkpoint, and an Agent "
                   "Action Capsule per guarded call (docs/scitt.md).")
def export(instance_ids: tuple[str, ...], out_dir: str, since: str | None, until: str | None,
           with_payloads: bool, db: str | None, key: str | None, trust: str | None,
           dapr_state: str | None = None, trust_anchors: str | None = None,
           dapr_app_id: str | None = None, dapr_table: str = "state",
           witness_policy: str | None = None, fmt: str = "bundle") -> int:
    """Write a self-contained signed bundle of INSTANCE_IDS (default: all) for auditors."""
    from histaudit.bundle.export import DaprSource
    from histaudit.bundle.export import export as write_bundle
    from histaudit.witness.policy import read_policy

    dapr = None
    if dapr_state is None:
        if trust_anchors or dapr_app_id:
            raise UsageError("--trust-anchors and --dapr-app-id go with --dapr-state")
    elif not trust_anchors:
        raise UsageError("--dapr-state needs --trust-anchors CA.pem")
    else:
        dapr = DaprSource(dapr_state, read_file(trust_anchors, "trust anchors"),
                          app_id=dapr_app_id, table=dapr_table)

    witnesses = read_policy(witness_policy) if witness_policy is not None else None
    signer = load_signer(key, run_settings())
    keys = trust_store(trust)
    if signer.kid not in keys:
        raise UsageError(f"the signing key {signer.kid} is not in the trust store {trust}")
    shown = render.clip(os.path.basename(out_dir.rstrip("/")), 40)
    with open_ledger(db) as ledger, Meter(f"exporting to {shown}") as meter:
        result = write_bundle(ledger, instance_ids, out_dir, signer=signer, trust=keys,
                              since=since, until=until, with_payloads=with_payloads,
                              progress=meter.callback, dapr=dapr, witnesses=witnesses,
                              scitt=fmt == "scitt")
    click.echo(f"exported {result.instances} instance(s), {result.entries} entries, "
               f"{result.bytes} bytes to {result.path}")
    if result.cosignatures_ignored:
        click.echo(f"warning: {len(result.cosignatures_ignored)} stored cosignature row(s) "
                   f"of the checkpoint left out, written by something other than histaudit: "
                   f"{'; '.join(result.cosignatures_ignored)}", err=True)
    return EXIT_CLEAN
