"""Crash-matrix results made by hand: a clean run, and a crashed run judged against it.

The unit tests of :mod:`histaudit.crashtest` judge outputs without an engine: a run that
completed with ``output_text`` is compared with a clean run whose output is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from histaudit.crashtest.judge import Evidence, judge
from histaudit.crashtest.results import DIVERGED, KIND_APP, CleanRun, PointResult
from histaudit.crashtest.sandbox import RunState

__all__ = ["clean_run", "judged"]


def clean_run(output: Any, instance: str = "wf-clean-1a2b") -> CleanRun:
    """A completed clean run of ``app.py:wf`` with ``output``, no effects, one point."""
    return CleanRun(target="app.py:wf", instance=instance, status="COMPLETED", output=output,
                    output_text=None, effects={}, findings=(), points=("after:a",),
                    workflows=("wf",), activities=("a",), declared=(), wall=1.0,
                    worker_start=0.5)


def judged(clean: CleanRun, output_text: str, instance: str = "wf-app-9f8e", *,
           ignore: Sequence[str] = ()) -> PointResult:
    """A crash at ``after:a`` that completed with ``output_text``, judged against ``clean``."""
    start = PointResult(point="after:a", kind=KIND_APP, outcome=DIVERGED, detail="",
                        rerun="", instance=instance)
    return judge(start, clean, RunState("COMPLETED", output_text, None), Evidence({}, (), ()),
                 ignore=ignore)
