"""Audited workflows: every decision signed while not replaying.

A registered workflow records its start, each activity or child workflow it schedules,
``continue_as_new``, and its completion or failure — only while *not* replaying, so
the replays after a crash add nothing.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Generator
from typing import Any

from dapr.ext.workflow import DaprWorkflowContext

from histaudit import sdk
from histaudit.ledger.kinds import Kind

from .recorder import AuditRecorder, Payload, sdk_json, worker_id

__all__ = ["AuditedWorkflowContext", "audit_workflow"]

log = logging.getLogger("histaudit.interceptor")

class AuditedWorkflowContext:
    """What an audited workflow receives: the SDK's context, with decisions recorded.

    Everything not overridden here is delegated to the ``DaprWorkflowContext``. Records
    are written only while the workflow is not replaying; a ledger problem is logged,
    never raised, because an exception here would fail the workflow for good (the gap is
    still visible, against the engine's own history).
    """

    def __init__(self, ctx: DaprWorkflowContext, recorder: AuditRecorder,
                 workflow: str) -> None:
        self._ctx = ctx
        self._recorder = recorder
        self._workflow = workflow
        self._continued = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    @property
    def instance_id(self) -> str:
        return str(self._ctx.instance_id)

    @property
    def is_replaying(self) -> bool:
        return bool(self._ctx.is_replaying)

    @property
    def inner(self) -> DaprWorkflowContext:
        """The SDK's own context, unaudited."""
        return self._ctx

    # -- recording -------------------------------------------------------------------

    def _decide(self, kind: str, data: dict[str, Any], *payloads: Payload) -> None:
        if self._ctx.is_replaying:
            return
        try:
            self._recorder.append(self.instance_id, kind,
                                  {"workflow": self._workflow, **data, "worker": worker_id()},
                                  *payloads)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("histaudit: could not record %s for workflow %s: %s", kind,
                        self.instance_id, exc)

    def _commit(self, text: str | None) -> Payload:
        return self._recorder.commit(self.instance_id, text)

    def _scheduled(self, task: Any) -> tuple[int | None, Any]:
        """The task id and pending action the SDK created for ``task`` (None if hidden)."""
        return sdk.pending_action(self._ctx, task)

    def record_start(self, text: str | None) -> None:
        if self.is_replaying:
            return
        inp = self._commit(text)
        self._decide(Kind.WORKFLOW_STARTED, {"input": inp.ref, "input_digest": inp.digest}, inp)

    def record_end(self, result: Any) -> None:
        if self.is_replaying:
            return
        out = self._commit(sdk_json(result))
        self._decide(Kind.WORKFLOW_COMPLETED, {"output": out.ref, "output_digest": out.digest}, out)

    def record_failure(self, exc: BaseException) -> None:
        if self.is_replaying:
            return
        err = self._commit(str(exc))
        self._decide(Kind.WORKFLOW_FAILED, {"error_type": type(exc).__name__, "error": err.ref,
                                       "error_digest": err.digest}, err)

    # -- the audited decisions -------------------------------------------------------

    def call_activity(self, activity: Any, **kwargs: Any) -> Any:
        """Schedule an activity (``DaprWorkflowContext.call_activity``) and record it."""
        task: Any = self._ctx.call_activity(activity, **kwargs)
        if not self.is_replaying:
            task_id, action = self._scheduled(task)
            if action is not None and action.HasField("scheduleTask"):
                sched = action.scheduleTask
                name, execution_id = sched.name, sched.taskExecutionId or None
                text = sched.input.value if sched.HasField("input") else None
            else:
                name, execution_id = sdk.registered_name(activity), None
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(Kind.WORKFLOW_SCHEDULED_ACTIVITY, {
                "activity": name, "task_id": task_id, "execution_id": execution_id,
                "retry_policy": kwargs.get("retry_policy") is not None,
                "input": inp.ref, "input_digest": inp.digest}, inp)
        return task

    def call_child_workflow(self, workflow: Any, **kwargs: Any) -> Any:
        """Schedule a child workflow (``DaprWorkflowContext.call_child_workflow``), recorded."""
        task: Any = self._ctx.call_child_workflow(workflow, **kwargs)
        if not self.is_replaying:
            task_id, action = self._scheduled(task)
            child = None
            if action is not None and action.HasField("createChildWorkflow"):
                child = action.createChildWorkflow
            if child is not None:
                name, child_id = child.name, child.instanceId or None
                text = child.input.value if child.HasField("input") else None
            else:
                name, child_id = sdk.registered_name(workflow), kwargs.get("instance_id")
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(Kind.WORKFLOW_SCHEDULED_CHILD, {
                "child_workflow": name, "child_instance": child_id, "task_id": task_id,
                "input": inp.ref, "input_digest": inp.digest}, inp)
        return task

    def continue_as_new(self, new_input: Any, **kwargs: Any) -> None:
        """Restart the workflow with new input (recorded), as the SDK method does."""
        self._ctx.continue_as_new(new_input, **kwargs)
        self._continued = True
        inp = self._commit(sdk_json(new_input))
        self._decide(Kind.WORKFLOW_CONTINUED_AS_NEW, {"input": inp.ref, "input_digest": inp.digest},
                     inp)

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


def audit_workflow(recorder: AuditRecorder, fn: Callable[..., Any],
                    name: Callable[[], str]) -> Callable[..., Any]:
    """Wrap one workflow function; same signature, so the SDK binds inputs as before."""

    @functools.wraps(fn)
    def audited(ctx: DaprWorkflowContext, *args: Any, **kwargs: Any) -> Any:
        actx = AuditedWorkflowContext(ctx, recorder, name())
        if not actx.is_replaying:
            try:
                text = sdk_json(args[0]) if args else None
            except (TypeError, ValueError):
                text = None
            actx.record_start(text)
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
