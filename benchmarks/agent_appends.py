"""Run an app with every ledger append timed: ``python agent_appends.py APP.py [ARGS]``.

``bench_agent.py`` starts its audited worker through this, so figure 7a can say how much
of a turn the ledger's appends take inside the real worker (not in a loop of their own):
each :meth:`AuditRecorder.append <histaudit.interceptor.recorder.AuditRecorder.append>`
is timed in wall and thread CPU time, split by whether its kind must be durable. On
SIGTERM the totals go to the JSON file ``$BENCH_APPEND_STATS`` and the process ends. The
timing costs two clock reads a side per append (≈ 10 µs a turn of 38 appends).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import threading
import time
from typing import Any

from histaudit.interceptor.recorder import MUST_BE_DURABLE, AuditRecorder

_totals = {mode: {"appends": 0, "wall_s": 0.0, "cpu_s": 0.0} for mode in ("durable", "riding")}
_lock = threading.Lock()
_append = AuditRecorder.append


def _timed(self: AuditRecorder, instance: str, kind: str, data: Any, *payloads: Any) -> Any:
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        return _append(self, instance, kind, data, *payloads)
    finally:
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        with _lock:
            t = _totals["durable" if kind in MUST_BE_DURABLE else "riding"]
            t["appends"] += 1
            t["wall_s"] += wall
            t["cpu_s"] += cpu


def _dump(*_: object) -> None:
    with _lock, open(os.environ["BENCH_APPEND_STATS"], "w") as fh:
        json.dump(_totals, fh)
    os._exit(0)


if __name__ == "__main__":
    AuditRecorder.append = _timed  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, _dump)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
