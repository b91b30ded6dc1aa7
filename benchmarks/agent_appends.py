"""Run an app with every ledger append timed: ``python agent_appends.py APP.py [ARGS]``.

``bench_agent.py`` starts one more audited worker through this after figure 7a's rounds
(the ratio's own workers run untimed), to say how much of a turn the ledger's appends
take inside the real worker (not in a loop of their own): each
:meth:`AuditRecorder.append <histaudit.interceptor.recorder.AuditRecorder.append>` is
timed in wall and thread CPU time, split by whether its kind must be durable. The
rest of what the interceptor does on the turn's path is timed too, in wall time, each
section without the timed sections inside it (an activity's start without its append):
the :data:`SECTIONS`. On SIGTERM the totals go to the JSON file ``$BENCH_APPEND_STATS``
and the process ends. The timing costs two clock reads a side per call (≈ 0.3 ms a turn,
of ≈ 170 calls).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from histaudit.interceptor.recorder import MUST_BE_DURABLE, AuditRecorder

SECTIONS = {
    "activity start": ("histaudit.interceptor.activity", None, "_start_activity"),
    "activity completion": ("histaudit.interceptor.activity", None, "_completed"),
    "attempt count": ("histaudit.interceptor.recorder", AuditRecorder, "start_counts"),
    "payload commitments": ("histaudit.interceptor.recorder", AuditRecorder, "commit"),
    "decisions queued": ("histaudit.interceptor.recorder", AuditRecorder, "append_decision"),
    "scheduling (call_activity)": ("histaudit.interceptor.workflow",
                                   "AuditedWorkflowContext", "call_activity"),
    "replayed results check": ("histaudit.interceptor.replaycheck", "ReplayedResultCheck",
                               "check_turn"),
    "LLM call record": ("histaudit.interceptor.llm", None, "record_llm_call"),
    "(the SDK's own call_activity)": ("dapr.ext.workflow.dapr_workflow_context",
                                      "DaprWorkflowContext", "call_activity"),
}
"""What else is timed: label -> (module, class or None, function). The SDK's own
``call_activity`` runs inside histaudit's and is timed apart, so "scheduling" is only
what histaudit adds; it is what the plain worker spends too."""

_totals: dict[str, Any] = {mode: {"appends": 0, "wall_s": 0.0, "cpu_s": 0.0}
                           for mode in ("durable", "riding")}
_totals["sections"] = {label: {"calls": 0, "wall_s": 0.0} for label in SECTIONS}
_lock = threading.Lock()
_nested = threading.local()
_append = AuditRecorder.append


def _timed(fn: Callable[..., Any], label: str | None) -> Callable[..., Any]:
    """``fn`` timed; ``label`` None: an append (split by durability), else a section."""
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        stack = _nested.__dict__.setdefault("stack", [])
        stack.append(0.0)  # the wall time of timed calls inside this one
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            inside = stack.pop()
            if stack:
                stack[-1] += wall
            with _lock:
                if label is None:
                    t = _totals["durable" if args[2] in MUST_BE_DURABLE else "riding"]
                    t["appends"] += 1
                    t["wall_s"] += wall
                    t["cpu_s"] += cpu
                else:
                    s = _totals["sections"][label]
                    s["calls"] += 1
                    s["wall_s"] += wall - inside
    return timed


def _install() -> None:
    AuditRecorder.append = _timed(_append, None)  # type: ignore[method-assign]
    for label, (module, owner, name) in SECTIONS.items():
        where: Any = importlib.import_module(module)
        if isinstance(owner, str):
            where = getattr(where, owner)
        elif owner is not None:
            where = owner
        setattr(where, name, _timed(getattr(where, name), label))


def _dump(*_: object) -> None:
    with _lock, open(os.environ["BENCH_APPEND_STATS"], "w") as fh:
        json.dump(_totals, fh)
    os._exit(0)


if __name__ == "__main__":
    _install()
    signal.signal(signal.SIGTERM, _dump)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
