"""Every app crash point of the research-report example (fan-out, a retry policy, a child
workflow), two at a time (``--jobs 2``), on the real engine: every point found by the
clean run, none failing, the report published once whatever the crash. The app is
crashed only (not the engine) to keep the runtime down. Split from ``test_crashtest.py``
(stop 47) to keep each file inside its CPU budget. Cost: ≈ 32 s of CPU, 50 s of wall on
a slow 2-core machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit import crashtest as ct
from histaudit.verify.findings import Severity

pytestmark = [pytest.mark.engine, pytest.mark.crash]

RESEARCH = Path(__file__).resolve().parents[2] / "examples" / "research_report" / "app.py"
REPORT_REQUEST = {"topic": "solid-state batteries", "sources": ["arxiv", "news"]}


@pytest.mark.timeout(1500)
def test_research_report_every_point_two_at_a_time() -> None:
    """Fan-out, a retry policy and a child workflow; every app crash point, --jobs 2."""
    assert RESEARCH.is_file(), "examples/research_report/app.py has not landed"
    spec = ct.CrashSpec(target=f"{RESEARCH}:research_report", input=REPORT_REQUEST)
    result = ct.run_matrix(spec, jobs=2, engine_points=False)
    clean = result.clean
    assert clean.status == "COMPLETED" and clean.effects == {"publish": 1}
    assert {"research_report", "analyze"} <= set(clean.workflows)
    # Every activity of parent and child, the fan-out's second pass, the retry's second
    # attempt and the app's named points were all found by the clean run.
    for activity in clean.activities:
        assert f"before:{activity}" in clean.points and f"after:{activity}" in clean.points
    for point in ("before:fetch_source#2", "after:extract_notes#2", "before:review_draft#2",
                  "fetched", "extracted", "drafted", "published", "after-effect:publish"):
        assert point in clean.points, clean.points
    assert clean.not_reached == ()
    assert tuple(p.point for p in result.points) == clean.points

    problems = [f"{p.point}: {p.outcome} {p.detail} {p.codes}\n{p.log_tail}"
                for p in result.points if p.failing]
    assert not problems, "\n".join(problems)
    for p in result.points:
        assert p.output_matches and p.effects == {"publish": 1}, (p.point, p.diff)
        if p.outcome == "findings":
            # Crashed between intent and done: the app checks, the ledger cannot know.
            assert p.point in ("before-effect:publish", "published", "after-effect:publish")
            assert p.codes[0] == "effect-uncertain" and p.worst == Severity.WARNING
    assert by_outcome(result)["identical"] >= len(result.points) - 3
    assert result.exit_code == 0


def by_outcome(result: ct.MatrixResult) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(ct.OUTCOMES, 0)
    for p in result.points:
        counts[p.outcome] += 1
    return counts
