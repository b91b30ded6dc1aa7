"""Replay a recorded workflow history against workflow code, offline, and say where it differs.

Dapr replays a workflow from its stored history every time it resumes it. Code that
changed since the history was recorded, or that is not deterministic (wall-clock time,
random numbers, I/O in the workflow body), takes a different path on that replay. The
SDK notices only part of it: it refuses a replayed step whose *type* or activity *name*
differs from the history, but not a different *input*, and it never compares the way the
workflow ends. :func:`replay` runs the SDK's own orchestration executor over a recorded
history (:class:`~histaudit.replay.executor.CheckingExecutor`) and adds the missing
comparisons:

* every activity, child workflow and timer the code schedules is compared with the
  matching ``TaskScheduled`` / ``ChildWorkflowInstanceCreated`` / ``TimerCreated`` event:
  name **and** input (fire time for timers);
* the completion the code produces is compared with the ``ExecutionCompleted`` event:
  status, result, and error type and message for a failure;
* whatever the SDK itself refuses (``NonDeterminismError``) is reported too.

The first difference is the :class:`Divergence` of the :class:`ReplayResult`, with both
sides shown: what the history recorded and what the code did. A history that has not
ended (the instance is still running, or the file was saved mid-run) replays as far as it
goes: the result says so (``completed`` False) and names the last event replayed, the
steps still waiting for a completion and what the code would do next — its next turn,
which the history cannot contradict. A history that cannot be
replayed at all is an :class:`~histaudit.errors.InputError`, never a divergence.
Reconstructing a history from the ledger alone is not supported: the ledger holds
commitments, not the engine's events.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from histaudit import sdk, usercode
from histaudit.errors import InputError, UsageError

from . import describe
from .executor import CheckingExecutor
from .history import History, execution_started
from .result import DIFFERENT_OUTCOME, Divergence, ReplayResult

__all__ = ["assert_replays", "load_workflow", "load_workflows", "registry_for", "replay"]


def registry_for(workflow: Any) -> Any:
    """A ``_Registry`` holding ``workflow``: a function (``@wfr.workflow``-decorated or
    plain), a ``{name: function}`` mapping, a ``WorkflowRuntime`` or an SDK registry."""
    if isinstance(workflow, sdk.Registry):
        return workflow
    if isinstance(workflow, sdk.WorkflowRuntime):
        return sdk.registry_of(workflow)
    functions = usercode.workflow_functions(workflow)
    # A throwaway runtime registers through the SDK's own wrapper (DaprWorkflowContext,
    # input models), as production does. register_workflow marks the function it gets,
    # so it gets a proxy: the caller's function stays registrable in a real runtime.
    runtime = sdk.WorkflowRuntime(host="127.0.0.1", port="1")
    for name, fn in functions.items():
        runtime.register_workflow(_proxy(fn), name=name)
    return sdk.registry_of(runtime)


def _proxy(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def proxy(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    sdk.strip_registration_marks(proxy)
    return proxy


def load_workflow(ref: str) -> Any:
    """The workflow code ``MODULE:NAME`` names (see :mod:`histaudit.usercode`): a
    function, a mapping of names to functions, or a ``WorkflowRuntime``."""
    target = usercode.load(ref, "--workflow")
    if not (callable(target) or isinstance(target, Mapping | sdk.WorkflowRuntime)):
        raise InputError(f"--workflow {ref!r}: it is not a workflow function")
    return target


def load_workflows(refs: Sequence[str]) -> Any:
    """The workflow code several ``MODULE:NAME`` references name, as one ``{name: function}``
    mapping (one reference: what :func:`load_workflow` returns). A ``WorkflowRuntime``
    holds its own registry and can only be given alone."""
    targets = [load_workflow(ref) for ref in refs]
    if len(targets) == 1:
        return targets[0]
    merged: dict[str, Callable[..., Any]] = {}
    for ref, target in zip(refs, targets, strict=True):
        if isinstance(target, sdk.WorkflowRuntime):
            raise UsageError(f"--workflow {ref!r} is a WorkflowRuntime: give it as the only "
                             f"--workflow, or give workflow functions")
        merged.update(usercode.workflow_functions(target))
    return merged


def replay(history: History | Sequence[Any] | str | os.PathLike[str], workflow: Any,
           instance_id: str | None = None) -> ReplayResult:
    """Replay ``history`` against ``workflow`` with the SDK's executor; compare every step.

    ``history``: a :class:`History`, history events (``HistoryEvent`` protobufs, as the
    engine returns them) or the path of a golden history file. ``workflow``: the workflow
    function (``@wfr.workflow``-decorated or plain; as registered — its Dapr alternate
    name, else ``__name__`` — it must be the history's workflow), a ``{name: function}``
    mapping, a ``WorkflowRuntime`` or an SDK ``_Registry``.
    ``instance_id``, when given, must be the history's instance.

    Raises InputError when the history cannot be replayed at all (empty, not a workflow
    history, another instance, a workflow that is not registered).
    """
    if isinstance(history, str | os.PathLike):
        history = History.load(history)
    events = list(history)
    if not events:
        raise InputError("the history is empty")
    started = execution_started(events)
    name = started.name
    recorded_instance = started.workflowInstance.instanceId
    if instance_id and recorded_instance and recorded_instance != instance_id:
        raise InputError(f"the history is of instance {recorded_instance!r}, "
                         f"not {instance_id!r}")
    instance = instance_id or recorded_instance or "(unknown)"
    registry = registry_for(workflow)
    if name not in registry.orchestrators and name not in registry.versioned_orchestrators:
        have = sorted({*registry.orchestrators, *registry.versioned_orchestrators})
        raise InputError(f"the history is of workflow {name!r}, but the code given is "
                         f"{', '.join(map(repr, have)) or 'no workflow'} (renamed code "
                         f"replays under its recorded name: @alternate_name({name!r}))")

    # The engine hands the SDK the committed turns as old events and the newest turn
    # (from its last WorkflowStarted event) as new ones: replay it the same way, so code
    # reading is_replaying sees what it saw when the history was recorded.
    split = 0
    for i, event in enumerate(events):
        if event.HasField("workflowStarted"):
            split = i
    executor = CheckingExecutor(registry, events)
    results = executor.execute(instance, events[:split], events[split:])
    outcome, upcoming = _compare_end(executor, results.actions)
    divergences = _with_patches(sorted(
        executor.divergences, key=lambda d: (d.index if d.index is not None else len(events))),
        events, executor.context)
    done = next((a for a in results.actions if a.HasField("completeWorkflow")), None)
    ended = executor.completed is not None
    return ReplayResult(
        instance_id=instance, workflow=name, events=len(events), outcome=outcome,
        divergence=divergences[0] if divergences else None, divergences=tuple(divergences),
        completed=ended, last_event=describe.describe_event(events[-1]),
        waiting=() if ended else tuple(describe.unanswered(events)), next=upcoming,
        output=None if done is None else describe.value(done.completeWorkflow.result))


def _with_patches(divergences: list[Divergence], events: Sequence[Any],
                  ctx: Any) -> list[Divergence]:
    """``divergences`` naming the patches behind them: those the recorded run took
    (``ctx.is_patched`` answered True, the history says so) that this code never took —
    the check removed or renamed, so the code follows another branch than the one the
    ledger signed as ``workflow.patch``."""
    dropped = [p for p in sdk.history_patches(events)
               if ctx is None or p not in sdk.patches_taken(ctx)]
    if not dropped or not divergences:
        return divergences
    names = ", ".join(repr(p) for p in dropped)
    note = (f"; the recorded run took patch{'es' if len(dropped) > 1 else ''} {names} "
            f"(is_patched answered True), which this code never takes")
    return [dataclasses.replace(d, message=d.message + note) for d in divergences]


def _compare_end(executor: Any, actions: Sequence[Any]) -> tuple[str, tuple[str, ...]]:
    """Compare the code's last actions with how the history ends; return the outcome and,
    for a history that has not ended, what the code would do next."""
    done = next((a for a in actions if a.HasField("completeWorkflow")), None)
    open_steps = [a for a in actions if not a.HasField("completeWorkflow")
                  and not sdk.is_optional_timer_action(a)]
    outcome = ("running" if done is None
               else describe.status_word(done.completeWorkflow.workflowStatus))
    if executor.refused:
        return "refused by the SDK", ()  # the end would only repeat the first divergence
    if executor.completed is None:
        # The history has not ended (saved mid-run, or the instance is still running):
        # what the code does past its last event is not a divergence but its next turn —
        # the engine records those steps only once it has run that turn.
        return outcome, tuple(describe.describe_action(a)
                              for a in (*open_steps, *([done] if done else [])))
    index, event = executor.completed
    recorded = event.executionCompleted
    if done is None:
        actual = (describe.describe_action(open_steps[0]) if open_steps
                  else "workflow still running (waiting for an event or timer)")
        executor.divergences.append(Divergence(
            DIFFERENT_OUTCOME, int(event.eventId), index, describe.describe_end(recorded), actual,
            "the history ends the workflow here, the code goes on"))
        return outcome, ()
    mine = done.completeWorkflow
    same = (mine.workflowStatus == recorded.workflowStatus
            and describe.value(mine.result) == describe.value(recorded.result))
    if same and recorded.workflowStatus == 3:
        same = (mine.failureDetails.errorType == recorded.failureDetails.errorType
                and mine.failureDetails.errorMessage == recorded.failureDetails.errorMessage)
    if not same:
        executor.divergences.append(Divergence(
            DIFFERENT_OUTCOME, int(event.eventId), index, describe.describe_end(recorded),
            describe.describe_end(mine), "the workflow ends with another status or result than "
                                 "the history recorded"))
    return outcome, ()


def assert_replays(history: History | Sequence[Any] | str | os.PathLike[str], workflow: Any,
                   instance_id: str | None = None) -> ReplayResult:
    """pytest helper: replay, and fail with the explanation when the code diverges."""
    result = replay(history, workflow, instance_id)
    if not result.ok:
        raise AssertionError(result.explain())
    return result
