"""Audited activities: ``activity.started`` before the body, the outcome after it.

Each registered activity is wrapped (same signature, so the SDK binds inputs as before):

* ``activity.started`` before its body, with an ``attempt`` number counted from the
  ledger itself, because a crash loses whatever the process remembered;
* ``activity.completed`` (or ``activity.failed``) after it, appended *before* the result
  goes back to the engine and on stable storage by then (the start is not waited for: it
  becomes durable with the completion; see ``recorder.MUST_BE_DURABLE``), so a crash
  after a side effect shows up later as a second ``activity.started`` of the same task.
  An output over the payload limit, which the engine could not receive, is recorded and
  raised as ``activity.failed``. A ledger that refuses the write fails the activity: the
  engine never hears of a success the ledger does not hold.

Automatic crash points (see :mod:`histaudit.crash`): ``before:<activity>`` after the
start is signed and before the body runs; ``after:<activity>`` after the body returned,
or raised, and *before* the completion (or failure) is signed or reported. A crash there
loses both, so the engine runs the activity again: the at-least-once case worth testing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dapr.ext.workflow import WorkflowActivityContext

from histaudit import sdk
from histaudit.crash import crash_point, crash_scope, step_aliases
from histaudit.errors import StoreError, UsageError
from histaudit.ledger import records as rec
from histaudit.ledger.kinds import Kind

from . import tracing
from .recorder import ENGINE_GRPC_LIMIT, AuditRecorder, sdk_json, worker_id
from .tracing import Traced

__all__ = ["ActivityRun", "PayloadTooLargeError", "audit_activity", "current_activity"]

log = logging.getLogger("histaudit.interceptor")

_CURRENT: ContextVar[ActivityRun | None] = ContextVar("histaudit_activity", default=None)


def current_activity() -> ActivityRun | None:
    """The audited activity execution running in this context, if any."""
    return _CURRENT.get()


@dataclass(frozen=True, slots=True)
class ActivityRun:
    """One execution of one activity, as recorded in ``activity.started``."""

    recorder: AuditRecorder
    instance: str
    activity: str
    task_id: int
    execution_id: str
    attempt: int
    started_seq: int
    worker: str = field(default_factory=worker_id)
    generation: int = 0
    """The instance's generation (0 until its first ``continue_as_new``): task ids start
    again in each, so the crash scope names it."""
    input: Any = field(default=None, compare=False, repr=False)
    """The input the SDK called the activity with (decoded), for wrappers that know its
    shape (a dapr-agents tool call's id); never recorded from here."""

    def fields(self) -> dict[str, Any]:
        """The fields every entry about this execution carries."""
        return {"activity": self.activity, "task_id": self.task_id,
                "execution_id": self.execution_id, "attempt": self.attempt,
                "worker": self.worker}


def _start_activity(recorder: AuditRecorder, name: str, args: tuple[Any, ...]) -> ActivityRun:
    """Record ``activity.started`` for the call the SDK is about to make."""
    ctx = args[0] if args else None
    inner = ctx.get_inner_context() if isinstance(ctx, WorkflowActivityContext) else ctx
    instance = str(getattr(inner, "orchestration_id", None) or getattr(ctx, "workflow_id", ""))
    task_id = int(getattr(inner, "task_id", -1))
    execution_id = str(getattr(inner, "task_execution_id", "") or "")
    if not instance:
        raise UsageError(f"activity {name!r} was called without a workflow activity context")
    wire = sdk.wire_input(inner)
    text: str | None
    if wire is sdk.NOT_CAPTURED:
        text = sdk_json(args[1]) if len(args) > 1 else None
    else:
        text = wire if isinstance(wire, str) else None
    prior, generation = recorder.start_counts(instance, execution_id, task_id)
    attempt = prior + 1
    worker = worker_id()
    inp = recorder.commit(instance, text)
    entry = recorder.append(instance, Kind.ACTIVITY_STARTED, {
        "activity": name, "task_id": task_id, "execution_id": execution_id,
        "attempt": attempt, "worker": worker, "input": inp.ref, "input_digest": inp.digest,
    }, inp)
    return ActivityRun(recorder, instance, name, task_id, execution_id, attempt, entry.seq,
                       worker, generation, args[1] if len(args) > 1 else None)


def _record_failure(run: ActivityRun, exc: BaseException) -> rec.Entry:
    """Record ``activity.failed`` (type in clear, message committed) for ``exc``."""
    err = run.recorder.commit(run.instance, str(exc))
    return run.recorder.append(run.instance, Kind.ACTIVITY_FAILED, {
        **run.fields(), "started_seq": run.started_seq, "error_type": type(exc).__name__,
        "error": err.ref, "error_digest": err.digest,
    }, err)


def _failed(run: ActivityRun, exc: Exception, traced: Traced) -> None:
    """The body raised: record it; the original error still goes to the engine."""
    try:
        traced.entry(_record_failure(run, exc), run.recorder.origin)
    except Exception as problem:  # noqa: BLE001 - the activity fails either way
        log.warning("histaudit: could not record the failure of activity %s (task %s of "
                    "%s): %s", run.activity, run.task_id, run.instance, problem)


class PayloadTooLargeError(UsageError):
    """An activity returned more than the engine can receive: it fails instead."""


def _completed(run: ActivityRun, result: Any, traced: Traced) -> None:
    """Record ``activity.completed``; raise (failing the activity) if that is impossible.

    An output over the recorder's payload limit (below the engine's gRPC message limit)
    could never reach the engine as a success, so it is recorded and raised as a failure:
    the ledger says what the engine was given.
    """
    try:
        text = sdk_json(result)
    except (TypeError, ValueError) as exc:  # the SDK could not send it either
        _failed(run, exc, traced)
        raise
    size = 0 if text is None else len(text.encode("utf-8"))
    if size > run.recorder.max_payload:
        too_large = PayloadTooLargeError(
            f"activity {run.activity!r} (task {run.task_id} of {run.instance!r}) returned "
            f"{size} bytes, over histaudit's payload limit of {run.recorder.max_payload} "
            f"bytes (HISTAUDIT_MAX_PAYLOAD_BYTES; the engine takes at most "
            f"{ENGINE_GRPC_LIMIT} per message): failing it, the engine could not receive it")
        _failed(run, too_large, traced)
        raise too_large
    out = run.recorder.commit(run.instance, text)
    try:
        traced.entry(run.recorder.append(run.instance, Kind.ACTIVITY_COMPLETED, {
            **run.fields(), "started_seq": run.started_seq, "output": out.ref,
            "output_digest": out.digest,
        }, out), run.recorder.origin)
    except Exception as exc:
        error = StoreError(
            f"histaudit could not record the completion of activity {run.activity!r} "
            f"(task {run.task_id} of {run.instance!r}); failing it rather than reporting "
            f"an unrecorded success: {exc}")
        with contextlib.suppress(Exception):
            traced.entry(_record_failure(run, error), run.recorder.origin)
        raise error from exc


def _span_attributes(run: ActivityRun) -> dict[str, Any]:
    """What an activity's span says of its execution (its entry is added at its end)."""
    return {"histaudit.activity": run.activity, "histaudit.task_id": run.task_id,
            "histaudit.execution_id": run.execution_id, "histaudit.attempt": run.attempt}


def _crash_scope(run: ActivityRun) -> contextlib.AbstractContextManager[None]:
    """Crash points in this execution get aliases scoped to its instance, generation and
    task id, the same in every process that runs it (:func:`histaudit.crash.crash_scope`):
    ``<instance>/<task id>`` in generation 0, ``<instance>/g<n>/<task id>`` in generation n."""
    if run.task_id < 0:
        return contextlib.nullcontext()
    where = run.instance if run.generation == 0 else f"{run.instance}/g{run.generation}"
    return crash_scope(f"{where}/{run.task_id}")


def audit_activity(recorder: AuditRecorder, fn: Callable[..., Any],
                    name: Callable[[], str]) -> Callable[..., Any]:
    """Wrap one activity function; same signature, so the SDK binds inputs as before."""
    if sdk.is_async_callable(fn):

        @functools.wraps(fn)
        async def audited_async(*args: Any, **kwargs: Any) -> Any:
            activity = name()
            with tracing.span(f"activity {activity}") as traced:
                # Ledger I/O runs off the event loop so other async activities keep going.
                run = await asyncio.to_thread(_start_activity, recorder, activity, args)
                traced.set(_span_attributes(run))
                token = _CURRENT.set(run)
                try:
                    with _crash_scope(run):
                        crash_point(f"before:{run.activity}",
                                    step_aliases("before", run.task_id))
                        try:
                            result = await fn(*args, **kwargs)
                        except Exception as exc:
                            crash_point(f"after:{run.activity}",
                                        step_aliases("after", run.task_id))
                            await asyncio.to_thread(_failed, run, exc, traced)
                            raise
                        crash_point(f"after:{run.activity}", step_aliases("after", run.task_id))
                    await asyncio.to_thread(_completed, run, result, traced)
                    return result
                finally:
                    _CURRENT.reset(token)

        return audited_async

    @functools.wraps(fn)
    def audited(*args: Any, **kwargs: Any) -> Any:
        activity = name()
        with tracing.span(f"activity {activity}") as traced:
            run = _start_activity(recorder, activity, args)
            traced.set(_span_attributes(run))
            token = _CURRENT.set(run)
            try:
                with _crash_scope(run):
                    crash_point(f"before:{run.activity}", step_aliases("before", run.task_id))
                    try:
                        result = fn(*args, **kwargs)
                    except Exception as exc:
                        # the body ended, by raising: the point sits before its end is signed
                        crash_point(f"after:{run.activity}", step_aliases("after", run.task_id))
                        _failed(run, exc, traced)
                        raise
                    crash_point(f"after:{run.activity}", step_aliases("after", run.task_id))
                _completed(run, result, traced)
                return result
            finally:
                _CURRENT.reset(token)

    return audited
