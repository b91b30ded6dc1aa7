"""``histaudit prove``: OpenTelemetry spans into a proof bundle (:mod:`histaudit.bundle.prove`)."""

from __future__ import annotations

import os

import click

from histaudit.errors import UsageError

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
)


@click.command("prove")
@click.option("--trace-id", "trace_id", metavar="HEX",
              help="The trace whose spans to prove (32 hex digits); read from --jaeger.")
@click.option("--span-id", "span_ids", multiple=True, metavar="HEX",
              help="Prove this span only (repeatable; default: every span of the trace "
                   "that names a histaudit entry).")
@click.option("--jaeger", metavar="URL",
              help="Jaeger query service to read the trace from (API v3, e.g. "
                   "http://localhost:16686); a redirect to another host is not followed.")
@click.option("--timeout", type=Seconds(0.1, 3600), default=30.0, show_default=True,
              metavar="SECONDS",
              help="With --jaeger: the most seconds to wait for the whole trace (connecting "
                   "and every byte of the answer, not each read).")
@click.option("--trace-file", "trace_file", metavar="FILE",
              help="Read spans from this OTLP JSON file instead (a SIEM's or a backend's "
                   "export).")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Bundle directory.")
@click.option("--witness-policy", "witness_policy", metavar="FILE",
              help="Carry only the stored witness cosignatures that verify under this "
                   "policy.")
@db_option
@key_option
@trust_option
def prove(trace_id: str | None, span_ids: tuple[str, ...], jaeger: str | None,
          timeout: float, trace_file: str | None, out_dir: str, witness_policy: str | None,
          db: str | None, key: str | None, trust: str | None) -> int:
    """Prove the ledger entries OpenTelemetry spans name: check each against the ledger
    and write a bundle (its instances whole, inclusion proofs, a signed checkpoint, and
    spans.json) that `histaudit verify --bundle` checks offline; exit 1 when a span names
    an entry the ledger does not hold as named (then nothing is written)."""
    from histaudit.bundle.prove import TRACE_MAX_BYTES, fetch_trace, proven_spans, read_spans
    from histaudit.bundle.prove import prove as prove_spans
    from histaudit.ledger.signers import load_signer
    from histaudit.witness.policy import read_policy

    from .ledger import open_ledger

    if (jaeger is None) == (trace_file is None):
        raise UsageError("give the trace with --jaeger URL --trace-id HEX, or --trace-file")
    if jaeger is not None:
        if trace_id is None:
            raise UsageError("--jaeger needs --trace-id")
        data, source = fetch_trace(jaeger, trace_id, timeout=timeout), f"trace {trace_id}"
    else:
        assert trace_file is not None
        data = read_file(trace_file, "trace file", TRACE_MAX_BYTES)
        source = f"trace file {os.path.basename(trace_file)}"
    spans = read_spans(data, source=source)
    if trace_id is not None:
        spans = [s for s in spans if s.trace_id == trace_id.lower()]
    chosen = proven_spans(spans, span_ids)
    witnesses = read_policy(witness_policy) if witness_policy is not None else None
    signer = load_signer(key, run_settings())
    keys = trust_store(trust)
    if signer.kid not in keys:
        raise UsageError(f"the signing key {signer.kid} is not in the trust store {trust}")
    with open_ledger(db) as ledger:
        result = prove_spans(ledger, chosen, out_dir, signer=signer, trust=keys,
                             witnesses=witnesses)
    for finding in result.findings:
        click.echo(f"{finding.severity} {finding.code}: {finding.message}")
    if result.export is None:
        click.echo(f"{len(result.findings)} of {len(chosen)} span(s) unproven; no bundle "
                   f"written")
        return EXIT_FINDINGS
    for s in result.spans:
        click.echo(f"span {s.span_id} {render.clip(s.name, 40)}: entry {s.seq} "
                   f"({s.kind}) of {render.clip(s.instance, 60)}, leaf {s.leaf}")
    click.echo(f"proved {len(result.spans)} span(s): {result.export.instances} instance(s), "
               f"{result.export.entries} entries under a signed checkpoint, "
               f"{result.export.bytes} bytes to {result.export.path}; check it with "
               f"`histaudit verify --bundle {out_dir}`")
    return EXIT_CLEAN
