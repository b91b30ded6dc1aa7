"""The replayed path's shortcuts answer exactly what the full path would.

``ReplayedResultCheck.check_turn`` skips the events of a turn's committed history that
are the very objects it found clean last turn, and reads everything else; the recorder's
``knows_decision`` answers from memory only what the chain is known to hold.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dapr.ext.workflow._durabletask.internal import history_events_pb2 as pb

from histaudit.interceptor.recorder import AuditRecorder
from histaudit.interceptor.replaycheck import ReplayedResultCheck
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import parse_entry
from histaudit.ledger.store import Ledger

from .test_folds import INSTANCE, completed, engine_result, mismatches


@pytest.fixture
def recorder(db_url: str) -> Iterator[tuple[AuditRecorder, Ledger]]:
    ledger = Ledger.open(db_url, create=True)
    try:
        yield AuditRecorder(ledger, KeyFileSigner.generate()), ledger
    finally:
        ledger.close()


def started_event() -> pb.HistoryEvent:
    event = pb.HistoryEvent(eventId=-1)
    event.workflowStarted.SetInParent()
    return event


def test_check_turn_skips_only_the_objects_it_found_clean(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    rec, ledger = recorder
    check = ReplayedResultCheck(rec)
    completed(rec, 1, '"one"')
    completed(rec, 2, '"two"')
    first, second = engine_result(1, '"one"'), engine_result(2, '"two"')
    committed = [started_event(), first]
    assert check.check_turn(INSTANCE, committed, [second]) == 0
    # next turn (a delta): the same objects, then the last turn's new event, resent
    resent = engine_result(2, '"two"')
    assert check.check_turn(INSTANCE, [*committed, resent], []) == 0
    assert check._checked_prefix(INSTANCE, [*committed, resent, second])[0] == 3
    # an equal but different object in the prefix ends what is taken as checked
    assert check._checked_prefix(INSTANCE, [*committed, second])[0] == 0
    # a full resend whose old result differs: new objects, so read and found out
    forged = [started_event(), engine_result(1, '"forged"'), engine_result(2, '"two"')]
    assert check.check_turn(INSTANCE, forged, []) == 1
    assert mismatches(ledger) == 1
    # the forged result is never part of a clean prefix: fed back again, looked at again
    assert check._checked_prefix(INSTANCE, forged)[0] == 1
    assert check.check_turn(INSTANCE, forged, []) == 0  # recorded once only
    assert mismatches(ledger) == 1


def test_check_turn_rechecks_results_not_signed_yet(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    rec, ledger = recorder
    check = ReplayedResultCheck(rec)
    unsigned = engine_result(5, '"later"')
    committed = [started_event(), unsigned]
    assert check.check_turn(INSTANCE, committed, []) == 0  # nobody signed task 5: no claim
    assert check._checked_prefix(INSTANCE, committed)[0] == 1  # ... and not taken as checked
    completed(rec, 5, '"other"')
    assert check.check_turn(INSTANCE, committed, []) == 1
    assert mismatches(ledger) == 1


def test_check_turn_memory_is_per_instance_and_bounded(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    rec, _ = recorder
    check = ReplayedResultCheck(rec)
    completed(rec, 1, '"one"')
    committed = [started_event(), engine_result(1, '"one"')]
    check.check_turn(INSTANCE, committed, [])
    assert check._checked_prefix("another-instance", committed)[0] == 0
    for i in range(check._MAX_PREFIXES + 1):
        check.check_turn(f"other-{i}", [started_event()], [])
    assert check._checked_prefix(INSTANCE, committed)[0] == 0
    assert len(check._prefixes) <= check._MAX_PREFIXES


def scheduled_event(task_id: int, execution: str) -> pb.HistoryEvent:
    event = pb.HistoryEvent(eventId=task_id)
    event.taskScheduled.name = "a"
    event.taskScheduled.taskExecutionId = execution
    return event


def other_execution_result(task_id: int, execution: str, text: str) -> pb.HistoryEvent:
    event = engine_result(task_id, text)
    event.taskCompleted.taskExecutionId = execution
    return event


def recorded_mismatches(ledger: Ledger) -> list[dict[str, object]]:
    return [e.data for e in (parse_entry(row.body) for row in ledger.entries(INSTANCE))
            if e.kind == Kind.REPLAY_MISMATCH]


def test_a_result_of_another_execution_of_the_task_id_is_a_mismatch(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    """CI saw daprd resolve a continued-as-new generation's task 0 with the late result of
    the previous generation's task 0: a signed output, but of execution x0, where the
    history scheduled execution y0. It is recorded even though this process found that
    result good for x0 before, and even when the schedule was read a turn earlier."""
    rec, ledger = recorder
    check = ReplayedResultCheck(rec)
    completed(rec, 0, '"in transit"')  # generation 2's task 0: execution x0
    assert check.check_turn(INSTANCE, [started_event()], [engine_result(0, '"in transit"')]
                            ) == 0  # generation 2 reads it: good, and remembered as good
    # generation 3 scheduled task 0 anew (execution y0) in the turn before; the late
    # result of x0 arrives now
    gen3 = [started_event(), scheduled_event(0, "y0")]
    assert check.check_turn(INSTANCE, gen3, []) == 0
    late = other_execution_result(0, "x0", '"in transit"')
    assert check.check_turn(INSTANCE, gen3, [late]) == 1
    [data] = recorded_mismatches(ledger)
    assert (data["task_id"], data["execution_id"], data["scheduled_execution_id"]) == (
        0, "x0", "y0")
    assert data["completed_seq"] == 1 and data["expected_digest"] is None
    assert data["activity"] == "a"
    # replayed on every later turn: never taken as clean, and recorded once only
    assert check.check_turn(INSTANCE, [*gen3, late], []) == 0
    assert check._checked_prefix(INSTANCE, [*gen3, late])[0] == 2
    assert len(recorded_mismatches(ledger)) == 1
    # a fresh process (no memory) reads the whole history and still records nothing new
    assert ReplayedResultCheck(rec).check_turn(INSTANCE, [*gen3, late], []) == 0
    assert len(recorded_mismatches(ledger)) == 1


def test_the_scheduled_execution_result_is_judged_as_before(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    """A result whose execution is the one scheduled, or that names none (an engine
    without execution ids), is compared with the signed output as before."""
    rec, ledger = recorder
    check = ReplayedResultCheck(rec)
    completed(rec, 3, '"three"')
    history = [started_event(), scheduled_event(3, "x3")]
    assert check.check_turn(INSTANCE, history, [engine_result(3, '"three"')]) == 0
    unnamed = other_execution_result(3, "", '"three"')
    assert check.check_turn(INSTANCE, [started_event(), scheduled_event(3, "")],
                            [unnamed]) == 0
    assert check.check_turn(INSTANCE, history, [engine_result(3, '"forged"')]) == 1
    [data] = recorded_mismatches(ledger)
    assert "scheduled_execution_id" not in data


def test_knows_decision_answers_only_from_what_the_chain_holds(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    rec, _ = recorder
    token = ("activity", "exec-1")
    assert not rec.knows_decision(INSTANCE, token)
    rec.append(INSTANCE, Kind.WORKFLOW_SCHEDULED_ACTIVITY, {
        "workflow": "w", "activity": "a", "task_id": 1, "execution_id": "exec-1"})
    assert not rec.knows_decision(INSTANCE, token)  # not read yet: memory cannot say
    assert rec.has_decision(INSTANCE, token)  # read
    assert rec.knows_decision(INSTANCE, token)
    assert not rec.knows_decision("another-instance", token)
    assert not rec.knows_decision(INSTANCE, ("activity", "exec-2"))
