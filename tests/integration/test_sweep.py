"""The sweep (``histaudit crashtest``'s default mode) on the real engine.

What a user relies on: one instance crashed at every point finds what a run per point
finds (checked point by point against ``--mode isolated`` on the 10-step financial
agent); a divergence no finding explains is bisected down to the one point that causes
it; a worker that dies on its own stops the sweep without losing the points after it;
engine crashes sweep too; and the CLI says what it does and writes it into the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from histaudit import crashtest as ct
from histaudit.verify.findings import Severity

pytestmark = [pytest.mark.engine, pytest.mark.crash]

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "examples" / "financial_agent" / "app.py"
APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"
TRIAGE = REPO / "examples" / "triage" / "app.py"
HISTAUDIT = str(Path(sys.executable).with_name("histaudit"))


def outcomes(result: ct.MatrixResult) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each point's outcome and its finding codes at warning or above (a sweep can place
    an info finding, such as a re-execution, only next to the crashes around it)."""
    return {p.point: (p.outcome.value, tuple(f.code for f in p.findings
                                             if f.severity >= Severity.WARNING))
            for p in result.points}


@pytest.fixture(scope="module")
def agent_clean(engine_binary: Path) -> tuple[ct.CrashSpec, ct.CleanRun]:
    spec = ct.CrashSpec(target=f"{AGENT}:financial_agent",
                        input={"ticker": "ACME", "steps": 10}, timeout=60)
    return spec, ct.run_clean(spec)


def test_a_sweep_finds_what_a_run_per_point_finds(
        agent_clean: tuple[ct.CrashSpec, ct.CleanRun]) -> None:
    spec, clean = agent_clean
    crashes: list[str] = []
    swept = ct.run_matrix(spec, clean=clean, engine_points=False,
                          on_crash=lambda point, kind, done, total: crashes.append(point))
    isolated = ct.run_matrix(spec, clean=clean, engine_points=False, mode="isolated", jobs=2)
    assert len(clean.points) == 22  # 10 steps, before/after each, and the report's effect
    assert crashes == list(clean.points)  # one instance, every point, in order
    assert outcomes(swept) == outcomes(isolated)
    assert outcomes(swept)["before-effect:send-report"] == ("findings", ("effect-uncertain",))
    assert outcomes(swept)["after-effect:send-report"] == ("findings", ("effect-uncertain",))
    assert [p for p, (o, _) in outcomes(swept).items() if o != "identical"] == [
        "before-effect:send-report", "after-effect:send-report"]
    # The points the sweep's findings are attributed to were run alone; as each finding
    # was reproduced there, the one sweep vouches for the others.
    confirmed = [p.point for p in swept.points if "in isolation" in p.detail]
    assert set(confirmed) >= {"before-effect:send-report", "after-effect:send-report"}
    assert swept.runs["isolated"] == len(confirmed) <= 4
    assert swept.runs["sweeps"] == 1 and swept.runs["sweep_crashes"] == 22
    vouched = [p for p in swept.points if p.point not in confirmed]
    assert all(p.outcome == "identical" and p.output_matches and p.status == "COMPLETED"
               and p.effects == clean.effects for p in vouched)
    for p in vouched:
        ct.assert_recovered(p)
    assert isolated.runs == {"sweeps": 0, "sweep_crashes": 0, "isolated": 22}
    assert swept.mode == "sweep" and swept.to_json()["mode"] == "sweep"


def test_a_divergence_no_finding_explains_is_bisected_to_its_point(
        engine_binary: Path, tmp_path: Path) -> None:
    """``stamp`` returns how often its body ran: crashed after its body, the re-run makes
    the output differ, and the ledger (one completion) has no warning to blame."""
    report = tmp_path / "m.json"
    run = subprocess.run([HISTAUDIT, "crashtest", f"{APP}:steps", "--input", "0",
                          "--no-engine-points", "--json", str(report)],
                         env={**os.environ, "COLUMNS": "200"}, capture_output=True,
                         text=True, timeout=600, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    doc = json.loads(report.read_text())
    assert doc["mode"] == "sweep"
    bad = {p["point"]: p for p in doc["points"] if p["outcome"] != "identical"}
    assert list(bad) == ["after:stamp"], bad
    assert bad["after:stamp"]["outcome"] == "diverged"
    assert "bisected from a sweep" in bad["after:stamp"]["detail"]
    assert "$.stamp.runs: 1 -> 2" in bad["after:stamp"]["detail"]
    assert "--point after:stamp --no-engine-points" in bad["after:stamp"]["rerun"]
    assert sorted(p["point"] for p in doc["points"]) == sorted(doc["clean"]["points"])
    assert doc["runs"]["sweeps"] > 2  # the sweep, then halves of it
    # Progress: one line per crash, counted against the points.
    n = len(doc["clean"]["points"])
    assert f"[1/{n}] app sweep: crashed at before:add" in run.stderr
    assert f"[{n}/{n}] app sweep: crashed at after:add#4" in run.stderr


def test_a_worker_dying_on_its_own_stops_the_sweep_and_the_rest_is_swept_again(
        engine_binary: Path) -> None:
    spec = ct.CrashSpec(target=f"{APP}:steps", input=0, env={"FRAGILE": "1"}, timeout=15)
    result = ct.run_matrix(spec, engine_points=False)
    by_point = {p.point: p for p in result.points}
    assert sorted(by_point) == sorted(result.clean.points)  # nothing lost
    fragile = by_point["after:fragile"]
    assert fragile.outcome in ("stuck", "failed")
    assert "the sweep stopped after this crash" in fragile.detail
    assert "worker exited with status 3" in fragile.detail
    assert by_point["after:stamp"].outcome == "diverged"
    assert {p for p, r in by_point.items() if r.outcome == "identical"} == \
        set(by_point) - {"after:fragile", "after:stamp"}
    assert result.runs["sweeps"] >= 2


def test_engine_crashes_sweep_too(engine_binary: Path) -> None:
    """The engine killed while a step runs: the step is dispatched again once its lock
    expires. ``add`` does not mind; ``stamp`` runs twice and the output differs."""
    spec = ct.CrashSpec(target=f"{APP}:steps", input=0, timeout=30)
    crashes: list[tuple[str, ct.CrashKind]] = []
    result = ct.run_matrix(spec, app_points=False,
                           points=["before:step:1-2", "after:step:1-2", "before:step:4"],
                           on_crash=lambda point, kind, done, total:
                           crashes.append((point, kind)))
    swept = ["before:add", "after:add", "before:add#2", "after:add#2", "before:stamp"]
    assert crashes[:5] == [(p, ct.KIND_ENGINE) for p in swept]
    assert [(p.point, p.kind, p.outcome.value) for p in result.points] == [
        *[(p, ct.KIND_ENGINE, "identical") for p in swept[:4]],
        ("before:stamp", ct.KIND_ENGINE, "diverged")]
    stamp = result.points[-1]
    assert "in isolation: output $.stamp.runs: 1 -> 2" in stamp.detail
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
