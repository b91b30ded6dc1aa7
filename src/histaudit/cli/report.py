"""``histaudit report``: the period report an auditor reads (HTML and JSON;
:mod:`histaudit.bundle.compliance`)."""

from __future__ import annotations

import click

from . import render
from .options import EXIT_CLEAN, EXIT_FINDINGS, TIMESTAMP, db_option, trust_option, trust_store


@click.command("report")
@click.option("--since", required=True, type=TIMESTAMP, help="Start of the period.")
@click.option("--until", required=True, type=TIMESTAMP, help="End of the period.")
@click.option("--out", "out_dir", required=True, metavar="DIR",
              help="Directory for report.json and report.html (created; files in it are "
                   "not overwritten).")
@click.option("--retention-policy", "retention_file", metavar="FILE",
              help="Say which instances its holds cover (ids exact, \"glob:PATTERN\" "
                   "globs) and which hold ids match none.")
@click.option("--witness-policy", "witness_file", metavar="FILE",
              help="Judge the checkpoints' cosignatures by this policy's quorum.")
@db_option
@trust_option
def report(since: str, until: str, out_dir: str, retention_file: str | None,
           witness_file: str | None, db: str | None, trust: str | None) -> int:
    """Write report.json and report.html: what the ledger recorded, kept, erased, held,
    verified (every chain, --full) and had witnessed in the period. Exit 1 when a chain
    fails verification, as `verify --all` does (the report says which, rows that do not
    parse included)."""
    from pathlib import Path

    import orjson

    from histaudit.bundle.compliance import build, render_html
    from histaudit.errors import InputError, UsageError
    from histaudit.ledger.keys import parse_time
    from histaudit.ledger.retention import read_policy as read_retention
    from histaudit.witness.policy import read_policy as read_witnesses

    from .ledger import open_ledger

    start, end = parse_time(since), parse_time(until)
    if start > end:
        raise UsageError(f"--since {since} is after --until {until}")
    keys = trust_store(trust)
    retention = read_retention(retention_file) if retention_file else None
    witnesses = read_witnesses(witness_file) if witness_file else None
    out = Path(out_dir)
    files = {"report.json": out / "report.json", "report.html": out / "report.html"}
    for path in files.values():
        if path.exists():
            raise InputError(f"{path} already exists; refusing to overwrite a report")
    with open_ledger(db) as ledger:
        doc = build(ledger, since=start, until=end, trust=keys, retention=retention,
                    witnesses=witnesses)
    try:
        out.mkdir(parents=True, exist_ok=True)
        files["report.json"].write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        files["report.html"].write_text(render_html(doc), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the report in {out}: {exc.strerror or exc}") from None
    t = doc["totals"]
    click.echo(f"{t['instances']} instance(s), {t['entries']} entries in the period: "
               f"{t['instances_verified']} verified, {t['instances_failing']} failing; "
               f"{t['payloads_erased']} payload(s) erased, {t['instances_held']} on hold; "
               f"report in {out}")
    for idle in doc["unmatched_holds"]:
        click.echo(f"hold {idle['hold']} ({render.clip(idle['reason'], 120)}) matches no "
                   f"instance: {', '.join(render.clip(p, 80) for p in idle['instances'])}")
    if doc["ledger_findings"]:
        click.echo(f"the ledger as a whole fails: {', '.join(doc['ledger_findings'])}")
    return EXIT_FINDINGS if t["instances_failing"] or doc["ledger_findings"] else EXIT_CLEAN
