"""What an instance's runs used (histaudit.bundle.usage): LLM calls, tokens and tool calls
in all, per run and per crash, and how the report and the picture show them. Cost: < 1 s
of CPU (entries built in memory, no ledger, no engine).

The figures are counted by hand from the entries tests/support/agent_ledger.py writes
(its ``EXPECTED``), not by the code under test.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from histaudit.bundle.html import CSP, Limits, render_instance_html
from histaudit.bundle.steps import analyse
from histaudit.bundle.timeline_svg import step_label
from histaudit.bundle.usage import ENDED, account
from histaudit.ledger.timeline import TimelineEntry
from support.agent_ledger import (
    CALL_LLM,
    EXPECTED,
    RUN_TOOL,
    SUMMARIZE,
    A,
    B,
    C,
    as_timeline,
    expected,
    travel,
)

from .report_cases import Builder


def tools_of(usage: Any) -> dict[str, dict[str, int]]:
    return {t.name: {k: v for k, v in t.as_json().items() if k != "tool"} for t in usage.tools}


@pytest.mark.parametrize("extra", [0, 10])
def test_the_instance_in_all_is_the_hand_count(extra: int) -> None:
    want = expected(extra) if extra else EXPECTED
    usage = account(as_timeline(travel(extra)))
    assert (usage.llm.calls, usage.llm.prompt_tokens, usage.llm.completion_tokens,
            usage.llm.total_tokens) == (want["llm_calls"], want["prompt"], want["completion"],
                                        want["total"])
    assert usage.llm.unreported == 0 and usage.llm.models == ["stub-1"]
    assert tools_of(usage) == want["tools"]
    # book_flight ran twice: once to its done, once begun and never answered (the crash)
    (flight,) = [t for t in usage.tools if t.name == "book_flight"]
    assert flight.executions == 2


def test_each_crash_is_a_worker_and_what_the_runs_it_cut_short_had_used() -> None:
    usage = account(as_timeline(travel()))
    assert [c.worker for c in usage.crashes] == [A, B]
    first, second = usage.crashes
    assert [(r.activity, r.task_id, r.attempt) for r in first.runs] == [(RUN_TOOL, 3, 1),
                                                                        (RUN_TOOL, 4, 1)]
    assert first.llm.calls == 0
    assert [t.words() for t in first.tools] == ["book_flight: 1 begun with no answer",
                                                "book_hotel: done 1"]
    assert [(r.activity, r.attempt) for r in second.runs] == [(SUMMARIZE, 1)]
    assert second.llm.words() == "1 LLM call, 140 tokens (90 prompt, 50 completion)"
    assert second.tools == ()


def test_the_runs_of_a_task_delivered_again_each_say_what_they_used() -> None:
    entries = as_timeline(travel())
    usage = account(entries)
    repeated = usage.repeated()
    assert [[(r.activity, r.task_id, r.attempt, r.worker, r.ended) for r in runs]
            for runs in repeated] == [
        [(RUN_TOOL, 3, 1, A, "crashed"), (RUN_TOOL, 3, 2, B, "completed")],
        [(RUN_TOOL, 4, 1, A, "crashed"), (RUN_TOOL, 4, 2, B, "completed")],
        [(SUMMARIZE, 6, 1, B, "crashed"), (SUMMARIZE, 6, 2, C, "completed")]]
    # Each run starts at its own activity.started, signed or not in its records.
    starts = {(e.data["task_id"], e.data["attempt"]): e.seq for e in entries
              if e.kind == "activity.started"}
    assert all(r.started_seq == starts[(r.task_id, r.attempt)] for r in usage.runs)
    assert [r.words() for r in repeated[1]] == ["book_hotel: done 1", "book_hotel: skipped 1"]
    assert {r.ended for r in usage.runs} <= set(ENDED)
    assert [(r.activity, r.ended) for r in usage.runs if r.task_id in (0, 2, 5)] == [
        (CALL_LLM, "completed")] * 3
    assert usage.runs_of(repeated[0][0].key) == repeated[0]


def test_failed_calls_unreported_tokens_a_run_still_going_and_generations() -> None:
    b = Builder()
    b.add("workflow.started", A)
    base = {"activity": "agent.call_llm", "task_id": 1, "execution_id": "", "attempt": 1}
    b.add("activity.started", A, **base)
    b.add("llm.call", A, **base, model="m", prompt_tokens=5, completion_tokens=None,
          total_tokens=None, error_type="RateLimitError")
    b.add("activity.failed", A, **base)
    again = {**base, "attempt": 2}
    b.add("activity.started", A, **again)
    b.add("llm.call", A, **again, model="m", prompt_tokens=5, completion_tokens=2,
          total_tokens=7, error_type=None)
    b.add("activity.completed", A, **again)
    tool = {"activity": "agent.run_tool", "task_id": 2, "execution_id": "", "attempt": 1}
    b.add("activity.started", A, **tool)
    b.add("effect.intent", A, **tool, name="tool:pay", key="k")
    b.add("effect.failed", A, **tool, name="tool:pay", key="k", error_type="ValueError")
    b.add("effect.intent", A, **tool, name="email", key="k")  # not a tool: not counted
    b.add("workflow.continued_as_new", A)
    b.add("activity.started", B, **base)  # the next generation's task 1: another step
    b.add("llm.call", B, **base, model="m", prompt_tokens=1, completion_tokens=1,
          total_tokens=2)
    usage = account(b.entries)
    assert [(r.task_id, r.attempt, r.ended) for r in usage.runs] == [
        (1, 1, "failed"), (1, 2, "completed"), (2, 1, "no-outcome"), (1, 1, "no-outcome")]
    assert usage.llm.words() == ("3 LLM calls, 9 tokens (11 prompt, 3 completion); 1 with "
                                 "no token count reported; 1 failed")
    assert tools_of(usage) == {"pay": {"done": 0, "skipped": 0, "failed": 1,
                                       "unanswered": 0}}
    assert usage.crashes == ()
    assert len(usage.repeated()) == 1  # task 1 of the first generation, not the second's


def test_labels_keep_the_task_number_and_the_tool_at_20_plus_tasks() -> None:
    entries = as_timeline(travel(extra_turns=12))
    run, usage = analyse(entries), account(entries)
    assert len(run.steps) >= 30
    labels = {s.task_id: step_label(s, usage.runs_of(s.key)) for s in run.steps}
    for task, (shown, full) in labels.items():
        assert f"#{task}" in shown and len(shown) <= 38, shown
        assert f"(task {task})" in full
    assert labels[3][0] == "run_tool #3 book_flight"
    assert labels[29][0] == "run_tool #29 send_note"
    assert labels[28][0] == "call_llm #28 LLM 130 tok"
    assert labels[30][0] == "summarize #30 LLM ×2 280 tok"
    assert labels[30][1] == (f"{SUMMARIZE} (task 30): 2 LLM calls, 280 tokens (180 prompt, "
                             f"100 completion)")
    assert labels[1][0] == "run_tool #1"  # the read-only search: no tool record names it


def page(entries: list[TimelineEntry], limits: Limits | None = None) -> str:
    return render_instance_html("trip-1", entries, source="ledger sqlite:///x.db",
                                with_payloads=False, limits=limits).decode("utf-8")


def test_the_instance_page_names_tool_and_llm_calls_with_their_tokens() -> None:
    text = page(as_timeline(travel(extra_turns=10)))
    assert CSP in text and "<script" not in text
    assert not re.search(r"<[^>]+\son\w+=", text)  # no event handler attribute
    assert "Not verified" in text and "histaudit verify trip-1" in text
    # the picture: LLM calls marked with their tokens, tool calls named
    assert "entry 97: LLM call to stub-1: 140 tokens (90 prompt, 50 completion)" in text
    assert "side effect tool call book_flight [exec-3] about to be done" in text
    assert ">run_tool #25 send_note<" in text and ">summarize #26 LLM ×2 280 tok<" in text
    # the section in all, per crash, per run of a task delivered again
    usage = re.search(r"<section class=usage.*?</section>", text)
    assert usage
    rows = [[re.sub(r"<[^>]+>", "", c).replace("&nbsp;", " ") for c in
             re.findall(r"<td[^>]*>(.*?)</td>", r)]
            for r in re.findall(r"<tr[^>]*>(.*?)</tr>", usage.group(0))[1:]]
    assert rows[0] == ["all 29 run(s)", "15", "1,830", "290", "2,120",
                       "book_flight: done 1, 1 begun with no answer; book_hotel: done 1, "
                       "skipped 1; send_note: done 10"]
    assert rows[1][0].startswith(f"crash of worker {A}, runs it cut short: ")
    assert rows[1][1:] == ["0", "0", "0", "0", "book_flight: 1 begun with no answer; "
                                               "book_hotel: done 1"]
    assert rows[2][0] == (f"crash of worker {B}, runs it cut short: {SUMMARIZE} task 26: "
                          f"run #1 on {B} (crashed)")
    assert rows[2][1:] == ["1", "90", "50", "140", "no tool call"]
    assert [r[0] for r in rows[3:]] == [
        f"{RUN_TOOL} task 3: run #1 on {A} (crashed)",
        f"{RUN_TOOL} task 3: run #2 on {B} (completed)",
        f"{RUN_TOOL} task 4: run #1 on {A} (crashed)",
        f"{RUN_TOOL} task 4: run #2 on {B} (completed)",
        f"{SUMMARIZE} task 26: run #1 on {B} (crashed)",
        f"{SUMMARIZE} task 26: run #2 on {C} (completed)"]
    # the steps table: what each run of a step used
    steps = re.search(r"<section class=steps.*?</section>", text)
    assert steps and "LLM calls and tool calls, per run" in steps.group(0)
    hotel = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", steps.group(0))
                 if "task&nbsp;4<" in r)
    words = re.sub(r"<[^>]+>", "", hotel)
    assert f"run #1 on {A} (crashed): book_hotel: done 1" in words
    assert f"run #2 on {B} (completed): book_hotel: skipped 1" in words


def test_a_page_with_no_agent_says_so() -> None:
    b = Builder()
    b.add("workflow.started", A)
    b.step(1, "charge", A)
    text = page(b.entries)
    assert "No LLM call and no tool call was recorded." in text
    assert "no LLM call, no tool call" in text  # the line under the title


def test_the_runs_listed_are_bounded_and_the_page_says_how_many_more() -> None:
    text = page(as_timeline(travel()), Limits(table_steps=2))
    usage = re.search(r"<section class=usage.*?</section>", text)
    assert usage and usage.group(0).count("<tr class=retry>") == 2
    assert "4 more run(s) of tasks delivered again" in usage.group(0)
