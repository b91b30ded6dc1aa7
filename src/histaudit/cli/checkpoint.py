"""``histaudit checkpoint``: sign one (the group's own action), or ``verify`` one kept.

``checkpoint`` is a group invoked without a subcommand, so ``histaudit checkpoint [--db]
[--key] [--out]`` still writes a checkpoint as it always did, while ``histaudit checkpoint
verify NOTE --trust PATH`` reads one offline (no database, no SQLAlchemy). The writing
options belong to the group and are refused before a subcommand, where they would mean
nothing (``cosign`` takes its own). ``checkpoint cosign --witness-policy FILE`` writes a
checkpoint and has the policy's witnesses cosign it (C2SP tlog-witness).
"""

from __future__ import annotations

import base64
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from histaudit.errors import UsageError, VerificationError
from histaudit.ledger.checkpoint import parse_note, verifier_key
from histaudit.ledger.signers import load_signer
from histaudit.verify.findings import Finding
from histaudit.witness.policy import read_policy

from . import render
from .options import (
    EXIT_CLEAN,
    EXIT_FINDINGS,
    Seconds,
    db_option,
    key_option,
    read_file,
    run_settings,
    trust_option,
    trust_store,
    write_file,
)

if TYPE_CHECKING:
    from histaudit.witness.cosign import CosignResult

__all__ = ["checkpoint"]

_WRITE_OPTIONS = {"db": "--db", "key": "--key", "out_file": "--out"}


@click.group("checkpoint", invoke_without_command=True)
@db_option
@key_option
@click.option("--out", "out_file", metavar="FILE", help="Also write the note to FILE.")
@click.pass_context
def checkpoint(ctx: click.Context, db: str | None, key: str | None,
               out_file: str | None) -> int | None:
    """Sign and store a checkpoint of the whole ledger; print it (C2SP signed note).

    `checkpoint verify NOTE --trust PATH` checks a kept note offline instead.
    """
    if ctx.invoked_subcommand is not None:
        given = [flag for name, flag in _WRITE_OPTIONS.items()
                 if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
        if given:
            raise UsageError(f"{', '.join(given)}: give them after `checkpoint "
                             f"{ctx.invoked_subcommand}` (see its --help)")
        return None
    # The ledger side is imported here: `checkpoint verify` loads no database code.
    from histaudit.bundle.staging import StagedOutput
    from histaudit.ledger.chain import make_checkpoint

    from .ledger import open_ledger

    signer = load_signer(key, run_settings())
    # --out is checked, and the note written beside it, before the checkpoint is stored:
    # a bad path or a full disk leaves the ledger unchanged (docs/bundle.md §4).
    output = (StagedOutput(out_file, lambda cp: cp.note, what="checkpoint note",
                           directory=False) if out_file else None)
    with open_ledger(db) as ledger:
        cp = make_checkpoint(ledger, signer, output=output)
    sys.stdout.write(cp.note.decode())
    return EXIT_CLEAN


_POLICY_HELP = ("Witness policy file (C2SP tlog-policy lines: witness NAME VKEY [URL], "
                "group NAME N|any|all MEMBER..., quorum NAME|none; docs/bundle.md §4.4).")


@checkpoint.command("cosign")
@db_option
@key_option
@click.option("--witness-policy", "policy_file", metavar="FILE", required=True,
              envvar="HISTAUDIT_WITNESS_POLICY", help=_POLICY_HELP)
@click.option("--out", "out_file", metavar="FILE", help="Also write the cosigned note to FILE.")
@click.option("--timeout", type=Seconds(0.1, 300), default=10.0, show_default=True,
              metavar="S", help="Seconds to wait for each witness.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object: {ok, origin, size, root, root_hex, note, "
                   "witnesses: {name: {status, message, old_size}}, quorum}.")
def cosign_command(db: str | None, key: str | None, policy_file: str, out_file: str | None,
                   timeout: float, as_json: bool) -> int:
    """Sign a checkpoint and have the policy's witnesses cosign it; print the cosigned note.

    Each witness with a URL gets the checkpoint with a consistency proof from the size it
    last cosigned. Cosignatures are stored beside the checkpoint. Exit 0 when the quorum
    holds; 1 (one line naming each witness) when it does not, or when a witness has seen a
    tree this ledger does not extend (a rollback or fork); 2 for unusable input. With
    --json the document says the same, exit 1 included, and is printed either way.
    """
    from histaudit.witness.cosign import cosign

    from .ledger import open_ledger

    policy = read_policy(policy_file)
    if not any(w.url for w in policy.witnesses.values()):
        raise UsageError(f"witness policy {policy_file} gives no witness a URL to send "
                         f"checkpoints to (witness NAME VKEY URL)")
    signer = load_signer(key, run_settings())
    with open_ledger(db) as ledger:
        result = cosign(ledger, signer, policy, timeout=timeout)
    if result.ignored:
        click.echo(f"warning: {len(result.ignored)} stored cosignature row(s) of the "
                   f"checkpoint do not count and were left out, written by something other "
                   f"than histaudit: {'; '.join(result.ignored)}", err=True)
    if out_file and result.ok:
        write_file(out_file, result.note)
    if as_json:
        render.emit_json(_cosign_json(result))
        return EXIT_CLEAN if result.ok else EXIT_FINDINGS
    if not result.ok:
        raise VerificationError(result.summary())
    sys.stdout.write(result.note.decode())
    return EXIT_CLEAN


def _cosign_json(result: CosignResult) -> dict[str, Any]:
    """``checkpoint cosign --json`` (schemas/checkpoint-cosign.output.schema.json)."""
    cp, verdict = result.checkpoint, result.verdict
    return {"ok": result.ok, "origin": cp.origin, "size": cp.size,
            "root": base64.b64encode(cp.root).decode(), "root_hex": cp.root.hex(),
            "note": result.note.decode(),
            "witnesses": {o.witness: {"status": o.status, "message": o.message,
                                      "old_size": o.old_size} for o in result.outcomes},
            "quorum": {"required": verdict.required, "satisfied": verdict.satisfied,
                       "cosigned": dict(verdict.cosigned), "invalid": list(verdict.invalid)},
            "summary": None if result.ok else result.summary()}


@checkpoint.command("verify")
@click.argument("note", metavar="NOTE")
@trust_option
@click.option("--witness-policy", "policy_file", metavar="FILE", help=_POLICY_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify_note(note: str, trust: str | None, policy_file: str | None, as_json: bool) -> int:
    """Verify a kept checkpoint NOTE offline and say what it proves.

    Exit 0 when a key in --trust signed the note's exact text (and, with
    --witness-policy, its witness quorum cosigned it); 1 when it reads but no trusted
    signature verifies, or the policy's findings; 2 when it does not read as a note.
    """
    keys = trust_store(trust)
    data = read_file(note, "checkpoint")
    policy = read_policy(policy_file) if policy_file else None
    cp = parse_note(data, keys, source=note)
    signer = keys.get(cp.kid)
    assert signer is not None  # parse_note returns the kid of a key it found in ``keys``
    doc: dict[str, Any] = {"note": note, "ok": True, "origin": cp.origin, "size": cp.size,
           "root": base64.b64encode(cp.root).decode(), "root_hex": cp.root.hex(),
           "kid": cp.kid, "key_name": signer.name,
           "verifier_key": verifier_key(cp.origin, signer),
           # C2SP checkpoints carry no time, and histaudit adds no extension line for one.
           "timestamp": None}
    findings: tuple[Finding, ...] = ()
    if policy is not None:
        verdict = policy.judge(data)
        findings = verdict.findings(note)
        doc["ok"] = not findings
        doc["witnesses"] = {"required": verdict.required, "satisfied": verdict.satisfied,
                            "cosigned": dict(verdict.cosigned),
                            "findings": [f.to_json() for f in findings]}
    status = EXIT_FINDINGS if findings else EXIT_CLEAN
    if as_json:
        render.emit_json(doc)
        return status
    if findings:
        click.echo(f"checkpoint {render.clip(note)}: signed by trusted key {cp.kid}, but its "
                   f"witness cosignatures fail the policy:")
        for f in findings:
            click.echo(f"  {f.code:<24} {render.clip(f.message)}")
        return status
    name = f" ({render.clip(signer.name)})" if signer.name else ""
    click.echo(f"checkpoint {render.clip(note)}: OK, signed by trusted key {cp.kid}{name}\n"
               f"  origin        {render.clip(cp.origin)}\n"
               f"  tree size     {cp.size} leaves\n"
               f"  root          {doc['root']} (hex {doc['root_hex']})\n"
               f"  verifier key  {render.clip(doc['verifier_key'])}\n"
               f"  time          none (a checkpoint note carries no timestamp)\n"
               f"It proves: the key vouched that ledger {render.clip(cp.origin)} had "
               f"{cp.size} leaves (entries) whose RFC 9162 tree has this root. Keep it; "
               f"`histaudit verify --since-checkpoint` later proves the ledger (or a "
               f"bundle) only grew since.")
    if policy is not None:
        when = ", ".join(f"{n} at {_utc(t)}" for n, t in sorted(doc["witnesses"]["cosigned"]
                                                                 .items()))
        click.echo(f"  witnesses     quorum {render.clip(policy.describe())} holds: "
                   f"{render.clip(when or 'none needed')}")
    return EXIT_CLEAN


def _utc(timestamp: int) -> str:
    try:
        return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"UNIX time {timestamp}"
