"""The one-line change (README) across a crash, in both of the SDK's history modes, on
the standalone engine (issue #39, item 1). Cost: ≈ 25 s of CPU (three engines, about
twenty-five app starts).

With the SDK's stateful history on (dapr ≥ 1.19's default), durabletask-go v0.14.0 — the
standalone engine here — may route a workflow turn into a worker stream's own buffer just
as the worker crashes and then hold it until the lock times out (2 minutes): an 8-way
fan-out crashed mid-way hung 2 times in 16. ``AuditedWorkflowRuntime()`` therefore turns
the mode off unless the app asks for it, and says so in the log. What is tested:

* the default: ``stateful_history`` is off and logged; a fan-out crashed nine times in turn
  and restarted at once completes every time well inside the lock timeout (measured with
  the mode on, the same loop stalled at its 7th crash; with it off, 16 of 16 resumed in
  0.5 s),
  with every search run once or, for the crashed one, twice — and ``verify`` clean but for
  the re-execution;
* the mode on (``disable_stateful_history=False``), where the app asks for it: histaudit's
  replay check reads delta histories correctly (a crash and resume, then ``verify`` with
  the engine's history, finds nothing but the re-execution). The standalone engine runs
  with a 3-second lock here, so its known stall cannot hang the test.

Not on daprd: v1.18.3 predates history deltas, so both modes are one there — and this
fan-out, crashed and restarted, was left stranded by daprd in 4 runs of 16 under test
load (its actor types unregistered with a worker connected; docs/adr/0008-daprd.md),
whatever the mode and whether or not the next worker waited 3 s: issue #39 stays open on
it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit import sdk
from histaudit.testing import DURABLETASK, start_engine, teardown
from histaudit.testing.engine import EngineProcess
from support.fanout import RESUME_LIMIT_S, Fanout

pytestmark = [pytest.mark.engine, pytest.mark.crash]



def _engine(kind: str, tmp: Path, lock_timeout: float | None = None) -> Any:
    if kind == DURABLETASK and lock_timeout is not None:
        eng = EngineProcess(state_dir=tmp / "engine", lock_timeout=lock_timeout)
        eng.start()
        return eng
    return start_engine(kind, tmp / "engine")


@pytest.fixture
def default_rig(tmp_path: Path) -> Iterator[Fanout]:
    """The standalone engine with its real 2-minute lock: a stall would show."""
    eng = _engine(DURABLETASK, tmp_path)
    try:
        with Fanout(tmp_path, eng, stateful=False) as rig:
            yield rig
    finally:
        teardown(eng)


def test_the_default_turns_stateful_history_off_and_says_so(
        default_rig: Fanout) -> None:
    rig = default_rig
    # with the mode on, this loop stalled at its 7th crash (2 minutes, the engine's lock)
    points = ["searched#2", "searched#4", "searched#7", "after:search#5"] * 2 + [
        "before:search#3"]
    for point in points:
        took = rig.crash_and_resume(point)
        assert took < RESUME_LIMIT_S, (point, took)
        codes = rig.verify(rig.last)
        assert set(codes) <= {"activity-reexecuted"}, (point, codes)
    # every vendor searched in every run; bodies in flight at a crash ran again
    lines = rig.searches()
    assert set(lines) == {str(v) for v in range(8)} and len(lines) >= len(points) * 8
    log = (rig.tmp / "app.log").read_text()
    assert log.count("ready stateful_history=False") == len(points) * 2
    assert sdk.has_stateful_history() or "stateful history is off" not in log


@pytest.mark.parametrize("stateful", [False, True], ids=["full-history", "stateful-history"])
def test_a_crash_in_the_fan_out_resumes_and_verifies_in_either_mode(
        stateful: bool, tmp_path: Path) -> None:
    eng = _engine(DURABLETASK, tmp_path, lock_timeout=3.0)
    try:
        with Fanout(tmp_path, eng, stateful=stateful) as rig:
            rig.crash_and_resume("after:search#5")
            # a second instance on the same, now warm, worker stream: deltas if any
            rig.app.start()
            instance = rig.schedule("procure", None)
            assert rig.finish(instance).runtime_status.name == "COMPLETED"
            assert rig.verify(rig.last) == ["activity-reexecuted"]
            assert rig.verify(instance) == []
            assert len(rig.searches()) >= 8 + 1 + 8
            started = (rig.tmp / "app.log").read_text()
            assert f"ready stateful_history={stateful and sdk.has_stateful_history()}" in started
    finally:
        teardown(eng)

