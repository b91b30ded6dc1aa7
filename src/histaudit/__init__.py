"""histaudit: a signed, hash-chained ledger of Dapr Workflow executions, and its verifier."""

from .errors import HistauditError

__all__ = ["HistauditError", "__version__"]
__version__ = "0.1.0"
