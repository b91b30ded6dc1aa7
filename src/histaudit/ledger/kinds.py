"""Every kind of ledger entry, in one place.

An entry's ``kind`` says what happened; the verifier's behaviour analysis, the crash
matrix and the CLI read it, the interceptor and the chain write it. ``Kind`` is a
``StrEnum``, so a member compares equal to the string stored in the signed body
(``Kind.ACTIVITY_STARTED == "activity.started"``) and a kind this histaudit does not know
(written by a newer one) still parses: entries carry a plain string.
"""

from __future__ import annotations

import enum


class Kind(enum.StrEnum):
    # an activity execution (histaudit.interceptor.activity)
    ACTIVITY_STARTED = "activity.started"
    ACTIVITY_COMPLETED = "activity.completed"
    ACTIVITY_FAILED = "activity.failed"
    # a workflow decision (histaudit.interceptor.workflow)
    WORKFLOW_STARTED = "workflow.started"
    WORKFLOW_SCHEDULED_ACTIVITY = "workflow.scheduled_activity"
    WORKFLOW_SCHEDULED_CHILD = "workflow.scheduled_child"
    WORKFLOW_SCHEDULED_TIMER = "workflow.scheduled_timer"
    WORKFLOW_CONTINUED_AS_NEW = "workflow.continued_as_new"
    WORKFLOW_CUSTOM_STATUS = "workflow.custom_status"
    WORKFLOW_PATCH = "workflow.patch"
    WORKFLOW_RERUN = "workflow.rerun"
    WORKFLOW_PROPAGATED_HISTORY = "workflow.propagated_history"
    WORKFLOW_COMPLETED = "workflow.completed"
    WORKFLOW_FAILED = "workflow.failed"
    # what reached a workflow from outside its code (histaudit.interceptor.received)
    WORKFLOW_EVENT_RECEIVED = "workflow.event_received"
    WORKFLOW_TIMER_FIRED = "workflow.timer_fired"
    WORKFLOW_SUSPENDED = "workflow.suspended"
    WORKFLOW_RESUMED = "workflow.resumed"
    WORKFLOW_TERMINATED = "workflow.terminated"
    # a replayed result that is not the signed one (histaudit.interceptor.replaycheck)
    REPLAY_MISMATCH = "replay.mismatch"
    # a side effect inside an activity (histaudit.interceptor.effects)
    EFFECT_INTENT = "effect.intent"
    EFFECT_DONE = "effect.done"
    EFFECT_FAILED = "effect.failed"
    EFFECT_SKIPPED = "effect.skipped"
    # an LLM call inside an activity, with its cost (histaudit.interceptor.llm)
    LLM_CALL = "llm.call"
    # an erased payload (histaudit.ledger.chain.erase_payload)
    PAYLOAD_ERASED = "payload.erased"
    # Dapr's own signed history of the instance, verified and summed up before a purge
    # (histaudit dapr-capture; docs/dapr-signatures.md)
    DAPR_HISTORY_CAPTURED = "dapr.history_captured"

    @property
    def is_effect(self) -> bool:
        return self.value.startswith("effect.")


EFFECT_KINDS = frozenset(k for k in Kind if k.is_effect)


AFTERWORD_KINDS = frozenset({Kind.PAYLOAD_ERASED, Kind.DAPR_HISTORY_CAPTURED})
"""Records about an instance that are not its workflow's doing (an erasure, Dapr's history
captured): they often follow its end, and say nothing of its state."""


WORKFLOW_STATE: dict[str, str] = {
    Kind.WORKFLOW_COMPLETED: "completed", Kind.WORKFLOW_FAILED: "failed",
    Kind.WORKFLOW_TERMINATED: "terminated", Kind.WORKFLOW_CONTINUED_AS_NEW: "continued-as-new",
    Kind.WORKFLOW_SUSPENDED: "suspended"}
"""What an instance's last signed entry (the last not in :data:`AFTERWORD_KINDS`) says of
its workflow (``list``'s ``workflow`` column, ``verify --tree``); anything else is
``not-ended``: running, waiting, or ended unheard by the ledger."""
