"""What the engine hands a workflow from outside its code: signed as it arrives.

A workflow's own decisions are signed by :mod:`.workflow`. What reaches it from elsewhere
arrives as new events of a workflow turn, and is signed here, the first time a turn
carries it:

==========================  ===============================  ===========================
engine event                entry                            signed in clear
==========================  ===============================  ===========================
``eventRaised``             ``workflow.event_received``      the event's ``name``
``timerFired``              ``workflow.timer_fired``         ``timer_id``, ``fire_at``
``executionSuspended``      ``workflow.suspended``
``executionResumed``        ``workflow.resumed``
``executionTerminated``     ``workflow.terminated``          ``recurse``
==========================  ===============================  ===========================

Every entry also carries ``received_at`` (the engine's timestamp of the event) and
``event_id``; a payload (an event's data, a suspend, resume or terminate reason) is
committed, erasable, never in clear. The engine does not say who raised an event or
terminated an instance, so neither does the ledger: an app that needs the approver signed
puts the approver in the event's payload.

A turn the engine delivers again after a crash carries the same events with the same
timestamps: each is signed once per instance. What this process signed or read is kept
in memory; an instance seen for the first time is looked up in the ledger once.
``workflow.terminated`` ends the instance and is on stable storage before the SDK answers
the turn (:data:`.recorder.MUST_BE_DURABLE`); the others, like decisions, ride on the next
durable commit.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from histaudit.ledger.kinds import Kind

from .recorder import AuditRecorder

__all__ = ["RECEIVED_KINDS", "ReceivedEvents"]

log = logging.getLogger("histaudit.interceptor")

_Fields = Callable[[Any], dict[str, Any]]

_RECEIVED: dict[str, tuple[Kind, _Fields]] = {
    "eventRaised": (Kind.WORKFLOW_EVENT_RECEIVED, lambda e: {"name": e.name}),
    "timerFired": (Kind.WORKFLOW_TIMER_FIRED,
                   lambda e: {"timer_id": e.timerId, "fire_at": e.fireAt.ToJsonString()}),
    "executionSuspended": (Kind.WORKFLOW_SUSPENDED, lambda e: {}),
    "executionResumed": (Kind.WORKFLOW_RESUMED, lambda e: {}),
    "executionTerminated": (Kind.WORKFLOW_TERMINATED, lambda e: {"recurse": bool(e.recurse)}),
}
RECEIVED_KINDS = frozenset(kind for kind, _ in _RECEIVED.values())
_INSTANCES_KEPT = 1024


def _identity(kind: str, data: dict[str, Any]) -> tuple[str, str, str]:
    return (kind, str(data.get("received_at")), str(data.get("name", data.get("timer_id", ""))))


class ReceivedEvents:
    """Signs a turn's received events into ``recorder``'s ledger, each once."""

    def __init__(self, recorder: AuditRecorder) -> None:
        self.recorder = recorder
        self._signed: OrderedDict[str, set[tuple[str, str, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, instance: str, new_events: Iterable[Any]) -> None:
        """Sign the received events among a turn's ``new_events`` not yet signed. A ledger
        problem is logged, never raised: the turn goes on, and the engine's history still
        holds the event."""
        if not self.recorder.bound:
            return
        for event in new_events:
            member = event.WhichOneof("eventType")
            if member not in _RECEIVED:
                continue
            try:
                self._sign(instance, event, member)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("histaudit: could not sign %s of %s: %s", member, instance, exc)

    def _sign(self, instance: str, event: Any, member: str) -> None:
        kind, fields = _RECEIVED[member]
        body = getattr(event, member)
        data = {"received_at": event.timestamp.ToJsonString(), "event_id": event.eventId,
                **fields(body)}
        identity = _identity(kind, data)
        with self._lock:
            signed = self._known(instance)
            if identity in signed:
                return
            text = body.input.value if "input" in body.DESCRIPTOR.fields_by_name \
                and body.HasField("input") else None
            payload = self.recorder.commit(instance, text or None)
            self.recorder.append(instance, kind, {
                **data, "payload": payload.ref, "payload_digest": payload.digest}, payload)
            signed.add(identity)

    def _known(self, instance: str) -> set[tuple[str, str, str]]:
        """What this instance's ledger chain already holds (read once per instance)."""
        signed = self._signed.get(instance)
        if signed is None:
            signed = {_identity(e.kind, dict(e.data)) for e in self.recorder.entries(instance)
                      if e.kind in RECEIVED_KINDS}
            self._signed[instance] = signed
            while len(self._signed) > _INSTANCES_KEPT:
                self._signed.popitem(last=False)
        else:
            self._signed.move_to_end(instance)
        return signed
