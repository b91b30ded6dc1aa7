"""What the crash matrix counts, and when a point fails (issue 48, items 2 and 7), on the
real engine.

A crash at ``after-effect:X`` comes after X's block ran, so that attempt got through: the
triage example, whose comment is not deduplicated, posts it again on the retry, and the
point counts two executions against the clean run's one and fails — named with both
counts — although its finding (``effect-uncertain``) is only a warning. ``--fail-on``
fails a point on a finding at or above it, as ``verify --fail-on`` does. A workflow that
ends FAILED where the clean run completed is a failing point whose detail carries the
failure. Each test is one clean run and one or two isolated crashes. Cost: ≈ 25 s of CPU
on a slow 2-core machine (3 tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from histaudit import crashtest as ct
from support.cli import cli
from support.schemas import valid

pytestmark = [pytest.mark.engine, pytest.mark.crash]

REPO = Path(__file__).resolve().parents[2]
TRIAGE = REPO / "examples" / "triage" / "app.py"
TICKET = {"id": "T-1", "title": "Login page 500s"}
SWEEP_APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"


def _matrix(tmp: Path, *args: str) -> tuple[int, dict[str, dict], str]:
    """``histaudit crashtest`` of the triage example, isolated runs: its exit status, its
    points by name (the JSON checked against its schema) and what it printed."""
    out = tmp / "matrix.json"
    r = cli("crashtest", f"{TRIAGE}:triage", "--input", json.dumps(TICKET), "--mode",
            "isolated", "--no-engine-points", "--json", out, *args, cwd=tmp, timeout=600)
    assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    doc = valid("crashtest", json.loads(out.read_text(encoding="utf-8")))
    return r.returncode, {p["point"]: p for p in doc["points"]}, r.stdout


@pytest.mark.timeout(600)
def test_an_effect_done_again_after_its_attempt_got_through_fails_the_point(
        engine_binary: Path, tmp_path: Path) -> None:
    rc, points, out = _matrix(tmp_path, "--point", "after-effect:post-comment")
    p = points["after-effect:post-comment"]
    assert rc == 1, out
    # The crashed attempt posted (the ledger has its intent only) and the retry posted
    # again: two executions, where the JSON used to say one and the point passed.
    assert p["effects"] == {"post-comment": 2}, p
    assert p["doubled"] == {"post-comment": {"here": 2, "clean": 1}}
    assert p["outcome"] == "findings" and p["worst"] == "warning" and p["failing"], p
    assert p["codes"][0] == "effect-uncertain"
    assert p["detail"].startswith("post-comment done 2× (clean run: 1×); effect-uncertain")
    assert "after-effect:post-comment (app): findings — post-comment done 2× (clean run: 1×)" \
        in out


@pytest.mark.timeout(600)
def test_fail_on_warning_fails_a_point_with_a_warning(engine_binary: Path,
                                                      tmp_path: Path) -> None:
    """IDEMPOTENT=1: crashed before its block, the post is done once, by the retry (a
    warning: the ledger cannot know); crashed after the post's done, the retry skips it
    (info). With ``--fail-on warning`` the first fails and the second does not."""
    rc, points, out = _matrix(tmp_path, "--point", "before-effect:post-comment", "--point",
                              "after_post", "--env", "IDEMPOTENT=1", "--jobs", "2",
                              "--fail-on", "warning")
    assert rc == 1, out
    uncertain, skipped = points["before-effect:post-comment"], points["after_post"]
    assert uncertain["worst"] == "warning" and uncertain["failing"], uncertain
    assert uncertain["effects"] == {"post-comment": 1} and uncertain["doubled"] == {}
    assert skipped["worst"] == "info" and not skipped["failing"], skipped
    assert skipped["outcome"] == "identical" and "effect-deduplicated" in skipped["codes"]
    assert uncertain["rerun"].endswith("--env IDEMPOTENT=1 --fail-on warning")
    assert "failing on warning" in out.splitlines()[1]


@pytest.mark.timeout(600)
def test_a_workflow_that_ends_failed_where_the_clean_run_completed_fails(
        engine_binary: Path) -> None:
    """``fragile`` raises when it runs again (``FRAGILE=raise``, no retry policy): crashed
    after its body, the workflow ends FAILED."""
    spec = ct.CrashSpec(target=f"{SWEEP_APP}:steps", input=0, env={"FRAGILE": "raise"})
    p = ct.run_point(spec, "after:fragile")
    assert p.outcome == ct.FAILED and p.status == "FAILED" and p.failing, p.detail
    assert p.detail.startswith("workflow FAILED where the clean run COMPLETED: "), p.detail
    assert "fragile ran twice" in p.detail
    with pytest.raises(AssertionError, match="fragile ran twice"):
        ct.assert_recovered(p)
