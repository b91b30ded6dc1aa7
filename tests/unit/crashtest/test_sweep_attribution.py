"""Which crashes of a sweep a finding is put next to, and when a sweep vouches for the
points in between (histaudit.crashtest.sweep.SweepRun), without an engine."""

from __future__ import annotations

from dataclasses import replace

from tests.support.crashtest import clean_run

from histaudit.crashtest.discovery import base_point
from histaudit.crashtest.results import FINDINGS, IDENTICAL, KIND_APP, Outcome, PointResult
from histaudit.crashtest.sweep import SweepCrash, SweepRun, scoped_points
from histaudit.verify.findings import Finding

# Three crashes; the ledger's last seq of instance "wf" at each: 4, 9, 15.
CRASHES = (SweepCrash("before:a", 1.0, {"wf": 4}), SweepCrash("after:a", 2.0, {"wf": 9}),
           SweepCrash("before:b", 3.0, {"wf": 15, "wf:0001": 2}))


def finding(code: str, seq: int | None, instance: str = "wf") -> Finding:
    return Finding.make(code, instance, seq, "m")


def sweep(*findings: Finding, outcome: Outcome = FINDINGS) -> SweepRun:
    result = PointResult(point="sweep of 3 points", kind=KIND_APP, outcome=outcome,
                         detail="", rerun="", findings=findings)
    return SweepRun(kind=KIND_APP, crashes=CRASHES, result=result, stopped_at=None, wall=4.0)


def alone(point: str, *codes: str) -> PointResult:
    return PointResult(point=point, kind=KIND_APP, outcome=FINDINGS if codes else IDENTICAL,
                       detail="", rerun="", findings=tuple(finding(c, 1) for c in codes))


def test_a_finding_sits_between_the_crash_before_its_entry_and_the_one_after() -> None:
    run = sweep()
    assert run.around(finding("effect-uncertain", 3)) == (None, "before:a")
    assert run.around(finding("effect-uncertain", 5)) == ("before:a", "after:a")
    assert run.around(finding("effect-uncertain", 9)) == ("before:a", "after:a")
    assert run.around(finding("effect-uncertain", 10)) == ("after:a", "before:b")
    assert run.around(finding("effect-uncertain", 16)) == ("before:b", None)
    assert run.around(finding("effect-uncertain", None)) == (None, None)
    # Each instance (a child workflow) by its own seq; absent before a crash: 0.
    assert run.around(finding("effect-uncertain", 1, "wf:0001")) == ("after:a", "before:b")


def test_only_warnings_and_errors_are_attributed_and_info_is_listed_at_both_sides() -> None:
    dup = finding("effect-duplicate", 12)
    rerun = finding("activity-reexecuted", 6)
    run = sweep(dup, rerun)
    assert run.attributed() == {"after:a": [dup], "before:b": [dup]}
    assert run.info_around("before:a") == (rerun,)
    assert run.info_around("after:a") == (rerun,)
    assert run.info_around("before:b") == ()


def test_a_sweep_vouches_for_the_rest_only_when_each_finding_is_reproduced_beside_it() -> None:
    run = sweep(finding("effect-duplicate", 12), finding("effect-uncertain", 5))
    reproduced = {"before:b": alone("before:b", "effect-duplicate"),
                  "after:a": alone("after:a", "effect-uncertain")}
    assert run.explained_by(reproduced)
    # The same code reproduced, but not next to the finding: not explained.
    elsewhere = {"before:b": alone("before:b", "effect-duplicate", "effect-uncertain")}
    assert not run.explained_by(elsewhere)
    # Next to it, but alone the point shows something else (or nothing).
    assert not run.explained_by({**reproduced, "after:a": alone("after:a")})
    assert not run.explained_by({})
    # Nothing at warning or above: nothing to explain.
    assert sweep(finding("activity-reexecuted", 6)).explained_by({})


def test_scoped_points_are_the_aliases_of_a_pass_inside_an_activity() -> None:
    clean = clean_run("done")
    aliases = {"after:step:1": "after:a", "step:1": "after:a",
               "after:a@wf-1/1": "after:a", "before:a@wf-1/2": "before:a#2",
               "named@wf-1/2": "named"}
    clean = replace(clean, aliases=aliases)
    assert scoped_points(clean) == {"after:a": "after:a@wf-1/1",
                                    "before:a#2": "before:a@wf-1/2",
                                    "named": "named@wf-1/2"}
    assert all(alias.startswith(base_point(p) + "@") for p, alias in
               scoped_points(clean).items())
