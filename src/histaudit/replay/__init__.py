"""Replay recorded workflow histories against workflow code, offline.

``history``   :class:`History`, the value type: load, save, fetch from the engine
``result``    frozen :class:`ReplayResult` and :class:`Divergence`, divergence kinds
``executor``  the SDK's executor, checking every step before the SDK consumes it
``describe``  both sides of a divergence in words
``replayer``  :func:`replay` and :func:`assert_replays`
``signed``    the replayed output against the signed one (``replay-mismatch``)
``batch``     :func:`replay_many`: many histories, fail-fast or keep-going

Importing this package imports the Dapr SDK (the executor is the SDK's own).
"""

from .batch import BatchResult, ItemStatus, ReplayItem, replay_many
from .history import HISTORY_FORMAT, HISTORY_VERSION, History, engine_instance_ids, history_files
from .replayer import assert_replays, load_workflow, load_workflows, registry_for, replay
from .result import (
    DIFFERENT_ACTIVITY,
    DIFFERENT_INPUT,
    DIFFERENT_ORDER,
    DIFFERENT_OUTCOME,
    NONDETERMINISM_ERROR,
    Divergence,
    ReplayResult,
)
from .signed import NOT_COMPARED, OutputCheck, OutputStatus, compare_signed

__all__ = ["DIFFERENT_ACTIVITY", "DIFFERENT_INPUT", "DIFFERENT_ORDER", "DIFFERENT_OUTCOME",
           "HISTORY_FORMAT", "HISTORY_VERSION", "NONDETERMINISM_ERROR", "NOT_COMPARED",
           "BatchResult", "Divergence", "History", "ItemStatus", "OutputCheck", "OutputStatus",
           "ReplayItem", "ReplayResult", "assert_replays", "compare_signed",
           "engine_instance_ids", "history_files", "load_workflow", "load_workflows",
           "registry_for", "replay", "replay_many"]
