"""The SDK's own workflow executor, comparing each step with the history first.

The SDK refuses a replayed step whose *type* or activity *name* differs from the
history, but not a different *input*; :class:`CheckingExecutor` looks at the actions the
code produced (by sequence id) before the SDK consumes them and records every
:class:`~histaudit.replay.replayer.Divergence`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from histaudit import sdk

from . import describe
from .result import (
    DIFFERENT_ACTIVITY,
    DIFFERENT_INPUT,
    DIFFERENT_ORDER,
    DIFFERENT_OUTCOME,
    NONDETERMINISM_ERROR,
    Divergence,
)

_log = logging.getLogger("histaudit.replay")
_log.setLevel(logging.WARNING)  # the SDK formats per-event debug summaries below DEBUG

class _Scheduled:
    """What the history schedules, by sequence id, for classifying a divergence."""

    def __init__(self, events: Sequence[Any]) -> None:
        self.by_id: dict[int, tuple[str, str | None]] = {}
        for event in events:
            if event.HasField("taskScheduled"):
                ev = event.taskScheduled
                self.by_id[event.eventId] = (ev.name, describe.value(ev.input))
            elif event.HasField("childWorkflowInstanceCreated"):
                ev = event.childWorkflowInstanceCreated
                self.by_id[event.eventId] = (ev.name, describe.value(ev.input))

    def later(self, event_id: int) -> list[tuple[str, str | None]]:
        return [step for eid, step in self.by_id.items() if eid > event_id]


_STEP_ACTION = {"taskScheduled": "scheduleTask",
                "childWorkflowInstanceCreated": "createChildWorkflow",
                "timerCreated": "createTimer"}


class CheckingExecutor:
    """The SDK's executor (:func:`histaudit.sdk.hooked_executor`), comparing each step
    with the history before the SDK does."""

    def __init__(self, registry: Any, events: Sequence[Any]) -> None:
        self._sdk = sdk.hooked_executor(registry, _log, self)
        self.divergences: list[Divergence] = []
        self._index = {id(e): i for i, e in enumerate(events)}
        # The recorded outcome: (index, ExecutionCompleted event), or None while running.
        # Looked up front: the SDK stops feeding events at the first exception.
        self.completed: tuple[int, Any] | None = next(
            ((i, e) for i, e in enumerate(events) if e.HasField("executionCompleted")),
            None)
        self.refused = False  # the SDK refused the replay part-way
        self.context: Any = None
        """The SDK's orchestration context of the replay (set at its first event)."""
        self._scheduled = _Scheduled(events)
        self._diverged_at: set[int] = set()
        self._pending: Any = None

    def execute(self, instance: str, old: Sequence[Any], new: Sequence[Any]) -> Any:
        """The SDK's ``execute``: its result (the actions the code produced)."""
        return self._sdk.execute(instance, old, new)

    def diverge(self, kind: str, event: Any | None, expected: str, actual: str,
                message: str) -> None:
        event_id = None if event is None else int(event.eventId)
        if event_id is not None:
            if event_id in self._diverged_at:
                return
            self._diverged_at.add(event_id)
        index = None if event is None else self._index.get(id(event))
        self.divergences.append(Divergence(kind, event_id, index, expected, actual,
                                           message))

    def before_event(self, executor: Any, ctx: Any, event: Any) -> bool:
        self.context = ctx
        kind = event.WhichOneof("eventType")
        if kind == "executionCompleted":
            # The SDK has no handler for it (it never receives one from the engine);
            # it is the recorded outcome, compared once the replay has run.
            return False
        # The SDK pops the matching action before it may raise: keep it for the report.
        self._pending = sdk.pending_actions(ctx).get(event.eventId) \
            if event.eventId >= 0 else None
        if not (sdk.executor_is_suspended(executor) and sdk.is_suspendable(event)):
            if kind == "taskScheduled":
                self._check_step(ctx, event, event.taskScheduled, "scheduleTask",
                                 "activity")
            elif kind == "childWorkflowInstanceCreated":
                self._check_step(ctx, event, event.childWorkflowInstanceCreated,
                                 "createChildWorkflow", "child workflow")
            elif kind == "timerCreated":
                self._check_timer(ctx, event)
        return True

    def event_failed(self, ctx: Any, event: Any, exc: Exception) -> None:
        # NonDeterminismError; or, for a step the code replaced by its completion, the
        # NotImplementedError the SDK raises while describing that mismatch. Anything
        # else is the workflow's own failure, part of its outcome.
        pending = self._pending
        step = _STEP_ACTION.get(event.WhichOneof("eventType"))
        other = pending is not None and step is not None and not pending.HasField(step)
        if isinstance(exc, sdk.NonDeterminismError) or other:
            self.refused = True
            actual = ("nothing (the code schedules no step here)" if pending is None
                      else describe.describe_action(pending))
            kind_ = NONDETERMINISM_ERROR
            if pending is not None and pending.HasField("completeWorkflow"):
                kind_ = DIFFERENT_OUTCOME
            why = (f"the SDK refused the replay: {exc}"
                   if isinstance(exc, sdk.NonDeterminismError)
                   else "the code ends the workflow where the history goes on")
            self.diverge(kind_, event, describe.describe_event(event), actual, why)

    def _check_step(self, ctx: Any, event: Any, recorded: Any, field_name: str,
                    what: str) -> None:
        action = sdk.pending_actions(ctx).get(event.eventId)
        if action is None or sdk.is_optional_timer_action(action):
            return  # the SDK decides: a missing step, or an optional-timer shift
        if not action.HasField(field_name):
            return  # another kind of step: the SDK raises NonDeterminismError
        mine = getattr(action, field_name)
        expected = (recorded.name, describe.value(recorded.input))
        actual = (mine.name, describe.value(mine.input))
        if actual == expected:
            return
        later = self._scheduled.later(event.eventId)
        if actual in later or (actual[0] != expected[0]
                               and actual[0] in {name for name, _ in later}):
            kind, message = DIFFERENT_ORDER, (
                f"the code schedules {what} {actual[0]!r} at step #{event.eventId}, "
                f"which the history schedules only later: the steps were reordered")
        elif actual[0] != expected[0]:
            kind, message = DIFFERENT_ACTIVITY, (
                f"the code schedules {what} {actual[0]!r} where the history scheduled "
                f"{expected[0]!r}")
        else:
            kind, message = DIFFERENT_INPUT, (
                f"the code calls {what} {actual[0]!r} with another input than the "
                f"history recorded (the SDK does not check inputs)")
        self.diverge(kind, event, describe.describe_event(event), describe.describe_action(action),
                     message)

    def _check_timer(self, ctx: Any, event: Any) -> None:
        action = sdk.pending_actions(ctx).get(event.eventId)
        if action is None or not action.HasField("createTimer"):
            return  # the SDK decides
        if sdk.is_optional_timer_action(action) or sdk.is_optional_timer_event(event):
            return
        if action.createTimer.fireAt != event.timerCreated.fireAt:
            self.diverge(DIFFERENT_INPUT, event, describe.describe_event(event),
                         describe.describe_action(action),
                         "the code sets a timer for another time than the history "
                         "(a fire time computed from the wall clock?)")
