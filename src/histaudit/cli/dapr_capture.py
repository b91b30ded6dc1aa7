"""``histaudit dapr-capture``: verify Dapr's own signed history of one instance and sign
what it was into the instance's ledger chain, before the engine purges it
(docs/dapr-signatures.md)."""

from __future__ import annotations

import click

from . import render
from .dapr_verify import _anchors, dapr_store_options
from .options import EXIT_CLEAN, EXIT_FINDINGS, db_option, key_option, run_settings


@click.command("dapr-capture")
@click.argument("instance_id")
@dapr_store_options
@db_option
@key_option
@click.option("--json", "as_json", is_flag=True, help="Print the signed record as JSON.")
def dapr_capture(instance_id: str, state_db: str, trust_anchors: str, app_id: str | None,
                 table: str, db: str | None, key: str | None, as_json: bool) -> int:
    """Verify INSTANCE_ID's Dapr history signatures and sign their sum (signatures,
    signed events and their digest, signers) into its ledger chain as
    dapr.history_captured, so the ledger still says what Dapr signed once Dapr has purged
    it; dapr-verify --db then checks the store against it. Exit 1, capturing nothing,
    when Dapr's history does not verify."""
    from histaudit.bundle.dapr_state import read_workflow_rows
    from histaudit.errors import InputError
    from histaudit.ledger import chain
    from histaudit.ledger.kinds import Kind
    from histaudit.ledger.signers import load_signer
    from histaudit.verify.dapr_crosscheck import capture_record
    from histaudit.verify.dapr_history import verify_dapr_history

    from .ledger import open_ledger

    anchors = _anchors(trust_anchors)
    signer = load_signer(key, run_settings())
    rows = read_workflow_rows(state_db, instance_id, app_id=app_id, table=table)
    history = verify_dapr_history(rows, anchors, app_id=app_id)
    if not history.ok:
        click.echo(f"{render.clip(instance_id)}: Dapr's history does not verify "
                   f"({', '.join(sorted({f.code for f in history.findings}))}): not captured; "
                   f"run dapr-verify for the details")
        return EXIT_FINDINGS
    record = capture_record(history, rows, app_id)
    with open_ledger(db) as ledger:
        if ledger.head(instance_id) is None:
            raise InputError(f"the ledger has no entries for instance {instance_id!r}: "
                             f"nothing to capture Dapr's history into")
        entry = chain.append(ledger, instance_id, Kind.DAPR_HISTORY_CAPTURED, record,
                             signer=signer)
    if as_json:
        render.emit_json({"instance": instance_id, "entry": entry.seq, **record})
    else:
        click.echo(f"captured {record['signed_events']} signed event(s), "
                   f"{record['signatures']} signature(s) of {render.clip(instance_id)} "
                   f"into entry {entry.seq}")
    return EXIT_CLEAN
