"""Both sides of a divergence in words: a history event, and what the code did instead."""

from __future__ import annotations

from typing import Any

TEXT_LIMIT = 300
"""Longest payload text shown in a description."""

def clip(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def value(wrapper: Any) -> str | None:
    """The text of a ``StringValue`` field, None when absent or empty (as the SDK reads it)."""
    return wrapper.value if wrapper is not None and wrapper.value != "" else None


def shown(text: str | None) -> str:
    return "no input" if text is None else clip(text)


STATUS = {  # pb.OrchestrationStatus -> the word this module reports
    0: "running", 1: "completed", 2: "continued-as-new", 3: "failed", 4: "canceled",
    5: "terminated", 6: "pending", 7: "suspended", 8: "stalled",
}


def status_word(code: int) -> str:
    return STATUS.get(code, f"status {code}")


# --- describing steps ------------------------------------------------------------------

def describe_event(event: Any) -> str:
    kind = event.WhichOneof("eventType")
    if kind == "taskScheduled":
        ev = event.taskScheduled
        return f"activity {ev.name!r} with {shown(value(ev.input))} (step #{event.eventId})"
    if kind == "childWorkflowInstanceCreated":
        ev = event.childWorkflowInstanceCreated
        return (f"child workflow {ev.name!r} with {shown(value(ev.input))} "
                f"(step #{event.eventId})")
    if kind == "timerCreated":
        return f"{_timer(event.timerCreated)} (step #{event.eventId})"
    if kind == "executionCompleted":
        return describe_end(event.executionCompleted)
    if kind in ("taskCompleted", "taskFailed", "childWorkflowInstanceCompleted",
                "childWorkflowInstanceFailed"):
        what = "activity" if kind.startswith("task") else "child workflow"
        how = "completed" if kind.endswith("Completed") else "failed"
        return f"{what} of step #{getattr(event, kind).taskScheduledId} {how}"
    if kind == "timerFired":
        return f"timer of step #{event.timerFired.timerId} fired"
    if kind == "eventRaised":
        return f"event {event.eventRaised.name!r} raised"
    if kind == "executionStarted":
        return f"workflow {event.executionStarted.name!r} started"
    if event.eventId < 0:
        return f"{kind} event"
    return f"{kind} event (step #{event.eventId})"


_ANSWERS = {"taskCompleted": "taskScheduledId", "taskFailed": "taskScheduledId",
            "childWorkflowInstanceCompleted": "taskScheduledId",
            "childWorkflowInstanceFailed": "taskScheduledId", "timerFired": "timerId"}


def unanswered(events: Any) -> list[str]:
    """The steps ``events`` schedule (activities, child workflows, timers) that they
    record no completion, failure or firing for, in words, in history order."""
    answered = {getattr(getattr(e, kind), field)
                for e in events for kind, field in _ANSWERS.items() if e.HasField(kind)}
    return [describe_event(e) for e in events
            if e.WhichOneof("eventType") in ("taskScheduled", "childWorkflowInstanceCreated",
                                             "timerCreated")
            and e.eventId not in answered]


def describe_action(action: Any) -> str:
    kind = action.WhichOneof("workflowActionType")
    if kind == "scheduleTask":
        a = action.scheduleTask
        return f"activity {a.name!r} with {shown(value(a.input))} (step #{action.id})"
    if kind == "createChildWorkflow":
        a = action.createChildWorkflow
        return f"child workflow {a.name!r} with {shown(value(a.input))} (step #{action.id})"
    if kind == "createTimer":
        return f"{_timer(action.createTimer)} (step #{action.id})"
    if kind == "completeWorkflow":
        return describe_end(action.completeWorkflow)
    return f"{kind} action (step #{action.id})"


_NO_TIMEOUT_YEAR = "9999-"
"""The SDK waits for an event without a timeout by a timer due in year 9999."""


def _timer(timer: Any) -> str:
    """A timer (created event or action) in words, by what it is for: its origin says
    whether it is a durable timer, an event's timeout or a retry's delay."""
    due = when(timer.fireAt)
    origin = timer.WhichOneof("origin")
    if origin == "externalEvent":
        name = timer.externalEvent.name
        if due.startswith(_NO_TIMEOUT_YEAR):
            return f"waiting for event {name!r} (no timeout)"
        return f"waiting for event {name!r}, timing out at {due}"
    if origin == "activityRetry":
        return f"retry delay of an activity, until {due}"
    if origin == "childWorkflowRetry":
        return f"retry delay of child workflow {timer.childWorkflowRetry.instanceId!r}, " \
               f"until {due}"
    return f"timer firing at {due}"


def describe_end(done: Any) -> str:
    status = status_word(done.workflowStatus)
    if done.workflowStatus == 3:  # failed
        fd = done.failureDetails
        return f"workflow {status}: {fd.errorType}: {clip(fd.errorMessage)}"
    result = value(done.result)
    return f"workflow {status} with result {shown(result) if result else 'none'}"


def when(ts: Any) -> str:
    return ts.ToJsonString() if ts.seconds or ts.nanos else "(unset)"
