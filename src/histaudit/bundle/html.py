"""The human report inside a bundle: one HTML file, no script, nothing loaded from outside.

Per instance, in the order an auditor asks: what the verifier found (each finding linked
to the entries it is about), a picture of the run (steps and attempts per worker
process, crashes, re-deliveries and duplicate side effects marked; :mod:`.timeline_svg`),
the LLM calls, their tokens and the tool calls, in all, per crash and per run
(:mod:`.usage_html`), a table of the steps (deliveries, re-runs after a crash or a failure,
side effects, outcome, what each run used) and the signed entries themselves. Payload
values are shown when the bundle carries them (``export --with-payloads``), their digests
otherwise. :func:`render_instance_html` is the same sections for one instance read by
``histaudit show --html``, unverified and saying so.

Everything that came from the ledger is escaped: payloads are whatever an activity
returned, so an attacker's. A Content-Security-Policy meta tag allows only the page's own
stylesheet (by its hash) and ``data:`` images, so even a bug in the escaping could not
run a script or reach the network. Large instances are bounded (:class:`Limits`) and the
page says what it left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import orjson

from histaudit.ledger.checkpoint import Checkpoint
from histaudit.ledger.timeline import PayloadState, TimelineEntry, payload_refs
from histaudit.verify.findings import Finding
from histaudit.verify.report import Report

from . import usage_html
from .html_style import CSP, STYLESHEET
from .steps import Effect, Step, StepGroup, analyse, collapse
from .timeline_svg import PALETTE, render_svg
from .usage import account, tools_words
from .workflow_facts import WorkflowFacts, event_words

__all__ = ["CSP", "Limits", "render_html", "render_instance_html"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """How much of one instance the page shows; what is left out is said in the page."""

    svg_steps: int = 40
    """Rows of steps in the picture (uneventful runs are summed up beyond it)."""
    workers: int = 12
    """Worker lanes in the picture."""
    table_steps: int = 300
    """Rows of the step table (uneventful runs are summed up beyond it)."""
    entry_rows: int = 400
    """Entry rows: the first and last halves, plus every entry a finding names."""
    value_chars: int = 160
    """Characters of a payload value shown inline; the rest is behind a disclosure."""
    value_bytes: int = 16 * 1024
    """Bytes of a payload value put in the page at all."""



_STATES = {PayloadState.ERASED: "erased (a signed payload.erased says so)",
           PayloadState.ABSENT: "not in the bundle",
           PayloadState.MISMATCH: "stored bytes do not match the signed commitment: not shown"}


def render_html(reports: Sequence[Report], *, origin: str, checkpoint: Checkpoint,
                entries: Mapping[str, Sequence[TimelineEntry]] | None = None,
                with_payloads: bool = False, limits: Limits | None = None) -> bytes:
    """Render the bundle report: ``entries`` maps instance -> its entries in chain order
    (payload values filled in when ``with_payloads``)."""
    limits = limits or Limits()
    # What needs a look first: failed instances, then those with any finding, then clean.
    reports = sorted(reports, key=lambda r: (r.ok, not r.findings))
    parts = [
        _head(f"histaudit bundle — {origin}"),
        "<body><header><h1>histaudit audit trail</h1>",
        f"<p>Ledger <code>{escape(origin)}</code>, checkpoint at "
        f"<b>{checkpoint.size}</b> entries, signed by key <code>{escape(checkpoint.kid)}</code>."
        " This page is what the exporter's verifier concluded; it proves nothing by itself."
        " Verify the bundle offline with <code>histaudit verify --bundle DIR --trust KEYS</code>"
        " (or any implementation of docs/format.md and docs/bundle.md).</p>",
        "<p class=note>"
        + ("Exported <b>with payloads</b>: activity inputs and outputs are shown as recorded "
           "(escaped text; they are whatever the workflow handled)." if with_payloads else
           "Exported <b>without payloads</b>: values are not in the bundle; each is shown "
           "by its keyed digest (equal values in one instance have equal digests).")
        + " Hover a shortened digest for the full value.</p></header>",
        "<table class=summary><thead><tr><th>instance</th><th>workflow</th><th>entries</th>"
        "<th>status</th><th>findings</th></tr></thead><tbody>",
    ]
    facts = {r.instance_id: WorkflowFacts.of((entries or {}).get(r.instance_id, ()))
             for r in reports}
    for r in reports:
        parts.append(f"<tr><td><a href='#{_anchor(r.instance_id)}'>{escape(r.instance_id)}"
                     f"</a></td><td>{_workflow(facts[r.instance_id], set(facts))}</td>"
                     f"<td class=n>{r.entries}</td><td>{_status(r)}</td>"
                     f"<td>{_counts(r.findings)}</td></tr>")
    parts.append("</tbody></table>")
    parts.append(_tree(reports, facts))
    for r in reports:
        rows = list((entries or {}).get(r.instance_id, ()))
        parts.append(_instance(r, rows, with_payloads=with_payloads, limits=limits,
                               facts=facts[r.instance_id], known=set(facts)))
    parts.append("</body></html>\n")
    return "".join(parts).encode("utf-8")


# --- one instance ----------------------------------------------------------------------

class _Page:
    """What one instance's sections share: anchors, the rows shown, the findings."""

    def __init__(self, instance: str, findings: Sequence[Finding],
                 rows: Sequence[TimelineEntry], limits: Limits, with_payloads: bool) -> None:
        self.anchor = _anchor(instance)
        self.instance = instance
        self.limits = limits
        self.with_payloads = with_payloads
        self.run = run = analyse(rows)
        self.usage = account(rows)
        self.workers = {w.name: w.index % PALETTE for w in run.workers}
        self.findings = list(findings)
        self.about: dict[int, list[int]] = {}  # seq -> indices of the findings naming it
        for i, f in enumerate(self.findings):
            for seq in finding_entries(f):
                self.about.setdefault(seq, []).append(i)
        self.shown = _shown(rows, self.about, limits.entry_rows)

    def entry_href(self, seq: int) -> str | None:
        return f"#{self.anchor}-e{seq}" if seq in self.shown else None

    def entry_link(self, seq: int, text: str | None = None) -> str:
        href = self.entry_href(seq)
        label = escape(text if text is not None else str(seq))
        return f"<a href='{href}'>{label}</a>" if href else label

    def finding_link(self, i: int) -> str:
        f = self.findings[i]
        return (f"<a href='#{self.anchor}-f{i + 1}' class='badge {f.severity}'>"
                f"{escape(f.code)}</a>")

    def worker(self, name: Any) -> str:
        if not isinstance(name, str) or not name:
            return ""
        cls = f"w{self.workers[name]}" if name in self.workers else "wx"
        return f"<span class='sw {cls}'></span><span class=mono>{escape(name)}</span>"


def finding_entries(f: Finding) -> list[int]:
    """The entries a finding is about: its ``entries`` when it names them, else its seq."""
    named = getattr(f, "entries", None)
    seqs = [s for s in named if type(s) is int] if isinstance(named, list | tuple) else []
    if f.seq is not None and f.seq not in seqs:
        seqs.insert(0, f.seq)
    return seqs


def render_instance_html(instance: str, rows: Sequence[TimelineEntry], *, source: str,
                         with_payloads: bool = False, limits: Limits | None = None) -> bytes:
    """One instance's page as ``histaudit show --html`` writes it: ``rows`` are all its
    entries in chain order, read from ``source`` (a ledger or bundle, as the page names
    it) and not verified; the page says so and names the command that verifies them."""
    page = _Page(instance, (), rows, limits or Limits(), with_payloads)
    facts = WorkflowFacts.of(rows)
    return "".join([
        _head(f"histaudit — {instance}"),
        "<body><header><h1>histaudit timeline</h1>",
        f"<p>Instance <code>{escape(instance)}</code> as read from <code>{escape(source)}"
        "</code>. <b>Not verified</b>: this page says what the entries say; <code>histaudit "
        f"verify {escape(instance)}</code> checks their chain, signatures and behaviour.</p>"
        "</header>",
        f"<section class=instance id='{page.anchor}'><h2>{escape(instance)}</h2>",
        _meta(page, rows, facts, set()), *_body(page, rows, facts),
        "</section></body></html>\n"]).encode("utf-8")


def _head(title: str) -> str:
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="referrer" content="no-referrer">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{STYLESHEET}</style></head>")


def _instance(r: Report, rows: Sequence[TimelineEntry], *, with_payloads: bool,
              limits: Limits, facts: WorkflowFacts, known: set[str]) -> str:
    page = _Page(r.instance_id, r.findings, rows, limits, with_payloads)
    out = [f"<section class=instance id='{page.anchor}'>"
           f"<h2>{escape(r.instance_id)} {_status(r)}</h2>"]
    if rows:
        out.append(_meta(page, rows, facts, known, mode=r.mode))
    out.append(_findings(page))
    if rows:
        out.extend(_body(page, rows, facts))
    out.append("</section>")
    return "".join(out)


def _meta(page: _Page, rows: Sequence[TimelineEntry], facts: WorkflowFacts, known: set[str],
          *, mode: str | None = None) -> str:
    if not rows:
        return "<p class=meta>No entries.</p>"
    verified = f"; verified: <code>{escape(mode)}</code>" if mode is not None else ""
    return (f"<p class=meta>Workflow {_workflow(facts, known)}. {len(rows)} entries, "
            f"{rows[0].ts or '?'} to {rows[-1].ts or '?'} (UTC); {len(page.run.steps)} "
            f"step(s), {len(page.run.workers)} worker process(es); "
            f"{escape(page.usage.llm.words())}, "
            f"{escape(tools_words(page.usage.tools))}{verified}.</p>")


def _body(page: _Page, rows: Sequence[TimelineEntry], facts: WorkflowFacts) -> list[str]:
    """What follows the findings: the picture, LLM and tool calls, steps, events, entries."""
    if not rows:
        return []
    return [_picture(page), usage_html.section(page.usage, page.anchor, page.entry_link,
                                               max_runs=page.limits.table_steps),
            _steps(page), _received(page, facts), _entries(page, rows)]


def _findings(page: _Page) -> str:
    out = [f"<section class=findings id='{page.anchor}-findings'><h3>Findings</h3>"]
    if not page.findings:
        out.append("<p class=ok>No findings.</p></section>")
        return "".join(out)
    out.append("<table><thead><tr><th>severity</th><th>code</th><th>entries</th>"
               "<th>what the verifier found</th></tr></thead><tbody>")
    for i, f in enumerate(page.findings):
        seqs = finding_entries(f)
        links = ", ".join(page.entry_link(s) for s in seqs) or "—"
        out.append(f"<tr id='{page.anchor}-f{i + 1}' class={f.severity}>"
                   f"<td><span class='badge {f.severity}'>{f.severity}</span></td>"
                   f"<td><code>{escape(f.code)}</code></td><td>{links}</td>"
                   f"<td>{escape(f.message)}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _picture(page: _Page) -> str:
    svg, dropped = render_svg(page.run, link=page.entry_href, usage=page.usage,
                              max_steps=page.limits.svg_steps, max_workers=page.limits.workers)
    out = [f"<section class=picture id='{page.anchor}-run'><h3>The run</h3>"
           "<p class=note>One lane per worker process, then one row per step; each bar is "
           "an attempt (a delivery by the engine) in its worker's colour, placed by entry "
           "order. Marks link to their entries.</p>", f"<div class=figure>{svg}</div>"]
    steps = len(page.run.steps)
    if steps > page.limits.svg_steps:
        out.append(f"<p class=note>This instance has {steps} steps: the picture sums up runs "
                   f"of uneventful steps (delivered once, completed, no odd side effect) as "
                   f"grey bars")
        out.append(f" and leaves out {dropped} step(s) past the first "
                   f"{page.limits.svg_steps} rows." if dropped else ".")
        out.append(" Every step is in the step table.</p>" if steps <= page.limits.table_steps
                   else "</p>")
    out.append("</section>")
    return "".join(out)


def _steps(page: _Page) -> str:
    out = [f"<section class=steps id='{page.anchor}-steps'><h3>Steps</h3>"]
    if not page.run.steps:
        out.append("<p class=note>No activity ran in this instance.</p></section>")
        return "".join(out)
    lines, dropped = collapse(page.run.steps, page.limits.table_steps)
    out.append("<table><thead><tr><th>step</th><th>deliveries</th><th>workers</th>"
               "<th>ran again</th><th>side effects</th><th>outcome</th>"
               "<th>LLM calls and tool calls, per run</th>"
               "</tr></thead><tbody>")
    for line in lines:
        if isinstance(line, StepGroup):
            names = sorted({s.activity for s in line.steps})
            shown = ", ".join(escape(n) for n in names[:8]) + (" …" if len(names) > 8 else "")
            out.append(f"<tr class=gap><td colspan=7>{len(line.steps)} steps ({shown}), each "
                       f"delivered once and completed, entries "
                       f"{page.entry_link(line.first)}–{page.entry_link(line.last)}</td></tr>")
        else:
            out.append(_step_row(page, line))
    if dropped:
        out.append(f"<tr class=gap><td colspan=7>{dropped} more step(s) not listed (over "
                   f"{page.limits.table_steps} rows): <code>histaudit show "
                   f"{escape(page.instance)} --bundle DIR --trust KEYS --kind activity</code> "
                   f"lists them.</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _step_row(page: _Page, s: Step) -> str:
    cls = " class=retry" if s.deliveries > 1 else ""
    if s.duplicates:
        cls = " class=error"
    attempts = ", ".join(page.entry_link(a.started, f"#{a.number}") for a in s.attempts)
    workers = "<br>".join(dict.fromkeys(page.worker(a.worker) for a in s.attempts
                                        if a.worker))
    crashed = [a for a in s.attempts[:-1] if a.cut_short]
    failed = [a for a in s.attempts[:-1] if a.outcome == "failed"]
    reasons = []
    if crashed:
        reasons.append("<b>after a crash</b>: " + "; ".join(
            f"attempt {a.number} on <span class=mono>{escape(a.worker or '?')}</span> "
            f"stopped after entry {page.entry_link(a.last)} with no outcome" for a in crashed))
    if failed:
        reasons.append("retried after a failure (its RetryPolicy): " + "; ".join(
            f"attempt {a.number} failed at entry {page.entry_link(a.outcome_seq or a.last)}"
            for a in failed))
    if reasons:
        again = "<br>".join(reasons)
    elif s.deliveries > 1:
        again = "delivered again (no attempt was cut short)"
    else:
        again = "no"
    effects = "<br>".join(_effect(page, e) for e in s.effects.values()) or "—"
    return (f"<tr{cls}><td><b>{escape(s.activity)}</b> <span class=k>task&nbsp;"
            f"{escape(str(s.task_id))}</span></td>"
            f"<td class=n>{s.deliveries} ({attempts})</td><td class=wk>{workers}</td>"
            f"<td>{again}</td>"
            f"<td>{effects}</td><td>{_outcome(page, s)}</td>"
            f"<td>{usage_html.runs_cell(page.usage.runs_of(s.key), page.entry_link)}</td></tr>")


def _tree(reports: Sequence[Report], facts: Mapping[str, WorkflowFacts]) -> str:
    """The bundle's workflows as a tree (parents by their children's signed link), when
    a child of another instance here is in it; nothing otherwise."""
    children: dict[str, list[str]] = {}
    for r in reports:
        parent = facts[r.instance_id].parent
        if parent in facts:
            children.setdefault(str(parent), []).append(r.instance_id)
    if not children:
        return ""
    status = {r.instance_id: r for r in reports}
    roots = [r.instance_id for r in reports if facts[r.instance_id].parent not in facts]
    out = ["<section class=tree><h3>Workflow tree</h3><ul>"]
    seen: set[str] = set()

    def node(instance: str) -> None:
        seen.add(instance)
        out.append(f"<li><a href='#{_anchor(instance)}'>{escape(instance)}</a> "
                   f"{_workflow(facts[instance], set())} {_status(status[instance])}")
        below = [c for c in children.get(instance, ()) if c not in seen]
        if below:
            out.append("<ul>")
            for child in sorted(below):
                node(child)
            out.append("</ul>")
        out.append("</li>")

    for root in sorted(roots):
        node(root)
    out.append("</ul></section>")
    return "".join(out)


def _workflow(facts: WorkflowFacts, known: set[str]) -> str:
    """The workflow's summary, its parent linked when the page has it."""
    parent = facts.parent
    return facts.summary(None if parent is None or parent not in known
                         else f"#{_anchor(parent)}")


def _received(page: _Page, facts: WorkflowFacts) -> str:
    """What reached the workflow from outside its code, its custom statuses, the children
    it started and the generations it ended: one row each, linked to its entry."""
    out = [f"<section class=received id='{page.anchor}-events'><h3>Workflow events</h3>"]
    if not facts.events:
        out.append("<p class=note>No external event, timer, suspend, resume, terminate, "
                   "custom status, child workflow or continue-as-new.</p></section>")
        return "".join(out)
    out.append("<table><thead><tr><th>entry</th><th>what</th><th>details</th></tr></thead>"
               "<tbody>")
    for e in facts.events:
        out.append(f"<tr><td>{page.entry_link(e.seq)}</td><td><code>{escape(str(e.kind))}"
                   f"</code></td><td>{escape(event_words(e))}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _effect(page: _Page, e: Effect) -> str:
    what = f"<code>{escape(e.name)}</code> <span class=k>[{escape(e.key)}]</span>"
    counts = []
    if e.done:
        done = ", ".join(page.entry_link(s) for s in e.done)
        counts.append(f"done {len(e.done)}× ({done})")
    if e.skipped:
        counts.append(f"skipped {len(e.skipped)}× (already done)")
    if e.failed:
        counts.append(f"failed {len(e.failed)}×")
    if e.unconfirmed:
        counts.append(f"{e.unconfirmed} intent(s) never confirmed")
    badge = " <span class='badge dup'>DUPLICATE</span>" if e.duplicate else ""
    return f"{what}: {'; '.join(counts) or 'intent only'}{badge}"


def _outcome(page: _Page, s: Step) -> str:
    if s.outcome is None:
        return "<span class=bad>no outcome recorded</span>"
    word = ("<span class=ok>completed</span>" if s.outcome == "completed"
            else "<span class=bad>failed</span>")
    seq = s.output_seq
    return word + ("" if seq is None else f" at&nbsp;{page.entry_link(seq)}")


def _entries(page: _Page, rows: Sequence[TimelineEntry]) -> str:
    out = [f"<section class=entries id='{page.anchor}-entries'><h3>Entries</h3>"
           "<table><thead><tr><th>seq</th><th>time (UTC)</th><th>event</th><th>worker</th>"
           "<th>details</th><th>payloads</th><th>findings</th></tr></thead><tbody>"]
    hidden: list[int] = []
    for e in rows:
        if e.seq not in page.shown:
            hidden.append(e.seq)
            continue
        if hidden:
            out.append(_gap(page, hidden))
            hidden = []
        out.append(_entry_row(page, e))
    if hidden:
        out.append(_gap(page, hidden))
    out.append("</tbody></table></section>")
    return "".join(out)


def _gap(page: _Page, seqs: list[int]) -> str:
    return (f"<tr class=gap><td colspan=7>{len(seqs)} entries not shown (seq {seqs[0]}–"
            f"{seqs[-1]}; the page shows {page.limits.entry_rows} entries of a large instance "
            f"and every entry a finding names): <code>histaudit show {escape(page.instance)} "
            f"--bundle DIR --trust KEYS --seq {seqs[0]}..{seqs[-1]}</code> lists them."
            f"</td></tr>")


def _entry_row(page: _Page, e: TimelineEntry) -> str:
    classes = []
    attempt = e.data.get("attempt")
    if type(attempt) is int and attempt > 1:
        classes.append("retry")
    if e.seq in page.about:
        classes.append("flag")
    cls = f" class='{' '.join(classes)}'" if classes else ""
    flagged = " ".join(page.finding_link(i) for i in page.about.get(e.seq, ()))
    if e.error is not None:
        return (f"<tr id='{page.anchor}-e{e.seq}'{cls}><td class=n>{e.seq}</td><td></td>"
                f"<td class=bad>unreadable</td><td></td><td>{escape(e.error)}</td><td></td>"
                f"<td>{flagged}</td></tr>")
    ts = e.ts or ""
    clock = ts[11:23] if len(ts) >= 20 and ts[10] == "T" else ts
    return (f"<tr id='{page.anchor}-e{e.seq}'{cls}><td class=n>{e.seq}</td>"
            f"<td class='t mono' title='{escape(ts)}'>{escape(clock)}</td>"
            f"<td class=ev><code>{escape(e.kind or '')}</code></td>"
            f"<td class=wk>{page.worker(e.data.get('worker'))}</td>"
            f"<td>{_details(page, e.data)}</td><td>{_payloads(page, e)}</td>"
            f"<td>{flagged}</td></tr>")


def _details(page: _Page, data: Mapping[str, Any]) -> str:
    refs = payload_refs(data)
    skip = {"worker", *refs, *(f"{name}_digest" for name in refs)}
    parts = []
    for key in sorted(data):
        if key in skip:
            continue
        value = data[key]
        if key.endswith("_seq") and type(value) is int:
            shown = page.entry_link(value)
        elif key == "execution_id" and isinstance(value, str) and len(value) > 16:
            shown = _hash(value)
        else:
            shown = f"<span class=mono>{escape(_compact(value, 200))}</span>"
        parts.append(f"<span class=k>{escape(key)}</span>={shown}")
    return " ".join(parts)


def _payloads(page: _Page, e: TimelineEntry) -> str:
    parts = []
    for name, commitment in payload_refs(e.data).items():
        ref = e.data[name]
        size = ref.get("n") if isinstance(ref, dict) else None
        digest = e.data.get(f"{name}_digest")
        label = f"<span class=k>{escape(name)}</span>"
        value = e.payloads.get(name) if page.with_payloads else None
        if value is not None and value.state == PayloadState.KEPT and value.data is not None:
            parts.append(f"{label} {_value(page, value.data)}")
        elif value is not None:
            parts.append(f"{label} <span class=note>{escape(_STATES.get(value.state, value.state))}"
                         f"</span>")
        else:
            shown = digest if isinstance(digest, str) else commitment
            what = "digest" if isinstance(digest, str) else "commitment"
            sized = f", {size} bytes" if type(size) is int else ""
            parts.append(f"{label} <span class=note>{what}</span> {_hash(shown)}"
                         f"<span class=note>{sized}</span>")
    return "<br>".join(parts)


def _value(page: _Page, data: bytes) -> str:
    """A kept payload, escaped; long ones behind a disclosure, huge ones cut."""
    cap = page.limits.value_bytes
    cut = len(data) > cap
    text = data[:cap].decode("utf-8", errors="replace")
    if len(text) <= page.limits.value_chars and not cut:
        return f"<code class=val>{escape(text)}</code>"
    head = escape(text[: page.limits.value_chars])
    tail = (f"<p class=note>… {len(data) - cap} more bytes not in this page "
            f"(payloads.jsonl has them)</p>" if cut else "")
    return (f"<details><summary><code class=val>{head}…</code> <span class=note>"
            f"({len(data)} bytes)</span></summary><pre>{escape(text)}</pre>{tail}</details>")


# --- small pieces ----------------------------------------------------------------------

def _status(r: Report) -> str:
    if r.ok:
        return "<span class='badge okb'>OK</span>"
    return "<span class='badge error'>FAILED</span>"


def _counts(findings: Sequence[Finding]) -> str:
    if not findings:
        return "—"
    codes: dict[str, Finding] = {}
    for f in findings:
        codes.setdefault(f.code, f)
    return " ".join(f"<span class='badge {f.severity}'>{escape(code)}</span>"
                    for code, f in sorted(codes.items()))


def _hash(full: str, keep: int = 12) -> str:
    """A digest shortened for people; the full value in the title (and in print)."""
    if len(full) <= keep + 2:
        return f"<span class=mono>{escape(full)}</span>"
    return (f"<span class=h title='{escape(full)}'><span class=s>{escape(full[:keep])}…"
            f"</span></span>")


def _compact(value: Any, limit: int) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = orjson.dumps(value).decode("utf-8")
        except TypeError:
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(rows: Sequence[TimelineEntry], about: Mapping[int, list[int]], limit: int
           ) -> set[int]:
    """Seqs whose rows the page holds: all, or the first and last ``limit // 2`` and every
    entry a finding names (so every finding's link has a target)."""
    seqs = [e.seq for e in rows]
    if len(seqs) <= limit:
        return set(seqs)
    half = max(limit // 2, 1)
    return {*seqs[:half], *seqs[-half:], *(set(about) & set(seqs))}


def _anchor(instance: str) -> str:
    """A fragment id for an instance: readable, and unique (two ids that read alike after
    the unsafe characters are replaced still differ by their hash)."""
    readable = "".join(c if c.isascii() and c.isalnum() else "-" for c in instance[:40])
    return f"i-{readable}-{hashlib.sha256(instance.encode('utf-8')).hexdigest()[:8]}"
