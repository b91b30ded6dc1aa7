"""``histaudit dapr-verify``: check Dapr's own history signatures of one instance offline,
and with ``--db`` cross-check them with the instance's signed ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from histaudit.errors import InputError
from histaudit.verify.findings import Finding, Severity

from . import render
from .ledger import open_ledger
from .options import EXIT_CLEAN, EXIT_FINDINGS, read_file, trust_option, trust_store

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

    from histaudit.ledger.keys import TrustStore
    from histaudit.verify.dapr_crosscheck import DaprLedgerResult
    from histaudit.verify.dapr_history import DaprHistoryResult, DaprWorkflowRows
    from histaudit.verify.report import Report

F = TypeVar("F", bound=Callable[..., Any])
_ABSENT = "no workflow state for instance"  # read_workflow_rows' message for an absent one


def _anchors(path: str) -> list[Certificate]:
    from histaudit.verify.dapr_history import load_anchors

    return load_anchors(read_file(path, "trust anchors"), path)


def _failing(findings: list[Finding]) -> bool:
    return any(f.severity >= Severity.ERROR for f in findings)


_STORE_OPTIONS = (
    click.option("--state-db", "state_db", required=True, metavar="PATH|URL",
                 help="daprd's actor state store: the state.sqlite component's file, or a "
                      "postgresql:// URL of the state.postgresql (v1) component's database."),
    click.option("--trust-anchors", "trust_anchors", required=True, metavar="CA.pem",
                 help="PEM trust anchors the signing certificates must chain to (sentry's "
                      "ca.crt)."),
    click.option("--app-id", "app_id", metavar="ID",
                 help="The app whose workflow this is: the signer's SPIFFE ID must name it."),
    click.option("--table", default="state", show_default=True, metavar="NAME",
                 help="The state table (the component's tableName)."),
)


def dapr_store_options(fn: F) -> F:
    """The options that name a daprd actor state store and how to read it (dapr-verify,
    dapr-capture)."""
    for option in reversed(_STORE_OPTIONS):
        fn = option(fn)
    return fn


@click.command("dapr-verify")
@click.argument("instance_id")
@dapr_store_options
# Not db_option: $HISTAUDIT_DB must not silently turn the cross-check on.
@click.option("--db", "--ledger", "db", metavar="URL",
              help="Also verify INSTANCE_ID's chain in this histaudit ledger and cross-check "
                   "it with Dapr's signed history (needs --trust).")
@trust_option
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: {ok, instance, present, events, signatures, "
                   "covered_events, signed_events, signers, findings, ledger, crosscheck}.")
def dapr_verify(instance_id: str, state_db: str, trust_anchors: str, app_id: str | None,
                table: str, db: str | None, trust: str | None, as_json: bool) -> int:
    """Verify INSTANCE_ID's Dapr history signatures (WorkflowHistorySigning) offline."""
    from histaudit.bundle.dapr_state import read_workflow_rows
    from histaudit.verify.dapr_history import verify_dapr_history

    anchors = _anchors(trust_anchors)
    keys = trust_store(trust) if db else None
    rows: DaprWorkflowRows | None
    try:
        rows = read_workflow_rows(state_db, instance_id, app_id=app_id, table=table)
    except InputError as exc:
        if not db or _ABSENT not in str(exc):
            raise
        rows = None  # absent: with a ledger that holds it, a finding (below)
    report, cross = None, None
    if db:
        assert keys is not None
        report, both = _crosscheck(db, instance_id, keys, rows, anchors, app_id)
        result, cross = both.history, both.crosscheck
    else:
        assert rows is not None
        result = verify_dapr_history(rows, anchors, app_id=app_id)
    ok = ((result is None or result.ok) and (report is None or report.ok)
          and not _failing(cross or []))
    if as_json:
        render.emit_json(_json(instance_id, result, report, cross, ok))
    else:
        _text(instance_id, result, report, cross)
    return EXIT_CLEAN if ok else EXIT_FINDINGS


def _crosscheck(db: str, instance: str, keys: TrustStore, rows: DaprWorkflowRows | None,
                anchors: list[Certificate], app_id: str | None
                ) -> tuple[Report, DaprLedgerResult]:
    """The ledger's report of ``instance``, and Dapr's checks with the cross-check, from
    one snapshot of the ledger."""
    from histaudit.verify.dapr_crosscheck import verify_with_ledger
    from histaudit.verify.verifier import verify_chain

    with open_ledger(db, reading=True) as ledger, ledger.snapshot() as snap:
        # the rows are streamed twice from the one snapshot, never held: an instance of a
        # million entries costs what verify does
        head = snap.head(instance)
        report = verify_chain(instance, snap.entries(instance), head, trust=keys,
                              payload_lookup=snap.payload)
        if report.entries == 0 and head is None:
            if rows is None:
                raise InputError(f"no workflow state for instance {instance!r} in the state "
                                 f"store, and no entries for it in the ledger")
            raise InputError(f"the ledger has no entries for instance {instance!r}")
        return report, verify_with_ledger(instance, rows, anchors, snap.entries(instance),
                                          snap.payload, app_id=app_id)


def _json(instance: str, result: DaprHistoryResult | None, report: Report | None,
          cross: list[Finding] | None, ok: bool) -> dict[str, Any]:
    if result is not None:
        doc = result.to_json()
    else:
        doc = {"ok": True, "instance": instance, "events": 0, "signatures": 0,
               "covered_events": 0, "signers": [], "findings": []}
    doc["ok"] = ok
    doc["present"] = result is not None
    doc["signed_events"] = result.verified if result is not None else 0
    doc["ledger"] = None if report is None else report.to_json()
    doc["crosscheck"] = None if cross is None else {
        "ok": not _failing(cross), "findings": [f.to_json() for f in cross]}
    return doc


def _text(instance: str, result: DaprHistoryResult | None, report: Report | None,
          cross: list[Finding] | None) -> None:
    out = render.console()
    shown = render.clip(instance)
    if result is None:
        out.print(f"{shown}: no Dapr workflow state in the store")
    else:
        status = "ok" if result.ok else f"{len(result.findings)} finding(s)"
        out.print(f"{shown}: {status} — {result.signatures} signature(s) cover "
                  f"{result.covered} of {result.events} event(s); signed by "
                  f"{', '.join(render.clip(s) for s in result.signers) or 'nobody'}")
        for f in result.findings:
            where = "" if f.seq is None else f" (signature {f.seq})"
            out.print(f"  {f.severity}: {f.code}{where}: {render.escape(f.message)}")
    if report is not None and cross is not None:
        status = "ok" if report.ok else f"{len(report.findings)} finding(s)"
        signed = 0 if result is None else result.verified
        out.print(f"ledger: {status} — {report.entries} entries; cross-check with "
                  f"{signed} signed Dapr event(s): "
                  + ("ok" if not cross else f"{len(cross)} finding(s)"))
        for f in (*report.findings, *cross):
            where = "" if f.seq is None else f" (entry {f.seq})"
            out.print(f"  {f.severity}: {f.code}{where}: {render.escape(f.message)}")
