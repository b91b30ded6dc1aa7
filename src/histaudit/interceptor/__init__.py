"""The Dapr interceptor: a WorkflowRuntime that signs every activity run and decision.

``recorder``     signs events into the ledger (group commit; which kinds wait for the
                 disk: ``MUST_BE_DURABLE``); payload commitments and keyed digests
``activity``     audited activities (``activity.started`` / ``completed`` / ``failed``)
``workflow``     audited workflow decisions, recorded while not replaying (and on
                 replay when the ledger lost them)
``replaycheck``  the live check of replayed results against the signed completions
``effects``      side effects inside activities (``side_effect``, ``once``)
``llm``          LLM calls inside activities (``record_llm_call``)
``tracing``      OpenTelemetry spans naming the signed entries (docs/traces.md)
``runtime``      :class:`AuditedWorkflowRuntime`, which wires them into the SDK

``histaudit.dapr`` re-exports the public names, for apps written against histaudit 0.1.
"""

from .activity import ActivityRun, current_activity
from .effects import SideEffect, current_effect, once, side_effect
from .recorder import AuditRecorder, payload_digest, sdk_decode, sdk_json
from .replaycheck import ReplayedResultCheck
from .runtime import AuditedWorkflowRuntime
from .workflow import AuditedWorkflowContext

__all__ = ["ActivityRun", "AuditRecorder", "AuditedWorkflowContext", "AuditedWorkflowRuntime",
           "ReplayedResultCheck", "SideEffect", "current_activity", "current_effect", "once",
           "payload_digest",
           "sdk_decode", "sdk_json", "side_effect"]
