"""How a workflow ended, when not a success (issue 48, item 7): ``workflow-failed`` with
the failure's error type and message, ``workflow-terminated``, and the engine's end the
ledger never signed (``verify --engine``). Cost: under 1 s of CPU."""

from __future__ import annotations

from typing import Any

import pytest

from histaudit import sdk
from histaudit.ledger import records
from histaudit.verify.behaviour import BehaviourCheck
from histaudit.verify.findings import Severity
from histaudit.verify.verifier import verify_chain

from .chains import INSTANCE, TRUST, chain, head_of
from .test_behaviour import entries, outcome

MESSAGE = "Activity task #3 failed: tool returned str,\n expected dict"
SALT = records.new_salt()
REF = {"c": records.commit(MESSAGE.encode(), SALT), "k": True, "n": len(MESSAGE)}
STORED = {REF["c"]: (SALT, MESSAGE.encode())}


def started(at: str = "t0") -> tuple[str, dict[str, Any]]:
    return ("workflow.started", {"workflow": "w", "started_at": at})


def failed(ref: Any = REF, error_type: Any = "TaskFailedError") -> tuple[str, dict[str, Any]]:
    return ("workflow.failed", {"error_type": error_type, "error": ref, "error_digest": "d"})


TERMINATED = ("workflow.terminated", {"received_at": "2026-12-01T10:00:09Z", "event_id": 7,
                                      "recurse": True, "payload": None})
COMPLETED = ("workflow.completed", {"output": None, "output_digest": None})


def verified(steps: list[tuple[str, dict[str, Any]]], payloads: dict[str, Any] | None = None,
             engine: list[Any] | None = None) -> Any:
    rows = chain(steps)
    return verify_chain(INSTANCE, rows, head_of(rows), trust=TRUST,
                        payload_lookup=None if payloads is None else payloads.get,
                        engine_history=engine,
                        engine_lookup=None if engine is None else (lambda _c: None))


def test_a_failed_workflow_is_a_warning_naming_its_entry_type_and_message() -> None:
    report = verified([started(), failed()], STORED)
    (f,) = report.findings
    assert (f.code, f.severity, f.seq, f.entries) == ("workflow-failed", Severity.WARNING,
                                                      2, (2,))
    assert f.message == ("the workflow failed (workflow.failed at entry 2): TaskFailedError: "
                         "Activity task #3 failed: tool returned str, expected dict")
    assert report.ok  # a warning: exit 0 at the default --fail-on error


@pytest.mark.parametrize(("payloads", "says"), [
    (None, "TaskFailedError; its message is a committed payload this verification did "
           "not read"),
    ({}, "TaskFailedError; its message is not stored (erased, or never kept)"),
    ({REF["c"]: (SALT, b"forged")}, "TaskFailedError; its stored message does not match "
                                    "what was signed"),
])
def test_a_message_is_quoted_only_as_signed(payloads: dict[str, Any] | None,
                                           says: str) -> None:
    report = verified([started(), failed()], payloads)
    (f,) = [f for f in report.findings if f.code == "workflow-failed"]
    assert f.message.endswith(says), f.message
    assert "forged" not in f.message
    # a stored message that is gone or altered is the payload check's finding as well
    assert report.codes() - {"workflow-failed"} <= {"payload-missing", "payload-mismatch"}


def test_a_long_message_is_clipped_and_a_missing_type_said_so() -> None:
    long = "x" * 1000
    salt = records.new_salt()
    ref = {"c": records.commit(long.encode(), salt), "n": 1000}
    (f,) = verified([started(), failed(ref, None)], {ref["c"]: (salt, long.encode())}).findings
    assert f.message.endswith(f"an error of no signed type: {'x' * 300}… (1000 chars)")


def test_a_terminated_workflow_is_informative_never_an_error() -> None:
    report = verified([started(), TERMINATED, ("payload.erased", {"commitment": "c"})])
    (f,) = report.findings
    assert (f.code, f.severity, f.seq) == ("workflow-terminated", Severity.INFO, 2)
    assert f.message == ("the workflow was terminated (workflow.terminated at entry 2, "
                         "received 2026-12-01T10:00:09Z): a client ended it there")
    assert report.ok and not report.failing(Severity.WARNING)


@pytest.mark.parametrize("steps", [
    [started(), COMPLETED],
    [started(), ("workflow.continued_as_new", {}), started("t1"), COMPLETED],
    [started(), failed(), started("t1")],  # run again after the failure: not ended (yet)
    [started(), failed(), started("t1"), COMPLETED],
    [started()],
])
def test_only_the_last_run_s_end_counts(steps: list[tuple[str, dict[str, Any]]]) -> None:
    assert verified(steps, STORED).findings == ()


def test_the_last_end_counts_in_memory_and_spilled() -> None:
    steps = [started(), *[("activity.started", {"task_id": i, "execution_id": "e",
                                                "activity": "a"}) for i in range(5)],
             ("workflow.continued_as_new", {}), started("t1"), failed()]
    found = [outcome(BehaviourCheck(INSTANCE, spill_at=at, payloads=STORED.get),
                     entries(steps)) for at in (1, 10**9)]
    assert found[0] == found[1] and [f.code for f in found[0]] == ["workflow-failed"]
    assert found[0][0].seq == len(steps)


# --- against the engine's history (verify --engine) -------------------------------------

def ended(status: int, error: tuple[str, str] | None = None) -> Any:
    p = sdk.protos
    details = None if error is None else p.TaskFailureDetails(errorType=error[0],
                                                              errorMessage=error[1])
    return p.HistoryEvent(eventId=-1, executionCompleted=p.ExecutionCompletedEvent(
        workflowStatus=status, failureDetails=details))


def engine_started() -> Any:
    return sdk.protos.HistoryEvent(eventId=-1, executionStarted=sdk.protos.ExecutionStartedEvent(
        name="w"))


def test_an_end_the_engine_holds_and_the_ledger_never_signed_is_a_finding() -> None:
    history = [engine_started(), ended(3, ("TaskFailedError", "Activity task #3 failed"))]
    report = verified([started()], engine=history)
    (f,) = report.findings
    assert (f.code, f.severity, f.seq) == ("engine-unsigned-completion", Severity.ERROR, None)
    assert f.message == (
        "the engine's history ends the workflow FAILED (event 1: TaskFailedError: Activity "
        "task #3 failed), but the ledger signed no workflow.completed or workflow.failed "
        "after its last workflow.started: it reads the workflow as still running")
    # the previous generation's end is not this run's
    steps = [started(), ("workflow.continued_as_new", {}), started("t1")]
    assert verified(steps, engine=[ended(1)]).codes() == {"engine-unsigned-completion"}


def test_a_terminate_the_ledger_never_heard_of_verifies_as_terminated() -> None:
    report = verified([started()], engine=[engine_started(), ended(5)])
    (f,) = report.findings
    assert (f.code, f.severity) == ("workflow-terminated", Severity.INFO)
    assert f.message == ("the engine's history ends the workflow TERMINATED (event 1), and "
                         "the ledger holds no workflow.terminated: a client ended it there")
    assert report.ok


@pytest.mark.parametrize(("steps", "status", "codes"), [
    ([started(), COMPLETED], 1, set()),
    ([started(), failed()], 3, {"workflow-failed"}),
    ([started(), TERMINATED], 5, {"workflow-terminated"}),  # once: the ledger's
    ([started()], 2, set()),  # continued as new: the engine's history goes on
    ([started()], None, set()),  # still running on both sides
])
def test_an_end_both_sides_hold_adds_nothing(steps: list[tuple[str, dict[str, Any]]],
                                             status: int | None, codes: set[str]) -> None:
    history = [engine_started()] + ([] if status is None else [ended(status)])
    report = verified(steps, engine=history)
    assert report.codes() == codes and len(report.findings) == len(codes)
