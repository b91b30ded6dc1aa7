"""``histaudit dapr-verify``: check Dapr's own history signatures of one instance offline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from histaudit.errors import InputError

from . import render
from .options import EXIT_CLEAN, EXIT_FINDINGS, read_file

if TYPE_CHECKING:
    from cryptography.x509 import Certificate


def _anchors(path: str) -> list[Certificate]:
    from cryptography import x509

    data = read_file(path, "trust anchors")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise InputError(f"trust anchors {path}: no PEM certificate in the file") from None
    return list(certs)


@click.command("dapr-verify")
@click.argument("instance_id")
@click.option("--state-db", "state_db", required=True, metavar="PATH",
              help="daprd's SQLite actor state store (the state.sqlite component's file).")
@click.option("--trust-anchors", "trust_anchors", required=True, metavar="CA.pem",
              help="PEM trust anchors the signing certificates must chain to (sentry's "
                   "ca.crt).")
@click.option("--app-id", "app_id", metavar="ID",
              help="The app whose workflow this is: the signer's SPIFFE ID must name it.")
@click.option("--table", default="state", show_default=True, metavar="NAME",
              help="The state table (the component's tableName).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: {ok, instance, events, signatures, "
                   "covered_events, signers, findings}.")
def dapr_verify(instance_id: str, state_db: str, trust_anchors: str, app_id: str | None,
                table: str, as_json: bool) -> int:
    """Verify INSTANCE_ID's Dapr history signatures (WorkflowHistorySigning) offline."""
    from histaudit.bundle.dapr_state import read_workflow_rows
    from histaudit.verify.dapr_history import verify_dapr_history

    anchors = _anchors(trust_anchors)
    rows = read_workflow_rows(state_db, instance_id, app_id=app_id, table=table)
    result = verify_dapr_history(rows, anchors, app_id=app_id)
    if as_json:
        render.emit_json(result.to_json())
    else:
        out = render.console()
        status = "ok" if result.ok else f"{len(result.findings)} finding(s)"
        out.print(f"{render.clip(instance_id)}: {status} — {result.signatures} signature(s) "
                  f"cover {result.covered} of {result.events} event(s); signed by "
                  f"{', '.join(render.clip(s) for s in result.signers) or 'nobody'}")
        for f in result.findings:
            where = "" if f.seq is None else f" (signature {f.seq})"
            out.print(f"  {f.severity}: {f.code}{where}: {render.escape(f.message)}")
    return EXIT_CLEAN if result.ok else EXIT_FINDINGS
