"""``histaudit show`` on an agent's instance, run as a user runs it: what its runs used (LLM
calls, tokens, tool calls; in all, per crash, per run of a task delivered again) under the
table and in ``--json``, and ``--html``, a page opened in headless Chromium with its tool
and LLM calls named. Cost: ≈ 6 s of CPU measured (commands forked from the pre-imported
server, on SQLite and PostgreSQL, an export; one Chromium ``--dump-dom``, ≈ 1 s).

The instance is a travel agent's, signed through the library as the interceptor signs it
(tests/support/agent_ledger.py: 27 tasks, two crashes); the figures are its hand count.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.agent_ledger import RUN_TOOL, SUMMARIZE, A, B, C, expected, sign_into, travel
from support.chromium import Dom, chromium, console_problems
from support.cli import cli, exits, one_error_line
from support.ledgers import World
from support.schemas import valid

TRIP = "trip-1"
EXTRA = 10  # 10 more turns: 27 tasks, labels past task 9
WANT = expected(EXTRA)
SUMMARY = 6 + 2 * EXTRA  # the summarize task


def _world(url: str, tmp: Path) -> World:
    key, trust, signer = generate_keypair(tmp / "keys", name="ops")
    with Ledger.open(url, create=True) as ledger:
        sign_into(ledger, signer, TRIP, travel(EXTRA))
    return World(tmp=tmp, url=url, signer=signer, key=key, trust=trust)


@pytest.fixture
def trip(db_url: str, tmp_path: Path) -> World:
    return _world(db_url, tmp_path)


def show(w: World, *args: str | Path) -> Any:
    return cli("show", TRIP, *args, "--db", w.url, cwd=w.tmp)


def test_show_says_what_the_runs_used_in_all_per_crash_and_per_run(trip: World) -> None:
    r = show(trip)
    exits(r)
    lines = r.stdout.splitlines()
    summary = lines[lines.index("LLM calls and tool calls:"):]
    assert summary[1:3] == [
        f"  LLM: {WANT['llm_calls']} LLM calls, {WANT['total']:,} tokens ({WANT['prompt']:,} "
        f"prompt, {WANT['completion']} completion); model stub-1",
        "  tools: book_flight: done 1, 1 begun with no answer; book_hotel: done 1, skipped 1; "
        "send_note: done 10"]
    assert summary[3:7] == [
        f"  crash of worker {A} (it cut short {RUN_TOOL} task 3 run #1, {RUN_TOOL} task 4 "
        f"run #1):",
        "    no LLM call; book_flight: 1 begun with no answer; book_hotel: done 1",
        f"  crash of worker {B} (it cut short {SUMMARIZE} task {SUMMARY} run #1):",
        "    1 LLM call, 140 tokens (90 prompt, 50 completion); no tool call"]
    assert summary[7:10] == [f"  {RUN_TOOL} task 3, delivered 2 times:",
                             f"    run #1 on {A} (started at entry 10, crashed): book_flight: "
                             f"1 begun with no answer",
                             f"    run #2 on {B} (started at entry 15, completed): "
                             f"book_flight: done 1"]
    assert summary[-1] == (f"    run #2 on {C} (started at entry 98, completed): 1 LLM call, "
                           f"140 tokens (90 prompt, 50 completion)")
    # the entries themselves: an LLM call and a tool call say what they are
    assert "LLM call to stub-1: 140 tokens (90 prompt, 50 completion)" in r.stdout
    assert "tool call book_hotel: skipped" in r.stdout


def test_show_json_counts_the_whole_instance_whatever_the_filters_keep(trip: World) -> None:
    r = show(trip, "--json")
    exits(r)
    doc = valid("show", json.loads(r.stdout))
    usage = doc["usage"]
    assert (usage["llm"]["calls"], usage["llm"]["prompt_tokens"],
            usage["llm"]["completion_tokens"], usage["llm"]["total_tokens"]) == (
        WANT["llm_calls"], WANT["prompt"], WANT["completion"], WANT["total"])
    assert {t["tool"]: {k: v for k, v in t.items() if k != "tool"}
            for t in usage["tools"]} == WANT["tools"]
    assert [(c["worker"], c["llm"]["total_tokens"]) for c in usage["crashes"]] == [(A, 0),
                                                                                  (B, 140)]
    summarize = [r for r in usage["runs"] if r["activity"] == SUMMARIZE]
    assert [(r["attempt"], r["worker"], r["ended"], r["llm"]["calls"]) for r in summarize] == [
        (1, B, "crashed", 1), (2, C, "completed", 1)]
    llm_only = show(trip, "--kind", "llm.call", "--json")
    exits(llm_only)
    filtered = valid("show", json.loads(llm_only.stdout))
    assert len(filtered["entries"]) == WANT["llm_calls"]
    assert filtered["usage"] == doc["usage"]
    text = show(trip, "--task", "3")
    exits(text)
    assert "LLM calls and tool calls (the whole instance, not only the entries shown):" in \
        text.stdout


def test_show_html_writes_one_page_and_refuses_what_it_cannot_do(trip: World) -> None:
    page = trip.tmp / "trip.html"
    r = show(trip, "--html", page)
    exits(r)
    assert r.stdout == f"wrote {page}: the timeline of instance {TRIP} (101 entries; not " \
                       f"verified)\n"
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and text.count("<svg") == 1
    assert f"{WANT['llm_calls']} LLM calls, {WANT['total']:,} tokens" in text
    one_error_line(show(trip, "--html", page), "already exists")
    # from an exported bundle: the same page but for where it was read
    bundle = trip.tmp / "bundle"
    exits(cli("export", TRIP, "--out", bundle, "--db", trip.url, "--key", trip.key,
              "--trust", trip.trust, cwd=trip.tmp))
    exits(cli("show", TRIP, "--bundle", bundle, "--trust", trip.trust, "--html",
              trip.tmp / "bundled.html", cwd=trip.tmp))
    bundled = (trip.tmp / "bundled.html").read_text(encoding="utf-8")
    assert f"as read from <code>bundle {bundle}" in bundled
    cut = text.index("<section class=instance")
    assert bundled[bundled.index("<section class=instance"):] == text[cut:]
    one_error_line(show(trip, "--html", trip.tmp / "b.html", "--kind", "llm"), "--html",
                   "--kind")
    one_error_line(show(trip, "--html", trip.tmp / "c.html", "--json"), "--json")
    assert not (trip.tmp / "b.html").exists() and not (trip.tmp / "c.html").exists()


def test_show_html_in_chromium_names_tool_and_llm_calls(sqlite_url: str,
                                                        tmp_path: Path) -> None:
    w = _world(sqlite_url, tmp_path)
    page = tmp_path / "trip.html"
    exits(show(w, "--html", page, "--payloads"))
    r = chromium(page, "--dump-dom", profile=tmp_path / "profile")
    assert console_problems(r.stderr) == []
    dom = Dom(r.stdout)
    # Nothing that runs or fetches, as in the bundle's report.
    assert not [n for n in dom.all if n.tag in ("script", "iframe", "object", "embed", "img",
                                                "link", "base", "form")]
    assert not [n for n in dom.all for a in n.attrs if a.startswith("on")]
    ids = dom.by_id()
    assert all(n.attrs["href"][1:] in ids for n in dom.all if "href" in n.attrs)
    # The picture: every task's row label keeps its number, run_tool rows name their tool
    # and LLM rows their tokens; each LLM call is a mark whose tooltip gives its tokens.
    (svg,) = dom.root.find("svg")
    shown = [t.text.removeprefix(t.find("title")[0].text if t.find("title") else "")
             for t in svg.find("text")]  # a label's text after its tooltip's
    labels = [x for x in shown if re.search(r" #\d+", x)]
    assert len(labels) == WANT["tasks"] and not [x for x in labels if "…" in x]
    assert "run_tool #3 book_flight" in labels
    assert f"run_tool #{SUMMARY - 1} send_note" in labels
    assert f"summarize #{SUMMARY} LLM ×2 280 tok" in labels
    llm = [m.find("title")[0].text for m in svg.find(cls="llm") if m.find("title")]
    assert len(llm) == WANT["llm_calls"]
    assert "LLM call to stub-1: 140 tokens (90 prompt, 50 completion)" in llm[-1]
    tool_marks = [t.text for t in svg.find("title") if "tool call book_flight" in t.text]
    assert tool_marks and all("[exec-3]" in t for t in tool_marks)
    # The usage table and the steps table say it in words.
    (usage,) = dom.root.find("section", "usage")
    assert f"all 29 run(s){WANT['llm_calls']}" in usage.text.replace("\xa0", " ")
    (steps,) = dom.root.find("section", "steps")
    flight = next(row.text.replace("\xa0", " ") for row in steps.find("tr")
                  if "task 3" in row.text.replace("\xa0", " "))
    assert f"run #1 on {A} (crashed): book_flight: 1 begun with no answer" in flight
    # The committed answers are shown as the escaped text they are.
    assert any(v.text == '{"content":"ok <b>fine</b>"}' for v in dom.root.find("code", "val"))
