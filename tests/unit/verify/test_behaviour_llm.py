"""histaudit.verify.behaviour_llm: what crashes cost in LLM calls, from signed
``llm.call`` entries, through the verifier's fast scan. Cost: < 1 s (signed chains in
memory, no engine).

The agent-level tests (tests/agents/test_durable_agent.py) make these entries with a real
DurableAgent on daprd; here each pattern is built exactly, so the wording, the counting of
calls and tokens, and the cases that must *not* be findings are pinned.
"""

from __future__ import annotations

from typing import Any

from histaudit.verify.verifier import verify_chain

from .chains import INSTANCE, TRUST, chain, head_of

CALL_LLM, SUMMARIZE = "dapr.agents.a.call_llm", "dapr.agents.a.summarize"


def start(task: int, attempt: int, activity: str = CALL_LLM) -> tuple[str, dict[str, Any]]:
    return "activity.started", {"activity": activity, "task_id": task, "attempt": attempt,
                                "execution_id": f"e{task}", "worker": "w:1"}


def call(task: int, started_seq: int, *, messages: int = 2, tokens: int | None = 15,
         activity: str = CALL_LLM) -> tuple[str, dict[str, Any]]:
    return "llm.call", {"activity": activity, "task_id": task, "execution_id": f"e{task}",
                        "attempt": 1, "worker": "w:1", "started_seq": started_seq,
                        "model": "stub-1", "messages": messages, "prompt_tokens": None,
                        "completion_tokens": None, "total_tokens": tokens,
                        "tool_calls": [], "finish_reason": "stop", "error_type": None,
                        "answer": None, "answer_digest": None}


def findings(steps: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    rows = chain(steps)
    return [f for f in verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST).findings
            if f.code in ("llm-call-repeated", "conversation-restarted")]


def test_calls_made_again_by_a_re_execution_are_what_the_crash_cost() -> None:
    found = findings([start(3, 1), call(3, 1), call(3, 1, tokens=7),
                      start(3, 2), call(3, 4, tokens=20)])
    assert [f.code for f in found] == ["llm-call-repeated"]
    f = found[0]
    assert (f.seq, f.entries, f.task_id, f.activity) == (2, (2, 3), 3, CALL_LLM)
    assert "in 2 executions: the crash cost 2 LLM calls and 22 tokens of stub-1" in f.message
    assert "the answer used is from entry 5" in f.message


def test_a_re_execution_that_found_its_answer_recorded_cost_nothing() -> None:
    """dapr-agents' call_llm with a state store: the second delivery returns the
    recorded message without calling; only one execution called."""
    assert findings([start(3, 1), call(3, 1), start(3, 2)]) == []


def test_calls_with_no_token_count_are_counted_and_said_to_be_unreported() -> None:
    found = findings([start(9, 1, SUMMARIZE), call(9, 1, tokens=None, activity=SUMMARIZE),
                      start(9, 2, SUMMARIZE), call(9, 3, tokens=None, activity=SUMMARIZE)])
    assert len(found) == 1
    assert "the crash cost 1 LLM call (1 call with no token count reported)" in \
        found[0].message


def test_a_conversation_that_shrank_is_a_restart() -> None:
    found = findings([start(2, 1), call(2, 1, messages=2), start(5, 1),
                      call(5, 3, messages=4), start(8, 1), call(8, 5, messages=1)])
    assert [f.code for f in found] == ["conversation-restarted"]
    f = found[0]
    assert (f.seq, f.entries, f.task_id) == (6, (2, 4, 6), 8)
    assert "(task 8) sent the LLM 1 message after task 5 had sent 4 (entry 4)" in f.message
    # the conversation it lost: both earlier calls, priced (issue 48: they were not)
    assert f.message.endswith("; the conversation it lost cost 2 LLM calls and 30 tokens "
                              "(entries 2, 4)")


def test_a_restart_and_a_repeated_execution_count_each_lost_call_once() -> None:
    """Task 5's first execution called (7 tokens) and crashed; its re-execution called
    again (9), and the agent, its conversation lost, restarted at task 8: the restart
    prices task 2's call and the re-execution's, not the first execution's, which
    llm-call-repeated prices. 3 calls, 7 + 15 + 9 = 31 tokens thrown away in all."""
    found = findings([start(2, 1), call(2, 1, messages=2),
                      start(5, 1), call(5, 3, messages=4, tokens=7),
                      start(5, 2), call(5, 5, messages=4, tokens=9),
                      start(8, 1), call(8, 7, messages=1, tokens=11)])
    repeated, restarted = found
    assert repeated.code == "llm-call-repeated" and "cost 1 LLM call and 7 tokens" in \
        repeated.message
    assert restarted.code == "conversation-restarted"
    assert restarted.message.endswith(
        "the conversation it lost cost 2 LLM calls and 24 tokens (entries 2, 6; 1 more "
        "counted by llm-call-repeated)")
    assert restarted.entries == (2, 6, 8)


def test_what_is_not_a_restart() -> None:
    # summarize is another activity: its short request says nothing about call_llm's
    assert findings([start(2, 1), call(2, 1, messages=6), start(9, 1, SUMMARIZE),
                     call(9, 3, messages=1, activity=SUMMARIZE)]) == []
    # a re-execution of the same task (its conversation was read again) is not a restart
    assert [f.code for f in findings([start(5, 1), call(5, 1, messages=4), start(5, 2),
                                      call(5, 3, messages=3)])] == ["llm-call-repeated"]
    # a new generation (continue-as-new) starts its own conversation and task ids
    gen = [("workflow.started", {"started_at": "2026-12-01T00:00:00Z"}), start(5, 1),
           call(5, 2, messages=4), ("workflow.started", {"started_at": "2026-12-01T00:01:00Z"}),
           start(7, 1), call(7, 5, messages=1)]
    assert findings(gen) == []
