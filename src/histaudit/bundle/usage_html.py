"""LLM calls, tokens and tool calls (:mod:`.usage`) in the HTML pages: the instance's
table (in all, per crash, per run of a task delivered more than once) and the step table's
cell (per run). Every text that came from the ledger is escaped."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from html import escape

from .usage import Crash, LlmUse, RunUse, ToolUse, Usage, tools_words

__all__ = ["EntryLink", "runs_cell", "section"]

EntryLink = Callable[[int, str], str]
"""(seq, text) -> a link to that entry's row with ``text`` (escaped), or the text alone."""


def section(usage: Usage, anchor: str, link: EntryLink, *, max_runs: int = 300) -> str:
    """The instance's "LLM calls and tool calls" section: at most ``max_runs`` rows of
    runs of tasks delivered again (the page says how many more)."""
    out = [f"<section class=usage id='{anchor}-usage'><h3>LLM calls and tool calls</h3>"]
    if usage.empty:
        out.append("<p class=note>No LLM call and no tool call was recorded.</p></section>")
        return "".join(out)
    out.append("<p class=note>As the entries sign them: each <code>llm.call</code> with the "
               "tokens its provider reported, each tool call (a side effect "
               "<code>tool:NAME</code>) by how it ended. A run is one delivery of a task; a "
               "crash is a worker process that stopped in the middle of runs the engine "
               "delivered again, and its row is what those runs had used. What a crash is "
               "proven to have cost is the verifier's <code>llm-call-repeated</code>.</p>"
               "<table><thead><tr><th>runs</th><th>LLM calls</th><th>prompt tokens</th>"
               "<th>completion tokens</th><th>total tokens</th><th>tool calls</th></tr>"
               "</thead><tbody>")
    out.append(_row(f"<b>all {len(usage.runs)} run(s)</b>", usage.llm, usage.tools))
    for crash in usage.crashes:
        out.append(_row(_crash(crash, link), crash.llm, crash.tools, cls="error"))
    again = [r for runs in usage.repeated() for r in runs]
    for r in again[:max_runs]:
        out.append(_row(f"{_task(r)}: {_run(r, link)}", r.llm, r.tools.values(), cls="retry"))
    if len(again) > max_runs:
        out.append(f"<tr class=gap><td colspan=6>{len(again) - max_runs} more run(s) of tasks "
                   f"delivered again (the step table and <code>histaudit show</code> list "
                   f"them)</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def runs_cell(runs: list[RunUse], link: EntryLink) -> str:
    """The step table's cell: what each run of one step used (``—``: nothing)."""
    if not runs:
        return "—"
    if len(runs) == 1 and runs[0].ended in ("completed", "no-outcome"):
        return escape(runs[0].words())
    return "<br>".join(f"{_run(r, link)}: {escape(r.words())}" for r in runs)


def _row(what: str, llm: LlmUse, tools: Iterable[ToolUse], *, cls: str = "") -> str:
    unreported = (f" <span class=note>({llm.unreported} call(s) with no token count)</span>"
                  if llm.unreported else "")
    failed = f" <span class=bad>({llm.failed} failed)</span>" if llm.failed else ""
    return (f"<tr{f' class={cls}' if cls else ''}><td>{what}</td>"
            f"<td class=n>{llm.calls}{failed}</td><td class=n>{llm.prompt_tokens:,}</td>"
            f"<td class=n>{llm.completion_tokens:,}</td>"
            f"<td class=n>{llm.total_tokens:,}{unreported}</td>"
            f"<td>{escape(tools_words(tools))}</td></tr>")


def _crash(crash: Crash, link: EntryLink) -> str:
    runs = "; ".join(f"{_task(r)}: {_run(r, link)}" for r in crash.runs)
    return (f"<b>crash</b> of worker <span class=mono>{escape(crash.worker)}</span>, "
            f"runs it cut short: {runs}")


def _task(r: RunUse) -> str:
    return f"<b>{escape(r.activity)}</b> <span class=k>task&nbsp;{escape(str(r.task_id))}</span>"


def _run(r: RunUse, link: EntryLink) -> str:
    number = "?" if r.attempt is None else str(r.attempt)
    where = f" on <span class=mono>{escape(r.worker)}</span>" if r.worker else ""
    seq = r.started_seq if r.started_seq is not None else r.first
    return f"run {link(seq, f'#{number}')}{where} ({escape(r.ended.replace('-', ' '))})"
