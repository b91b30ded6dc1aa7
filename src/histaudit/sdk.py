"""Every touch of the Dapr workflow SDK's private names, in one place.

histaudit sits closer to the SDK than its public API reaches: it takes the exact JSON
text the SDK exchanges with the engine, hooks two worker methods, reads the actions a
workflow produced, and replays histories on the SDK's own executor. Each of those uses a
private name; this module is the only one that spells them, so an SDK upgrade is checked
here and nowhere else. :func:`missing` lists what the installed SDK lacks
(tests/unit/test_sdk.py asserts it is nothing for the pinned version, ADR 0002).

Two layouts are supported, both with the SDK's durabletask client at
``dapr.ext.workflow._durabletask``: ``dapr[workflow]`` ≥ 1.19 (the SDK inside the core
wheel) and dapr 1.18.x with ``dapr-ext-workflow`` 1.18.x (what dapr-agents 1.0 requires).
They differ, for histaudit, in one place: 1.19 builds a work item's committed events in
``TaskHubGrpcWorker._resolve_history`` (stateful history: a cache plus the engine's
delta), 1.18 hands ``req.pastEvents`` straight to ``_execute_orchestrator``; the replay
check hooks whichever the installed SDK has (:func:`hook_resolve_history`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from histaudit.errors import SdkError


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


DAPR_VERSION = _version("dapr")
EXT_WORKFLOW_VERSION = _version("dapr-ext-workflow")

try:
    from dapr.ext.workflow import DaprWorkflowContext, WorkflowRuntime
    from dapr.ext.workflow._durabletask import task, worker
    from dapr.ext.workflow._durabletask.internal import helpers, protos, shared
    from dapr.ext.workflow._durabletask.internal import (
        orchestrator_service_pb2_grpc as stubs,
    )
except ImportError as exc:  # one line for the CLI and the app, not a traceback
    if DAPR_VERSION is None:
        fix = "install dapr>=1.19 (pip install 'dapr[workflow]')"
    elif DAPR_VERSION.startswith("1.18"):
        fix = (f"dapr {DAPR_VERSION} keeps it in a package of its own: "
               "pip install 'dapr-ext-workflow>=1.18.3,<1.19'")
    else:
        fix = f"dapr {DAPR_VERSION} does not provide it as histaudit expects ({exc})"
    raise SdkError(f"the Dapr workflow SDK (dapr.ext.workflow) is not importable: {fix}"
                   ) from None

__all__ = [
    "NonDeterminismError", "OrchestrationExecutor", "Registry", "WorkflowRuntime",
    "copy_registration_marks", "executor_is_suspended", "from_json", "get_grpc_channel",
    "has_stateful_history", "history_stub", "hook_activity_resolve", "hook_resolve_history",
    "is_async_callable",
    "is_optional_timer_action", "is_optional_timer_event", "is_suspendable", "missing",
    "pending_action", "pending_actions", "protos", "registered_name", "registered_names",
    "registry_of", "runtime_context", "set_wire_input", "sidecar_at",
    "strip_registration_marks", "to_json", "unwrap_decorated", "wire_input",
]


def layout() -> str:
    """Which SDK layout is installed, in words for ``--version``, reports and errors:
    ``dapr 1.19.0`` (the SDK inside ``dapr``), ``dapr 1.18.3 + dapr-ext-workflow 1.18.3``,
    or a mixed install named as one (the legacy package over the core's files)."""
    if EXT_WORKFLOW_VERSION is None:
        return f"dapr {DAPR_VERSION}"
    text = f"dapr {DAPR_VERSION} + dapr-ext-workflow {EXT_WORKFLOW_VERSION}"
    if DAPR_VERSION and not DAPR_VERSION.startswith("1.18"):
        text += (" (mixed: the legacy dapr-ext-workflow overwrote the SDK inside dapr "
                 f"{DAPR_VERSION}; uninstall it, or pin dapr<1.19)")
    return text

# The SDK's private names histaudit uses, resolved on first use (PEP 562), never at
# import: an SDK that renamed one still imports, and `missing()` can say what is gone.
_LAZY: dict[str, tuple[Any, str]] = {
    "OrchestrationExecutor": (worker, "_OrchestrationExecutor"),
    "Registry": (worker, "_Registry"),
    "NonDeterminismError": (task, "NonDeterminismError"),
    "is_suspendable": (worker, "_is_suspendable"),
    # The SDK's own JSON codec (untyped upstream): the exact text it exchanges with the engine.
    "to_json": (shared, "to_json"),
    "from_json": (shared, "from_json"),
    "is_async_callable": (shared, "is_async_callable"),
    "is_optional_timer_action": (helpers, "is_optional_timer_action"),
    "is_optional_timer_event": (helpers, "is_optional_timer_event"),
    "get_grpc_channel": (shared, "get_grpc_channel"),
}

if TYPE_CHECKING:
    OrchestrationExecutor: type
    """The SDK's workflow executor: ``(registry, logger).execute(instance, old, new)``."""
    Registry: type
    """The SDK's registry of workflows (``orchestrators``, ``versioned_orchestrators``)
    and activities (``activities``)."""
    NonDeterminismError: type[Exception]
    is_suspendable: Callable[[Any], bool]
    to_json: Callable[[Any], str]
    from_json: Callable[[str], Any]
    is_async_callable: Callable[[Any], bool]
    is_optional_timer_action: Callable[[Any], bool]
    is_optional_timer_event: Callable[[Any], bool]
    get_grpc_channel: Callable[..., Any]


def __getattr__(name: str) -> Any:
    """Resolve one of :data:`_LAZY`'s names once; an SDK without it is one SdkError."""
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = found
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise SdkError(f"the installed Dapr workflow SDK ({layout()}) has no "
                       f"{module.__name__}.{attr}, which histaudit relies on; it supports "
                       f"dapr 1.18.x with dapr-ext-workflow 1.18.x and dapr 1.19") from None
    globals()[name] = value
    return value


def has_stateful_history() -> bool:
    """Does this SDK's ``WorkflowRuntime`` take ``disable_stateful_history`` (dapr ≥ 1.19:
    the worker may ask the engine for history deltas)?"""
    try:
        return "disable_stateful_history" in inspect.signature(WorkflowRuntime).parameters
    except (TypeError, ValueError):
        return False


def history_stub(channel: Any) -> Any:
    """The SDK's gRPC stub of the engine's TaskHubSidecarService (GetInstanceHistory)."""
    return stubs.TaskHubSidecarServiceStub(channel)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def sidecar_at(address: str, *, timeout: float) -> Iterator[None]:
    """Inside, the SDK's clients find their sidecar at ``address`` (``HOST:PORT``, gRPC), as
    under ``dapr run``: for user code that connects when it is imported (a dapr-agents
    agent asks daprd for its metadata), given ``replay --engine`` and no ``DAPR_*``.

    ``DAPR_GRPC_ENDPOINT`` is set on the SDK's settings object, not only in the
    environment: dapr 1.18 reads the environment once, when ``dapr.conf`` is imported,
    which histaudit has done by then (1.19 reads it on each use, and prefers a value set on
    the object). And ``DaprClient``'s sidecar health check, which asks daprd's *HTTP* port
    (``DAPR_HTTP_PORT``, which ``--engine`` does not name: it would wait out
    ``DAPR_HEALTH_TIMEOUT`` at 127.0.0.1:3500), waits up to ``timeout`` seconds for the
    gRPC channel to ``address`` instead. Both are put back on the way out."""
    import grpc
    from dapr.clients.health import DaprHealth
    from dapr.conf import settings

    def wait_for_sidecar() -> None:
        channel = __getattr__("get_grpc_channel")(address)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"Dapr health check timed out, after {timeout:g}s: nothing "
                               f"answered at {address} (--engine)") from None
        finally:
            channel.close()

    own = vars(settings)
    endpoint = own.get("DAPR_GRPC_ENDPOINT", _UNSET)
    check = DaprHealth.__dict__.get("wait_for_sidecar")
    setattr(settings, "DAPR_GRPC_ENDPOINT", address)  # noqa: B010 - no such attribute typed
    if check is not None:
        DaprHealth.wait_for_sidecar = staticmethod(wait_for_sidecar)  # type: ignore[method-assign]
    try:
        yield
    finally:
        if check is not None:
            DaprHealth.wait_for_sidecar = check  # type: ignore[method-assign]
        if endpoint is _UNSET:
            own.pop("DAPR_GRPC_ENDPOINT", None)
        else:
            setattr(settings, "DAPR_GRPC_ENDPOINT", endpoint)  # noqa: B010


_UNSET: Any = object()

_REGISTRATION_MARKS = ("_dapr_alternate_name", "_activity_registered", "_workflow_registered")
_WORKER_ATTR = "_WorkflowRuntime__worker"
# Attribute the wire-input hook leaves on the SDK's ActivityContext (histaudit's own name).
_WIRE_INPUT = "_histaudit_wire_input"
NOT_CAPTURED: Any = object()
"""What :func:`wire_input` returns when the hook did not run for an activity call."""


def missing() -> list[str]:
    """The private names histaudit relies on that the installed SDK does not have."""
    gone = [f"_durabletask.worker.{n}" for n in ("_OrchestrationExecutor", "_Registry",
                                                   "_is_suspendable", "TaskHubGrpcWorker")
            if not hasattr(worker, n)]
    gone += [f"_durabletask.internal.shared.{n}" for n in ("to_json", "from_json",
                                                            "is_async_callable",
                                                            "get_grpc_channel")
             if not hasattr(shared, n)]
    grpc_worker = getattr(worker, "TaskHubGrpcWorker", object)
    if _history_method(grpc_worker) is None:
        gone.append("TaskHubGrpcWorker._resolve_history (1.19) or _execute_orchestrator (1.18)")
    activity_executor = getattr(worker, "_ActivityExecutor", object)
    gone += [f"_ActivityExecutor.{n}" for n in ("_resolve",)
             if not hasattr(activity_executor, n)]
    probe = WorkflowRuntime(host="127.0.0.1", port="1")
    sdk_worker = getattr(probe, _WORKER_ATTR, None)
    if sdk_worker is None:
        gone.append(f"WorkflowRuntime.{_WORKER_ATTR}")
    else:
        for attr in ("_registry", "_activity_executor"):
            if not hasattr(sdk_worker, attr):
                gone.append(f"TaskHubGrpcWorker.{attr}")
    runtime_ctx = worker._RuntimeOrchestrationContext("probe")
    if runtime_context(DaprWorkflowContext(runtime_ctx)) is not runtime_ctx:
        gone.append(f"DaprWorkflowContext.{_CONTEXT_ATTR}")
    gone += [f"_RuntimeOrchestrationContext.{n}" for n in ("_pending_tasks", "_pending_actions",
                                                          "_sequence_number")
             if not hasattr(runtime_ctx, n)]
    return gone


# --- the runtime's worker and registry ----------------------------------------------------

def _worker_of(runtime: WorkflowRuntime) -> Any:
    return getattr(runtime, _WORKER_ATTR, None)


def registry_of(runtime: WorkflowRuntime) -> Any:
    """The runtime's SDK ``_Registry`` (None if this SDK hides it)."""
    return getattr(_worker_of(runtime), "_registry", None)


def registered_names(runtime: WorkflowRuntime) -> tuple[list[str], list[str]]:
    """(workflow names, activity names) registered on ``runtime``."""
    registry = registry_of(runtime)
    if registry is None:
        return [], []
    workflows = list(getattr(registry, "orchestrators", {}))
    workflows += [n for n in getattr(registry, "versioned_orchestrators", {})
                  if n not in workflows]
    return workflows, list(getattr(registry, "activities", {}))


def hook_activity_resolve(runtime: WorkflowRuntime, after: Callable[[Any, str | None], None]
                          ) -> bool:
    """Call ``after(activity_context, encoded_input)`` each time the SDK resolves an
    activity call (``_ActivityExecutor._resolve``), before the activity runs. True if
    hooked."""
    executor = getattr(_worker_of(runtime), "_activity_executor", None)
    original = getattr(executor, "_resolve", None)
    if original is None:
        return False

    def resolve(fn: Any, orchestration_id: str, name: str, task_id: int,
                encoded_input: str | None, *rest: Any, **kw: Any) -> Any:
        resolved = original(fn, orchestration_id, name, task_id, encoded_input, *rest, **kw)
        try:
            ctx = resolved[1]
        except (IndexError, TypeError):
            return resolved
        after(ctx, encoded_input)
        return resolved

    executor._resolve = resolve  # type: ignore[union-attr]
    return True


def _history_method(worker_or_class: Any) -> str | None:
    """The worker method a work item's committed events pass through on this SDK."""
    for name in ("_resolve_history", "_execute_orchestrator"):
        if hasattr(worker_or_class, name):
            return name
    return None


def hook_resolve_history(runtime: WorkflowRuntime,
                         after: Callable[[Any, list[Any]], None]) -> bool:
    """Call ``after(request, events)`` with the committed events of every workflow work
    item the worker replays, before the workflow runs. On 1.19 that is what
    ``TaskHubGrpcWorker._resolve_history`` returns (the engine's full history, or the
    worker's cache plus a delta); on 1.18, which has no such cache, the request's
    ``pastEvents`` as ``_execute_orchestrator`` receives them. The events go on unchanged.
    True if hooked."""
    sdk_worker = _worker_of(runtime)
    method = _history_method(sdk_worker)
    if method is None:
        return False
    original = getattr(sdk_worker, method)
    if method == "_resolve_history":
        def resolve_history(req: Any) -> Any:
            events = original(req)
            after(req, events)
            return events

        sdk_worker._resolve_history = resolve_history
    else:
        def execute_orchestrator(req: Any, *args: Any, **kwargs: Any) -> Any:
            after(req, list(req.pastEvents))
            return original(req, *args, **kwargs)

        sdk_worker._execute_orchestrator = execute_orchestrator
    return True


def set_wire_input(activity_context: Any, text: str | None) -> None:
    try:
        setattr(activity_context, _WIRE_INPUT, text)
    except (AttributeError, TypeError):
        pass


def wire_input(activity_context: Any) -> Any:
    """The input text the engine sent for this call, or :data:`NOT_CAPTURED`."""
    return getattr(activity_context, _WIRE_INPUT, NOT_CAPTURED)


# --- a workflow's pending actions ----------------------------------------------------------

_CONTEXT_ATTR = "_DaprWorkflowContext__obj"


def runtime_context(ctx: Any) -> Any:
    """The SDK's own orchestration context behind a ``DaprWorkflowContext`` (``ctx``
    itself when it is not one). Reading the pending tasks through the wrapper costs a
    failed lookup and its ``__getattr__`` each time; the replayed path of every turn
    reads them once per earlier step. The wrapper's own attributes are read, never its
    ``__getattr__``, which an SDK without this name would send round in circles."""
    inner = getattr(ctx, "__dict__", {}).get(_CONTEXT_ATTR)
    return ctx if inner is None else inner


def workflow_version(ctx: Any) -> str | None:
    """The version name this run of a versioned workflow is (``register_versioned_workflow``;
    the SDK reads it from the history on replay), None for an unversioned one. Both SDK
    layouts keep it on the runtime context as ``_version_name`` and have no public
    accessor."""
    name = getattr(runtime_context(ctx), "_version_name", None)
    return name if isinstance(name, str) else None


def patches_taken(ctx: Any) -> frozenset[str]:
    """The patches the running workflow's code asked ``is_patched`` about and took
    (the SDK keeps only those it answered True)."""
    patches = getattr(runtime_context(ctx), "_encountered_patches", None)
    return frozenset(p for p in patches or () if isinstance(p, str))


def history_patches(events: Iterable[Any]) -> list[str]:
    """The patches a history says its workflow took, in the order first recorded: each
    turn's ``WorkflowStarted`` carries the code's ``version.patches`` (daprd keeps only
    those new in the turn)."""
    seen: dict[str, None] = {}
    for event in events:
        if event.HasField("workflowStarted") and event.workflowStarted.HasField("version"):
            seen.update(dict.fromkeys(event.workflowStarted.version.patches))
    return list(seen)


def propagated_chunks(history: Any) -> list[tuple[str, str, str, list[Any]]]:
    """A ``PropagatedHistory``'s chunks, oldest ancestor first: (instance id, app id,
    workflow name, its events). Both layouts keep the chunk index private
    (``_chunks``, each a start index and count into the public ``events``)."""
    events = list(getattr(history, "events", None) or ())
    out = []
    for chunk in getattr(history, "_chunks", None) or ():
        start, count = int(chunk.start_event_index), int(chunk.event_count)
        out.append((str(chunk.instance_id), str(chunk.app_id), str(chunk.workflow_name),
                    events[start:start + count]))
    return out


def pending_actions(ctx: Any) -> dict[int, Any]:
    """The actions the workflow code produced so far this turn, by sequence id."""
    actions = getattr(ctx, "_pending_actions", None)
    return actions if isinstance(actions, dict) else {}


def pending_action(ctx: Any, scheduled: Any) -> tuple[int | None, Any]:
    """The task id and pending action the SDK created for the task ``scheduled``; ``ctx``
    is read fastest as its :func:`runtime_context`."""
    pending = getattr(ctx, "_pending_tasks", None)
    if not isinstance(pending, dict):
        return None, None
    # The SDK numbers a new task with its sequence counter, so the task just created is
    # normally the one under the counter's value (asked on the replayed path too, once per
    # earlier step on every turn). Else the tasks are searched newest first: the task
    # asked about is the one the SDK created last, and a workflow that fans out holds
    # many pending tasks at once.
    seq = getattr(ctx, "_sequence_number", None)
    if seq.__class__ is int and pending.get(seq) is scheduled:
        return seq, pending_actions(ctx).get(seq)
    for task_id, candidate in reversed(pending.items()):
        if candidate is scheduled:
            return int(task_id), pending_actions(ctx).get(task_id)
    return None, None


def executor_is_suspended(executor: Any) -> bool:
    return bool(getattr(executor, "_is_suspended", False))


# --- registration marks and decorators ------------------------------------------------------

def registered_name(target: Any) -> str:
    """The name the SDK registers/schedules ``target`` under (a str is its own name)."""
    if isinstance(target, str):
        return target
    alt = getattr(target, "__dict__", {}).get("_dapr_alternate_name")
    return str(alt or getattr(target, "__name__", repr(target)))


def copy_registration_marks(source: Callable[..., Any], target: Callable[..., Any]) -> None:
    """Copy the marks the SDK left on ``source`` when registering it onto ``target``.

    ``ctx.call_activity(fn)`` and ``client.schedule_new_workflow(fn)`` read the registered
    name off the function the user holds, and double registration is refused on it.
    """
    for attr in _REGISTRATION_MARKS:
        if attr in source.__dict__:
            target.__dict__[attr] = source.__dict__[attr]


def strip_registration_marks(fn: Callable[..., Any]) -> None:
    for attr in _REGISTRATION_MARKS:
        fn.__dict__.pop(attr, None)


def unwrap_decorated(obj: Any) -> Any:
    """The workflow or activity function behind ``@wfr.workflow`` / ``@wfr.activity``.

    Those decorators register the function and return a zero-argument ``innerfn`` that
    returns it (with the function's signature copied on, and ``__wrapped__`` set); called
    as a workflow it would fail with "takes 0 positional arguments". Anything else is
    returned unchanged.
    """
    inner = getattr(obj, "__wrapped__", None)
    code = getattr(obj, "__code__", None)
    if inner is None or code is None or not inspect.isfunction(obj):
        return obj
    takes_args = code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    if code.co_name != "innerfn" or code.co_argcount or code.co_kwonlyargcount or takes_args:
        return obj  # e.g. @alternate_name's innerfn(*args, **kwargs), which forwards
    return inner if obj() is inner else obj


# --- the SDK's workflow executor, with hooks around each event (histaudit replay) ---------

class EventHooks(Protocol):
    """What :func:`hooked_executor` calls around the SDK's handling of each event."""

    def before_event(self, executor: Any, ctx: Any, event: Any) -> bool:
        """Called first; False skips the SDK's handling of ``event``."""
        ...

    def event_failed(self, ctx: Any, event: Any, exc: Exception) -> None:
        """The SDK raised ``exc`` handling ``event`` (re-raised after this returns)."""
        ...


@functools.cache
def _hooked_executor_class() -> type:
    class HookedExecutor(__getattr__("OrchestrationExecutor")):  # type: ignore[misc]
        """The SDK's executor; ``process_event`` (the SDK's method) runs inside hooks."""

        def __init__(self, registry: Any, logger: Any, hooks: EventHooks) -> None:
            super().__init__(registry, logger)
            self._hooks = hooks

        def process_event(self, ctx: Any, event: Any) -> None:
            if not self._hooks.before_event(self, ctx, event):
                return
            try:
                super().process_event(ctx, event)
            except Exception as exc:
                self._hooks.event_failed(ctx, event, exc)
                raise

    return HookedExecutor


def hooked_executor(registry: Any, logger: Any, hooks: EventHooks) -> Any:
    """The SDK's workflow executor over ``registry``, calling ``hooks`` around each event
    it processes: the one override of an SDK method, here with the SDK's other names."""
    return _hooked_executor_class()(registry, logger, hooks)
