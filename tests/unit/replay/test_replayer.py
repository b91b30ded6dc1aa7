"""Offline replay of golden histories recorded on the real engine — no engine needed here.

The files in tests/golden/histories/ were recorded by tests/golden/record_histories.py
from the workflows in examples/nondeterminism/workflows.py. Replaying them runs the Dapr
SDK's own orchestration executor (histaudit.replay), so these tests tell in CI whether
workflow code still replays the histories it produced, and name the difference when not.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from datetime import UTC, datetime
from typing import Any

import pytest
from examples.nondeterminism import v2, workflows

from histaudit.errors import InputError
from histaudit.replay import (
    DIFFERENT_ACTIVITY,
    DIFFERENT_INPUT,
    DIFFERENT_OUTCOME,
    History,
    assert_replays,
    replay,
)
from support.repo import HISTORIES, ORDER_HISTORY, read_json

ORDER = ORDER_HISTORY


# --- deterministic code replays its own history ------------------------------------------

@pytest.mark.parametrize("stem", ["order", "approval"])
def test_deterministic_workflow_replays_its_golden_history(stem: str) -> None:
    result = assert_replays(HISTORIES / f"{stem}.json", getattr(workflows, stem))
    assert result.ok and result.divergence is None and result.divergences == ()
    assert result.outcome == "completed"
    assert result.events == read_json(HISTORIES / f"{stem}.json")["count"]
    assert result.instance_id == f"golden-{stem}"
    assert "OK" in result.explain()


def test_a_refactoring_that_keeps_the_steps_replays() -> None:
    assert replay(ORDER, v2.order_refactored, "golden-order").ok


def test_workflow_may_be_given_as_mapping_or_runtime() -> None:
    import dapr.ext.workflow as wf

    assert replay(History.load(ORDER).events, {"order": workflows.order}).ok
    runtime = wf.WorkflowRuntime(host="127.0.0.1", port="1")
    runtime.register_workflow(v2.order_new_input)
    assert replay(ORDER, runtime).divergence.kind == DIFFERENT_INPUT  # type: ignore[union-attr]


def test_replay_leaves_the_function_registrable() -> None:
    """Replay must not mark the user's function as registered (the SDK refuses twice)."""
    import dapr.ext.workflow as wf

    assert replay(ORDER, workflows.order).ok
    assert replay(ORDER, workflows.order).ok
    wf.WorkflowRuntime(host="127.0.0.1", port="1").register_workflow(v2.order_refactored)


# --- changed code: one divergence of each kind, both sides shown ---------------------------

EXPECTED_SIDES = {  # variant -> (kind, text in the history side, text in the code side)
    "order_new_activity": ("different-activity", "activity 'charge'", "activity 'authorize'"),
    "order_new_input": ("different-input", '"amount": 42}', '"amount": 4200}'),
    "order_swapped": ("different-order", "activity 'reserve'", "activity 'charge'"),
    "order_new_result": ("different-outcome", '"at": "', '"status": "shipped"'),
    "order_timer_first": ("nondeterminism-error", "activity 'reserve'", "timer firing at"),
}


@pytest.mark.parametrize("variant", sorted(EXPECTED_SIDES))
def test_changed_code_diverges_with_a_clear_explanation(variant: str) -> None:
    kind, history_side, code_side = EXPECTED_SIDES[variant]
    assert v2.VARIANTS[variant] == kind
    result = replay(ORDER, getattr(v2, variant), "golden-order")
    assert not result.ok and not bool(result)
    d = result.divergence
    assert d is not None and d.kind == kind
    assert history_side in d.expected and code_side in d.actual, d
    assert code_side not in d.expected
    text = result.explain()
    assert f"DIVERGED: {kind}" in text and d.expected in text and d.actual in text
    doc = result.to_json()
    assert doc["ok"] is False and doc["divergence"]["kind"] == kind
    json.dumps(doc)  # serialisable as is
    with pytest.raises(AssertionError, match=kind):
        assert_replays(ORDER, getattr(v2, variant))


def test_the_sdk_would_miss_a_changed_input_but_replay_does_not() -> None:
    d = replay(ORDER, v2.order_new_input).divergence
    assert d is not None and d.event_id == 2 and d.index == 5
    assert "SDK does not check inputs" in d.message


def test_code_that_ends_early_is_a_different_outcome() -> None:
    def order(ctx: Any, o: dict[str, Any]) -> Generator[Any, Any, str]:
        yield ctx.call_activity(workflows.reserve, input=o)
        return "done early"

    d = replay(ORDER, order).divergence
    assert d is not None and d.kind == DIFFERENT_OUTCOME and d.event_id == 2
    assert "activity 'charge'" in d.expected and "done early" in d.actual


def test_code_that_goes_on_after_the_recorded_end_is_a_different_outcome() -> None:
    def order(ctx: Any, o: dict[str, Any]) -> Generator[Any, Any, Any]:
        result = yield from workflows.order(ctx, o)
        yield ctx.call_activity(workflows.ship, input="again")
        return result

    d = replay(ORDER, order).divergence
    assert d is not None and d.kind == DIFFERENT_OUTCOME
    assert "workflow completed" in d.expected and "activity 'ship'" in d.actual


def test_a_running_history_replays_clean_as_running() -> None:
    events = History.load(ORDER).events[:-3]  # drop the last turn: still waiting for ship
    result = replay(events, workflows.order)
    assert result.ok and result.outcome == "running"


def test_steps_past_the_end_of_a_running_history_are_the_codes_next_turn() -> None:
    """Past the last event of a history that has not ended, what the code schedules is
    its next turn, not a divergence: the engine records it once it has run that turn."""
    events = History.load(ORDER).events[:-3]
    events = [e for e in events if e.eventId != 3]  # the history ends at charge's completion
    result = replay(events, workflows.order)
    assert result.ok and not result.completed and result.outcome == "running"
    assert result.last_event == "activity of step #2 completed"
    assert result.waiting == () and result.next == ('activity \'ship\' with "A-17" (step #3)',)
    assert "next, today's code would: activity 'ship'" in result.explain()


def test_a_running_history_names_what_it_waits_for() -> None:
    result = replay(History.load(ORDER).events[:-3], workflows.order)
    assert result.waiting == ('activity \'ship\' with "A-17" (step #3)',) and result.next == ()
    assert result.output is None
    done = replay(ORDER, workflows.order)
    assert done.completed and done.output is not None and '"tracking-A-17"' in done.output


# --- non-deterministic code -----------------------------------------------------------------

def test_wall_clock_branch_diverges_once_the_clock_moved_on() -> None:
    doc = read_json(HISTORIES / "wall_clock.json")
    started = next(e for e in doc["events"] if "executionStarted" in e)
    deadline = datetime.fromisoformat(json.loads(started["executionStarted"]["input"])["deadline"])
    assert datetime.now(UTC) > deadline, "re-recorded seconds ago: run again in a moment"
    d = replay(HISTORIES / "wall_clock.json", workflows.wall_clock).divergence
    assert d is not None and d.kind == DIFFERENT_ACTIVITY
    assert "'fast_path'" in d.expected and "'slow_path'" in d.actual


def test_random_number_in_the_workflow_body_diverges() -> None:
    d = replay(HISTORIES / "dice.json", workflows.dice).divergence
    assert d is not None and d.kind == DIFFERENT_INPUT and "activity 'roll'" in d.actual


# --- histories that cannot be replayed -------------------------------------------------------

def test_history_of_another_workflow_is_bad_input() -> None:
    with pytest.raises(InputError, match=r"history is of workflow 'order'.*'dice' \(renamed "
                                         r"code replays under its recorded name: "
                                         r"@alternate_name\('order'\)\)"):
        replay(ORDER, workflows.dice)


def test_history_of_another_instance_is_bad_input() -> None:
    with pytest.raises(InputError, match="instance 'golden-order', not 'other'"):
        replay(ORDER, workflows.order, "other")


def test_empty_history_and_history_without_start_are_bad_input() -> None:
    with pytest.raises(InputError, match="empty"):
        replay([], workflows.order)
    events = [e for e in History.load(ORDER).events if not e.HasField("executionStarted")]
    with pytest.raises(InputError, match="ExecutionStarted"):
        replay(events, workflows.order)
