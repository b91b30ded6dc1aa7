"""verify.dapr_crosscheck: Dapr's signed history against the ledger, pure.

The events are real ``HistoryEvent`` protobufs built with the SDK's generated classes and
serialized, as daprd stores them; the ledger rows are well-formed signed chains
(tests/unit/verify/chains.py). The wire reader must read what the generated classes read.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit import sdk
from histaudit.ledger import records
from histaudit.verify.dapr_crosscheck import (
    crosscheck_dapr,
    instance_missing,
    parse_history_event,
    verify_with_ledger,
)
from histaudit.verify.dapr_history import DaprWorkflowRows
from histaudit.verify.findings import CODES, Severity

from .chains import INSTANCE, chain

pb = sdk.protos
SALT = b"s" * records.SALT_BYTES


def _ref(text: str) -> dict[str, Any]:
    raw = text.encode()
    return {"c": records.commit(raw, SALT), "n": len(raw)}


def _payloads(*texts: str) -> dict[str, tuple[bytes, bytes]]:
    return {_ref(t)["c"]: (SALT, t.encode()) for t in texts}


def _ev(event_id: int = -1, **member: Any) -> bytes:
    return pb.HistoryEvent(eventId=event_id, **member).SerializeToString()


def _scheduled(task: int, name: str, execution: str = "") -> bytes:
    return _ev(task, taskScheduled=pb.TaskScheduledEvent(name=name,
                                                         taskExecutionId=execution))


def _completed(task: int, result: str, execution: str = "") -> bytes:
    from google.protobuf import wrappers_pb2

    return _ev(taskCompleted=pb.TaskCompletedEvent(
        taskScheduledId=task, result=wrappers_pb2.StringValue(value=result),
        taskExecutionId=execution))


def _ended(result: str) -> bytes:
    from google.protobuf import wrappers_pb2

    return _ev(executionCompleted=pb.ExecutionCompletedEvent(
        workflowStatus=pb.ORCHESTRATION_STATUS_COMPLETED,
        result=wrappers_pb2.StringValue(value=result)))


START = _ev(executionStarted=pb.ExecutionStartedEvent(name="wf"))
FULL = [START, _scheduled(1, "greet"), _completed(1, '"hi"'), _scheduled(2, "shout"),
        _completed(2, '"HI!"'), _ended('{"a": 1}')]


def _ledger(*, end: bool = True, shout: bool = True) -> list[records.StoredEntry]:
    steps: list[tuple[str, dict[str, Any]]] = [
        ("workflow.started", {"workflow": "wf"}),
        ("activity.started", {"activity": "greet", "task_id": 1, "attempt": 1}),
        ("activity.completed", {"activity": "greet", "task_id": 1, "output": _ref('"hi"')}),
    ]
    if shout:
        steps += [("activity.started", {"activity": "shout", "task_id": 2, "attempt": 1}),
                  ("activity.completed", {"activity": "shout", "task_id": 2,
                                          "output": _ref('"HI!"')})]
    if end:
        steps.append(("workflow.completed", {"workflow": "wf", "output": _ref('{"a": 1}')}))
    return chain(steps)


LOOKUP = _payloads('"hi"', '"HI!"', '{"a": 1}').get


def _codes(findings: list[Any]) -> list[str]:
    return sorted(f.code for f in findings)


def test_the_wire_reader_reads_what_the_generated_classes_read() -> None:
    for i, raw in enumerate([*FULL, _scheduled(3, "x", "exec-3"), _completed(3, "", "exec-3")]):
        mine, theirs = parse_history_event(raw, i), pb.HistoryEvent.FromString(raw)
        assert mine.event_id == theirs.eventId and mine.index == i
        kind = theirs.WhichOneof("eventType")
        assert mine.kind == (kind if kind != "executionStarted" else "other")
        assert mine.HasField("taskCompleted") == theirs.HasField("taskCompleted")
        if mine.taskCompleted is not None:
            assert mine.taskCompleted.taskScheduledId == theirs.taskCompleted.taskScheduledId
            assert mine.taskCompleted.result.value == theirs.taskCompleted.result.value
            assert mine.taskCompleted.taskExecutionId == theirs.taskCompleted.taskExecutionId
        if mine.taskScheduled is not None:
            assert mine.taskScheduled.taskExecutionId == theirs.taskScheduled.taskExecutionId
    assert parse_history_event(FULL[-1], 5).result == '{"a": 1}'


def test_a_complete_history_agrees_with_its_ledger() -> None:
    assert crosscheck_dapr(INSTANCE, FULL, _ledger(), LOOKUP) == []


def test_a_history_cut_before_the_end_is_behind_the_ledger() -> None:
    findings = crosscheck_dapr(INSTANCE, FULL[:3], _ledger(), LOOKUP)
    assert _codes(findings) == ["dapr-history-behind-ledger", "dapr-history-behind-ledger",
                                "engine-missing-completion"]
    by_task = {f.task_id: f for f in findings if f.code == "dapr-history-behind-ledger"}
    assert by_task[2].activity == "shout" and by_task[2].entries == (4, 5)
    assert "never scheduled" in by_task[2].message
    assert by_task[None].seq == 6 and "ExecutionCompleted" in by_task[None].message
    assert all(f.severity is Severity.ERROR for f in by_task.values())


def test_only_the_end_missing_is_said_as_such() -> None:
    findings = crosscheck_dapr(INSTANCE, FULL[:5], _ledger(), LOOKUP)
    assert _codes(findings) == ["dapr-history-behind-ledger"]
    assert findings[0].seq == 6 and "workflow.completed" in findings[0].message


def test_a_running_instance_whose_history_is_ahead_of_nothing_is_clean() -> None:
    """The ledger has not got further than Dapr: nothing to say (a scheduled task whose
    completion is not signed yet is in flight)."""
    assert crosscheck_dapr(INSTANCE, FULL[:4], _ledger(end=False, shout=False), LOOKUP) == []


def test_a_different_completion_result_or_workflow_result_is_a_mismatch() -> None:
    changed = [*FULL[:4], _completed(2, '"HO!"'), _ended('{"a": 2}')]
    findings = crosscheck_dapr(INSTANCE, changed, _ledger(), LOOKUP)
    assert _codes(findings) == ["replay-mismatch", "replay-mismatch"]
    assert {f.seq for f in findings} == {5, 6}


def test_a_completion_of_another_execution_than_the_scheduled_one_is_a_mismatch() -> None:
    """The task's result is a signed output, but of execution x2 where the history
    scheduled y2 (daprd 1.18.3 can resolve a continued-as-new generation's task with the
    late result of the previous generation's task of the same id)."""
    def history(execution: str) -> list[bytes]:
        return [*FULL[:3], _scheduled(2, "shout", "y2"), _completed(2, '"HI!"', execution),
                FULL[5]]

    findings = crosscheck_dapr(INSTANCE, history("x2"), _ledger(), LOOKUP)
    assert _codes(findings) == ["replay-mismatch"]
    assert findings[0].task_id == 2 and findings[0].severity is Severity.ERROR
    assert "result of execution x2" in findings[0].message
    assert "not of execution y2 that the history scheduled" in findings[0].message
    assert crosscheck_dapr(INSTANCE, history("y2"), _ledger(), LOOKUP) == []
    assert crosscheck_dapr(INSTANCE, history(""), _ledger(), LOOKUP) == []  # names none


def test_a_completion_the_ledger_never_signed_is_unsigned() -> None:
    findings = crosscheck_dapr(INSTANCE, FULL, _ledger(end=False, shout=False),
                               LOOKUP)
    assert _codes(findings) == ["engine-unsigned-completion", "engine-unsigned-completion"]


def test_an_erased_payload_of_the_same_size_is_unverifiable_not_a_mismatch() -> None:
    findings = crosscheck_dapr(INSTANCE, FULL, _ledger(), lambda _c: None)
    assert _codes(findings) == ["engine-completion-unverifiable"] * 2
    assert all(f.severity is Severity.INFO for f in findings)


def test_a_signed_event_that_is_not_a_history_event_is_malformed() -> None:
    findings = crosscheck_dapr(INSTANCE, [*FULL, b"\xff\xff"], _ledger(), LOOKUP)
    assert _codes(findings) == ["dapr-record-malformed"]


def test_only_the_generation_after_continue_as_new_is_compared() -> None:
    old = chain([("workflow.started", {}),
                 ("activity.completed", {"activity": "old", "task_id": 7,
                                         "output": _ref('"x"')}),
                 ("workflow.continued_as_new", {}),
                 ("workflow.started", {}),
                 ("activity.started", {"activity": "greet", "task_id": 1})])
    assert crosscheck_dapr(INSTANCE, FULL[:2], old, LOOKUP) == []
    assert crosscheck_dapr(INSTANCE, [START], old[:3], LOOKUP) == []  # nothing yet
    findings = crosscheck_dapr(INSTANCE, [START], old, LOOKUP)
    assert [(f.code, f.task_id) for f in findings] == [("dapr-history-behind-ledger", 1)]


def test_a_missing_instance_and_the_whole_check() -> None:
    missing = instance_missing(INSTANCE, 6)
    assert missing.code == "dapr-instance-missing" and CODES[missing.code][0] is Severity.ERROR
    assert "6 entries" in missing.message
    result = verify_with_ledger(INSTANCE, None, [], _ledger(), LOOKUP)
    assert result.history is None and _codes(result.findings) == ["dapr-instance-missing"]
    # rows with no signature: Dapr's signed history is empty, so all the ledger holds
    # is missing from it
    unsigned = DaprWorkflowRows(INSTANCE, dict(enumerate(FULL)), {}, {})
    result = verify_with_ledger(INSTANCE, unsigned, [], _ledger(), LOOKUP)
    assert result.history is not None and result.history.verified == 0
    assert "dapr-history-uncovered" in _codes(result.findings)
    assert _codes(result.crosscheck).count("dapr-history-behind-ledger") == 3


@pytest.mark.parametrize("code", ["dapr-history-behind-ledger", "dapr-instance-missing"])
def test_the_new_codes_are_integrity_errors(code: str) -> None:
    from histaudit.verify.findings import GROUPS, Group

    assert CODES[code][0] is Severity.ERROR and GROUPS[code] is Group.INTEGRITY


def _sorted_then_cut(rows: list[Any], instance: str) -> list[Any]:
    """The generation as the cross-check first found it, holding every entry: parse, sort
    by seq (stable), keep what follows the last continue-as-new. The oracle of the test
    below."""
    from histaudit.errors import FormatError
    from histaudit.ledger.kinds import Kind

    parsed = []
    for row in rows:
        try:
            e = records.parse_entry(row.body)
        except FormatError:
            continue
        if e.instance == instance:
            parsed.append(e)
    parsed.sort(key=lambda e: e.seq)
    last = max((i for i, e in enumerate(parsed)
                if e.kind == Kind.WORKFLOW_CONTINUED_AS_NEW), default=None)
    return parsed if last is None else parsed[last + 1:]


_STEP = st.tuples(st.integers(1, 12),  # seq: repeats and any order, as in a forged ledger
                  st.sampled_from(["workflow.continued_as_new", "activity.started",
                                   "activity.completed", "malformed"]),
                  st.sampled_from([INSTANCE, INSTANCE, "other"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=30))
def test_the_generation_is_read_in_one_pass_as_sorting_all_of_it_would_find_it(
        steps: list[tuple[int, str, str]]) -> None:
    # dapr-verify --db streams the rows instead of listing them: the one pass, holding
    # only what is not below the newest continue-as-new, must pick exactly the entries,
    # in exactly the order, that sorting the whole instance and cutting it did
    from histaudit.verify.dapr_crosscheck import _generation

    from .chains import dumps, entry_doc, stored

    rows = []
    for i, (seq, kind, instance) in enumerate(steps):
        body = (b'{"not": "an entry"}' if kind == "malformed" else
                dumps(entry_doc(seq, i, "0" * 64, kind, {"task_id": i}, instance=instance)))
        rows.append(stored(body, leaf=i, seq=seq, instance=instance))
    got = _generation(iter(rows), INSTANCE)
    assert [(e.seq, e.leaf) for e in got] == \
        [(e.seq, e.leaf) for e in _sorted_then_cut(rows, INSTANCE)]
