"""How the CLI shows things: rich tables for people, JSON for machines."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click
import orjson
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from histaudit.verify.findings import Severity
from histaudit.verify.report import Report, Scope

CELL_CHARS = 500
"""Longest text one table cell shows; a huge stored value must not stall the render."""

_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow",
                   Severity.INFO: "cyan"}


def console() -> Console:
    return Console(highlight=False, soft_wrap=True, markup=False, emoji=False)


def escape(text: str) -> str:
    """``text`` with every character that is not printable (newline, NUL, ESC of ANSI
    escapes, C1 controls, bidi overrides, surrogates) written as a ``\\x``/``\\u``
    escape: a value stored in a ledger or bundle never reaches the terminal raw."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clip(text: object, limit: int = CELL_CHARS) -> str:
    """``text`` for human output: cut to ``limit`` characters with the full length noted,
    and escaped (:func:`escape`). Everything printed from a ledger goes through here."""
    text = str(text)
    return escape(text) if len(text) <= limit else f"{escape(text[:limit])}… ({len(text)} chars)"


def columns(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A header and one line per row, in columns two spaces apart, the last one ragged:
    greppable, and linear in the rows (a rich table of 5,000 rows took 7 s to lay out).
    Cells are clipped already (:func:`clip`); widths count terminal cells (wide CJK)."""
    lines = [list(header), *map(list, rows)]
    widths = [max(cell_len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        cells = [c + " " * (w - cell_len(c)) for c, w in zip(line, widths, strict=False)]
        out.append("  ".join([*cells, line[-1]]).rstrip())
    click.echo("\n".join(out))


def emit_json(doc: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def reports(items: Iterable[Report]) -> None:
    """One status line per report, and a table of its findings when it has any."""
    out = console()
    for report in items:
        label = (f"instance {clip(report.instance_id)}" if report.scope is Scope.INSTANCE
                 else str(report.scope))
        line = f"{label}: {report.entries} entries, {report.mode} check — "
        if out.is_terminal:
            out.print(Text.assemble(line, _status(report)))
        else:  # no colour to lay out: rich's print cost ~100 µs a line of verify --all
            out.file.write(f"{line}{'OK' if report.ok else 'FAILED'}\n")
        if not report.findings:
            continue
        table = Table(show_lines=False, header_style="bold")
        for col in ("seq", "severity", "code", "finding"):
            table.add_column(col, overflow="fold")
        for f in report.findings:
            table.add_row("-" if f.seq is None else str(f.seq),
                          Text(str(f.severity), style=_SEVERITY_STYLE[f.severity]),
                          clip(f.code), clip(f.message))
        out.print(table)


def _status(report: Report) -> Text:
    return Text("OK", style="bold green") if report.ok else Text("FAILED", style="bold red")


DIGEST_CHARS = 12
"""Hex characters of a SHA-256 digest shown to people (``--json`` has all 64)."""
_DIGEST = re.compile(r"[0-9a-f]{64}")


def short_digest(value: object) -> str:
    """A 64-hex-character digest as its first :data:`DIGEST_CHARS` characters and "…";
    anything else as :func:`clip` shows it."""
    if isinstance(value, str) and _DIGEST.fullmatch(value):
        return value[:DIGEST_CHARS] + "…"
    return clip(value, 200)


def details(data: Mapping[str, Any]) -> str:
    """An entry's data as ``key=value`` pairs, committed payloads as ⟨commitment size⟩,
    digests shortened (:func:`short_digest`)."""
    parts = []
    for key in sorted(data):
        value = data[key]
        if isinstance(value, dict) and "c" in value:
            shown = f"⟨{short_digest(value['c'])} {clip(value.get('n', '?'), 20)}B⟩"
        else:
            shown = short_digest(value)
        parts.append(f"{clip(key, 100)}={shown}")
    return " ".join(parts)
