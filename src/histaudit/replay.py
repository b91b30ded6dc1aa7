"""Replay a recorded workflow history against workflow code, offline, and say where it differs.

Dapr replays a workflow from its stored history every time it resumes it. Code that
changed since the history was recorded, or that is not deterministic (wall-clock time,
random numbers, I/O in the workflow body), takes a different path on that replay. The
SDK notices only part of it: it refuses a replayed step whose *type* or activity *name*
differs from the history, but not a different *input*, and it never compares the way the
workflow ends. :func:`replay` runs the SDK's own orchestration executor over a recorded
history and adds the missing comparisons:

* every activity, child workflow and timer the code schedules is compared with the
  matching ``TaskScheduled`` / ``ChildWorkflowInstanceCreated`` / ``TimerCreated`` event:
  name **and** input (fire time for timers);
* the completion the code produces is compared with the ``ExecutionCompleted`` event:
  status, result, and error type and message for a failure;
* whatever the SDK itself refuses (``NonDeterminismError``) is reported too.

The first difference is the :class:`Divergence` of the :class:`ReplayResult`, with both
sides shown: what the history recorded and what the code did.

Histories come from the engine (:func:`fetch_history`: the sidecar's
``GetInstanceHistory``) or from a golden file (:func:`save_history` / :func:`load_history`:
JSON with a format name, an integer ``version`` and every event as protobuf JSON). A
history that cannot be used — a file that is truncated, garbled or of an unknown version,
a history of another workflow, an engine that does not answer — is an
:class:`~histaudit.errors.InputError` (or :class:`~histaudit.errors.EngineError`), never
a divergence. Reconstructing a history from the ledger alone is not supported: the
ledger holds commitments, not the engine's events.

SDK internals this module relies on (``dapr.ext.workflow._durabletask.worker``, checked
against dapr 1.19): ``_OrchestrationExecutor(registry, logger).execute(instance_id,
old_events, new_events)`` and its ``process_event(ctx, event)``, which this module
overrides to look at ``ctx._pending_actions`` (the actions the code produced, by sequence
id) before the SDK consumes them; ``_Registry``; ``task.NonDeterminismError``; the
helpers ``is_optional_timer_action`` / ``is_optional_timer_event``. Workflows are
registered through a throwaway ``WorkflowRuntime.register_workflow`` so they receive the
same ``DaprWorkflowContext`` wrapper as in production.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .errors import EngineError, InputError, UsageError

__all__ = [
    "DIFFERENT_ACTIVITY",
    "DIFFERENT_INPUT",
    "DIFFERENT_ORDER",
    "DIFFERENT_OUTCOME",
    "HISTORY_FORMAT",
    "HISTORY_VERSION",
    "NONDETERMINISM_ERROR",
    "Divergence",
    "ReplayResult",
    "assert_replays",
    "fetch_history",
    "load_history",
    "load_workflow",
    "replay",
    "save_history",
]

HISTORY_FORMAT = "histaudit.workflow-history"
HISTORY_VERSION = 1
MAX_HISTORY_BYTES = 512 << 20
DEFAULT_TIMEOUT_S = 10.0

DIFFERENT_ACTIVITY = "different-activity"
"""At one step the code schedules another activity (or child workflow) than the history."""
DIFFERENT_INPUT = "different-input"
"""Same activity at the same step, with another input (or a timer with another fire time)."""
DIFFERENT_ORDER = "different-order"
"""The code schedules, at this step, what the history schedules at a later one."""
DIFFERENT_OUTCOME = "different-outcome"
"""The workflow ends differently: status, result or error, or it ends where the history
goes on, or goes on where the history ended."""
NONDETERMINISM_ERROR = "nondeterminism-error"
"""The SDK itself refused the replay (another kind of step, or no step where the history
has one)."""

_TEXT_LIMIT = 300
_log = logging.getLogger("histaudit.replay")
_log.setLevel(logging.WARNING)  # the SDK formats per-event debug summaries below DEBUG


# --- results ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Divergence:
    """One place where the code did not do what the history recorded."""

    kind: str
    event_id: int | None
    """Sequence id of the step in the history (the task id of an activity)."""
    index: int | None
    """Position of the history event in the history (0-based)."""
    expected: str
    """What the history recorded."""
    actual: str
    """What the code did on replay."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "event_id": self.event_id, "index": self.index,
                "expected": self.expected, "actual": self.actual, "message": self.message}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of replaying one history. ``bool(result)`` is True when it is clean."""

    instance_id: str
    workflow: str
    events: int
    """History events fed to the SDK's executor."""
    outcome: str
    """How the replayed code ended: completed, failed, terminated, continued-as-new,
    running (waiting for more events), or "refused by the SDK" (non-determinism)."""
    divergence: Divergence | None = None
    """The first divergence, or None when the code replays the history exactly."""
    divergences: tuple[Divergence, ...] = field(default_factory=tuple)
    """Every divergence, in history order (later ones are often consequences of the first)."""

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def __bool__(self) -> bool:
        return self.ok

    def explain(self) -> str:
        """A few lines for a human: verdict, then both sides of the first divergence."""
        head = (f"instance {self.instance_id}: workflow {self.workflow!r}, "
                f"{self.events} history events replayed")
        d = self.divergence
        if d is None:
            return f"{head} — OK (replay {self.outcome}, same steps and outcome as recorded)"
        where = f"step #{d.event_id}" if d.event_id is not None else "the end"
        if d.index is not None:
            where += f" (history event {d.index})"
        more = len(self.divergences) - 1
        lines = [f"{head} — DIVERGED: {d.kind} at {where}",
                 f"  {d.message}",
                 f"  history: {d.expected}",
                 f"  code:    {d.actual}"]
        if more > 0:
            lines.append(f"  ({more} further difference(s) follow from here)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "workflow": self.workflow, "ok": self.ok,
                "events": self.events, "outcome": self.outcome,
                "divergence": None if self.divergence is None else self.divergence.to_json(),
                "divergences": [d.to_json() for d in self.divergences]}


# --- the SDK, loaded on first use (it pulls in gRPC) -----------------------------------

@functools.lru_cache(maxsize=1)
def _sdk() -> Any:
    from types import SimpleNamespace

    from dapr.ext.workflow import WorkflowRuntime
    from dapr.ext.workflow._durabletask import task, worker
    from dapr.ext.workflow._durabletask.internal import helpers as ph
    from dapr.ext.workflow._durabletask.internal import orchestrator_service_pb2_grpc as stubs
    from dapr.ext.workflow._durabletask.internal import protos as pb
    from dapr.ext.workflow._durabletask.internal import shared

    return SimpleNamespace(WorkflowRuntime=WorkflowRuntime, task=task, worker=worker, ph=ph,
                           pb=pb, stubs=stubs, shared=shared)


def _clip(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def _value(wrapper: Any) -> str | None:
    """The text of a ``StringValue`` field, None when absent or empty (as the SDK reads it)."""
    return wrapper.value if wrapper is not None and wrapper.value != "" else None


def _shown(text: str | None) -> str:
    return "no input" if text is None else _clip(text)


_STATUS = {  # pb.OrchestrationStatus -> the word this module reports
    0: "running", 1: "completed", 2: "continued-as-new", 3: "failed", 4: "canceled",
    5: "terminated", 6: "pending", 7: "suspended", 8: "stalled",
}


def _status(code: int) -> str:
    return _STATUS.get(code, f"status {code}")


# --- describing steps ------------------------------------------------------------------

def _describe_event(event: Any) -> str:
    kind = event.WhichOneof("eventType")
    if kind == "taskScheduled":
        ev = event.taskScheduled
        return f"activity {ev.name!r} with {_shown(_value(ev.input))} (step #{event.eventId})"
    if kind == "childWorkflowInstanceCreated":
        ev = event.childWorkflowInstanceCreated
        return (f"child workflow {ev.name!r} with {_shown(_value(ev.input))} "
                f"(step #{event.eventId})")
    if kind == "timerCreated":
        return f"timer firing at {_when(event.timerCreated.fireAt)} (step #{event.eventId})"
    if kind == "executionCompleted":
        return _describe_end(event.executionCompleted)
    return f"{kind} event (step #{event.eventId})"


def _describe_action(action: Any) -> str:
    kind = action.WhichOneof("workflowActionType")
    if kind == "scheduleTask":
        a = action.scheduleTask
        return f"activity {a.name!r} with {_shown(_value(a.input))} (step #{action.id})"
    if kind == "createChildWorkflow":
        a = action.createChildWorkflow
        return f"child workflow {a.name!r} with {_shown(_value(a.input))} (step #{action.id})"
    if kind == "createTimer":
        return f"timer firing at {_when(action.createTimer.fireAt)} (step #{action.id})"
    if kind == "completeWorkflow":
        return _describe_end(action.completeWorkflow)
    return f"{kind} action (step #{action.id})"


def _describe_end(done: Any) -> str:
    status = _status(done.workflowStatus)
    if done.workflowStatus == 3:  # failed
        fd = done.failureDetails
        return f"workflow {status}: {fd.errorType}: {_clip(fd.errorMessage)}"
    result = _value(done.result)
    return f"workflow {status} with result {_shown(result) if result else 'none'}"


def _when(ts: Any) -> str:
    return ts.ToJsonString() if ts.seconds or ts.nanos else "(unset)"


# --- the checking executor ---------------------------------------------------------------

class _Scheduled:
    """What the history schedules, by sequence id, for classifying a divergence."""

    def __init__(self, events: Sequence[Any]) -> None:
        self.by_id: dict[int, tuple[str, str | None]] = {}
        for event in events:
            if event.HasField("taskScheduled"):
                ev = event.taskScheduled
                self.by_id[event.eventId] = (ev.name, _value(ev.input))
            elif event.HasField("childWorkflowInstanceCreated"):
                ev = event.childWorkflowInstanceCreated
                self.by_id[event.eventId] = (ev.name, _value(ev.input))

    def later(self, event_id: int) -> list[tuple[str, str | None]]:
        return [step for eid, step in self.by_id.items() if eid > event_id]


_STEP_ACTION = {"taskScheduled": "scheduleTask",
                "childWorkflowInstanceCreated": "createChildWorkflow",
                "timerCreated": "createTimer"}


def _make_executor_class() -> type:
    sdk = _sdk()

    class CheckingExecutor(sdk.worker._OrchestrationExecutor):  # type: ignore[misc,name-defined]
        """The SDK's executor, comparing each step with the history before the SDK does."""

        def __init__(self, registry: Any, events: Sequence[Any]) -> None:
            super().__init__(registry, _log)
            self.divergences: list[Divergence] = []
            self._index = {id(e): i for i, e in enumerate(events)}
            # The recorded outcome: (index, ExecutionCompleted event), or None while running.
            # Looked up front: the SDK stops feeding events at the first exception.
            self.completed: tuple[int, Any] | None = next(
                ((i, e) for i, e in enumerate(events) if e.HasField("executionCompleted")),
                None)
            self.refused = False  # the SDK refused the replay part-way
            self._scheduled = _Scheduled(events)
            self._diverged_at: set[int] = set()

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

        def process_event(self, ctx: Any, event: Any) -> None:
            kind = event.WhichOneof("eventType")
            if kind == "executionCompleted":
                # The SDK has no handler for it (it never receives one from the engine);
                # it is the recorded outcome, compared once the replay has run.
                return
            # The SDK pops the matching action before it may raise: keep it for the report.
            pending = ctx._pending_actions.get(event.eventId) if event.eventId >= 0 else None
            if not (self._is_suspended and sdk.worker._is_suspendable(event)):
                if kind == "taskScheduled":
                    self._check_step(ctx, event, event.taskScheduled, "scheduleTask",
                                     "activity")
                elif kind == "childWorkflowInstanceCreated":
                    self._check_step(ctx, event, event.childWorkflowInstanceCreated,
                                     "createChildWorkflow", "child workflow")
                elif kind == "timerCreated":
                    self._check_timer(ctx, event)
            try:
                super().process_event(ctx, event)
            except Exception as exc:
                # NonDeterminismError; or, for a step the code replaced by its completion,
                # the NotImplementedError the SDK raises while describing that mismatch.
                # Anything else is the workflow's own failure, part of its outcome.
                step = _STEP_ACTION.get(kind)
                other = (pending is not None and step is not None
                         and not pending.HasField(step))
                if isinstance(exc, sdk.task.NonDeterminismError) or other:
                    self.refused = True
                    actual = ("nothing (the code schedules no step here)" if pending is None
                              else _describe_action(pending))
                    kind_ = NONDETERMINISM_ERROR
                    if pending is not None and pending.HasField("completeWorkflow"):
                        kind_ = DIFFERENT_OUTCOME
                    why = (f"the SDK refused the replay: {exc}"
                           if isinstance(exc, sdk.task.NonDeterminismError)
                           else "the code ends the workflow where the history goes on")
                    self.diverge(kind_, event, _describe_event(event), actual, why)
                raise

        def _check_step(self, ctx: Any, event: Any, recorded: Any, field_name: str,
                        what: str) -> None:
            action = ctx._pending_actions.get(event.eventId)
            if action is None or sdk.ph.is_optional_timer_action(action):
                return  # the SDK decides: a missing step, or an optional-timer shift
            if not action.HasField(field_name):
                return  # another kind of step: the SDK raises NonDeterminismError
            mine = getattr(action, field_name)
            expected = (recorded.name, _value(recorded.input))
            actual = (mine.name, _value(mine.input))
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
            self.diverge(kind, event, _describe_event(event), _describe_action(action),
                         message)

        def _check_timer(self, ctx: Any, event: Any) -> None:
            action = ctx._pending_actions.get(event.eventId)
            if action is None or not action.HasField("createTimer"):
                return  # the SDK decides
            if sdk.ph.is_optional_timer_action(action) or sdk.ph.is_optional_timer_event(event):
                return
            if action.createTimer.fireAt != event.timerCreated.fireAt:
                self.diverge(DIFFERENT_INPUT, event, _describe_event(event),
                             _describe_action(action),
                             "the code sets a timer for another time than the history "
                             "(a fire time computed from the wall clock?)")

    return CheckingExecutor


@functools.lru_cache(maxsize=1)
def _executor_class() -> type:
    return _make_executor_class()


# --- workflows -------------------------------------------------------------------------

def _workflow_name(fn: Any) -> str:
    alt = getattr(fn, "__dict__", {}).get("_dapr_alternate_name")
    return str(alt or getattr(fn, "__name__", ""))


def _registry_for(workflow: Any) -> Any:
    """A ``_Registry`` holding ``workflow``: a function, a ``{name: function}`` mapping, a
    ``WorkflowRuntime`` or an SDK ``_Registry`` (used as is)."""
    sdk = _sdk()
    if isinstance(workflow, sdk.worker._Registry):
        return workflow
    if isinstance(workflow, sdk.WorkflowRuntime):
        return workflow._WorkflowRuntime__worker._registry
    if isinstance(workflow, Mapping):
        items = list(workflow.items())
    elif callable(workflow):
        items = [(_workflow_name(workflow), workflow)]
    else:
        raise UsageError(f"not a workflow: {workflow!r} (give a function, a mapping of "
                         f"names to functions, or a WorkflowRuntime)")
    # A throwaway runtime registers through the SDK's own wrapper (DaprWorkflowContext,
    # input models), as production does. register_workflow marks the function it gets,
    # so it gets a proxy: the caller's function stays registrable in a real runtime.
    runtime = sdk.WorkflowRuntime(host="127.0.0.1", port="1")
    for name, fn in items:
        if not name:
            raise UsageError(f"cannot tell the workflow name of {fn!r}")
        runtime.register_workflow(_proxy(fn), name=name)
    return runtime._WorkflowRuntime__worker._registry


def _proxy(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def proxy(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    for mark in ("_dapr_alternate_name", "_workflow_registered", "_activity_registered"):
        proxy.__dict__.pop(mark, None)
    return proxy


def load_workflow(ref: str) -> Any:
    """Import ``module:attr`` (or ``path/to/file.py:attr``) and return the attribute.

    The current directory is importable, as with ``python -m``. Anything that goes wrong
    — no such module, an error while importing it, no such attribute — is an InputError.
    """
    module_name, sep, attr = ref.rpartition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"--workflow {ref!r}: expected MODULE:FUNCTION")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise InputError(f"--workflow {ref!r}: no file {module_name}")
            sys.path.insert(0, str(path.resolve().parent))
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise InputError(f"--workflow {ref!r}: cannot load {module_name}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except InputError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, any error
        detail = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        raise InputError(f"--workflow {ref!r}: cannot import {module_name}: {detail}") from None
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InputError(f"--workflow {ref!r}: {module_name} has no {attr!r}") from None
    if not callable(target) and not isinstance(target, Mapping):
        raise InputError(f"--workflow {ref!r}: {attr!r} is not a workflow function")
    return target


# --- replay ----------------------------------------------------------------------------

def _execution_started(events: Sequence[Any]) -> Any:
    for event in events:
        if event.HasField("executionStarted"):
            return event.executionStarted
    raise InputError("history has no ExecutionStarted event: not a workflow history")


def replay(history: Sequence[Any] | str | os.PathLike[str], workflow: Any,
           instance_id: str | None = None) -> ReplayResult:
    """Replay ``history`` against ``workflow`` with the SDK's executor; compare every step.

    ``history``: history events (``HistoryEvent`` protobufs, as the engine returns them)
    or the path of a golden history file. ``workflow``: the workflow function (as
    registered: its Dapr alternate name, else ``__name__``, must be the history's workflow
    name), a ``{name: function}`` mapping, a ``WorkflowRuntime`` or an SDK ``_Registry``.
    ``instance_id``, when given, must be the history's instance.

    Raises InputError when the history cannot be replayed at all (empty, not a workflow
    history, another instance, a workflow that is not registered).
    """
    events = load_history(history) if isinstance(history, str | os.PathLike) else list(history)
    if not events:
        raise InputError("the history is empty")
    started = _execution_started(events)
    name = started.name
    recorded_instance = started.workflowInstance.instanceId
    if instance_id and recorded_instance and recorded_instance != instance_id:
        raise InputError(f"the history is of instance {recorded_instance!r}, "
                         f"not {instance_id!r}")
    instance = instance_id or recorded_instance or "(unknown)"
    registry = _registry_for(workflow)
    if name not in registry.orchestrators and name not in registry.versioned_orchestrators:
        have = sorted({*registry.orchestrators, *registry.versioned_orchestrators})
        raise InputError(f"the history is of workflow {name!r}, but the code given is "
                         f"{', '.join(map(repr, have)) or 'no workflow'}")

    # The engine hands the SDK the committed turns as old events and the newest turn
    # (from its last WorkflowStarted event) as new ones: replay it the same way, so code
    # reading is_replaying sees what it saw when the history was recorded.
    split = 0
    for i, event in enumerate(events):
        if event.HasField("workflowStarted"):
            split = i
    executor = _executor_class()(registry, events)
    results = executor.execute(instance, events[:split], events[split:])
    outcome = _compare_end(executor, results.actions)
    divergences = sorted(executor.divergences,
                         key=lambda d: (d.index if d.index is not None else len(events)))
    return ReplayResult(instance_id=instance, workflow=name, events=len(events),
                        outcome=outcome, divergence=divergences[0] if divergences else None,
                        divergences=tuple(divergences))


def _compare_end(executor: Any, actions: Sequence[Any]) -> str:
    """Compare the code's last actions with how the history ends; return the outcome."""
    ph = _sdk().ph
    done = next((a for a in actions if a.HasField("completeWorkflow")), None)
    open_steps = [a for a in actions if not a.HasField("completeWorkflow")
                  and not ph.is_optional_timer_action(a)]
    outcome = "running" if done is None else _status(done.completeWorkflow.workflowStatus)
    if executor.refused:
        return "refused by the SDK"  # the end would only repeat the first divergence
    if executor.completed is None:  # the history has not ended
        if done is not None:
            executor.diverge(DIFFERENT_OUTCOME, None, "workflow still running",
                             _describe_action(done),
                             "the code ends the workflow where the history goes on")
        elif open_steps:
            executor.diverge(DIFFERENT_ACTIVITY, None,
                             "no further step after the last recorded one",
                             _describe_action(open_steps[0]),
                             "the code schedules a step the history does not have")
        return outcome
    index, event = executor.completed
    recorded = event.executionCompleted
    if done is None:
        actual = (_describe_action(open_steps[0]) if open_steps
                  else "workflow still running (waiting for an event or timer)")
        executor.divergences.append(Divergence(
            DIFFERENT_OUTCOME, int(event.eventId), index, _describe_end(recorded), actual,
            "the history ends the workflow here, the code goes on"))
        return outcome
    mine = done.completeWorkflow
    same = (mine.workflowStatus == recorded.workflowStatus
            and _value(mine.result) == _value(recorded.result))
    if same and recorded.workflowStatus == 3:
        same = (mine.failureDetails.errorType == recorded.failureDetails.errorType
                and mine.failureDetails.errorMessage == recorded.failureDetails.errorMessage)
    if not same:
        executor.divergences.append(Divergence(
            DIFFERENT_OUTCOME, int(event.eventId), index, _describe_end(recorded),
            _describe_end(mine), "the workflow ends with another status or result than "
                                 "the history recorded"))
    return outcome


def assert_replays(history: Sequence[Any] | str | os.PathLike[str], workflow: Any,
                   instance_id: str | None = None) -> ReplayResult:
    """pytest helper: replay, and fail with the explanation when the code diverges."""
    result = replay(history, workflow, instance_id)
    if not result.ok:
        raise AssertionError(result.explain())
    return result


# --- history files ---------------------------------------------------------------------

def save_history(events: Sequence[Any], path: str | os.PathLike[str]) -> Path:
    """Write ``events`` as a golden history file (one event per line, for readable diffs)."""
    from google.protobuf import json_format

    events = list(events)
    started = _execution_started(events) if events else None
    header = {
        "format": HISTORY_FORMAT,
        "version": HISTORY_VERSION,
        "instance_id": started.workflowInstance.instanceId if started else None,
        "workflow": started.name if started else None,
        "count": len(events),
    }
    lines = [orjson.dumps(json_format.MessageToDict(e)).decode() for e in events]
    head = orjson.dumps(header).decode()[:-1]
    text = head + ', "events": [\n' + ",\n".join(lines) + "\n]}\n"
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise InputError(f"cannot write history {out}: {exc.strerror or exc}") from None
    return out


def load_history(path: str | os.PathLike[str]) -> list[Any]:
    """Read and validate a golden history file; InputError on anything unexpected."""
    from google.protobuf import json_format

    pb = _sdk().pb
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_HISTORY_BYTES + 1)
    except OSError as exc:
        raise InputError(f"history {p}: {exc.strerror or exc}") from None
    if len(raw) > MAX_HISTORY_BYTES:
        raise InputError(f"history {p} is larger than {MAX_HISTORY_BYTES} bytes")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"history {p} is not valid JSON (truncated or garbled?): {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != HISTORY_FORMAT:
        raise InputError(f"history {p} is not a {HISTORY_FORMAT} file")
    version = doc.get("version")
    if type(version) is not int or version != HISTORY_VERSION:
        raise InputError(f"history {p}: unsupported version {version!r} "
                         f"(this histaudit reads version {HISTORY_VERSION})")
    items, count = doc.get("events"), doc.get("count")
    if not isinstance(items, list) or type(count) is not int:
        raise InputError(f"history {p}: 'events' must be a list and 'count' an integer")
    if len(items) != count:
        raise InputError(f"history {p} is truncated or padded: {len(items)} events, "
                         f"header says {count}")
    events = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(f"history {p}: event {i} is not an object")
        event = pb.HistoryEvent()
        try:
            json_format.ParseDict(item, event)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise InputError(f"history {p}: event {i} is not a HistoryEvent: {exc}") from None
        if event.WhichOneof("eventType") is None:
            raise InputError(f"history {p}: event {i} has no event type")
        events.append(event)
    if events:
        started = _execution_started(events)
        if doc.get("workflow") != started.name or \
                doc.get("instance_id") != started.workflowInstance.instanceId:
            raise InputError(f"history {p}: header names workflow {doc.get('workflow')!r} of "
                             f"instance {doc.get('instance_id')!r}, the events "
                             f"{started.name!r} of {started.workflowInstance.instanceId!r}")
    return events


# --- the engine ------------------------------------------------------------------------

def fetch_history(address: str, instance_id: str, *,
                  timeout: float = DEFAULT_TIMEOUT_S) -> list[Any]:
    """The engine's history of ``instance_id`` (``GetInstanceHistory`` over the SDK's stub).

    EngineError when the engine does not answer within ``timeout`` seconds; InputError
    when it has no such instance.
    """
    import grpc

    sdk = _sdk()
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--engine {address!r}: expected HOST:PORT")
    channel = sdk.shared.get_grpc_channel(address, options=[
        ("grpc.max_receive_message_length", -1)])
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise EngineError(f"engine at {address} did not answer within "
                              f"{timeout:g}s") from None
        stub = sdk.stubs.TaskHubSidecarServiceStub(channel)
        request = sdk.pb.GetInstanceHistoryRequest(instanceId=instance_id)
        try:
            response = stub.GetInstanceHistory(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.NOT_FOUND:
                raise InputError(f"engine at {address} has no instance {instance_id!r}") from None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise EngineError(f"engine at {address} did not answer within "
                                  f"{timeout:g}s") from None
            raise EngineError(f"engine at {address}: GetInstanceHistory failed: "
                              f"{code.name if code else 'error'}: {detail}") from None
    finally:
        channel.close()
    events = list(response.events)
    if not events:
        raise InputError(f"engine at {address} has no instance {instance_id!r} (no history)")
    return events
