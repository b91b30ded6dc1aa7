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
from histaudit.ledger.keys import Signer
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger

from .test_folds import INSTANCE, completed, engine_result, mismatches


@pytest.fixture
def recorder(db_url: str) -> Iterator[tuple[AuditRecorder, Ledger]]:
    ledger = Ledger.open(db_url, create=True)
    try:
        yield AuditRecorder(ledger, Signer.generate()), ledger
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
    assert check._checked_prefix(INSTANCE, [*committed, resent, second]) == 3
    # an equal but different object in the prefix ends what is taken as checked
    assert check._checked_prefix(INSTANCE, [*committed, second]) == 0
    # a full resend whose old result differs: new objects, so read and found out
    forged = [started_event(), engine_result(1, '"forged"'), engine_result(2, '"two"')]
    assert check.check_turn(INSTANCE, forged, []) == 1
    assert mismatches(ledger) == 1
    # the forged result is never part of a clean prefix: fed back again, looked at again
    assert check._checked_prefix(INSTANCE, forged) == 1
    assert check.check_turn(INSTANCE, forged, []) == 0  # recorded once only
    assert mismatches(ledger) == 1


def test_check_turn_rechecks_results_not_signed_yet(
        recorder: tuple[AuditRecorder, Ledger]) -> None:
    rec, ledger = recorder
    check = ReplayedResultCheck(rec)
    unsigned = engine_result(5, '"later"')
    committed = [started_event(), unsigned]
    assert check.check_turn(INSTANCE, committed, []) == 0  # nobody signed task 5: no claim
    assert check._checked_prefix(INSTANCE, committed) == 1  # ... and not taken as checked
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
    assert check._checked_prefix("another-instance", committed) == 0
    for i in range(check._MAX_PREFIXES + 1):
        check.check_turn(f"other-{i}", [started_event()], [])
    assert check._checked_prefix(INSTANCE, committed) == 0
    assert len(check._prefixes) <= check._MAX_PREFIXES


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
