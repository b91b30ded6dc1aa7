"""Audited workflows: every decision signed once, the first time it is made.

A registered workflow records its start, each activity, child workflow or durable timer
it schedules, its custom status, ``continue_as_new``, and its completion or failure while
*not* replaying, so the replays
after a crash add nothing — with one exception. Decisions are not durable when they are
recorded (see :data:`.recorder.MUST_BE_DURABLE`): a power loss can take the last few with
it while the engine, which has them, carries on. So while replaying, a start or a
scheduled activity or child whose record the ledger does not hold is appended then,
marked ``"replayed": true``. Whether the ledger holds it is answered from what this
process appended or read before, else by the recorder's incremental fold: a replay costs
no ledger read unless something is missing from memory.

A workflow run while its runtime's recorder has no ledger yet (the app's runtime handed,
never started, to ``histaudit replay``) records nothing: there is nothing to sign into,
and a replay is not an execution.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any

from dapr.ext.workflow import DaprWorkflowContext

from histaudit import history_file, sdk
from histaudit.errors import HistauditError
from histaudit.ledger.kinds import Kind
from histaudit.verify.propagated import Chunk, check_propagated

from .late import LateRecord
from .recorder import MUST_BE_DURABLE, AuditRecorder, Payload, decision_token, sdk_json, worker_id

__all__ = ["AuditedWorkflowContext", "audit_workflow"]

log = logging.getLogger("histaudit.interceptor")

_RECORD_LATE = frozenset({Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED,
                          Kind.WORKFLOW_CONTINUED_AS_NEW})
"""Decisions no later turn replays: one the ledger cannot take when it is made is kept
and recorded once the ledger answers again (:mod:`.late`)."""


def _engine_time(ctx: Any) -> str | None:
    """The workflow's replay-safe clock now (the engine's time of the turn), ISO 8601."""
    try:
        value = ctx.current_utc_datetime
    except Exception:  # noqa: BLE001 - an SDK without it: generations are not told apart
        return None
    return value.isoformat() if isinstance(value, datetime) else None


class AuditedWorkflowContext:
    """What an audited workflow receives: the SDK's context, with decisions recorded.

    Everything not overridden here is delegated to the ``DaprWorkflowContext``. Records
    are written while the workflow is not replaying, and while replaying only for a
    decision the ledger lacks (see the module docstring); a ledger problem is logged,
    never raised, because an exception here would fail the workflow for good (the gap is
    still visible, against the engine's own history).
    """

    def __init__(self, ctx: DaprWorkflowContext, recorder: AuditRecorder,
                 workflow: str) -> None:
        self._ctx = ctx
        self._sdk_ctx = sdk.runtime_context(ctx)
        """The SDK's own context behind ``ctx``: its pending tasks and replay flag."""
        self._recorder = recorder
        self._workflow = workflow
        self._continued = False
        self._recording = recorder.bound
        """False when the runtime was never started (an offline replay): record nothing."""
        self._generation = _engine_time(ctx)
        """When this generation of the workflow started, by the engine's clock: the SDK
        calls the workflow function at its ``ExecutionStarted`` event, on every replay
        alike. Names the generation in ``workflow.started`` (``started_at``)."""
        self._instance = str(ctx.instance_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    @property
    def instance_id(self) -> str:
        return self._instance

    @property
    def is_replaying(self) -> bool:
        return bool(self._sdk_ctx.is_replaying)

    @property
    def inner(self) -> DaprWorkflowContext:
        """The SDK's own context, unaudited."""
        return self._ctx

    # -- recording -------------------------------------------------------------------

    def _needed(self, kind: str, fields: dict[str, Any]) -> bool:
        """Whether to record this decision: always when new; on replay only if missing."""
        if not self._recording:
            return False
        if not self.is_replaying:
            return True
        token = decision_token(kind, fields, self._generation)
        if token is None:
            return False
        try:
            return not self._recorder.has_decision(self.instance_id, token)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("histaudit: could not look up %s for workflow %s: %s", kind,
                        self.instance_id, exc)
            return False

    def _decide(self, kind: str, data: dict[str, Any], *payloads: Payload) -> None:
        """Record a decision :meth:`_needed` asked for (a replayed one marked so)."""
        record = {"workflow": self._workflow, **data, "worker": worker_id()}
        if self.is_replaying:
            record["replayed"] = True
        token = decision_token(kind, data, self._generation)
        if token is not None and kind not in MUST_BE_DURABLE:
            # re-appended by a replay when missing: it need not hold up the turn
            self._recorder.append_decision(self.instance_id, kind, record, token, *payloads)
            return
        try:
            self._recorder.append(self.instance_id, kind, record, *payloads)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            if kind not in _RECORD_LATE:
                log.warning("histaudit: could not record %s for workflow %s: %s", kind,
                            self.instance_id, exc)  # the next turn's replay records it
                return
            log.warning("histaudit: could not record %s for workflow %s, will record it "
                        "once the ledger answers: %s", kind, self.instance_id, exc)
            recorder, instance = self._recorder, self.instance_id
            recorder.late.add(LateRecord(
                instance, kind,
                append=lambda: recorder.append(instance, kind, record, *payloads),
                held=lambda: token is not None and recorder.has_decision(instance, token)))
            return
        if token is not None:
            self._recorder.noted_decision(self.instance_id, token)

    def _commit(self, text: str | None) -> Payload:
        return self._recorder.commit(self.instance_id, text)

    def _scheduled(self, task: Any) -> tuple[int | None, Any]:
        """The task id and pending action the SDK created for ``task`` (None if hidden)."""
        return sdk.pending_action(self._sdk_ctx, task)

    def record_start(self, args: tuple[Any, ...]) -> None:
        """Record ``workflow.started`` (its input is ``args[0]``) unless already recorded;
        a child names its ``parent`` (instance and the task id it was scheduled as), as
        the engine's ``ExecutionStarted`` event of the turn does."""
        fields = {"started_at": self._generation}
        if not self._needed(Kind.WORKFLOW_STARTED, fields):
            return
        try:
            text = sdk_json(args[0]) if args else None
        except (TypeError, ValueError):
            text = None
        inp = self._commit(text)
        try:
            parent = self._parent()
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("histaudit: could not read the parent of workflow %s: %s",
                        self._instance, exc)
            parent = None
        self._record_rerun()
        version = sdk.workflow_version(self._ctx)
        self._decide(Kind.WORKFLOW_STARTED,
                     {**fields, "input": inp.ref, "input_digest": inp.digest,
                      "parent": parent, **({"version": version} if version else {})}, inp)

    def _record_rerun(self) -> None:
        """Sign ``workflow.rerun`` when this instance is a rerun of another from one of
        its events (``rerun_workflow_from_event``): the engine copied the source's
        history up to that event, so the results before it were signed in the source's
        chain, not here. The link names the source, the event, the source's entry that
        scheduled it and the source chain's head (seq and hash) as this process read it:
        what the copied prefix must agree with (``verify --engine``)."""
        try:
            found = _rerun_of(self._instance, self._recorder.turn_events(self._instance))
            if found is None:
                return
            source, event_id = found
            fields = {"source": source, "event_id": event_id}
            if not self._needed(Kind.WORKFLOW_RERUN, fields):
                return
            fields.update(_source_link(self._recorder, source, event_id))
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("histaudit: could not read the rerun source of workflow %s: %s",
                        self._instance, exc)
            return
        self._decide(Kind.WORKFLOW_RERUN, fields)

    def _parent(self) -> dict[str, Any] | None:
        """The parent workflow the engine started this one for (None: a top-level one,
        or the turn's events are not reachable)."""
        for event in self._recorder.turn_events(self._instance) or ():
            if event.HasField("executionStarted"):
                started = event.executionStarted
                if not started.HasField("parentInstance"):
                    return None
                parent = started.parentInstance
                return {"instance": parent.workflowInstance.instanceId,
                        "task_id": int(parent.taskScheduledId),
                        "app_id": parent.appID or None}
        return None

    def _replaying_or_idle(self) -> bool:
        """Nothing to record for a workflow's end: replaying, or not recording at all."""
        return not self._recording or self.is_replaying

    def record_end(self, result: Any) -> None:
        if self._replaying_or_idle():
            return
        out = self._commit(sdk_json(result))
        self._decide(Kind.WORKFLOW_COMPLETED, {"output": out.ref, "output_digest": out.digest}, out)

    def record_failure(self, exc: BaseException) -> None:
        if self._replaying_or_idle():
            return
        err = self._commit(str(exc))
        self._decide(Kind.WORKFLOW_FAILED, {"error_type": type(exc).__name__, "error": err.ref,
                                       "error_digest": err.digest}, err)

    # -- the audited decisions -------------------------------------------------------

    def call_activity(self, activity: Any, **kwargs: Any) -> Any:
        """Schedule an activity (``DaprWorkflowContext.call_activity``) and record it."""
        task: Any = self._ctx.call_activity(activity, **kwargs)
        if not self._recording:
            return task
        task_id, action = self._scheduled(task)
        if action is not None and action.HasField("scheduleTask"):
            sched = action.scheduleTask
            execution_id = sched.taskExecutionId or None
            if execution_id and self.is_replaying and self._recorder.knows_decision(
                    self._instance, ("activity", execution_id)):
                # The replay of a scheduling already recorded (the same token _needed
                # would build): the common case, once per earlier step on every turn.
                return task
            name = sched.name
            text = sched.input.value if sched.HasField("input") else None
        else:
            sched, name, execution_id = None, sdk.registered_name(activity), None
        fields = {"activity": name, "task_id": task_id, "execution_id": execution_id,
                  "retry_policy": _policy(kwargs.get("retry_policy"))}
        if self._needed(Kind.WORKFLOW_SCHEDULED_ACTIVITY, fields):
            if sched is None:
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(Kind.WORKFLOW_SCHEDULED_ACTIVITY,
                         {**fields, "input": inp.ref, "input_digest": inp.digest}, inp)
        return task

    def call_child_workflow(self, workflow: Any, **kwargs: Any) -> Any:
        """Schedule a child workflow (``DaprWorkflowContext.call_child_workflow``), recorded."""
        task: Any = self._ctx.call_child_workflow(workflow, **kwargs)
        task_id, action = self._scheduled(task)
        child = None
        if action is not None and action.HasField("createChildWorkflow"):
            child = action.createChildWorkflow
        if child is not None:
            name, child_id = child.name, child.instanceId or None
        else:
            name, child_id = sdk.registered_name(workflow), kwargs.get("instance_id")
        fields = {"child_workflow": name, "child_instance": child_id, "task_id": task_id}
        if self._needed(Kind.WORKFLOW_SCHEDULED_CHILD, fields):
            if child is not None:
                text = child.input.value if child.HasField("input") else None
            else:
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(Kind.WORKFLOW_SCHEDULED_CHILD,
                         {**fields, "input": inp.ref, "input_digest": inp.digest}, inp)
        return task

    def create_timer(self, fire_at: Any) -> Any:
        """Create a durable timer (``DaprWorkflowContext.create_timer``), signed as
        ``workflow.scheduled_timer`` with its task id and due time; its firing is signed
        as ``workflow.timer_fired`` when a turn carries it (:mod:`.received`)."""
        task: Any = self._ctx.create_timer(fire_at)
        if not self._recording:
            return task
        task_id, action = self._scheduled(task)
        due = (action.createTimer.fireAt.ToJsonString()
               if action is not None and action.HasField("createTimer") else None)
        fields = {"task_id": task_id, "fire_at": due}
        if self._needed(Kind.WORKFLOW_SCHEDULED_TIMER, fields):
            self._decide(Kind.WORKFLOW_SCHEDULED_TIMER, fields)
        return task

    def is_patched(self, patch_name: str) -> bool:
        """Whether this run takes the patched branch (``DaprWorkflowContext.is_patched``),
        signed as ``workflow.patch`` — the patch's name, the answer and the workflow's
        version name — the first time the run asks it: which rule decided is a decision
        an auditor asks about. The SDK answers from the history on replay, so the answer
        signed once holds for every replay; ``histaudit replay`` names the patch when code
        changed since takes another branch."""
        taken = bool(self._ctx.is_patched(patch_name))
        if self._recording:
            fields = {"patch": patch_name, "taken": taken,
                      "version": sdk.workflow_version(self._ctx)}
            if self._needed(Kind.WORKFLOW_PATCH, fields):
                self._decide(Kind.WORKFLOW_PATCH, fields)
        return taken

    def get_propagated_history(self) -> Any:
        """The history the engine propagated to this workflow
        (``DaprWorkflowContext.get_propagated_history``), unchanged — checked against the
        ledger first: each chunk whose instance the ledger holds must hold only results
        that instance signed, and everything it signed as scheduled before this workflow
        (:mod:`histaudit.verify.propagated`). Signed as ``workflow.propagated_history``
        — the chunks, what was checked, the problems found and the events received
        (committed) — once per distinct history a generation is given; the verifier
        reports its problems as ``propagated-history-mismatch``."""
        history = self._ctx.get_propagated_history()
        if history is not None and self._recording:
            try:
                self._check_propagated(history)
            except Exception as exc:  # noqa: BLE001 - see the class docstring
                log.warning("histaudit: could not check the propagated history of workflow "
                            "%s: %s", self._instance, exc)
        return history

    def _check_propagated(self, history: Any) -> None:
        chunks = [Chunk(*c) for c in sdk.propagated_chunks(history)]
        digest = hashlib.sha256(b"".join(
            hashlib.sha256(e.SerializeToString(deterministic=True)).digest()
            for chunk in chunks for e in chunk.events)).hexdigest()
        # not only on replay: a later turn (replaying or not) is given the history again
        token = decision_token(Kind.WORKFLOW_PROPAGATED_HISTORY, {"digest": digest},
                               self._generation)
        if token is None or self._recorder.has_decision(self._instance, token):
            return
        recorder = self._recorder
        result = check_propagated(chunks, self._scheduled_as(),
                                  lambda instance: list(recorder.entries(instance)),
                                  recorder.ledger.payload)
        events = [e for chunk in chunks for e in chunk.events]
        try:
            text: str | None = history_file.dumps(events)
        except HistauditError:  # no ExecutionStarted in it: nothing to keep as a history
            text = None
        received = self._commit(text)
        scope = getattr(getattr(history, "scope", None), "name", None)
        self._decide(Kind.WORKFLOW_PROPAGATED_HISTORY, {
            "digest": digest, "scope": scope,
            "chunks": [{"instance": c.instance, "app_id": c.app_id, "workflow": c.workflow,
                        "events": len(c.events)} for c in chunks],
            "checked": list(result.checked), "unchecked": list(result.unchecked),
            "problems": list(result.problems), "history": received.ref}, received)

    def _scheduled_as(self) -> int | None:
        """The task id this workflow's parent scheduled it under (its ExecutionStarted)."""
        for event in self._recorder.turn_events(self._instance) or ():
            if event.HasField("executionStarted") \
                    and event.executionStarted.HasField("parentInstance"):
                return int(event.executionStarted.parentInstance.taskScheduledId)
        return None

    def set_custom_status(self, status: Any) -> None:
        """Set the workflow's custom status (``DaprWorkflowContext.set_custom_status``),
        signed as ``workflow.custom_status`` with the value committed, each time the code
        sets it while not replaying."""
        self._ctx.set_custom_status(status)
        if self._replaying_or_idle():
            return
        try:
            text = sdk_json(status)
        except (TypeError, ValueError):
            text = None
        value = self._commit(text)
        self._decide(Kind.WORKFLOW_CUSTOM_STATUS,
                     {"status": value.ref, "status_digest": value.digest}, value)

    def continue_as_new(self, new_input: Any, **kwargs: Any) -> None:
        """Restart the workflow with new input, as the SDK method does; signed with the
        new input and the generation's history (every engine event up to this turn), which
        the engine drops and ``histaudit replay`` replays from the ledger."""
        self._ctx.continue_as_new(new_input, **kwargs)
        self._continued = True
        if self._replaying_or_idle():
            return
        inp = self._commit(sdk_json(new_input))
        events = self._recorder.turn_events(self._instance)
        hist = self._commit(None if events is None else history_file.dumps(events))
        self._decide(Kind.WORKFLOW_CONTINUED_AS_NEW,
                     {"input": inp.ref, "input_digest": inp.digest, "history": hist.ref,
                      "history_events": None if events is None else len(events)}, inp, hist)

    def _drive(self, gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """Run the workflow generator unchanged, recording how it ends."""
        try:
            result = yield from gen
        except Exception as exc:
            self.record_failure(exc)
            raise
        if not self._continued:
            self.record_end(result)
        return result


_RERUN_TARGETS = ("taskScheduled", "childWorkflowInstanceCreated", "timerCreated")
"""The events a rerun may start from; the engine marks the one it did with the source."""


def _rerun_of(instance: str, events: Sequence[Any] | None) -> tuple[str, int] | None:
    """(source instance, event id) when ``events`` are a rerun's history: the engine
    copies the source's ``ExecutionStarted`` as it was (naming the source, not this
    instance) and marks the event the rerun starts from with
    ``rerunParentInstanceInfo``."""
    if not events:
        return None
    started = next((e for e in events if e.HasField("executionStarted")), None)
    copied = started.executionStarted.workflowInstance.instanceId if started else ""
    if not copied or copied == instance:
        return None
    for event in events:
        kind = event.WhichOneof("eventType")
        if kind in _RERUN_TARGETS:
            body = getattr(event, kind)
            if body.HasField("rerunParentInstanceInfo"):
                return str(body.rerunParentInstanceInfo.instanceID), int(event.eventId)
    return None


def _source_link(recorder: AuditRecorder, source: str, event_id: int) -> dict[str, Any]:
    """Where the rerun's source stands in the ledger: the seq of its entry that
    scheduled ``event_id`` (its last generation's; None if the ledger has none), and its
    head (``{seq, hash}``; None when the ledger holds no such instance)."""
    scheduled = None
    for entry in recorder.entries(source):
        if entry.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            scheduled = None
        elif entry.kind in _SCHEDULING and entry.data.get("task_id") == event_id:
            scheduled = entry.seq
    head = recorder.ledger.head(source)
    row = recorder.ledger.entry_at(source, head.seq) if head is not None else None
    return {"source_entry": scheduled,
            "source_head": None if row is None else {"seq": row.seq, "hash": row.hash}}


_SCHEDULING = frozenset({Kind.WORKFLOW_SCHEDULED_ACTIVITY, Kind.WORKFLOW_SCHEDULED_CHILD,
                         Kind.WORKFLOW_SCHEDULED_TIMER})


def _policy(policy: Any) -> dict[str, Any] | None:
    """A ``RetryPolicy`` as signed with the scheduling (None without one): its attempts,
    its intervals in milliseconds and its backoff coefficient as text (signed records hold
    no floats). Each retry is then a new task of the same execution id, its
    ``activity.started`` counting the attempt."""
    if policy is None:
        return None

    def ms(name: str) -> int | None:
        value = getattr(policy, name, None)
        return None if value is None else round(value.total_seconds() * 1000)

    backoff = getattr(policy, "backoff_coefficient", None)
    attempts = getattr(policy, "max_number_of_attempts", None)
    return {"max_number_of_attempts": attempts if isinstance(attempts, int) else None,
            "first_retry_interval_ms": ms("first_retry_interval"),
            "backoff_coefficient": None if backoff is None else repr(float(backoff)),
            "max_retry_interval_ms": ms("max_retry_interval"),
            "retry_timeout_ms": ms("retry_timeout")}


def audit_workflow(recorder: AuditRecorder, fn: Callable[..., Any],
                    name: Callable[[], str]) -> Callable[..., Any]:
    """Wrap one workflow function; same signature, so the SDK binds inputs as before."""

    @functools.wraps(fn)
    def audited(ctx: DaprWorkflowContext, *args: Any, **kwargs: Any) -> Any:
        actx = AuditedWorkflowContext(ctx, recorder, name())
        actx.record_start(args)
        try:
            out = fn(actx, *args, **kwargs)
        except Exception as exc:
            actx.record_failure(exc)
            raise
        if inspect.isgenerator(out):
            return actx._drive(out)
        if not actx._continued:
            actx.record_end(out)
        return out

    return audited
