"""``histaudit show``: one instance's entries, filtered, from a ledger or an exported bundle,
with what its runs used (LLM calls, tokens, tool calls; :mod:`histaudit.bundle.usage`), or
its timeline as one HTML page (``--html``)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table

from histaudit.bundle.usage import TOOL_PREFIX, LlmCall, Usage, UsageCounter, tools_words
from histaudit.errors import InputError, UsageError, VerificationError
from histaudit.ledger import records as rec
from histaudit.ledger import timeline as tl
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.kinds import Kind

from . import render
from .options import EXIT_CLEAN, db_option, trust_option, trust_store
from .progress import Meter


@click.command()
@click.argument("instance_id")
@click.option("--kind", "kinds", multiple=True, metavar="KIND",
              help="Only entries of KIND (repeatable): a kind such as activity.completed, "
                   "or a family such as activity or effect.")
@click.option("--task", type=int, metavar="N", help="Only entries of task N (task_id).")
@click.option("--seq", "seq", metavar="A..B",
              help="Only entries A to B (inclusive; A.., ..B and N work too).")
@click.option("--activity", metavar="NAME", help="Only entries of activity NAME.")
@click.option("--compact", is_flag=True, help="One line per entry: seq, kind, activity/task, "
                                              "entry digest.")
@click.option("--payloads", is_flag=True, help="Show payload values (erased or absent ones "
                                               "say so).")
@click.option("--bundle", "bundle_path", metavar="DIR",
              help="Read an exported bundle (checked against its signed manifest with "
                   "--trust) instead of a database.")
@click.option("--html", "html_path", metavar="PATH",
              help="Write the instance's timeline to PATH (not overwritten) as one HTML page "
                   "with no script: the picture of its runs with tool and LLM calls named "
                   "and their tokens, what each run used, its steps and entries. Unverified, "
                   "as show is. The whole instance: no filter, --compact or --json.")
@db_option
@trust_option
@click.option("--json", "as_json", is_flag=True)
def show(instance_id: str, kinds: tuple[str, ...], task: int | None, seq: str | None,
         activity: str | None, compact: bool, payloads: bool, bundle_path: str | None,
         html_path: str | None, db: str | None, trust: str | None, as_json: bool) -> int:
    """INSTANCE_ID's entries as a readable timeline, and what its runs used: LLM calls,
    tokens and tool calls, in all, per crash and per run of a task run more than once."""
    if compact and as_json:
        raise UsageError("--compact and --json are two different outputs: pass one")
    keep = tl.EntryFilter.parse(kinds=kinds, task=task, activity=activity, seq=seq)
    html = Path(html_path) if html_path is not None else None
    if html is not None:
        if compact or as_json or keep != tl.EntryFilter():
            raise UsageError("--html writes the whole instance's page: drop --kind, --task, "
                             "--activity, --seq, --compact and --json")
        if html.exists():
            raise InputError(f"{html} already exists; refusing to overwrite it")
    counter = UsageCounter()
    if bundle_path:
        timeline, source = _from_bundle(Path(bundle_path), trust_store(trust), instance_id,
                                        keep, payloads=payloads, observe=counter.add)
    else:
        timeline, source = _from_ledger(db, instance_id, keep, payloads=payloads,
                                        observe=counter.add)
    usage = counter.result()
    if html is not None:
        _write_html(html, timeline, source, payloads)
    elif as_json:
        render.emit_json({"instance": instance_id,
                          "entries": [_json_entry(t, payloads) for t in timeline.entries],
                          "filters": keep.as_json(), "usage": usage.as_json()})
    elif compact:
        _compact(timeline, payloads)
    else:
        _table(timeline, payloads)
        _usage(usage, filtered=keep != tl.EntryFilter())
    return EXIT_CLEAN


Observer = Callable[[rec.Entry], None]


def _from_ledger(db: str | None, instance: str, keep: tl.EntryFilter, *,
                 payloads: bool, observe: Observer) -> tuple[tl.Timeline, str]:
    from histaudit.urls import shown_url

    from .ledger import open_ledger

    with (open_ledger(db, reading=True) as ledger, ledger.snapshot() as snap,
          Meter(f"reading {render.clip(instance, 40)}") as meter):
        if meter.enabled:
            meter(0, next((s.entries for s in snap.instances() if s.instance == instance),
                          None))
        timeline = tl.build(instance, meter.count(snap.entries(instance)), keep,
                            payloads=snap.payload if payloads else None, observe=observe)
        source = f"ledger {shown_url(ledger.url)}"
    if not timeline.stored:
        raise InputError(f"instance {rec.shown_id(instance)} has no entries in this ledger")
    return timeline, source


def _from_bundle(root: Path, trust: TrustStore, instance: str, keep: tl.EntryFilter, *,
                 payloads: bool, observe: Observer) -> tuple[tl.Timeline, str]:
    """The timeline of ``instance`` in the bundle at ``root``.

    Read as ``verify --bundle`` reads it (:mod:`histaudit.bundle.verify`): the manifest's
    DSSE signature checked with ``trust``, each file read by the same bounded reader
    (regular files inside the bundle, size caps) and refused unless its SHA-256 is the one
    the signed manifest lists. So every byte shown is what a trusted key exported; chains,
    entry signatures and inclusion proofs are ``verify --bundle``'s to check, as ``show``
    on a database checks nothing either.
    """
    from histaudit.bundle import verify as bv
    from histaudit.bundle.envelope import unb64

    manifest, _ = bv.load_manifest(root, trust)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise InputError("bundle manifest has no file list")

    def signed(name: str) -> bytes:
        meta = files.get(name)
        data = bv.read_listed(root, name, meta)
        if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise VerificationError(f"bundle file {name} does not match the signed manifest "
                                    f"(run `histaudit verify --bundle` for the details)")
        return data

    if "entries.jsonl" not in files:
        raise InputError("bundle manifest does not list entries.jsonl")
    lookup = None
    if payloads:
        if "payloads.jsonl" not in files:
            raise UsageError(f"bundle {root} was exported without --with-payloads: it "
                             f"holds no payload values to show")
        kept: dict[str, tuple[bytes, bytes]] = {}
        for n, p in enumerate(bv.read_jsonl(signed("payloads.jsonl"), "payloads.jsonl"), 1):
            try:
                kept[str(p["commitment"])] = (unb64(p.get("salt"), "payload salt"),
                                              unb64(p.get("data"), "payload data"))
            except (KeyError, InputError) as exc:
                raise InputError(f"bundle payloads.jsonl line {n}: {exc}") from None
        lookup = kept.get
    lines = bv.read_jsonl(signed("entries.jsonl"), "entries.jsonl")
    with Meter(f"reading {render.clip(instance, 40)} from the bundle",
               total=len(lines)) as meter:
        rows = (row for row in (bv.entry_row(e, n)
                                for n, e in enumerate(meter.count(lines), 1))
                if row.instance == instance)
        timeline = tl.build(instance, rows, keep, payloads=lookup, observe=observe)
    if not timeline.stored:
        raise InputError(f"instance {rec.shown_id(instance)} has no entries in bundle {root}")
    return timeline, f"bundle {root} (its files checked against its signed manifest)"


# --- rendering -----------------------------------------------------------------------------

def _json_entry(t: tl.TimelineEntry, payloads: bool) -> dict[str, Any]:
    """An entry in ``--json``: seq, ts, kind, kid, data, its full hash and ``error`` (null;
    for a row whose body does not parse the reason, with ts, kind, kid and data null),
    and with --payloads the values."""
    doc: dict[str, Any] = (
        {"seq": t.seq, "ts": t.ts, "kind": t.kind, "kid": t.kid, "data": dict(t.data)}
        if t.error is None else
        {"seq": t.seq, "ts": None, "kind": None, "kid": None, "data": None})
    doc["hash"] = t.hash
    doc["error"] = t.error
    if payloads:
        doc["payloads"] = {name: _json_payload(v) for name, v in t.payloads.items()}
    return doc


def _json_payload(v: tl.PayloadValue) -> dict[str, Any]:
    doc: dict[str, Any] = {"state": v.state}
    if v.data is not None:
        text = v.text()
        if text is not None:
            doc["text"] = text
        else:
            doc["base64"] = _b64(v.data)
    return doc


_STATE_SHOWN = {tl.PayloadState.ERASED: "⟨erased⟩", tl.PayloadState.ABSENT: "⟨not stored⟩",
                tl.PayloadState.MISMATCH: "⟨stored bytes do not match the commitment⟩"}


def _payload_shown(v: tl.PayloadValue, limit: int) -> str:
    if v.state != tl.PayloadState.KEPT:
        return _STATE_SHOWN.get(v.state, f"⟨{v.state}⟩")
    text = v.text()
    if text is None and v.data is not None:
        return f"⟨{len(v.data)} bytes, not UTF-8⟩ base64:{render.clip(_b64(v.data), limit)}"
    return render.clip(text, limit)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _task(t: tl.TimelineEntry) -> str:
    activity, task = t.data.get("activity"), t.data.get("task_id")
    parts = [render.clip(activity, 40)] if isinstance(activity, str) else []
    if type(task) is int:
        parts.append(f"#{task}")
    return " ".join(parts) or "-"


def _compact(timeline: tl.Timeline, payloads: bool) -> None:
    """One line per entry, no header: greppable, and short enough for 80 columns."""
    rows = [(t, "(malformed)" if t.error is not None else render.clip(t.kind, 40),
             render.clip(_task(t), 40)) for t in timeline.entries]
    # Columns as wide as their longest cell (each clipped to 40), so long names align.
    width = max((len(str(t.seq)) for t in timeline.entries), default=1)
    kinds = max((len(kind) for _, kind, _ in rows), default=0)
    tasks = max((len(task) for _, _, task in rows), default=0)
    for t, kind, task in rows:
        line = (f"{t.seq:>{width}}  {kind:<{kinds}}  {task:<{tasks}}  "
                f"{render.short_digest(t.hash)}")
        if payloads:
            line += "".join(f"  {render.clip(name, 40)}={_payload_shown(v, 120)}"
                            for name, v in t.payloads.items())
        click.echo(line.rstrip())


def _table(timeline: tl.Timeline, payloads: bool) -> None:
    # Fits 80 columns without splitting a value: no vertical rules, the time on two lines,
    # seq and kind never wrapped, and the details wrapped between key=value pairs (a
    # shortened digest is 13 characters, so it stays whole).
    table = Table(title=f"instance {render.clip(timeline.instance)}", header_style="bold",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    table.add_column("seq", no_wrap=True, justify="right")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("details", overflow="fold", ratio=1)
    for t in timeline.entries:
        if t.error is not None:
            table.add_row(str(t.seq), "-", "(malformed)", render.clip(t.error))
            continue
        details = render.details(t.data)
        named = _named(t)
        if named:
            details = f"{render.clip(named, 200)}\n{details}"
        if payloads:
            details += "".join(f"\n{render.clip(name, 100)}: {_payload_shown(v, 300)}"
                               for name, v in t.payloads.items())
        table.add_row(str(t.seq), render.clip(t.ts or "-").rstrip("Z").replace("T", "\n"),
                      render.clip(t.kind), details)
    out = render.console()
    out.print(table)
    if not timeline.entries:
        out.print(f"no entries match (the instance has {timeline.stored})")


def _named(t: tl.TimelineEntry) -> str | None:
    """What an LLM call or a tool call's entry is, in words: ``LLM call to gpt-x: 140
    tokens (…)``, ``tool call book_flight: done``."""
    if t.kind == Kind.LLM_CALL:
        return LlmCall.of(t.seq, t.data).words()
    name = t.data.get("name")
    if (isinstance(t.kind, str) and t.kind.startswith("effect.") and isinstance(name, str)
            and name.startswith(TOOL_PREFIX)):
        return f"tool call {name[len(TOOL_PREFIX):]}: {t.kind.removeprefix('effect.')}"
    return None


def _usage(usage: Usage, *, filtered: bool) -> None:
    """What the instance's runs used, under the entries: in all, per crash, and per run of
    each task delivered more than once (the whole instance, filtered or not)."""
    if usage.empty:
        return
    out = render.console()
    whole = " (the whole instance, not only the entries shown)" if filtered else ""
    models = f"; model {', '.join(usage.llm.models)}" if usage.llm.models else ""
    out.print(f"\nLLM calls and tool calls{whole}:\n"
              f"  LLM: {render.clip(usage.llm.words() + models, 300)}\n"
              f"  tools: {render.clip(tools_words(usage.tools), 500)}")
    for crash in usage.crashes:
        cut = ", ".join(f"{r.activity} task {r.task_id} run #{r.attempt}"
                        for r in crash.runs)
        out.print(f"  crash of worker {render.clip(crash.worker, 60)} (it cut short "
                  f"{render.clip(cut, 300)}):\n    {render.clip(crash.llm.words(), 200)}; "
                  f"{render.clip(tools_words(crash.tools), 300)}")
    for runs in usage.repeated():
        first = runs[0]
        out.print(f"  {render.clip(first.activity, 80)} task "
                  f"{render.clip(first.task_id, 40)}, delivered "
                  f"{usage.deliveries.get(first.key, len(runs))} times:")
        for r in runs:
            where = f" on {render.clip(r.worker, 60)}" if r.worker else ""
            began = f"started at entry {r.started_seq}, " if r.started_seq is not None else ""
            out.print(f"    run #{r.attempt}{where} ({began}{r.ended}): "
                      f"{render.clip(r.words(), 300)}")


def _write_html(path: Path, timeline: tl.Timeline, source: str, payloads: bool) -> None:
    from histaudit.bundle.html import render_instance_html

    page = render_instance_html(timeline.instance, timeline.entries, source=source,
                                with_payloads=payloads)
    try:
        with path.open("xb") as f:  # never over a file that appeared since the check
            f.write(page)
    except FileExistsError:
        raise InputError(f"{path} already exists; refusing to overwrite it") from None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None
    click.echo(f"wrote {path}: the timeline of instance {render.clip(timeline.instance, 80)}"
               f" ({len(timeline.entries)} entries; not verified)")
