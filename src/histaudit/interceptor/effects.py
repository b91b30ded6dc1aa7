"""Side effects inside activities: signed intent and done, and "did I already do this?".

Dapr delivers an activity at least once, so an activity that posts a comment or charges
a card may run again after a crash. Wrap the effect and the ledger answers for you::

    @wfr.activity(name="post_comment")
    def post_comment(ctx, summary):
        with side_effect(ctx, "post-comment", key=ticket_id) as effect:
            if effect.already_done:
                effect.skip()                       # done by an earlier attempt
                return effect.previous_result
            if effect.uncertain and tracker.has_comment(ticket_id):
                effect.skip()                       # crashed between effect and done
                return None
            effect.result = tracker.post(ticket_id, summary)
        return effect.result

or, for the common case, ``once(ctx, "post-comment", lambda: tracker.post(...), key=…)``.

Entering the block records ``effect.intent``, on stable storage before the block runs.
Leaving it normally records ``effect.done`` (with the committed ``effect.result``):
leaving normally *asserts the effect happened*.
Leaving it after ``effect.skip()`` records ``effect.skipped`` (the effect was already done,
this attempt did not repeat it). Leaving with an exception, or after ``effect.fail(...)``
(an effect that reports its error as a value, as agent frameworks do with a tool's
exception), records ``effect.failed`` with the error's type: never a done.
``already_done`` is true when a done record exists; ``uncertain`` when only an intent does
(an earlier attempt crashed in the middle, after its intent and before its done): ask
the target system, as above, before doing it again; the verifier then reports the crash
as ``effect-uncertain`` and says whether the retry skipped the effect or repeated it.
Code that ignores ``already_done`` and does the effect again records a second done —
exactly what the verifier reports as a duplicate side effect.
Two executions of one effect in one process (the engine handed its activity out again
while the first still runs) take turns: the second enters the block once the first has
left it, and finds its done.

Inside the block :func:`current_effect` is the effect (a tool can read it without being
handed it), and ``effect.idempotency_key`` is a key unique to this effect of this instance
that every attempt of it shares: pass it to a service that deduplicates by key (an
``Idempotency-Key`` header) and a crash inside the effect becomes harmless, since the
retry's request is the same request. Reading it is signed (``key_told`` in the record
that closes the block), so the verifier says which effects were told.

All records go into the activity's own instance chain, signed by the runtime's key. The
effect ``name`` and ``key`` are stored in clear so the verifier and a person can group
them: use identifiers (a ticket number, an order id), never personal data, as keys.

Each effect is a span (:mod:`.tracing`) naming the record that ends it: GenAI's
``execute_tool <tool>`` for an effect named ``tool:<tool>``, ``effect <name>`` otherwise.

Automatic crash points: ``before-effect:<name>`` after the intent is signed, and
``after-effect:<name>`` after the block and before the done record — the crash that
leaves an effect whose outcome is unknown.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from histaudit.crash import crash_point
from histaudit.errors import UsageError
from histaudit.ledger.kinds import Kind

from . import tracing
from .activity import ActivityRun, current_activity
from .recorder import sdk_decode, sdk_json

__all__ = ["TOOL_EFFECT_PREFIX", "SideEffect", "current_effect", "once", "runs_unaudited",
           "side_effect"]

TOOL_EFFECT_PREFIX = "tool:"
"""An agent's tool call is the side effect ``tool:<the tool's name in the agent>``."""

T = TypeVar("T")


@dataclass(eq=False)
class SideEffect:
    """What the ledger knows about one effect, and the result this attempt reports."""

    name: str
    key: str
    already_done: bool
    """An earlier execution recorded ``effect.done``: do not do it again."""
    uncertain: bool
    """An earlier execution recorded an intent and never a done: it may have happened."""
    previous_result: Any = None
    """The result recorded with the earlier done (None if none, erased or not kept)."""
    previous_result_available: bool = False
    result: Any = None
    """Set inside the block: committed into ``effect.done`` (JSON, as activity results)."""
    skipped: bool = False
    failure: tuple[str, str] | None = None
    """Set by :meth:`fail`: (error type, error text)."""
    instance: str = ""
    key_told: bool = False
    """Whether :attr:`idempotency_key` was read inside the block (signed on closing)."""

    def skip(self) -> None:
        """Declare that this attempt did not do the effect (it was already done).

        Leaving the block after ``skip()`` records ``effect.skipped``; leaving it without
        records ``effect.done`` — a second done for one key is a duplicate effect.
        """
        self.skipped = True

    def fail(self, error_type: str, error: str = "") -> None:
        """Declare that this attempt failed without raising: leaving the block records
        ``effect.failed`` with ``error_type`` (a class name, in clear) and ``error`` (its
        text, a committed payload), never a done. For an effect whose error comes back as
        a value: an agent framework's tool result marked as an error."""
        if not isinstance(error_type, str) or not error_type:
            raise UsageError("SideEffect.fail(): error_type must be a non-empty string")
        self.failure = (error_type, str(error))

    @property
    def idempotency_key(self) -> str:
        """``<instance>/<name>/<key>``: the same for every attempt of this effect and for
        no other effect; hand it to a service that deduplicates requests by key. Reading
        it is recorded (``key_told``)."""
        self.key_told = True
        return f"{self.instance}/{self.name}/{self.key}"


@dataclass(frozen=True, slots=True)
class _State:
    done_seq: int | None
    done_result: Any
    done_result_available: bool
    open_intents: int


_CURRENT: contextvars.ContextVar[SideEffect | None] = contextvars.ContextVar(
    "histaudit_effect", default=None)


def current_effect() -> SideEffect | None:
    """The side effect whose block is running in this context (the innermost), or None:
    what a guarded tool reads to learn its :attr:`~SideEffect.idempotency_key`."""
    return _CURRENT.get()


def _require_run(ctx: Any, name: str, key: str | None) -> tuple[ActivityRun, str]:
    run = current_activity()
    if run is None:
        raise UsageError("side_effect() runs only inside an activity registered with "
                         "histaudit.AuditedWorkflowRuntime")
    workflow_id = getattr(ctx, "workflow_id", None) if ctx is not None else None
    if workflow_id is not None and workflow_id != run.instance:
        raise UsageError(f"side_effect(): context of workflow {workflow_id!r} used inside an "
                         f"activity of {run.instance!r}")
    if not isinstance(name, str) or not name:
        raise UsageError("side_effect(): name must be a non-empty string")
    if key is None:
        # One effect per activity call: the execution id survives retries and re-deliveries.
        key = run.execution_id or f"task-{run.task_id}"
    if not isinstance(key, str) or not key:
        raise UsageError("side_effect(): key must be a non-empty string")
    return run, key


_UNAUDITED = threading.Event()
"""Set by an :class:`~histaudit.interceptor.runtime.AuditedWorkflowRuntime` built with
auditing off (``HISTAUDIT_ENABLED=0``): its activities run unwrapped, so a side effect
outside an audited activity is one of theirs, not a mistake."""


def runs_unaudited() -> None:
    """Say that this process's activities run unaudited (the runtime calls it)."""
    _UNAUDITED.set()


def _unaudited(name: str, key: str | None) -> SideEffect:
    """HISTAUDIT_ENABLED=0: activities run unwrapped, so there is no ledger to ask or write.
    The effect runs every time (nothing is known to be done or uncertain); skip() does
    nothing; no crash point fires."""
    if not isinstance(name, str) or not name:
        raise UsageError("side_effect(): name must be a non-empty string")
    if key is not None and (not isinstance(key, str) or not key):
        raise UsageError("side_effect(): key must be a non-empty string")
    return SideEffect(name, key or "", already_done=False, uncertain=False)


def _state(run: ActivityRun, name: str, key: str) -> _State:
    """Scan the instance's chain for this effect's earlier records."""
    done_seq: int | None = None
    done_ref: Any = None
    intents = 0
    for entry in run.recorder.entries(run.instance):
        if entry.data.get("name") != name or entry.data.get("key") != key:
            continue
        if entry.kind == Kind.EFFECT_INTENT:
            intents += 1
        elif entry.kind == Kind.EFFECT_DONE and done_seq is None:
            done_seq, done_ref = entry.seq, entry.data.get("result")
        # effect.failed leaves the intent open: an error does not prove nothing happened.
    result, available = None, False
    if isinstance(done_ref, dict):
        available, raw = run.recorder.load_payload(done_ref)
        result = sdk_decode(raw) if available and raw is not None else None
    return _State(done_seq, result, available, intents)


_BLOCKS: dict[tuple[str, str, str], tuple[threading.RLock, int]] = {}
_BLOCKS_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_at_a_time(instance: str, name: str, key: str) -> Iterator[None]:
    """Hold the block of one effect (instance, name, key) in this process: a second
    execution of it waits until the first has left its block, then reads the ledger.

    The engine hands an activity out again while its first execution still runs here
    when the engine restarted or the work item's lock expired; the retry would otherwise
    find only an intent (``uncertain``) and, in ``once()``, do the effect a second time,
    concurrently. Waiting, it finds the done record and skips. Re-entrant, so a block that
    nests the same effect on the same thread (or two coroutines of one event loop) goes
    on as before. Another process is not held: across processes the ledger's intent is
    what tells."""
    slot = (instance, name, key)
    with _BLOCKS_LOCK:
        lock, users = _BLOCKS.get(slot) or (threading.RLock(), 0)
        _BLOCKS[slot] = (lock, users + 1)
    try:
        with lock:
            yield
    finally:
        with _BLOCKS_LOCK:
            lock, users = _BLOCKS[slot]
            if users == 1:
                del _BLOCKS[slot]
            else:
                _BLOCKS[slot] = (lock, users - 1)


@contextlib.contextmanager
def side_effect(ctx: Any, name: str, *, key: str | None = None,
                call_id: str | None = None) -> Iterator[SideEffect]:
    """Guard one side effect of the running activity (see the module docstring).

    ``ctx`` is the activity's context (checked against the running activity); ``key`` is
    the idempotency key, by default the activity call's execution id, so retries and
    re-deliveries of one call share it. ``call_id``, an agent's tool call id (the LLM's),
    is signed in clear with the intent, so findings name the call.
    """
    if current_activity() is None and _UNAUDITED.is_set():
        yield _unaudited(name, key)
        return
    run, key = _require_run(ctx, name, key)
    with _one_at_a_time(run.instance, name, key), \
            tracing.span(*_span_of(name, key, call_id)) as traced:
        recorder = run.recorder
        state = _state(run, name, key)
        base = {**run.fields(), "name": name, "key": key}
        intent = recorder.append(run.instance, Kind.EFFECT_INTENT, {
            **base, **({"call_id": call_id} if isinstance(call_id, str) and call_id else {})})
        effect = SideEffect(name, key, already_done=state.done_seq is not None,
                            uncertain=state.done_seq is None and state.open_intents > 0,
                            previous_result=state.done_result,
                            previous_result_available=state.done_result_available,
                            instance=run.instance)
        crash_point(f"before-effect:{name}")
        token = _CURRENT.set(effect)
        try:
            yield effect
        except Exception as exc:
            _CURRENT.reset(token)
            with contextlib.suppress(Exception):  # the original error matters more
                _failed(run, traced, base, intent.seq, effect, type(exc).__name__, str(exc))
            raise
        _CURRENT.reset(token)
        if effect.failure is not None:
            _failed(run, traced, base, intent.seq, effect, *effect.failure)
            traced.failed(effect.failure[0])
            return
        told = {"key_told": True} if effect.key_told else {}
        if effect.skipped:
            traced.entry(recorder.append(run.instance, Kind.EFFECT_SKIPPED, {
                **base, "intent_seq": intent.seq, "done_seq": state.done_seq, **told}),
                recorder.origin)
            return
        crash_point(f"after-effect:{name}")
        out = recorder.commit(run.instance, sdk_json(effect.result))
        traced.entry(recorder.append(run.instance, Kind.EFFECT_DONE, {
            **base, "intent_seq": intent.seq, "result": out.ref,
            "result_digest": out.digest, **told}, out), recorder.origin)


def _failed(run: ActivityRun, traced: Any, base: dict[str, Any], intent_seq: int,
            effect: SideEffect, error_type: str, error: str) -> None:
    """Sign ``effect.failed``: the error's type in clear, its text as a payload."""
    recorder = run.recorder
    err = recorder.commit(run.instance, error)
    told = {"key_told": True} if effect.key_told else {}
    traced.entry(recorder.append(run.instance, Kind.EFFECT_FAILED, {
        **base, "intent_seq": intent_seq, "error_type": error_type, "error": err.ref,
        "error_digest": err.digest, **told}, err), recorder.origin)


def _span_of(name: str, key: str, call_id: str | None) -> tuple[str, dict[str, Any]]:
    """An effect's span: GenAI's ``execute_tool <tool>`` for an agent's tool call (an
    effect named ``tool:<tool>``; :func:`.tracing.execute_tool`, with the LLM's call id
    when given), ``effect <name>`` for any other. The record that ends the block (done,
    skipped or failed) is the span's entry."""
    attributes = {"histaudit.effect.name": name, "histaudit.effect.key": key}
    if name.startswith(TOOL_EFFECT_PREFIX):
        span_name, genai = tracing.execute_tool(
            name[len(TOOL_EFFECT_PREFIX):], call_id if isinstance(call_id, str) else None)
        return span_name, {**attributes, **genai}
    return f"effect {name}", attributes


def once(ctx: Any, name: str, action: Callable[[], T], *, key: str | None = None) -> Any:
    """Run ``action`` unless the ledger says this effect is done; return its result.

    On a re-execution that finds the effect done, returns the result recorded then
    (None when it was erased or payloads are not kept). An *uncertain* effect is done
    again; use :func:`side_effect` to check the target system first.
    """
    with side_effect(ctx, name, key=key) as effect:
        if effect.already_done:
            effect.skip()
            return effect.previous_result
        effect.result = action()
        return effect.result
