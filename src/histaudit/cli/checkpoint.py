"""``histaudit checkpoint``: sign one (the group's own action), or ``verify`` one kept.

``checkpoint`` is a group invoked without a subcommand, so ``histaudit checkpoint [--db]
[--key] [--out]`` still writes a checkpoint as it always did, while ``histaudit checkpoint
verify NOTE --trust PATH`` reads one offline (no database, no SQLAlchemy). The writing
options belong to the group and are refused before ``verify``, where they would mean
nothing.
"""

from __future__ import annotations

import base64
import sys

import click
from click.core import ParameterSource

from histaudit.errors import UsageError
from histaudit.ledger.checkpoint import parse_note, verifier_key
from histaudit.ledger.keys import signer_from_env

from . import render
from .options import EXIT_CLEAN, db_option, key_option, read_file, trust_option, trust_store

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
            raise UsageError(f"{', '.join(given)}: for writing a checkpoint; `checkpoint "
                             f"{ctx.invoked_subcommand}` takes NOTE, --trust and --json")
        return None
    # The ledger side is imported here: `checkpoint verify` loads no database code.
    from histaudit.bundle.staging import StagedOutput
    from histaudit.ledger.chain import make_checkpoint

    from .ledger import _open

    signer = signer_from_env(key)
    # --out is checked, and the note written beside it, before the checkpoint is stored:
    # a bad path or a full disk leaves the ledger unchanged (docs/bundle.md §4).
    output = (StagedOutput(out_file, lambda cp: cp.note, what="checkpoint note",
                           directory=False) if out_file else None)
    with _open(db) as ledger:
        cp = make_checkpoint(ledger, signer, output=output)
    sys.stdout.write(cp.note.decode())
    return EXIT_CLEAN


@checkpoint.command("verify")
@click.argument("note", metavar="NOTE")
@trust_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def verify_note(note: str, trust: str | None, as_json: bool) -> int:
    """Verify a kept checkpoint NOTE offline and say what it proves.

    Exit 0 when a key in --trust signed the note's exact text; 1 when it reads but no
    trusted signature verifies; 2 when it does not read as a checkpoint note.
    """
    keys = trust_store(trust)
    cp = parse_note(read_file(note, "checkpoint"), keys, source=note)
    signer = keys.get(cp.kid)
    assert signer is not None  # parse_note returns the kid of a key it found in ``keys``
    doc = {"note": note, "ok": True, "origin": cp.origin, "size": cp.size,
           "root": base64.b64encode(cp.root).decode(), "root_hex": cp.root.hex(),
           "kid": cp.kid, "key_name": signer.name,
           "verifier_key": verifier_key(cp.origin, signer),
           # C2SP checkpoints carry no time, and histaudit adds no extension line for one.
           "timestamp": None}
    if as_json:
        render.emit_json(doc)
        return EXIT_CLEAN
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
    return EXIT_CLEAN
