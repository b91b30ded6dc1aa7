"""The Dapr interceptor: a WorkflowRuntime that signs every activity run and decision.

``AuditedWorkflowRuntime`` is ``dapr.ext.workflow.WorkflowRuntime`` plus a ledger. Every
registered activity (sync or async, by decorator or ``register_activity``) records

* ``activity.started`` before its body, with an ``attempt`` number counted from the
  ledger itself, because a crash loses whatever the process remembered;
* ``activity.completed`` (or ``activity.failed``) after it, appended *before* the result
  goes back to the engine, so a crash after a side effect shows up later as a second
  ``activity.started`` of the same task. A ledger that refuses the write fails the
  activity: the engine never hears of a success the ledger does not hold.

Every registered workflow records its decisions while *not* replaying (its start, each
activity or child workflow it schedules, its completion or failure), so replays after a
crash add nothing.

Payloads (inputs, outputs, error messages) never enter a signed entry. An entry holds a
reference ``{"c": salted commitment, "n": size}`` and the payload sits beside the chain,
erasable. A random salt makes equal payloads commit differently, so each reference comes
with a ``*_digest``: HMAC-SHA256 under a per-instance secret derived from the signing
key. Equal payloads in one instance have equal digests (that is how re-executions that
returned different results are found), yet nobody without the private key can test a
guess of an erased value against either the commitment or the digest.

Commitments cover the exact JSON text the SDK exchanges with the engine: activity inputs
are taken off the wire, everything else is encoded with the SDK's own serializer, which
is what the SDK itself sends.

While a workflow replays, every activity result the engine feeds back is compared with
the signed completion of that task (see :class:`ReplayedResultCheck`); a result that is not
the one signed is recorded as ``replay.mismatch``, which the verifier reports as
``replay-mismatch``.

Automatic crash points (see :mod:`histaudit.crash`): ``before:<activity>`` after the
start is signed and before the body runs; ``after:<activity>`` after the body returned
and *before* the completion is signed or reported. A crash there loses both, so the
engine runs the activity again: the at-least-once case worth testing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import inspect
import itertools
import logging
import os
import socket
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dapr.ext.workflow import DaprWorkflowContext, WorkflowActivityContext, WorkflowRuntime
from dapr.ext.workflow._durabletask.internal import shared as _sdk_shared

from . import format as fmt
from .crash import crash_point
from .errors import HistauditError, KeyProblem, StoreError, UsageError
from .keys import Signer, signer_from_env
from .store import Ledger, resolve_url

__all__ = [
    "KINDS",
    "ActivityRun",
    "AuditRecorder",
    "AuditedWorkflowContext",
    "AuditedWorkflowRuntime",
    "ReplayedResultCheck",
    "current_activity",
    "payload_digest",
    "sdk_decode",
    "sdk_json",
]

log = logging.getLogger(__name__)

ACTIVITY_STARTED = "activity.started"
ACTIVITY_COMPLETED = "activity.completed"
ACTIVITY_FAILED = "activity.failed"
WORKFLOW_STARTED = "workflow.started"
WORKFLOW_SCHEDULED_ACTIVITY = "workflow.scheduled_activity"
WORKFLOW_SCHEDULED_CHILD = "workflow.scheduled_child"
WORKFLOW_CONTINUED_AS_NEW = "workflow.continued_as_new"
WORKFLOW_COMPLETED = "workflow.completed"
WORKFLOW_FAILED = "workflow.failed"
REPLAY_MISMATCH = "replay.mismatch"

KINDS = (ACTIVITY_STARTED, ACTIVITY_COMPLETED, ACTIVITY_FAILED, WORKFLOW_STARTED,
         WORKFLOW_SCHEDULED_ACTIVITY, WORKFLOW_SCHEDULED_CHILD, WORKFLOW_CONTINUED_AS_NEW,
         WORKFLOW_COMPLETED, WORKFLOW_FAILED, REPLAY_MISMATCH)
"""Entry kinds this module writes (the side-effect kinds are in :mod:`histaudit.effects`)."""

_DIGEST_DOMAIN = b"histaudit.digest-key.v1\x00"
# Attribute the wire-input hook leaves on the SDK's ActivityContext.
_WIRE_INPUT = "_histaudit_wire_input"
_NOT_CAPTURED = object()
# The SDK's own JSON codec (untyped upstream): the exact text it exchanges with the engine.
_to_json: Callable[[Any], str] = _sdk_shared.to_json
_from_json: Callable[[str], Any] = _sdk_shared.from_json


def sdk_json(value: Any) -> str | None:
    """Encode ``value`` exactly as the Dapr SDK does before handing it to the engine.

    ``None`` stays ``None``: the SDK sends no payload at all for it.
    """
    return None if value is None else _to_json(value)


def sdk_decode(raw: bytes) -> Any:
    """Decode stored payload bytes the way the SDK decodes what the engine sends."""
    return _from_json(raw.decode("utf-8"))


def payload_digest(signer: Signer, instance: str, payload: bytes) -> str:
    """Keyed digest of a payload: equal payloads of one instance give equal digests.

    The per-instance secret is SHA-256 over an Ed25519 signature of a fixed label and the
    instance id. Ed25519 signatures are deterministic (RFC 8032), so every process and
    replica holding the key derives the same secret, and nobody else can. The label is
    not JSON, so the signature can never double as a signature over a ledger record, and
    it is hashed, never stored.
    """
    return hmac.new(_instance_secret(signer, instance), payload, hashlib.sha256).hexdigest()


def _instance_secret(signer: Signer, instance: str) -> bytes:
    sig = signer.sign(_DIGEST_DOMAIN + instance.encode("utf-8"))
    return hashlib.sha256(_DIGEST_DOMAIN + sig).digest()


def _worker_id() -> str:
    """Who ran it: ``host:pid`` (computed per record, so a fork reports its own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class _Payload:
    """One committed payload: the signed reference, its digest and the erasable row."""

    ref: dict[str, Any] | None
    digest: str | None
    rows: dict[bytes, tuple[str, bytes]]


_S = TypeVar("_S")
_R = TypeVar("_R")
_MAX_FOLDS = 4096
"""Fold states kept per recorder (instance × fold), least recently used dropped first."""


class _Fold:
    """One fold's state over one instance's chain, and the last seq folded into it."""

    __slots__ = ("lock", "seq", "state")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0
        self.state: Any = None


class _StartCounts(Counter[tuple[str, Any]]):
    """``activity.started`` entries counted by execution id and by task id."""

    def add(self, entry: fmt.Entry) -> None:
        if entry.kind == ACTIVITY_STARTED:
            data = entry.data
            if data.get("execution_id"):
                self["execution_id", data["execution_id"]] += 1
            self["task_id", data.get("task_id")] += 1


class AuditRecorder:
    """Signs events into one ledger with one key; shared by a runtime's threads."""

    def __init__(self, ledger: Ledger, signer: Signer, *, keep_payloads: bool = True) -> None:
        self.ledger = ledger
        self.signer = signer
        self.keep_payloads = keep_payloads
        self._secret = functools.lru_cache(maxsize=4096)(self._derive_secret)
        self._folds: OrderedDict[tuple[str, str], _Fold] = OrderedDict()
        self._folds_lock = threading.Lock()

    def _derive_secret(self, instance: str) -> bytes:
        return _instance_secret(self.signer, instance)

    def digest(self, instance: str, payload: bytes) -> str:
        """See :func:`payload_digest`; cached per instance."""
        return hmac.new(self._secret(instance), payload, hashlib.sha256).hexdigest()

    def commit(self, instance: str, text: str | None) -> _Payload:
        """Commit to one JSON text (``None``: no payload, so no reference either)."""
        if text is None:
            return _Payload(None, None, {})
        raw = text.encode("utf-8")
        salt = fmt.new_salt()
        commitment = fmt.commit(raw, salt)
        rows = {salt: (commitment, raw)} if self.keep_payloads else {}
        return _Payload({"c": commitment, "n": len(raw)}, self.digest(instance, raw), rows)

    def append(self, instance: str, kind: str, data: Mapping[str, Any],
               *payloads: _Payload) -> fmt.Entry:
        """Sign one entry into ``instance``'s chain, storing the payloads it commits to."""
        rows: dict[bytes, tuple[str, bytes]] = {}
        for p in payloads:
            rows.update(p.rows)
        return self.ledger.append(instance, kind, data, signer=self.signer,
                                  payloads=rows or None)

    def entries(self, instance: str) -> Iterator[fmt.Entry]:
        """``instance``'s parsed entries in chain order, skipping any that do not parse.

        Used only to count and look up; the verifier is what reports a malformed entry.
        """
        for row in self.ledger.entries(instance):
            try:
                yield fmt.parse_entry(row.body)
            except HistauditError:
                continue

    def fold(self, instance: str, name: str, init: Callable[[], _S],
             step: Callable[[_S, fmt.Entry], None], answer: Callable[[_S], _R]) -> _R:
        """Fold ``step`` over ``instance``'s parsed entries; return ``answer(state)``.

        Reading the whole chain for every activity makes a long workflow quadratic. A
        chain only grows at its end, and appends are serialized, so what this process
        has read of it stays a prefix: the state of each fold (``name``) is kept per
        instance and brought up to date by reading only the entries after the last seq
        it has seen — entries any process appended since included. A new process (after
        a crash) starts from the first entry, as before. ``answer`` runs under the fold's
        lock, so it may read the state but must return something that does not share it.
        States are kept for the most recently used instances only.
        """
        key = (instance, name)
        with self._folds_lock:
            slot = self._folds.get(key)
            if slot is None:
                slot = self._folds[key] = _Fold()
            self._folds.move_to_end(key)
            while len(self._folds) > _MAX_FOLDS:
                self._folds.popitem(last=False)
        with slot.lock:
            if slot.state is None:
                slot.state = init()
            for row in self.ledger.entries(instance, after_seq=slot.seq):
                slot.seq = max(slot.seq, row.seq)
                try:
                    entry = fmt.parse_entry(row.body)
                except HistauditError:
                    continue  # counted nowhere; the verifier reports it
                step(slot.state, entry)
            return answer(slot.state)

    def prior_starts(self, instance: str, execution_id: str, task_id: int) -> int:
        """How many times this activity call already started, according to the ledger.

        A call is identified by the SDK's task execution id, which stays the same across
        retry-policy retries (each gets a new task id) and engine re-deliveries (same task
        id); an SDK that sends none falls back to the task id.
        """
        by = ("execution_id", execution_id) if execution_id else ("task_id", task_id)
        return self.fold(instance, "starts", _StartCounts, _StartCounts.add,
                         lambda counts: counts[by])

    def load_payload(self, ref: Mapping[str, Any]) -> tuple[bool, bytes | None]:
        """The stored bytes behind a reference: (True, bytes), or (False, None) once erased.

        A stored payload that does not match its signed commitment is refused.
        """
        commitment = ref.get("c")
        if not isinstance(commitment, str):
            return False, None
        stored = self.ledger.payload(commitment)
        if stored is None:
            return False, None
        salt, raw = stored
        if not fmt.commitment_matches(commitment, raw, salt):
            raise StoreError(f"stored payload {commitment[:12]}… does not match its signed "
                             f"commitment")
        return True, raw


# --- activities ------------------------------------------------------------------------

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
    worker: str = field(default_factory=_worker_id)

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
    wire = getattr(inner, _WIRE_INPUT, _NOT_CAPTURED)
    text: str | None
    if wire is _NOT_CAPTURED:
        text = sdk_json(args[1]) if len(args) > 1 else None
    else:
        text = wire if isinstance(wire, str) else None
    attempt = recorder.prior_starts(instance, execution_id, task_id) + 1
    worker = _worker_id()
    inp = recorder.commit(instance, text)
    entry = recorder.append(instance, ACTIVITY_STARTED, {
        "activity": name, "task_id": task_id, "execution_id": execution_id,
        "attempt": attempt, "worker": worker, "input": inp.ref, "input_digest": inp.digest,
    }, inp)
    return ActivityRun(recorder, instance, name, task_id, execution_id, attempt, entry.seq,
                       worker)


def _record_failure(run: ActivityRun, exc: BaseException) -> None:
    """Record ``activity.failed`` (type in clear, message committed) for ``exc``."""
    err = run.recorder.commit(run.instance, str(exc))
    run.recorder.append(run.instance, ACTIVITY_FAILED, {
        **run.fields(), "started_seq": run.started_seq, "error_type": type(exc).__name__,
        "error": err.ref, "error_digest": err.digest,
    }, err)


def _failed(run: ActivityRun, exc: Exception) -> None:
    """The body raised: record it; the original error still goes to the engine."""
    try:
        _record_failure(run, exc)
    except Exception as problem:  # noqa: BLE001 - the activity fails either way
        log.warning("histaudit: could not record the failure of activity %s (task %s of "
                    "%s): %s", run.activity, run.task_id, run.instance, problem)


def _completed(run: ActivityRun, result: Any) -> None:
    """Record ``activity.completed``; raise (failing the activity) if that is impossible."""
    try:
        text = sdk_json(result)
    except (TypeError, ValueError) as exc:  # the SDK could not send it either
        _failed(run, exc)
        raise
    out = run.recorder.commit(run.instance, text)
    try:
        run.recorder.append(run.instance, ACTIVITY_COMPLETED, {
            **run.fields(), "started_seq": run.started_seq, "output": out.ref,
            "output_digest": out.digest,
        }, out)
    except Exception as exc:
        error = StoreError(
            f"histaudit could not record the completion of activity {run.activity!r} "
            f"(task {run.task_id} of {run.instance!r}); failing it rather than reporting "
            f"an unrecorded success: {exc}")
        with contextlib.suppress(Exception):
            _record_failure(run, error)
        raise error from exc


def _audit_activity(recorder: AuditRecorder, fn: Callable[..., Any],
                    name: Callable[[], str]) -> Callable[..., Any]:
    """Wrap one activity function; same signature, so the SDK binds inputs as before."""
    if _sdk_shared.is_async_callable(fn):

        @functools.wraps(fn)
        async def audited_async(*args: Any, **kwargs: Any) -> Any:
            # Ledger I/O runs off the event loop so other async activities keep going.
            run = await asyncio.to_thread(_start_activity, recorder, name(), args)
            token = _CURRENT.set(run)
            try:
                crash_point(f"before:{run.activity}")
                try:
                    result = await fn(*args, **kwargs)
                except Exception as exc:
                    await asyncio.to_thread(_failed, run, exc)
                    raise
                crash_point(f"after:{run.activity}")
                await asyncio.to_thread(_completed, run, result)
                return result
            finally:
                _CURRENT.reset(token)

        return audited_async

    @functools.wraps(fn)
    def audited(*args: Any, **kwargs: Any) -> Any:
        run = _start_activity(recorder, name(), args)
        token = _CURRENT.set(run)
        try:
            crash_point(f"before:{run.activity}")
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                _failed(run, exc)
                raise
            crash_point(f"after:{run.activity}")
            _completed(run, result)
            return result
        finally:
            _CURRENT.reset(token)

    return audited


# --- workflows -------------------------------------------------------------------------

def _callable_name(target: Any) -> str:
    """The name the SDK registers/schedules ``target`` under."""
    if isinstance(target, str):
        return target
    alt = getattr(target, "__dict__", {}).get("_dapr_alternate_name")
    return str(alt or getattr(target, "__name__", repr(target)))


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

    def _decide(self, kind: str, data: dict[str, Any], *payloads: _Payload) -> None:
        if self._ctx.is_replaying:
            return
        try:
            self._recorder.append(self.instance_id, kind,
                                  {"workflow": self._workflow, **data, "worker": _worker_id()},
                                  *payloads)
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            log.warning("histaudit: could not record %s for workflow %s: %s", kind,
                        self.instance_id, exc)

    def _commit(self, text: str | None) -> _Payload:
        return self._recorder.commit(self.instance_id, text)

    def _scheduled(self, task: Any) -> tuple[int | None, Any]:
        """The task id and pending action the SDK created for ``task`` (None if hidden)."""
        pending = getattr(self._ctx, "_pending_tasks", None)
        actions = getattr(self._ctx, "_pending_actions", None)
        if not isinstance(pending, dict):
            return None, None
        for task_id, candidate in pending.items():
            if candidate is task:
                return int(task_id), actions.get(task_id) if isinstance(actions, dict) else None
        return None, None

    def record_start(self, text: str | None) -> None:
        if self.is_replaying:
            return
        inp = self._commit(text)
        self._decide(WORKFLOW_STARTED, {"input": inp.ref, "input_digest": inp.digest}, inp)

    def record_end(self, result: Any) -> None:
        if self.is_replaying:
            return
        out = self._commit(sdk_json(result))
        self._decide(WORKFLOW_COMPLETED, {"output": out.ref, "output_digest": out.digest}, out)

    def record_failure(self, exc: BaseException) -> None:
        if self.is_replaying:
            return
        err = self._commit(str(exc))
        self._decide(WORKFLOW_FAILED, {"error_type": type(exc).__name__, "error": err.ref,
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
                name, execution_id = _callable_name(activity), None
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(WORKFLOW_SCHEDULED_ACTIVITY, {
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
                name, child_id = _callable_name(workflow), kwargs.get("instance_id")
                text = sdk_json(kwargs.get("input"))
            inp = self._commit(text)
            self._decide(WORKFLOW_SCHEDULED_CHILD, {
                "child_workflow": name, "child_instance": child_id, "task_id": task_id,
                "input": inp.ref, "input_digest": inp.digest}, inp)
        return task

    def continue_as_new(self, new_input: Any, **kwargs: Any) -> None:
        """Restart the workflow with new input (recorded), as the SDK method does."""
        self._ctx.continue_as_new(new_input, **kwargs)
        self._continued = True
        inp = self._commit(sdk_json(new_input))
        self._decide(WORKFLOW_CONTINUED_AS_NEW, {"input": inp.ref, "input_digest": inp.digest},
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


def _audit_workflow(recorder: AuditRecorder, fn: Callable[..., Any],
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


# --- replayed results ------------------------------------------------------------------

class ReplayedResultCheck:
    """Compares activity results the engine feeds back with their signed completions.

    Every ``TaskCompleted`` event in the history the engine hands the app (old events
    and new ones) is matched to the ``activity.completed`` entries of the same task id
    (and the SDK's task execution id, when both carry one). The result text the workflow
    is about to read must be one of the signed outputs: compared by the keyed digest for
    entries signed with this runtime's key, else by the stored payload against its
    commitment. If none matches, one ``replay.mismatch`` entry is signed (task id,
    activity, expected and seen digests, the seq of the signed completion, and a
    commitment to the seen result); the same mismatch is not recorded twice.

    Results with no signed completion (an unaudited activity, another app's) are left to
    ``histaudit verify --engine``. The check records evidence and never stops the
    workflow: raising here would fail history resolution, and with it the workflow.
    A result seen and found good is not looked up again by this process.
    """

    _MAX_REMEMBERED = 100_000

    def __init__(self, recorder: AuditRecorder) -> None:
        self.recorder = recorder
        self._good: dict[tuple[str, int, str], bytes] = {}
        self._lock = threading.Lock()

    def check(self, instance: str, events: Iterable[Any]) -> int:
        """Check the ``TaskCompleted`` events among ``events``; return mismatches recorded."""
        todo = []
        for event in events:
            if not event.HasField("taskCompleted"):
                continue
            done = event.taskCompleted
            raw = done.result.value.encode("utf-8") if done.result.value != "" else None
            key = (instance, int(done.taskScheduledId), str(done.taskExecutionId or ""))
            seen = hashlib.sha256(b"-" if raw is None else b"+" + raw).digest()
            with self._lock:
                if self._good.get(key) == seen:
                    continue
            todo.append((key, raw, seen))
        if not todo:
            return 0
        completions, recorded = self._signed(instance, {key[1] for key, _, _ in todo})
        count = 0
        for key, raw, seen in todo:
            _, task_id, execution_id = key
            mine = [e for e in completions.get(task_id, ())
                    if not (execution_id and e.data.get("execution_id"))
                    or e.data.get("execution_id") == execution_id]
            if not mine:
                continue  # not signed here: for verify --engine to judge
            if any(self._same(instance, e, raw) for e in mine):
                with self._lock:
                    if len(self._good) >= self._MAX_REMEMBERED:
                        self._good.clear()
                    self._good[key] = seen
                continue
            seen_digest = None if raw is None else self.recorder.digest(instance, raw)
            if (task_id, seen_digest) in recorded:
                continue
            recorded.add((task_id, seen_digest))
            last = mine[-1]
            text = None if raw is None else raw.decode("utf-8")
            seen_ref = self.recorder.commit(instance, text)
            self.recorder.append(instance, REPLAY_MISMATCH, {
                "activity": last.data.get("activity"), "task_id": task_id,
                "execution_id": execution_id or None,
                "expected_digest": last.data.get("output_digest"),
                "seen_digest": seen_digest, "completed_seq": last.seq,
                "seen": seen_ref.ref, "worker": _worker_id()}, seen_ref)
            log.warning("histaudit: instance %s, task %s (%s): the engine fed back a result "
                        "that is not the signed completion at entry %s; recorded %s",
                        instance, task_id, last.data.get("activity"), last.seq,
                        REPLAY_MISMATCH)
            count += 1
        return count

    def _signed(self, instance: str, task_ids: set[int]
                ) -> tuple[dict[int, list[fmt.Entry]], set[Any]]:
        """Signed completions of ``task_ids``, and the mismatches already recorded."""

        def init() -> tuple[dict[int, list[fmt.Entry]], set[Any]]:
            return {}, set()

        def step(state: tuple[dict[int, list[fmt.Entry]], set[Any]],
                 entry: fmt.Entry) -> None:
            completions, recorded = state
            if entry.kind == ACTIVITY_COMPLETED:
                task_id = entry.data.get("task_id")
                if isinstance(task_id, int):
                    completions.setdefault(task_id, []).append(entry)
            elif entry.kind == REPLAY_MISMATCH:
                recorded.add((entry.data.get("task_id"), entry.data.get("seen_digest")))

        def copy(state: tuple[dict[int, list[fmt.Entry]], set[Any]]
                 ) -> tuple[dict[int, list[fmt.Entry]], set[Any]]:
            completions, recorded = state
            return ({t: list(completions[t]) for t in task_ids if t in completions},
                    set(recorded))

        return self.recorder.fold(instance, "replay", init, step, copy)

    def _same(self, instance: str, entry: fmt.Entry, raw: bytes | None) -> bool:
        ref = entry.data.get("output")
        if not isinstance(ref, dict):
            return raw is None
        if raw is None:
            return False
        digest = entry.data.get("output_digest")
        if entry.kid == self.recorder.signer.kid and isinstance(digest, str):
            return hmac.compare_digest(self.recorder.digest(instance, raw), digest)
        found, stored = self.recorder.load_payload(ref)
        # Signed under another key and erased: nothing to compare with, so no claim.
        return stored == raw if found else True


# --- the runtime -----------------------------------------------------------------------

def _mirror_registration(fn: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """Copy the SDK's registration marks from our wrapper back onto the user's function.

    ``ctx.call_activity(fn)`` and ``client.schedule_new_workflow(fn)`` read the registered
    name off the function the user holds, and double registration is refused on it.
    """
    for attr in ("_dapr_alternate_name", "_activity_registered", "_workflow_registered"):
        if attr in wrapper.__dict__:
            fn.__dict__[attr] = wrapper.__dict__[attr]


class AuditedWorkflowRuntime(WorkflowRuntime):
    """``WorkflowRuntime`` that signs every activity execution and workflow decision.

    Takes the same arguments, plus keyword-only ``ledger`` (URL; default
    ``$HISTAUDIT_DB``, else ``sqlite:///histaudit.db``), ``key`` (private key path;
    default ``$HISTAUDIT_KEY``) and ``keep_payloads`` (store payload bytes beside their
    commitments; False keeps only commitments, as if erased at once). The key is loaded
    and the ledger opened here, so an unusable one stops the app at start-up, before any
    workflow runs.
    """

    def __init__(self, *args: Any, ledger: str | None = None, key: str | None = None,
                 keep_payloads: bool = True, **kwargs: Any) -> None:
        signer = _load_signer(key)
        self.ledger = _open_ledger(ledger)
        self.signer = signer
        self.recorder = AuditRecorder(self.ledger, signer, keep_payloads=keep_payloads)
        super().__init__(*args, **kwargs)
        self.wire_inputs = self._capture_wire_inputs()
        self.replay_check = ReplayedResultCheck(self.recorder)
        self.checks_replayed_results = self._check_replayed_results()

    def _capture_wire_inputs(self) -> bool:
        """Let activities see the exact input text the engine sent (True if possible).

        The SDK decodes the input before calling the activity; this hook leaves the text
        on the SDK's ActivityContext. It relies on SDK internals, so when they change the
        interceptor falls back to re-encoding the decoded input with the SDK serializer,
        which yields the same text for any input the Python SDK produced.
        """
        worker = getattr(self, "_WorkflowRuntime__worker", None)
        executor = getattr(worker, "_activity_executor", None)
        original = getattr(executor, "_resolve", None)
        if original is None:
            log.info("histaudit: SDK activity internals not found; committing re-encoded inputs")
            return False

        def resolve(fn: Any, orchestration_id: str, name: str, task_id: int,
                    encoded_input: str | None, *rest: Any, **kw: Any) -> Any:
            resolved = original(fn, orchestration_id, name, task_id, encoded_input, *rest, **kw)
            with contextlib.suppress(AttributeError, IndexError, TypeError):
                setattr(resolved[1], _WIRE_INPUT, encoded_input or None)
            return resolved

        executor._resolve = resolve  # type: ignore[union-attr]
        return True

    def _check_replayed_results(self) -> bool:
        """Hand every history the worker replays to :class:`ReplayedResultCheck` (True if
        hooked).

        The hook wraps the SDK worker's ``_resolve_history(req)`` (dapr 1.19
        ``_durabletask.worker.TaskHubGrpcWorker``), which returns the committed events a
        workflow work item replays, whether the engine sent them in full or the worker
        rebuilt them from its history cache plus a delta; the request's ``newEvents`` are
        the rest. The events are passed on unchanged. Without that method (another SDK
        version) the app runs unchecked and ``histaudit verify --engine`` remains.
        """
        worker = getattr(self, "_WorkflowRuntime__worker", None)
        original = getattr(worker, "_resolve_history", None)
        if original is None:
            log.info("histaudit: SDK history internals not found; replayed results unchecked")
            return False
        check = self.replay_check

        def resolve_history(req: Any) -> Any:
            events = original(req)
            try:
                check.check(str(req.instanceId), itertools.chain(events, req.newEvents))
            except Exception as exc:  # noqa: BLE001 - see ReplayedResultCheck
                log.warning("histaudit: could not check the replayed results of %s: %s",
                            getattr(req, "instanceId", "?"), exc)
            return events

        worker._resolve_history = resolve_history  # type: ignore[union-attr]
        return True

    def register_activity(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register an activity (``def`` or ``async def``), audited."""
        wrapper: Callable[..., Any]
        wrapper = _audit_activity(self.recorder, fn,
                                  lambda: _callable_name(wrapper) if name is None else name)
        super().register_activity(wrapper, name=name)
        _mirror_registration(fn, wrapper)

    def register_workflow(self, fn: Callable[..., Any], *, name: str | None = None) -> None:
        """Register a workflow, audited."""
        wrapper: Callable[..., Any]
        wrapper = _audit_workflow(self.recorder, fn,
                                  lambda: _callable_name(wrapper) if name is None else name)
        super().register_workflow(wrapper, name=name)
        _mirror_registration(fn, wrapper)

    def register_versioned_workflow(self, fn: Callable[..., Any], *, name: str,
                                    version_name: str | None = None,
                                    is_latest: bool) -> None:
        """Register one version of a workflow, audited (recorded under ``name``)."""
        wrapper = _audit_workflow(self.recorder, fn, lambda: name)
        super().register_versioned_workflow(wrapper, name=name, version_name=version_name,
                                            is_latest=is_latest)
        _mirror_registration(fn, wrapper)

    def shutdown(self) -> None:
        """Stop the worker, then release the ledger's connections."""
        try:
            super().shutdown()  # type: ignore[no-untyped-call]
        finally:
            self.ledger.close()


def _load_signer(key: str | None) -> Signer:
    if not key and not os.environ.get("HISTAUDIT_KEY"):
        raise KeyProblem("AuditedWorkflowRuntime: no signing key: pass key=PATH or set "
                         "HISTAUDIT_KEY to an Ed25519 private key (histaudit keys generate)")
    try:
        return signer_from_env(key)
    except KeyProblem as exc:
        raise KeyProblem(f"AuditedWorkflowRuntime: {exc}") from None


def _open_ledger(url: str | None) -> Ledger:
    resolved = resolve_url(url)
    try:
        ledger = Ledger.open(resolved, create=True)
    except StoreError as exc:
        raise StoreError(f"AuditedWorkflowRuntime: {exc}") from None
    if ledger.dialect == "sqlite":
        path = ledger.engine.url.database
        if path and path != ":memory:":
            p = Path(path)
            for target in (p, p.parent):
                if not os.access(target, os.W_OK):
                    ledger.close()
                    raise StoreError(f"AuditedWorkflowRuntime: ledger {p} is not writable "
                                     f"({target} refuses writes)")
    return ledger

