"""``histaudit retention``: erase stored payloads past their policy's term, never one on
hold (:mod:`histaudit.ledger.retention`)."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from . import render
from .options import EXIT_CLEAN, TIMESTAMP, db_option, key_option, run_settings


@click.group()
def retention() -> None:
    """Erase stored payloads past their retention term (never one on hold)."""


@retention.command("apply")
@click.option("--policy", "policy_file", required=True, metavar="FILE",
              help="Retention policy (JSON: payload rules by kind and workflow, holds). A "
                   "hold names instance ids exactly; \"glob:PATTERN\" globs.")
@click.option("--now", type=TIMESTAMP, help="Judge terms as of this time (default: now).")
@click.option("--dry-run", is_flag=True, help="Say what would be erased; erase nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@db_option
@key_option
def apply_command(policy_file: str, now: str | None, dry_run: bool, as_json: bool,
                  db: str | None, key: str | None) -> int:
    """Erase every stored payload past its term that no hold covers, through the signed
    erasure (the chain still verifies); idempotent, and a run cut short is finished by
    running it again. A hold's instances are exact ids (`case[7]` holds that instance
    only); a pattern globs only with the prefix `glob:` (`glob:claim-2026-*`). A hold id
    or pattern that matches no instance is named."""
    from histaudit.ledger.retention import apply, check_now, read_policy
    from histaudit.ledger.signers import load_signer

    from .ledger import open_ledger

    policy = read_policy(policy_file)
    when = check_now(now) or datetime.now(UTC)
    signer = None if dry_run else load_signer(key, run_settings())
    with open_ledger(db) as ledger:
        tally = apply(ledger, policy, signer=signer, now=when, dry_run=dry_run)
    if as_json:
        render.emit_json({"policy": policy.digest, "now": when.isoformat(),
                          "dry_run": dry_run, **tally.to_json()})
        return EXIT_CLEAN
    c = tally.counts
    verb = "would erase" if dry_run else "erased"
    click.echo(f"policy {policy.digest}: {verb} {c['erased']} payload(s); already erased "
               f"{c['already-erased']}; kept {c['kept']} (within their term or under no "
               f"rule); held {c['held']}")
    for instance, reason in sorted(tally.held.items()):
        click.echo(f"  on hold: {render.clip(instance, 80)} ({render.clip(reason, 120)})")
    for idle in tally.unmatched_holds:
        click.echo(f"  hold {idle['hold']} ({render.clip(idle['reason'], 120)}) matches no "
                   f"instance: {', '.join(render.clip(p, 80) for p in idle['instances'])}")
    return EXIT_CLEAN
