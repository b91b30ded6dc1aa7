"""The picture of a run in the HTML report: an inline SVG, no script, every text escaped.

The x axis is the chain's order (entry seq), not wall time, so a crash that took the
worker a minute to come back does not squeeze the rest into a sliver. At the top, one
lane per worker process (``host:pid``) from its first to its last record, with a cross
where it stopped in the middle of a step; below, one row per step, each attempt a bar in
its worker's colour, re-deliveries, side effects and LLM calls marked (a tool call and an
LLM call named, with its tokens, in its tooltip). Beyond ``max_steps`` rows,
runs of uneventful steps are drawn as one grey bar (:func:`steps.collapse`), and the
caller says so in the page.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from .steps import Attempt, Run, Step, StepGroup, collapse
from .usage import TOOL_PREFIX, LlmUse, RunUse, Usage

__all__ = ["PALETTE", "render_svg"]

PALETTE = 8
"""Worker colours (CSS classes ``w0`` … ``w7``); more workers reuse them in turn."""

_LABEL_W, _PLOT_W, _RIGHT = 240, 700, 20
_LABEL_CHARS = 38
"""Characters of a row label that fit the label column (11 px system-ui, ≈ 6 px each)."""
_ROW, _TOP = 18, 28
_WIDTH = _LABEL_W + _PLOT_W + _RIGHT

Link = Callable[[int], str | None]
"""seq -> the fragment of that entry's row (``#…``), or None when the row is not shown."""


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class _Svg:
    def __init__(self, run: Run, link: Link, usage: Usage | None) -> None:
        self.lo, self.hi, self.link, self.usage = run.first, run.last, link, usage
        self.workers = {w.name: w.index % PALETTE for w in run.workers}
        self.parts: list[str] = []

    def x(self, seq: int) -> float:
        if self.hi <= self.lo:
            return float(_LABEL_W)
        return round(_LABEL_W + (seq - self.lo) / (self.hi - self.lo) * _PLOT_W, 1)

    def add(self, markup: str, *, title: str, seq: int | None = None) -> None:
        """One shape with a tooltip, linked to entry ``seq``'s row when it is shown."""
        shape = markup.replace("/>", f"><title>{escape(title)}</title></{_tag(markup)}>", 1)
        href = self.link(seq) if seq is not None else None
        self.parts.append(f'<a href="{escape(href)}">{shape}</a>' if href else shape)

    def text(self, x: float, y: float, text: str, *, cls: str = "lbl", full: str | None = None,
             anchor: str = "start") -> None:
        title = f"<title>{escape(full)}</title>" if full and full != text else ""
        self.parts.append(f'<text x="{x}" y="{y}" class="{cls}" text-anchor="{anchor}">'
                          f"{title}{escape(text)}</text>")


def _tag(markup: str) -> str:
    return markup[1:].split(" ", 1)[0]


def render_svg(run: Run, *, link: Link, usage: Usage | None = None, max_steps: int = 40,
               max_workers: int = 12) -> tuple[str, int]:
    """The ``<svg>`` of ``run`` (its LLM calls from ``usage``); and how many steps it left
    out (0: all drawn)."""
    lines, dropped = collapse(run.steps, max_steps)
    workers = run.workers[:max_workers]
    svg = _Svg(run, link, usage)
    y: float = _TOP
    _axis(svg, run)
    for w in workers:
        y += _ROW
        svg.text(4, y + 4, "worker " + _short(w.name, 30), full=f"worker {w.name}")
        x0, x1 = svg.x(w.first), svg.x(w.last)
        svg.add(f'<rect x="{x0}" y="{y - 5}" width="{max(x1 - x0, 3)}" height="10" '
                f'class="lane w{w.index % PALETTE}"/>',
                title=f"worker process {w.name}: {w.records} record(s), entries "
                      f"{w.first}–{w.last}", seq=w.first)
        if w.cut_short:
            names = ", ".join(f"{s.activity} (task {s.task_id})" for s in w.cut_short[:3])
            _cross(svg, x1, y, title=f"worker {w.name} stopped after entry {w.last} in the "
                                     f"middle of {names}: no outcome recorded (a crash)",
                   seq=w.last)
    if len(run.workers) > max_workers:
        y += _ROW
        svg.text(4, y + 4, f"… {len(run.workers) - max_workers} more worker(s)", cls="note")
    y += _ROW
    svg.text(4, y + 4, "workflow")
    for seq, kind in run.marks:
        _workflow_mark(svg, svg.x(seq), y, seq, kind)
    for line in lines:
        y += _ROW
        if isinstance(line, StepGroup):
            _group(svg, line, y)
        else:
            _step(svg, line, y)
    if dropped:
        y += _ROW
        svg.text(4, y + 4, f"… {dropped} more step(s) not drawn: see the step table",
                 cls="note")
    y += _ROW + 6
    y = _legend(svg, run, y)
    body = "".join(svg.parts)
    return (f'<svg class="run" '
            f'width="{_WIDTH}" height="{y}" viewBox="0 0 {_WIDTH} {y}" '
            f'aria-label="timeline of steps and attempts per worker process">'
            f"<title>steps and attempts per worker process, by entry order</title>"
            f"{body}</svg>", dropped)


def _axis(svg: _Svg, run: Run) -> None:
    svg.parts.append(f'<line x1="{_LABEL_W}" y1="{_TOP - 8}" x2="{_LABEL_W + _PLOT_W}" '
                     f'y2="{_TOP - 8}" class="axis"/>')
    svg.text(4, _TOP - 12, "entry seq →", cls="note")
    span = max(run.last - run.first, 1)
    step = max(1, _nice(span // 8))
    ticks = sorted({run.first, run.last, *range(((run.first // step) + 1) * step, run.last,
                                                step)})
    kept: list[tuple[int, float]] = []
    for t in ticks:  # labels at least 28 px apart; the first and last seq always labelled
        x = svg.x(t)
        if kept and x - kept[-1][1] < 28:
            if t != run.last:
                continue
            if kept[-1][0] != run.first:
                kept.pop()
        kept.append((t, x))
    for t, x in kept:
        svg.parts.append(f'<line x1="{x}" y1="{_TOP - 11}" x2="{x}" y2="{_TOP - 5}" '
                         f'class="axis"/>')
        svg.text(x, _TOP - 14, str(t), cls="tick", anchor="middle")


def _nice(n: int) -> int:
    for base in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000):
        if n <= base:
            return base
    return n


def _cross(svg: _Svg, x: float, y: float, *, title: str, seq: int | None) -> None:
    svg.add(f'<path d="M{x - 5} {y - 5}L{x + 5} {y + 5}M{x - 5} {y + 5}L{x + 5} {y - 5}" '
            f'class="crash"/>', title=title, seq=seq)


def _workflow_mark(svg: _Svg, x: float, y: float, seq: int, kind: str) -> None:
    if kind == "workflow.started":
        svg.add(f'<circle cx="{x}" cy="{y}" r="4" class="wf"/>',
                title=f"entry {seq}: workflow started", seq=seq)
    elif kind in ("workflow.completed", "workflow.continued_as_new"):
        svg.add(f'<rect x="{x - 4}" y="{y - 4}" width="8" height="8" class="wf"/>',
                title=f"entry {seq}: {kind}", seq=seq)
    elif kind == "workflow.failed":
        svg.add(f'<rect x="{x - 4}" y="{y - 4}" width="8" height="8" class="bad"/>',
                title=f"entry {seq}: workflow failed", seq=seq)
    else:  # replay.mismatch
        svg.add(f'<path d="M{x} {y - 5}L{x + 5} {y + 4}L{x - 5} {y + 4}Z" class="bad"/>',
                title=f"entry {seq}: replayed result differs from the signed one", seq=seq)


def step_label(step: Step, runs: list[RunUse]) -> tuple[str, str]:
    """A step's row label, and the whole of it for its tooltip.

    ``run_tool #12 book_flight``, ``call_llm #3 LLM 140 tok``: the activity's last dotted
    part (an agent's activities are ``dapr.agents.<agent>.<name>``), the task number
    always whole, then the tools it called, or ``LLM`` with its call count (``×2``) and
    tokens; only that tail is shortened to fit.
    """
    tools = list(dict.fromkeys(name[len(TOOL_PREFIX):] for name, _ in step.effects
                               if name.startswith(TOOL_PREFIX)))
    llm = LlmUse()
    for r in runs:
        llm.absorb(r.llm)
    name = step.activity.rsplit(".", 1)[-1] or step.activity
    head = f"{_short(name, 24)} #{_short(str(step.task_id), 8)}"
    tail = ", ".join(tools)
    if llm.calls:
        tail += (" " if tail else "") + ("LLM" if llm.calls == 1 else f"LLM ×{llm.calls}")
        if llm.unreported < llm.calls:
            tail += f" {llm.total_tokens:,} tok"
    shown = head + (" " + _short(tail, _LABEL_CHARS - len(head) - 1) if tail
                    and len(head) < _LABEL_CHARS - 4 else "")
    full = f"{step.activity} (task {step.task_id})"
    if tools:
        full += f": tool {', '.join(tools)}"
    if llm.calls:
        full += f"{';' if tools else ':'} {llm.words()}"
    return shown, full


def _step(svg: _Svg, step: Step, y: float) -> None:
    runs = svg.usage.runs_of(step.key) if svg.usage is not None else []
    shown, full = step_label(step, runs)
    svg.text(4, y + 4, shown, full=full)
    for i, a in enumerate(step.attempts):
        used = next((r for r in runs if r.attempt == a.number), None)
        _attempt(svg, step, a, y, later=i < len(step.attempts) - 1, used=used)


def _attempt(svg: _Svg, step: Step, a: Attempt, y: float, *, later: bool,
             used: RunUse | None) -> None:
    x0, x1 = svg.x(a.started), svg.x(a.last)
    who = a.worker or "an unnamed worker"
    colour = "wx" if a.worker not in svg.workers else f"w{svg.workers[a.worker]}"
    outcome = a.outcome or "no outcome recorded"
    spent = f"; {used.words()}" if used is not None else ""
    svg.add(f'<rect x="{x0}" y="{y - 6}" width="{max(x1 - x0, 4)}" height="12" rx="2" '
            f'class="att {colour}{"" if a.outcome != "failed" else " failedatt"}"/>',
            title=f"{step.activity} (task {step.task_id}) attempt {a.number} on {who}, "
                  f"entries {a.started}–{a.last}: {outcome}{spent}", seq=a.started)
    if a.number > 1:
        svg.add(f'<circle cx="{x0}" cy="{y}" r="5" class="redo"/>',
                title=f"delivered again: attempt {a.number} of {step.activity} "
                      f"(task {step.task_id})", seq=a.started)
    for call in used.calls if used is not None else ():
        x = svg.x(call.seq)
        cls = "bad" if call.error_type else "llm"
        svg.add(f'<circle cx="{x}" cy="{y}" r="3.5" class="{cls}"/>',
                title=f"entry {call.seq}: {call.words()}", seq=call.seq)
    for seq, kind, effect in a.marks:
        x = svg.x(seq)
        what = (f"tool call {effect.name[len(TOOL_PREFIX):]} [{effect.key}]"
                if effect.name.startswith(TOOL_PREFIX) else f"{effect.name} [{effect.key}]")
        if kind == "effect.done":
            dup = effect.duplicate and effect.done.index(seq) > 0
            cls = "dup" if dup else "eff"
            r = 6 if dup else 4
            svg.add(f'<path d="M{x} {y - r}L{x + r} {y}L{x} {y + r}L{x - r} {y}Z" '
                    f'class="{cls}"/>',
                    title=(f"entry {seq}: side effect {what} done AGAIN (done "
                           f"{len(effect.done)} times: a duplicate)" if dup else
                           f"entry {seq}: side effect {what} done"), seq=seq)
        elif kind == "effect.skipped":
            svg.add(f'<path d="M{x} {y - 4}L{x + 4} {y}L{x} {y + 4}L{x - 4} {y}Z" '
                    f'class="skip"/>',
                    title=f"entry {seq}: side effect {what} found done and skipped", seq=seq)
        elif kind == "effect.failed":
            svg.add(f'<path d="M{x} {y - 4}L{x + 4} {y}L{x} {y + 4}L{x - 4} {y}Z" '
                    f'class="bad"/>', title=f"entry {seq}: side effect {what} failed",
                    seq=seq)
        else:
            svg.add(f'<line x1="{x}" y1="{y - 6}" x2="{x}" y2="{y + 6}" class="intent"/>',
                    title=f"entry {seq}: side effect {what} about to be done (intent)",
                    seq=seq)
    if a.cut_short and later:
        _cross(svg, x1 + 6, y, title=f"attempt {a.number} of {step.activity} (task "
                                     f"{step.task_id}) on {who} stopped after entry {a.last} "
                                     f"with no outcome (a crash); it ran again", seq=a.last)
    elif a.cut_short:
        svg.text(x1 + 6, y + 4, "…", cls="note",
                 full=f"attempt {a.number}: no outcome recorded yet")


def _group(svg: _Svg, group: StepGroup, y: float) -> None:
    names = sorted({s.activity for s in group.steps})
    label = f"{len(group.steps)} steps, each ran once"
    svg.text(4, y + 4, label, cls="note",
             full=f"{label}: {', '.join(names[:10])}{' …' if len(names) > 10 else ''}")
    x0, x1 = svg.x(group.first), svg.x(group.last)
    svg.add(f'<rect x="{x0}" y="{y - 4}" width="{max(x1 - x0, 4)}" height="8" class="grp"/>',
            title=f"{label} and completed (entries {group.first}–{group.last}): "
                  f"{', '.join(names[:10])}", seq=group.first)


def _legend(svg: _Svg, run: Run, y: float) -> float:
    """The key to every mark, in rows under the plot; returns the height used."""
    items: list[tuple[str, str]] = [
        (f'<rect x="0" y="-6" width="18" height="12" rx="2" class="att w{w.index % PALETTE}"/>',
         f"attempt on {_short(w.name, 22)}") for w in run.workers[:PALETTE]]
    items += [
        ('<circle cx="5" cy="0" r="5" class="redo"/>', "delivered again (attempt > 1)"),
        ('<path d="M0 -5L10 5M0 5L10 -5" class="crash"/>', "stopped with no outcome (crash)"),
        ('<line x1="5" y1="-6" x2="5" y2="6" class="intent"/>', "side effect intent"),
        ('<path d="M5 -4L9 0L5 4L1 0Z" class="eff"/>', "side effect done"),
        ('<path d="M5 -6L11 0L5 6L-1 0Z" class="dup"/>', "side effect done again (duplicate)"),
        ('<path d="M5 -4L9 0L5 4L1 0Z" class="skip"/>', "side effect skipped (already done)"),
        ('<circle cx="5" cy="0" r="3.5" class="llm"/>', "LLM call (tokens in its tooltip)"),
        ('<circle cx="5" cy="0" r="4" class="wf"/>', "workflow started"),
        ('<rect x="1" y="-4" width="8" height="8" class="wf"/>', "workflow ended"),
        ('<rect x="0" y="-4" width="18" height="8" class="grp"/>', "uneventful steps, summed up"),
    ]
    svg.text(4, y + 4, "legend", cls="lbl")
    col_w, cols = 240, 3
    for i, (icon, label) in enumerate(items):
        cx = _LABEL_W + (i % cols) * col_w
        cy = y + (i // cols) * _ROW
        svg.parts.append(f'<g transform="translate({cx} {cy})">{icon}'
                         f'<text x="24" y="4" class="lbl">{escape(label)}</text></g>')
    return y + ((len(items) + cols - 1) // cols) * _ROW + 4
