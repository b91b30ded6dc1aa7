"""The HTML report rendered from hand-built reports and entries: order, links, payloads,
escaping, the content policy and the bounds on a large instance."""

from __future__ import annotations

import base64
import hashlib
import re
from html import escape

from histaudit.bundle.html import CSP, Limits, finding_entries, render_html
from histaudit.ledger.timeline import TimelineEntry
from histaudit.verify.findings import Finding
from histaudit.verify.report import Report

from .report_cases import CHECKPOINT, A, B, Builder, NamedFinding, crashed_run, report

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'"


def render(entries: dict[str, list[TimelineEntry]], *reports: Report, payloads: bool = True,
           limits: Limits | None = None) -> str:
    return render_html(list(reports), origin="histaudit/test-ledger", checkpoint=CHECKPOINT,
                       entries=entries, with_payloads=payloads, limits=limits).decode("utf-8")


def anchor_of(page: str, instance: str) -> str:
    m = re.search(r"<section class=instance id='([^']+)'><h2>" + re.escape(escape(instance)),
                  page)
    assert m, instance
    return m.group(1)


def ids(page: str) -> set[str]:
    return set(re.findall(r"\bid='([^']+)'", page))


def hrefs(page: str) -> list[str]:
    return re.findall(r"""href=["']#([^"']+)["']""", page)


def test_findings_come_first_and_link_to_every_entry_they_name() -> None:
    entries, seqs = crashed_run()
    dup = NamedFinding(code="effect-duplicate", instance="t-1", seq=seqs["done2"],
                       message="side effect post-comment [K-1] done 2 times",
                       severity=Finding.make("effect-duplicate", "t", 1, "").severity,
                       entries=(seqs["done1"], seqs["done2"]))
    again = Finding.make("activity-reexecuted", "t-1", seqs["restart"], "delivered twice")
    page = render({"t-1": entries}, report("t-1", len(entries), again, dup))
    a = anchor_of(page, "t-1")
    order = [page.index(f"id='{a}-{part}'") for part in ("findings", "run", "steps",
                                                        "entries")]
    assert order == sorted(order)
    findings = page[order[0]:order[1]]
    assert f"href='#{a}-e{seqs['done1']}'" in findings
    assert f"href='#{a}-e{seqs['done2']}'" in findings
    assert f"href='#{a}-e{seqs['restart']}'" in findings
    assert not set(hrefs(page)) - ids(page)  # every link in the page has its target
    # ... and the entries point back at their findings.
    row = re.search(rf"<tr id='{a}-e{seqs['done1']}'[^>]*>.*?</tr>", page)
    assert row and f"href='#{a}-f2'" in row.group(0) and "flag" in row.group(0)
    assert finding_entries(dup) == [seqs["done1"], seqs["done2"]]
    assert finding_entries(again) == [seqs["restart"]]


def test_failed_instances_come_before_clean_ones() -> None:
    clean, _ = crashed_run()
    page = render({"a-clean": clean, "b-bad": clean}, report("a-clean", len(clean)),
                  report("b-bad", len(clean), Finding.make("effect-duplicate", "b-bad", 5, "x")))
    assert page.index("<h2>b-bad") < page.index("<h2>a-clean")


def test_the_picture_marks_the_crash_the_redelivery_and_the_duplicate() -> None:
    entries, _ = crashed_run()
    page = render({"t-1": entries}, report("t-1", len(entries)))
    svg = page[page.index("<svg"):page.index("</svg>")]
    plotted = svg[:svg.index(">legend<")]
    assert plotted.count('class="lane w') == 2
    assert plotted.count('class="crash"') == 2  # worker A's lane and its attempt
    assert plotted.count('class="redo"') == 1 and plotted.count('class="dup"') == 1
    assert plotted.count('class="att w0') == 2 and plotted.count('class="att w1') == 1
    assert f"attempt on {A}" in svg and f"attempt on {B}" in svg
    steps = page[page.index("<h3>Steps"):page.index("<h3>Entries")]
    assert "<b>after a crash</b>: attempt 1 on <span class=mono>host-a:111</span>" in steps
    assert "DUPLICATE" in steps and "done 2×" in steps


def test_payload_values_with_payloads_digests_without() -> None:
    entries, seqs = crashed_run(output=HOSTILE.encode())
    with_values = render({"t-1": entries}, report("t-1", len(entries)))
    assert f"<code class=val>{escape(HOSTILE)}</code>" in with_values
    digests = render({"t-1": entries}, report("t-1", len(entries)), payloads=False)
    assert escape(HOSTILE) not in digests and "class=val" not in digests
    out = next(e for e in entries if e.seq == seqs["summarize_out"])
    full = out.data["output_digest"]
    assert f"<span class=h title='{full}'><span class=s>{full[:12]}…</span></span>" in digests
    assert "without payloads" in digests and "with payloads" in with_values


def test_an_erased_payload_says_so_and_a_long_one_folds_away() -> None:
    b = Builder()
    b.add("workflow.started", A, {"input": None})
    b.add("activity.completed", A, {"output": b"x" * 5000}, activity="a", task_id=1)
    page = render({"t": b.entries}, report("t", 2), limits=Limits(value_bytes=1000))
    assert "erased (a signed payload.erased says so)" in page
    assert "<details><summary><code class=val>" + "x" * 160 + "…" in page
    assert "4000 more bytes not in this page" in page and "x" * 1001 not in page


def test_every_value_from_the_ledger_is_escaped() -> None:
    b = Builder()
    b.add("workflow.started", HOSTILE, {"input": HOSTILE.encode()}, workflow=HOSTILE)
    b.add("activity.started", HOSTILE, activity=HOSTILE, task_id=HOSTILE, attempt=1,
          execution_id="")
    b.add("effect.done", HOSTILE, name=HOSTILE, key=HOSTILE, activity=HOSTILE,
          task_id=HOSTILE, attempt=1)
    b.add(HOSTILE, HOSTILE, **{HOSTILE: HOSTILE})
    bad = Finding.make("effect-duplicate", HOSTILE, 3, HOSTILE)
    page = render({HOSTILE: b.entries}, report(HOSTILE, 4, bad))
    page_no = render({HOSTILE: b.entries}, report(HOSTILE, 4, bad), payloads=False)
    for text in (page, page_no):
        assert "<script" not in text and "<img" not in text and "onerror=alert" not in \
            text.replace("onerror=alert(2)&gt;", "")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        # Attribute values cannot be closed early: ids are made of safe characters.
        assert all(re.fullmatch(r"[A-Za-z0-9-]+", i) for i in ids(text))


def test_a_strict_content_policy_covers_exactly_the_page_stylesheet() -> None:
    entries, _ = crashed_run()
    page = render({"t-1": entries}, report("t-1", len(entries)))
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    assert CSP.startswith("default-src 'none'; style-src 'sha256-")
    assert "img-src data:" in CSP and "script-src" not in CSP and "unsafe" not in CSP
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(styles) == 1
    digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
    assert f"'sha256-{digest}'" in CSP
    assert " style=" not in page  # an inline style attribute would be blocked
    assert not re.search(r"""(src|href)=["']?(https?:|//|data:|javascript:)""", page)
    assert "@media print" in styles[0] and "break-before:page" in styles[0]


def test_a_large_instance_is_bounded_and_the_page_says_so() -> None:
    b = Builder()
    for task in range(1, 301):
        b.step(task, "work", A, finish=task != 250)
        if task == 250:  # the one crash, late in the run: it must stay visible
            b.step(task, "work", B, attempt=2)
    late = Finding.make("activity-reexecuted", "big", b.entries[300].seq, "twice")
    limits = Limits(svg_steps=10, table_steps=20, entry_rows=50)
    page = render({"big": b.entries}, report("big", len(b.entries), late), limits=limits)
    whole = render({"big": b.entries}, report("big", len(b.entries), late))
    a = anchor_of(page, "big")
    rows = re.findall(rf"<tr id='{a}-e(\d+)'", page)
    assert len(rows) == 51 and str(late.seq) in rows  # 25 first, 25 last, the finding's
    assert "entries not shown (seq 26–" in page
    assert "the picture sums up runs of uneventful steps" in page
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert svg.count('class="grp"') == 3  # two summed-up runs and the legend's swatch
    assert svg.count('class="redo"') == 2  # the crash late in the run is drawn
    assert "249 steps (work), each delivered once and completed" in page
    assert not set(hrefs(page)) - ids(page)
    assert len(page) < len(whole) / 4


def test_a_retry_after_a_failure_is_not_called_a_crash_and_the_end_is_named() -> None:
    """A RetryPolicy retry (attempt 1 failed, attempt 2 of the same execution completed)
    reads as such; the workflow column says how it ended (issue #39)."""
    b = Builder()
    b.add("workflow.started", A, {"input": b"{}"}, workflow="review")
    base = {"activity": "review", "task_id": 1, "execution_id": "exec-1", "attempt": 1}
    first = b.add("activity.started", A, {"input": b"{}"}, **base)
    failed = b.add("activity.failed", A, {"error": b"busy"}, started_seq=first,
                   error_type="Busy", **base)
    b.step(2, "review", A, attempt=2, execution_id="exec-1")  # the retry: a new task
    b.add("workflow.terminated", None, received_at="2026-12-01T10:00:09Z", event_id=7,
          recurse=False)
    page = render({"r-1": b.entries}, report("r-1", len(b.entries)))
    text = re.sub(r"<[^>]+>", "", page)
    assert f"retried after a failure (its RetryPolicy): attempt 1 failed at entry {failed}" \
        in text
    assert "after a crash" not in text
    assert "review terminated" in text  # the summary's workflow column
    assert "terminated by a client at 2026-12-01T10:00:09Z" in text  # the events table
