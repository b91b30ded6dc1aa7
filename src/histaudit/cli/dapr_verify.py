"""``histaudit dapr-verify``: check Dapr's own history signatures of one instance offline,
and with ``--db`` cross-check them with the instance's signed ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from histaudit.errors import InputError
from histaudit.ledger.keys import TrustStore
from histaudit.verify.findings import Finding, Severity

from . import render
from .ledger import open_ledger
from .options import EXIT_CLEAN, EXIT_FINDINGS, read_file, trust_option, trust_store

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

    from histaudit.verification import DaprVerdict
    from histaudit.verify.dapr_history import DaprWorkflowRows

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
                   "covered_events, attestations, signed_events, signers, findings, "
                   "ledger, crosscheck}.")
def dapr_verify(instance_id: str, state_db: str, trust_anchors: str, app_id: str | None,
                table: str, db: str | None, trust: str | None, as_json: bool) -> int:
    """Verify INSTANCE_ID's Dapr history signatures (WorkflowHistorySigning) offline."""
    from histaudit.bundle.dapr_state import read_workflow_rows
    from histaudit.verification import Verifier

    anchors = _anchors(trust_anchors)
    keys = trust_store(trust) if db else None
    rows: DaprWorkflowRows | None
    try:
        rows = read_workflow_rows(state_db, instance_id, app_id=app_id, table=table)
    except InputError as exc:
        if not db or _ABSENT not in str(exc):
            raise
        rows = None  # absent: with a ledger that holds it, a finding (below)
    if db:
        assert keys is not None
        with open_ledger(db, reading=True) as ledger:
            verdict = Verifier(ledger, keys).dapr(instance_id, rows, anchors, app_id=app_id)
    else:
        verdict = Verifier(None, TrustStore([])).dapr(instance_id, rows, anchors,
                                                      app_id=app_id)
    ok = verdict.ok()
    if as_json:
        render.emit_json(_json(verdict, ok))
    else:
        _text(verdict)
    return EXIT_CLEAN if ok else EXIT_FINDINGS


def _json(verdict: DaprVerdict, ok: bool) -> dict[str, Any]:
    instance, result, report = verdict.instance, verdict.history, verdict.ledger
    cross = None if verdict.crosscheck is None else list(verdict.crosscheck)
    if result is not None:
        doc = result.to_json()
    else:
        doc = {"ok": True, "instance": instance, "events": 0, "signatures": 0,
               "covered_events": 0, "attestations": 0, "signers": [], "findings": []}
    doc["ok"] = ok
    doc["present"] = result is not None
    doc["signed_events"] = result.verified if result is not None else 0
    doc["ledger"] = None if report is None else report.to_json()
    doc["crosscheck"] = None if cross is None else {
        "ok": not _failing(cross), "findings": [f.to_json() for f in cross]}
    return doc


def _text(verdict: DaprVerdict) -> None:
    instance, result, report = verdict.instance, verdict.history, verdict.ledger
    cross = None if verdict.crosscheck is None else list(verdict.crosscheck)
    out = render.console()
    shown = render.clip(instance)
    if result is None:
        out.print(f"{shown}: no Dapr workflow state in the store")
    else:
        status = "ok" if result.ok else f"{len(result.findings)} finding(s)"
        out.print(f"{shown}: {status} — {result.signatures} signature(s) cover "
                  f"{result.covered} of {result.events} event(s); signed by "
                  f"{', '.join(render.clip(s) for s in result.signers) or 'nobody'}; "
                  f"{result.attestations} completion attestation(s) checked")
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
