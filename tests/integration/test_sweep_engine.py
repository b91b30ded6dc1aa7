"""The sweep with engine crashes (``histaudit crashtest --engine-points``) on the real
engine: the engine SIGKILLed at each point of one instance and restarted; a step handed out
again once its lock expires; and a duplicate caused by an early crash never vouched for
because a later crash in the same sweep reproduces it.
Cost: ≈ 35 s of CPU (2 tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit import crashtest as ct

pytestmark = [pytest.mark.engine, pytest.mark.crash]

APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"
TRIAGE = Path(__file__).resolve().parents[2] / "examples" / "triage" / "app.py"


def test_engine_crashes_sweep_too(engine_binary: Path) -> None:
    """The engine killed while a step runs: the step is dispatched again once its lock
    expires. ``add`` does not mind; ``stamp`` runs twice. Which of its two results the
    restarted engine keeps is a race between the interrupted body's completion and the
    re-dispatch: the second (the output differs: diverged), or the first (the output is
    the clean run's, and the ledger's two different results are the finding)."""
    spec = ct.CrashSpec(target=f"{APP}:steps", input=0, timeout=30)
    crashes: list[tuple[str, ct.CrashKind]] = []
    result = ct.run_matrix(spec, app_points=False,
                           points=["before:step:1-2", "after:step:1-2", "before:step:4"],
                           on_crash=lambda point, kind, done, total:
                           crashes.append((point, kind)))
    swept = ["before:add", "after:add", "before:add#2", "after:add#2", "before:stamp"]
    assert crashes[:5] == [(p, ct.KIND_ENGINE) for p in swept]
    assert [(p.point, p.kind, p.outcome.value) for p in result.points[:4]] == [
        (p, ct.KIND_ENGINE, "identical") for p in swept[:4]]
    stamp = result.points[-1]
    assert (stamp.point, stamp.kind) == ("before:stamp", ct.KIND_ENGINE)
    if stamp.outcome == "diverged":
        assert "in isolation: output $.stamp.runs: 1 -> 2" in stamp.detail
    else:
        assert stamp.outcome == "findings", stamp.detail
        assert "in isolation: activity-nondeterministic" in stamp.detail
    assert "activity-reexecuted" in stamp.codes
    assert "--point before:stamp --engine-crash" in stamp.rerun
    assert result.runs["isolated"] >= 1


def test_an_engine_sweep_does_not_hide_a_duplicate_behind_a_later_crash() -> None:
    """A kill at ``before:post_comment`` or ``after_post`` duplicates the triage post (the
    worker posts, its result dies with the old engine, the step is handed out again), but
    in a sweep that second post lands next to the later ``after:post_comment`` crash. The
    sweep must not vouch for the earlier points because that later one reproduces it."""
    spec = ct.CrashSpec(target=f"{TRIAGE}:triage", input={"id": "T-1", "title": "500s"})
    points = ["before:summarize", "before:post_comment", "after_post", "after:post_comment"]
    result = ct.run_matrix(spec, app_points=False, points=points)
    got = {p.point: p for p in result.points}
    assert list(got) == points
    assert got["before:summarize"].outcome == "identical", got["before:summarize"].detail
    for point in points[1:]:
        p = got[point]
        assert p.outcome == "findings" and "effect-duplicate" in p.codes, (point, p.detail)
        assert "in isolation" in p.detail and p.effects == {"post-comment": 2}
    assert result.runs["sweeps"] >= 2
