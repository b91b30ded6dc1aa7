"""histaudit: a signed, hash-chained ledger of Dapr Workflow executions, and its verifier."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .crash import crash_point
from .errors import HistauditError
from .version import __version__

if TYPE_CHECKING:
    from .contrib.dapr_agents import audit_agent
    from .interceptor import (
        AuditedWorkflowRuntime,
        SideEffect,
        current_effect,
        once,
        side_effect,
    )
    from .interceptor.llm import LlmCall, record_llm_call
    from .verification import KeptCheckpoint, Verdict, Verifier

__all__ = ["AuditedWorkflowRuntime", "HistauditError", "KeptCheckpoint", "LlmCall",
           "SideEffect", "Verdict", "Verifier", "__version__", "audit_agent", "crash_point",
           "current_effect", "once", "record_llm_call", "side_effect"]

# The supported API. The Dapr-facing names import the Dapr SDK (and gRPC), the verifier
# the store (SQLAlchemy); each loads only when asked for, so `import histaudit` stays
# light for the CLI and for code that needs one part.
_LAZY = {"AuditedWorkflowRuntime": "interceptor", "SideEffect": "interceptor",
         "once": "interceptor", "side_effect": "interceptor",
         "current_effect": "interceptor",
         "LlmCall": "interceptor.llm", "record_llm_call": "interceptor.llm",
         "audit_agent": "contrib.dapr_agents",
         "Verifier": "verification", "Verdict": "verification", "KeptCheckpoint": "verification"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'histaudit' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
