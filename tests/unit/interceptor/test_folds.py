"""The recorder's folds stay exact when this process's own appends are folded in without a
read, and the live replay check reads the chain again before it accuses anyone.

Two recorders on one ledger file (one key, like two replicas of an app) stand for two
processes: each has its own connection pool, so neither sees the other's appends except
through the database. Both ledgers are real (SQLite on disk, or PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dapr.ext.workflow._durabletask.internal import history_events_pb2 as pb

from histaudit.interceptor.recorder import AuditRecorder
from histaudit.interceptor.replaycheck import ReplayedResultCheck
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger

INSTANCE = "wf-folds"


@pytest.fixture
def pair(db_url: str) -> Iterator[tuple[AuditRecorder, AuditRecorder, Ledger]]:
    signer = KeyFileSigner.generate()
    first = Ledger.open(db_url, create=True)
    second = Ledger.open(db_url)
    try:
        yield AuditRecorder(first, signer), AuditRecorder(second, signer), first
    finally:
        first.close()
        second.close()


def started(rec: AuditRecorder, task_id: int) -> int:
    entry = rec.append(INSTANCE, Kind.ACTIVITY_STARTED, {
        "activity": "a", "task_id": task_id, "execution_id": f"x{task_id}", "attempt": 1})
    return entry.seq


def completed(rec: AuditRecorder, task_id: int, text: str) -> None:
    out = rec.commit(INSTANCE, text)
    rec.append(INSTANCE, Kind.ACTIVITY_COMPLETED, {
        "activity": "a", "task_id": task_id, "execution_id": f"x{task_id}",
        "output": out.ref, "output_digest": out.digest}, out)


def engine_result(task_id: int, text: str) -> pb.HistoryEvent:
    event = pb.HistoryEvent(eventId=task_id + 100)
    event.taskCompleted.taskScheduledId = task_id
    event.taskCompleted.taskExecutionId = f"x{task_id}"
    event.taskCompleted.result.value = text
    return event


def mismatches(ledger: Ledger) -> int:
    return sum(1 for row in ledger.entries(INSTANCE) if b'"replay.mismatch"' in row.body)


def test_own_appends_keep_the_fold_exact(pair: tuple[AuditRecorder, AuditRecorder, Ledger]
                                        ) -> None:
    a, b, _ = pair
    assert a.prior_starts(INSTANCE, "x1", 1) == 0   # the fold exists from here on
    started(a, 1)
    started(a, 1)
    assert a.prior_starts(INSTANCE, "x1", 1) == 2
    started(b, 1)                                   # another process, between A's appends
    assert a.prior_starts(INSTANCE, "x1", 1) == 3   # read, not guessed from memory
    started(a, 2)                                   # folded behind a gap: read next time
    started(b, 2)
    assert a.prior_starts(INSTANCE, "x2", 2) == 2
    assert b.prior_starts(INSTANCE, "x1", 1) == 3


def test_interleaved_threads_leave_no_hole(pair: tuple[AuditRecorder, AuditRecorder, Ledger]
                                          ) -> None:
    """An own entry that does not follow the fold's last seq (another thread's entry
    committed in between, not folded yet) is left to the next read, not folded over the
    hole."""
    a, _, ledger = pair
    assert a.prior_starts(INSTANCE, "x1", 1) == 0
    # an entry written around the recorder (as another thread's GroupWriter batch could be)
    a.writer.append(INSTANCE, Kind.ACTIVITY_STARTED, {"task_id": 1, "execution_id": "x1"})
    started(a, 1)
    assert a.prior_starts(INSTANCE, "x1", 1) == 2
    assert [row.seq for row in ledger.entries(INSTANCE)] == [1, 2]


def test_replay_check_reads_before_it_accuses(
        pair: tuple[AuditRecorder, AuditRecorder, Ledger]) -> None:
    a, b, ledger = pair
    check = ReplayedResultCheck(a)
    completed(a, 7, '"first"')
    assert check.check(INSTANCE, [engine_result(7, '"first"')]) == 0
    # B re-ran task 7 and signed another result; the engine kept B's. A's memory holds only
    # its own completion, so the result looks foreign until the chain is read again.
    completed(b, 7, '"second"')
    assert check.check(INSTANCE, [engine_result(7, '"second"')]) == 0
    assert mismatches(ledger) == 0
    # a result nobody signed is recorded once, however often it is fed back
    assert check.check(INSTANCE, [engine_result(7, '"forged"')]) == 1
    assert check.check(INSTANCE, [engine_result(7, '"forged"')]) == 0
    assert mismatches(ledger) == 1


def test_replay_check_remembers_long_results_by_digest(
        pair: tuple[AuditRecorder, AuditRecorder, Ledger]) -> None:
    a, _, ledger = pair
    check = ReplayedResultCheck(a)
    long_text = '"' + "x" * 500 + '"'
    completed(a, 3, long_text)
    assert check.check(INSTANCE, [engine_result(3, long_text)]) == 0
    changed = long_text[:-2] + 'y"'
    assert check.check(INSTANCE, [engine_result(3, changed)]) == 1
    assert check.check(INSTANCE, [engine_result(3, long_text)]) == 0
    assert mismatches(ledger) == 1
