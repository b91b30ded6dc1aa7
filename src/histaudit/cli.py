"""The ``histaudit`` command: parse, call the library, render. No logic lives only here.

One error boundary (:func:`main`) turns every library error into one line on stderr and
exit status 2; findings exit 1; a clean result exits 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import __version__
from . import format as fmt
from .errors import FormatError, HistauditError, InputError, KeyProblem, UsageError
from .findings import Severity
from .keys import TrustStore, generate_keypair, parse_time, signer_from_env
from .store import Ledger
from .bundle import export, verify_bundle
from .checkpoint import ConsistencyReport, check_consistency, make_checkpoint, parse_note
from .verify import Report, verify_all, verify_instance

EXIT_CLEAN, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow",
                   Severity.INFO: "cyan"}
# Longest text one table cell shows; a huge stored value must not stall the terminal render.
CELL_CHARS = 500

db_option = click.option("--db", "db", metavar="URL", envvar="HISTAUDIT_DB",
                         help="Ledger URL (default $HISTAUDIT_DB or sqlite:///histaudit.db).")
trust_option = click.option("--trust", metavar="PATH", envvar="HISTAUDIT_TRUST",
                            help="Trust store: directory of *.pub.json or one JSON file "
                                 "(default $HISTAUDIT_TRUST).")
key_option = click.option("--key", metavar="PATH", envvar="HISTAUDIT_KEY",
                          help="Private signing key (default $HISTAUDIT_KEY).")


def _out() -> Console:
    return Console(highlight=False, soft_wrap=True, markup=False)


def _clip(text: object, limit: int = CELL_CHARS) -> str:
    """``text`` for a table cell, cut to ``limit`` characters with the full length noted."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def _emit_json(doc: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def _trust(path: str | None) -> TrustStore:
    if not path:
        raise UsageError("no trust store: pass --trust PATH or set HISTAUDIT_TRUST")
    return TrustStore.load(path)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="histaudit")
def cli() -> None:
    """Signed, hash-chained audit ledger for Dapr Workflow, and its verifier."""


# --- keys ------------------------------------------------------------------------------

@cli.group()
def keys() -> None:
    """Create signing keys."""


@keys.command("generate")
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Directory for the pair.")
@click.option("--name", default="histaudit", show_default=True, help="File name stem.")
@click.option("--not-before", metavar="RFC3339", help="Start of the key's validity window.")
@click.option("--not-after", metavar="RFC3339", help="End of the key's validity window.")
def keys_generate(out_dir: str, name: str, not_before: str | None,
                  not_after: str | None) -> None:
    """Write NAME.key (mode 0600) and NAME.pub.json; print the key id."""
    for label, value in (("--not-before", not_before), ("--not-after", not_after)):
        if value is not None:
            try:
                from .keys import parse_time
                parse_time(value)
            except ValueError as exc:
                raise UsageError(f"{label}: {exc}") from None
    priv, pub, signer = generate_keypair(out_dir, name=name, not_before=not_before,
                                         not_after=not_after)
    click.echo(f"key id {signer.kid}\nprivate {priv} (mode 0600, keep it secret)\npublic  {pub}")


# --- verify ----------------------------------------------------------------------------

@cli.command()
@click.argument("instance_id", required=False)
@click.option("--all", "all_", is_flag=True, help="Verify every instance in the ledger.")
@db_option
@trust_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (or a list).")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default="error",
              show_default=True, help="Lowest severity that makes the exit status 1.")
@click.option("--full", is_flag=True, help="Also check every entry signature and payload.")
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes for --full signature checks (default: all cores).")
@click.option("--bundle", "bundle_path", metavar="DIR",
              help="Verify an exported bundle offline instead of a database.")
@click.option("--since-checkpoint", "since", metavar="FILE",
              help="Also prove the ledger is an append-only extension of this signed "
                   "checkpoint (catches rollback, fork, deleted instances).")
@click.option("--engine", "engine_addr", metavar="HOST:PORT",
              help="Also cross-check INSTANCE_ID's activity completions against the "
                   "engine's own history (GetInstanceHistory).")
def verify(instance_id: str | None, all_: bool, db: str | None, trust: str | None,
           as_json: bool, fail_on: str, full: bool, workers: int | None,
           since: str | None, bundle_path: str | None, engine_addr: str | None) -> None:
    """Prove INSTANCE_ID's chain complete and untampered; report what happened across crashes."""
    if engine_addr and (not instance_id or all_ or bundle_path):
        raise UsageError("--engine cross-checks one instance: give INSTANCE_ID, without "
                         "--all or --bundle")
    if bundle_path:
        if instance_id or all_ or since:
            raise UsageError("--bundle verifies the whole bundle; drop INSTANCE_ID, --all and "
                             "--since-checkpoint")
        result = verify_bundle(bundle_path, _trust(trust))
        reports = result.all_reports()
        if as_json:
            _emit_json({"bundle": bundle_path, "ok": result.ok,
                        "checkpoint": {"size": result.checkpoint.size,
                                       "origin": result.checkpoint.origin},
                        "reports": [r.to_json() for r in reports]})
        else:
            _render_reports(reports)
        threshold = Severity.parse(fail_on)
        sys.exit(EXIT_FINDINGS if any(r.failing(threshold) for r in reports) else EXIT_CLEAN)
    if instance_id and all_:
        raise UsageError("give INSTANCE_ID or --all, not both")
    if not (instance_id or all_ or since):
        raise UsageError("give INSTANCE_ID, --all or --since-checkpoint FILE")
    trust_store = _trust(trust)
    threshold = Severity.parse(fail_on)
    old = parse_note(_read_file(since, "checkpoint"), trust_store, source=since) if since else None
    with Ledger.open(db) as ledger:
        consistency = check_consistency(ledger, old) if old is not None else None
        if consistency is not None and not (instance_id or all_):
            _finish_consistency(consistency, as_json, threshold)
        if all_:
            reports = list(verify_all(ledger, trust=trust_store, full=full, workers=workers))
        else:
            assert instance_id is not None
            reports = [verify_instance(ledger, instance_id, trust=trust_store, full=full,
                                       workers=workers)]
            if engine_addr:
                reports = [_crosscheck(ledger, reports[0], engine_addr)]
    if consistency is not None:
        reports.append(_consistency_report(consistency))
    if as_json:
        # --all is always a list (also of one instance, or none); one instance is an object.
        _emit_json([r.to_json() for r in reports] if all_ or len(reports) != 1
                   else reports[0].to_json())
    else:
        _render_reports(reports)
    sys.exit(EXIT_FINDINGS if any(r.failing(threshold) for r in reports) else EXIT_CLEAN)


def _crosscheck(ledger: Ledger, report: Report, engine_addr: str) -> Report:
    from .crosscheck import crosscheck, with_findings
    from .replay import fetch_history

    history = fetch_history(engine_addr, report.instance_id)
    return with_findings(report, crosscheck(ledger, report.instance_id, history))


def _consistency_report(c: ConsistencyReport) -> Report:
    return Report(instance_id="(ledger)", entries=c.size,
                  mode=f"consistency {c.old_size}->{c.size}", findings=c.findings)


def _finish_consistency(c: ConsistencyReport, as_json: bool, threshold: Severity) -> NoReturn:
    report = _consistency_report(c)
    if as_json:
        _emit_json(report.to_json())
    else:
        _render_reports([report])
    sys.exit(EXIT_FINDINGS if report.failing(threshold) else EXIT_CLEAN)


def _read_file(path: str, what: str, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise InputError(f"{what} {path} is larger than {limit} bytes")
    return data


# --- export ----------------------------------------------------------------------------

@cli.command("export")
@click.argument("instance_ids", nargs=-1)
@click.option("--out", "out_dir", required=True, metavar="DIR", help="Bundle directory.")
@click.option("--since", metavar="RFC3339", help="Only instances with entries at or after.")
@click.option("--until", metavar="RFC3339", help="Only instances with entries at or before.")
@click.option("--with-payloads", is_flag=True, help="Include kept (unerased) payloads.")
@db_option
@key_option
@trust_option
def export_cmd(instance_ids: tuple[str, ...], out_dir: str, since: str | None,
               until: str | None, with_payloads: bool, db: str | None, key: str | None,
               trust: str | None) -> None:
    """Write a self-contained signed bundle of INSTANCE_IDS (default: all) for auditors."""
    for label, value in (("--since", since), ("--until", until)):
        if value is not None:
            try:
                parse_time(value)
            except ValueError as exc:
                raise UsageError(f"{label}: {exc}") from None
    signer = signer_from_env(key)
    trust_store = _trust(trust)
    if signer.kid not in trust_store:
        raise UsageError(f"the signing key {signer.kid} is not in the trust store {trust}")
    with Ledger.open(db) as ledger:
        result = export(ledger, instance_ids, out_dir, signer=signer, trust=trust_store,
                        since=since, until=until, with_payloads=with_payloads)
    click.echo(f"exported {result.instances} instance(s), {result.entries} entries, "
               f"{result.bytes} bytes to {result.path}")


# --- checkpoint ------------------------------------------------------------------------

@cli.command("checkpoint")
@db_option
@key_option
@click.option("--out", "out_file", metavar="FILE", help="Also write the note to FILE.")
def checkpoint_cmd(db: str | None, key: str | None, out_file: str | None) -> None:
    """Sign and store a checkpoint of the whole ledger; print it (C2SP signed note)."""
    signer = signer_from_env(key)
    with Ledger.open(db) as ledger:
        cp = make_checkpoint(ledger, signer)
    if out_file:
        try:
            with open(out_file, "wb") as fh:
                fh.write(cp.note)
        except OSError as exc:
            raise InputError(f"cannot write {out_file}: {exc.strerror}") from None
    sys.stdout.write(cp.note.decode())


def _render_reports(reports: Iterable[Report]) -> None:
    console = _out()
    for report in reports:
        status = Text("OK", style="bold green") if report.ok else Text("FAILED", style="bold red")
        console.print(Text.assemble(f"instance {_clip(report.instance_id)}: "
                                    f"{report.entries} entries, "
                                    f"{report.mode} check — ", status))
        if not report.findings:
            continue
        table = Table(show_lines=False, header_style="bold")
        for col in ("seq", "severity", "code", "finding"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            table.add_row("-" if f.seq is None else str(f.seq),
                          Text(str(f.severity), style=_SEVERITY_STYLE[f.severity]),
                          f.code, _clip(f.message))
        console.print(table)


# --- list / show -----------------------------------------------------------------------

@cli.command("list")
@db_option
@trust_option
@click.option("--json", "as_json", is_flag=True)
def list_(db: str | None, trust: str | None, as_json: bool) -> None:
    """Instances in the ledger: entries, last activity, verification status."""
    trust_store = TrustStore.load(trust) if trust else None
    rows = []
    with Ledger.open(db) as ledger:
        for summary in ledger.instances():
            last = None
            for last in _last_entry(ledger, summary.instance):
                pass
            status = "not checked (no --trust)"
            if trust_store is not None:
                report = verify_instance(ledger, summary.instance, trust=trust_store)
                status = "ok" if report.ok else f"FAILED ({len(report.failing(Severity.ERROR))})"
                if report.ok and report.findings:
                    status = f"ok, {len(report.findings)} warning/info"
            rows.append({"instance": summary.instance, "entries": summary.entries,
                         "last_ts": last.ts if last else None,
                         "last_kind": last.kind if last else None, "status": status})
    if as_json:
        _emit_json(rows)
        return
    table = Table(header_style="bold")
    for col in ("instance", "entries", "last activity", "last kind", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(_clip(r["instance"]), str(r["entries"]), _clip(r["last_ts"] or "-"),
                      _clip(r["last_kind"] or "-"), r["status"])
    _out().print(table)


def _last_entry(ledger: Ledger, instance: str) -> list[fmt.Entry]:
    head = ledger.head(instance)
    if head is None:
        return []
    try:
        seq = fmt.parse_head(head.body).seq
    except HistauditError:
        return []
    row = ledger.entry_at(instance, seq)
    if row is None:
        return []
    try:
        return [fmt.parse_entry(row.body)]
    except HistauditError:
        return []


@cli.command()
@click.argument("instance_id")
@db_option
@click.option("--json", "as_json", is_flag=True)
def show(instance_id: str, db: str | None, as_json: bool) -> None:
    """INSTANCE_ID's entries as a readable timeline."""
    with Ledger.open(db) as ledger:
        rows = list(ledger.entries(instance_id))
    if not rows:
        raise InputError(f"instance {instance_id!r} has no entries in this ledger")
    items = []
    for row in rows:
        try:
            e = fmt.parse_entry(row.body)
            items.append({"seq": e.seq, "ts": e.ts, "kind": e.kind, "kid": e.kid,
                          "data": dict(e.data)})
        except HistauditError as exc:
            items.append({"seq": row.seq, "ts": None, "kind": "(malformed)", "kid": None,
                          "data": {"error": str(exc)}})
    if as_json:
        _emit_json({"instance_id": instance_id, "entries": items})
        return
    table = Table(title=f"instance {_clip(instance_id)}", header_style="bold")
    for col in ("seq", "time (UTC)", "kind", "details"):
        table.add_column(col, overflow="fold")
    for it in items:
        table.add_row(str(it["seq"]), _clip((it["ts"] or "-").replace("T", " ").rstrip("Z")),
                      _clip(it["kind"]), _clip(_details(it["data"])))
    _out().print(table)


def _details(data: dict[str, Any]) -> str:
    parts = []
    for key in sorted(data):
        value = data[key]
        if isinstance(value, dict) and "c" in value:
            value = f"⟨{str(value['c'])[:10]}… {value.get('n', '?')}B⟩"
        parts.append(f"{_clip(key, 100)}={_clip(value, 200)}")
    return " ".join(parts)


# --- redact ----------------------------------------------------------------------------

@cli.command()
@click.argument("instance_id")
@click.option("--seq", type=click.IntRange(1), required=True, help="Entry holding the payload.")
@click.option("--field", "field_", required=True, help="Payload field, e.g. input or output.")
@click.option("--reason", default="privacy request", show_default=True)
@db_option
@key_option
def redact(instance_id: str, seq: int, field_: str, reason: str, db: str | None,
           key: str | None) -> None:
    """Erase one stored payload; the chain keeps its salted commitment and still verifies."""
    signer = signer_from_env(key)
    with Ledger.open(db) as ledger:
        row = ledger.entry_at(instance_id, seq)
        if row is None:
            raise InputError(f"instance {instance_id!r} has no entry {seq}")
        try:
            entry = fmt.parse_entry(row.body)
        except FormatError as exc:
            raise InputError(f"entry {seq} of {instance_id!r} is malformed: {exc}") from None
        ref = entry.data.get(field_)
        if not (isinstance(ref, dict) and isinstance(ref.get("c"), str)):
            raise InputError(f"entry {seq} of {instance_id!r} has no committed payload "
                             f"{field_!r}")
        erased, _ = ledger.erase_payload(instance_id, ref["c"], signer=signer,
                                         record={"entry": seq, "field": field_,
                                                 "reason": reason})
    click.echo(f"erased {field_} of entry {seq}" if erased
               else f"{field_} of entry {seq} was already erased; erasure recorded")


# --- replay ----------------------------------------------------------------------------

@cli.command("replay")
@click.argument("instance_id")
@click.option("--workflow", "workflow_ref", required=True, metavar="MODULE:FUNCTION",
              help="The workflow code to replay (importable from the current directory, "
                   "or path/to/file.py:FUNCTION).")
@click.option("--engine", "engine_addr", metavar="HOST:PORT",
              help="Fetch the history from the engine (GetInstanceHistory).")
@click.option("--history", "history_file", metavar="FILE", help="Read a saved history file.")
@click.option("--save", "save_file", metavar="FILE", help="Also save the history to FILE.")
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True,
              help="Seconds to wait for the engine.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def replay_cmd(instance_id: str, workflow_ref: str, engine_addr: str | None,
               history_file: str | None, save_file: str | None, timeout: float,
               as_json: bool) -> None:
    """Replay INSTANCE_ID's recorded history against workflow code; exit 1 if it diverges."""
    import logging

    from . import replay as rp

    if bool(engine_addr) == bool(history_file):
        raise UsageError("give the history source: --engine HOST:PORT or --history FILE")
    logging.getLogger("WorkflowRuntime").setLevel(logging.CRITICAL)  # the SDK's chatter
    workflow = rp.load_workflow(workflow_ref)
    events = (rp.fetch_history(engine_addr, instance_id, timeout=timeout) if engine_addr
              else rp.load_history(str(history_file)))
    result = rp.replay(events, workflow, instance_id)
    if save_file:
        rp.save_history(events, save_file)
    if as_json:
        _emit_json(result.to_json())
    else:
        click.echo(result.explain())
    sys.exit(EXIT_CLEAN if result.ok else EXIT_FINDINGS)


# --- crashtest -------------------------------------------------------------------------

@cli.command("crashtest")
@click.argument("target", metavar="MODULE_OR_FILE:WORKFLOW")
@click.option("--input", "input_json", required=True, metavar="JSON",
              help="The workflow input, as JSON.")
@click.option("--app", metavar="MODULE", help="Module (or .py file) holding the "
              "WorkflowRuntime, when it is not the target's module.")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Points run at once, each with its own engine and workers.")
@click.option("--junit", "junit_file", metavar="FILE", help="Also write JUnit XML.")
@click.option("--json", "json_file", metavar="FILE", help="Also write the result as JSON.")
@click.option("--point", "points", multiple=True, metavar="P",
              help="Only this point (repeatable), e.g. after_post or after:fetch_source#2.")
@click.option("--engine-crash", is_flag=True, help="Crash the engine (not the app) at the "
              "points.")
@click.option("--no-engine-points", is_flag=True, help="App crashes only.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
              help="Seconds a run may take to crash, and then to complete.")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V",
              help="Environment for the workers (repeatable), e.g. IDEMPOTENT=1.")
def crashtest_cmd(target: str, input_json: str, app: str | None, jobs: int,
                  junit_file: str | None, json_file: str | None, points: tuple[str, ...],
                  engine_crash: bool, no_engine_points: bool, timeout: float,
                  env_pairs: tuple[str, ...]) -> None:
    """Crash the workflow at every crash point it reaches, recover, compare with a clean
    run. Exit 1 if any point diverged, got stuck, failed or has an error finding."""
    from . import crashtest as ct

    if engine_crash and no_engine_points:
        raise UsageError("--engine-crash and --no-engine-points exclude each other")
    inp = ct.parse_input(input_json)
    env = ct.parse_env(env_pairs)

    def progress(p: ct.PointResult, done: int, total: int) -> None:
        click.echo(f"[{done}/{total}] {p.point} ({p.kind}): {p.outcome} {p.wall:.1f}s",
                   err=True)

    result = ct.run_matrix(target, input=inp, app=app, jobs=jobs, env=env, timeout=timeout,
                           points=points or None, app_points=not engine_crash,
                           engine_points=not no_engine_points, progress=progress)
    ct.render(result, _out())
    for path, data in ((json_file, lambda: ct.json_report(result)),
                       (junit_file, lambda: ct.junit_xml(result))):
        if path:
            try:
                with open(path, "wb") as fh:
                    fh.write(data())
            except OSError as exc:
                raise InputError(f"cannot write {path}: {exc.strerror}") from None
    sys.exit(result.exit_code)


# --- entry point -----------------------------------------------------------------------

def _fail(message: str) -> NoReturn:
    """Print ``message`` as exactly one line (newlines in paths or URLs escaped); exit 2."""
    one_line = message.replace("\r", "\\r").replace("\n", "\\n")
    click.echo(f"histaudit: error: {one_line}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the CLI with one error boundary: library errors become one line and exit 2."""
    try:
        rv = cli.main(args=argv, prog_name="histaudit", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.exceptions.Abort:
        click.echo("histaudit: aborted", err=True)
        sys.exit(130)
    except (HistauditError, KeyProblem) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    sys.exit(rv if isinstance(rv, int) else EXIT_CLEAN)


if __name__ == "__main__":
    main()
