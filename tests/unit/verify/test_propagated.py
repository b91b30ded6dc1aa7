"""verify.propagated: a propagated history against the signed chain of the instance it
came from — a real ledger, and events built with the SDK's own protobuf classes; the
real daprd delivery is in tests/integration/test_replay.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dapr.ext.workflow._durabletask.internal import history_events_pb2 as hpb

from histaudit.interceptor.recorder import AuditRecorder
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.verify.propagated import Chunk, check_propagated

PARENT = "parent-1"


def scheduled(task: int, name: str = "step") -> Any:
    e = hpb.HistoryEvent(eventId=task)
    e.taskScheduled.name = name
    return e


def completed(task: int, result: str) -> Any:
    e = hpb.HistoryEvent(eventId=-1)
    e.taskCompleted.taskScheduledId = task
    e.taskCompleted.result.value = result
    return e


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    """The parent's chain: steps 1 and 2 scheduled and completed, then child task 3."""
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        rec = AuditRecorder(ledger, KeyFileSigner.generate())
        for task in (1, 2):
            rec.append(PARENT, Kind.WORKFLOW_SCHEDULED_ACTIVITY,
                       {"activity": "step", "task_id": task})
            out = rec.commit(PARENT, f'"step-{task}"')
            rec.append(PARENT, Kind.ACTIVITY_COMPLETED,
                       {"activity": "step", "task_id": task, "output": out.ref}, out)
        rec.append(PARENT, Kind.WORKFLOW_SCHEDULED_CHILD,
                   {"child_workflow": "kid", "child_instance": "kid-1", "task_id": 3})
        rec.writer.flush()
        yield ledger


def check(ledger: Ledger, events: list[Any], cut: int | None = 3) -> Any:
    with ledger.snapshot() as snap:
        def entries(instance: str) -> list[Any]:
            from histaudit.ledger.records import parse_entry

            return [parse_entry(r.body) for r in snap.entries(instance)]

        return check_propagated([Chunk(PARENT, "app", "parent", events)], cut, entries,
                                snap.payload)


def history(two: str = '"step-2"') -> list[Any]:
    return [scheduled(1), completed(1, '"step-1"'), scheduled(2), completed(2, two)]


def test_what_the_parent_signed_is_clean(ledger: Ledger) -> None:
    result = check(ledger, history())
    assert (result.checked, result.unchecked, result.problems) == ((PARENT,), (), ())


def test_a_changed_result_is_a_problem(ledger: Ledger) -> None:
    (problem,) = check(ledger, history('"step-X"')).problems
    assert problem.startswith(f"{PARENT!r}: task 2's result (8 bytes) is not the output")


def test_a_result_the_parent_never_signed_is_a_problem(ledger: Ledger) -> None:
    (problem,) = check(ledger, [*history(), scheduled(9), completed(9, '"x"')]).problems
    assert "task 9 has a result (3 bytes) no signed activity.completed records" in problem


def test_a_history_cut_short_is_a_problem(ledger: Ledger) -> None:
    (problem,) = check(ledger, history()[:2]).problems
    assert problem.endswith("cut short: it lacks activity task 2, signed as scheduled "
                            "before task 3")
    # where the child was scheduled is unknown: the cut-off cannot be judged
    assert check(ledger, history()[:2], cut=None).problems == ()


def test_an_instance_the_ledger_does_not_hold_is_not_checked(ledger: Ledger) -> None:
    with ledger.snapshot() as snap:
        result = check_propagated([Chunk("elsewhere", "other-app", "w", history())], 3,
                                  lambda i: [], snap.payload)
    assert (result.checked, result.unchecked, result.problems) == ((), ("elsewhere",), ())
