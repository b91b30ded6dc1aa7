"""The human report inside a bundle: one HTML file, no scripts, no network.

Each instance is a timeline of its signed entries (steps, attempts, re-executions, side
effects) followed by its findings, so an auditor sees at a glance what ran, what ran
again after a crash, and what the verifier concluded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from histaudit.ledger.checkpoint import Checkpoint
from histaudit.verify.report import Report

# The "attempt=N" member of an entry's detail text; N > 1 marks a re-execution.
_ATTEMPT = re.compile(r"(?:^| )attempt=(\d+)(?= |$)")

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:72em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;width:100%;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4}.ok{color:#137333;font-weight:bold}.bad{color:#b3261e;font-weight:bold}
.error{background:#fde7e9}.warning{background:#fff4d6}.info{background:#e8f1fd}
.retry{background:#fff8e1}code{font-size:.92em}
"""


def render_html(reports: Sequence[Report], *, origin: str, checkpoint: Checkpoint,
                entries: dict[str, list[tuple[int, str, str, str]]] | None = None) -> bytes:
    """Render the bundle report. ``entries`` maps instance -> [(seq, ts, kind, detail)]."""
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>histaudit bundle — {escape(origin)}</title><style>{_CSS}</style></head><body>",
        "<h1>histaudit audit trail</h1>",
        f"<p>Ledger <code>{escape(origin)}</code>, checkpoint at "
        f"<b>{checkpoint.size}</b> entries, signed by key <code>{escape(checkpoint.kid)}</code>."
        " Verify this bundle offline with <code>histaudit verify --bundle DIR --trust KEYS</code>"
        " (or any implementation of docs/format.md and docs/bundle.md).</p>",
        "<table><tr><th>instance</th><th>entries</th><th>status</th><th>findings</th></tr>",
    ]
    for r in reports:
        status = '<span class=ok>OK</span>' if r.ok else '<span class=bad>FAILED</span>'
        codes = ", ".join(sorted(r.codes())) or "—"
        parts.append(f"<tr><td><a href='#{_anchor(r.instance_id)}'>{escape(r.instance_id)}"
                     f"</a></td><td>{r.entries}</td><td>{status}</td><td>{escape(codes)}</td></tr>")
    parts.append("</table>")
    for r in reports:
        parts.append(f"<h2 id='{_anchor(r.instance_id)}'>{escape(r.instance_id)}</h2>")
        rows = (entries or {}).get(r.instance_id)
        if rows:
            parts.append("<table><tr><th>seq</th><th>time (UTC)</th><th>event</th>"
                         "<th>details</th></tr>")
            for seq, ts, kind, detail in rows:
                attempt = _ATTEMPT.search(detail)
                cls = " class=retry" if attempt and attempt.group(1) != "1" else ""
                parts.append(f"<tr{cls}><td>{seq}</td><td>{escape(ts)}</td>"
                             f"<td>{escape(kind)}</td><td>{escape(detail)}</td></tr>")
            parts.append("</table>")
        if r.findings:
            parts.append("<table><tr><th>seq</th><th>severity</th><th>code</th>"
                         "<th>finding</th></tr>")
            for f in r.findings:
                parts.append(f"<tr class={f.severity}><td>{'' if f.seq is None else f.seq}</td>"
                             f"<td>{f.severity}</td><td>{escape(f.code)}</td>"
                             f"<td>{escape(f.message)}</td></tr>")
            parts.append("</table>")
        else:
            parts.append("<p class=ok>No findings.</p>")
    parts.append("</body></html>\n")
    return "".join(parts).encode("utf-8")


def _anchor(instance: str) -> str:
    return "i-" + "".join(c if c.isalnum() else "-" for c in instance)
