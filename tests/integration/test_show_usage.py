"""``histaudit show`` on an agent's instance, run as a user runs it: what its runs used (LLM
calls, tokens, tool calls; in all, per crash, per run of a task delivered again) under the
table and in ``--json``, and ``--html``, one page with its tool and LLM calls named.
Cost: ≈ 5 s of CPU (commands forked from the pre-imported server, on SQLite and
PostgreSQL).

The instance is a travel agent's, signed through the library as the interceptor signs it
(tests/support/agent_ledger.py: 25 tasks, two crashes); the figures are its hand count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.agent_ledger import RUN_TOOL, SUMMARIZE, A, B, C, expected, sign_into, travel
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
