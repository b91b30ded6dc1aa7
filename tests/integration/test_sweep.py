"""The sweep (``histaudit crashtest``'s default mode) on the real engine.

What a user relies on: one instance crashed at every point finds what a run per point
finds (checked point by point against ``--mode isolated`` on the financial agent: 4 steps
and 10 points in ``make test``, which hold every kind of point the agent has — before and
after a step, the report's activity and both sides of its side effect; 10 steps and 22
points in ``make test-long``); a divergence no finding explains is bisected down to the
one point that causes it; and the CLI says what it does and writes it into the JSON. A
worker that dies on its own: ``test_sweep_stops.py``; engine crashes in a sweep:
``test_sweep_engine.py``.
Cost: ≈ 80 s of CPU on a slow 2-core machine (2 tests: the 4-step agent's sweep beside its
isolated runs ≈ 43, the bisection ≈ 37).
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
from support.sizes import sized

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


AGENT_STEPS = sized(4, 10)


@pytest.fixture(scope="module")
def agent_clean(engine_binary: Path) -> tuple[ct.CrashSpec, ct.CleanRun]:
    spec = ct.CrashSpec(target=f"{AGENT}:financial_agent",
                        input={"ticker": "ACME", "steps": AGENT_STEPS}, timeout=60)
    return spec, ct.run_clean(spec)


@pytest.mark.sized
def test_a_sweep_finds_what_a_run_per_point_finds(
        agent_clean: tuple[ct.CrashSpec, ct.CleanRun]) -> None:
    spec, clean = agent_clean
    crashes: list[str] = []
    swept = ct.run_matrix(spec, clean=clean, engine_points=False,
                          on_crash=lambda point, kind, done, total: crashes.append(point))
    isolated = ct.run_matrix(spec, clean=clean, engine_points=False, mode="isolated", jobs=2)
    # before/after each step (the last is the report's), and the report's effect
    assert len(clean.points) == 2 * AGENT_STEPS + 2
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
    assert swept.runs["sweeps"] == 1 and swept.runs["sweep_crashes"] == len(clean.points)
    vouched = [p for p in swept.points if p.point not in confirmed]
    assert all(p.outcome == "identical" and p.output_matches and p.status == "COMPLETED"
               and p.effects == clean.effects for p in vouched)
    for p in vouched:
        ct.assert_recovered(p)
    assert isolated.runs == {"sweeps": 0, "sweep_crashes": 0, "isolated": len(clean.points)}
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
