"""The Dapr interceptor's public names, where histaudit 0.1 apps import them from.

``from histaudit.dapr import AuditedWorkflowRuntime`` keeps working; new code can import
from :mod:`histaudit` or :mod:`histaudit.interceptor`.
"""

from .interceptor import (
    ActivityRun,
    AuditedWorkflowContext,
    AuditedWorkflowRuntime,
    AuditRecorder,
    ReplayedResultCheck,
    SideEffect,
    current_activity,
    current_effect,
    once,
    payload_digest,
    sdk_decode,
    sdk_json,
    side_effect,
)

__all__ = ["ActivityRun", "AuditRecorder", "AuditedWorkflowContext", "AuditedWorkflowRuntime",
           "ReplayedResultCheck", "SideEffect", "current_activity", "current_effect", "once",
           "payload_digest",
           "sdk_decode", "sdk_json", "side_effect"]
