"""histaudit: a signed, hash-chained ledger of Dapr Workflow executions, and its verifier."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .crash import crash_point
from .errors import HistauditError

if TYPE_CHECKING:
    from .interceptor import AuditedWorkflowRuntime, SideEffect, once, side_effect

__all__ = ["AuditedWorkflowRuntime", "HistauditError", "SideEffect", "__version__",
           "crash_point", "once", "side_effect"]
__version__ = "0.1.0"

# The Dapr-facing names import the Dapr SDK (and gRPC); load them only when asked for,
# so `import histaudit` stays light for the CLI and the verifier.
_LAZY = {"AuditedWorkflowRuntime": "interceptor", "SideEffect": "interceptor",
         "once": "interceptor", "side_effect": "interceptor"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'histaudit' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
