"""Replay recorded workflow histories against workflow code, offline.

``history``   :class:`History`, the value type: load, save, fetch from the engine
``result``    frozen :class:`ReplayResult` and :class:`Divergence`, divergence kinds
``executor``  the SDK's executor, checking every step before the SDK consumes it
``describe``  both sides of a divergence in words
``replayer``  :func:`replay` and :func:`assert_replays`

Importing this package imports the Dapr SDK (the executor is the SDK's own).
"""

from .history import HISTORY_FORMAT, HISTORY_VERSION, History
from .replayer import assert_replays, load_workflow, registry_for, replay
from .result import (
    DIFFERENT_ACTIVITY,
    DIFFERENT_INPUT,
    DIFFERENT_ORDER,
    DIFFERENT_OUTCOME,
    NONDETERMINISM_ERROR,
    Divergence,
    ReplayResult,
)

__all__ = ["DIFFERENT_ACTIVITY", "DIFFERENT_INPUT", "DIFFERENT_ORDER", "DIFFERENT_OUTCOME",
           "HISTORY_FORMAT", "HISTORY_VERSION", "NONDETERMINISM_ERROR", "Divergence",
           "History", "ReplayResult", "assert_replays", "load_workflow", "registry_for",
           "replay"]
