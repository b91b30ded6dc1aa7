"""Judging a crash run against the clean run: outputs compared modulo each run's own
instance id, a diff that names the first differing field, effects counted in executions
(a crash at ``after-effect:X`` counts the attempt it cut) and when a point fails."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from histaudit.crashtest import CrashSpec
from histaudit.crashtest.judge import (
    INSTANCE_PLACEHOLDER,
    EffectKey,
    Evidence,
    cut_effects,
    first_difference,
    judge,
    without_instance,
)
from histaudit.crashtest.results import DIVERGED, FAILED, FINDINGS, IDENTICAL, KIND_APP, PointResult
from histaudit.crashtest.sandbox import RunState
from histaudit.verify.findings import EffectRef, Finding, Severity
from support.crashtest import clean_run, judged
from support.repo import REPO


def test_an_output_naming_its_own_instance_is_identical() -> None:
    clean = clean_run({"report": "report for wf-clean-1a2b", "ids": ["wf-clean-1a2b"],
                       "wf-clean-1a2b": 3})
    point = judged(clean, '{"report": "report for wf-app-9f8e", "ids": ["wf-app-9f8e"], '
                          '"wf-app-9f8e": 3}')
    assert point.outcome == IDENTICAL and point.output_matches, point.detail


def test_a_real_difference_names_the_first_field_that_differs() -> None:
    clean = clean_run({"report": {"title": "wf-clean-1a2b", "pages": [1, 2, 3]}, "n": 1})
    point = judged(clean, '{"report": {"title": "wf-app-9f8e", "pages": [1, 5, 3]}, "n": 2}')
    assert point.outcome == DIVERGED and not point.output_matches
    assert point.diff == ("output $.n: 1 -> 2",)  # keys in order: n before report


@pytest.mark.parametrize(("a", "b", "where"), [
    ({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "y"}]}, '$.a[1].b: "x" -> "y"'),
    ({"a": 1}, {"a": 1, "z": None}, "$.z: \"(absent)\" -> null"),
    ([1, 2], [1, 2, 3], "$: 2 items -> 3 items"),
    ({"a": [1]}, {"a": {"0": 1}}, '$.a: [1] -> {"0": 1}'),
    ("done", "done", None),
    (None, None, None),
])
def test_first_difference(a: Any, b: Any, where: str | None) -> None:
    assert first_difference(a, b) == where


def test_without_instance_replaces_inside_strings_and_keys_only() -> None:
    value = {"id-7": ["id-7/step", 7, None, {"k": "no"}]}
    assert without_instance(value, "id-7") == {
        INSTANCE_PLACEHOLDER: [f"{INSTANCE_PLACEHOLDER}/step", 7, None, {"k": "no"}]}
    assert without_instance(value, None) == value


def test_an_effect_count_that_differs_is_worded_as_what_happened() -> None:
    """``effect place-order done 1 -> 0`` read as a lost order (issue #39)."""
    from dataclasses import replace

    from histaudit.crashtest.judge import Evidence, judge
    from histaudit.crashtest.results import KIND_APP, PointResult
    from histaudit.crashtest.sandbox import RunState

    clean = replace(clean_run({"ok": True}), effects={"place-order": 1, "mail": 1})
    start = PointResult(point="after:a", kind=KIND_APP, outcome=DIVERGED, detail="",
                        rerun="", instance="wf-app-9f8e")
    point = judge(start, clean, RunState("COMPLETED", '{"ok": true}', None),
                  Evidence({"place-order": 0, "mail": 2}, (), ()))
    assert point.diff == ("effect mail: done twice in this run, once in the clean run",
                          "effect place-order: not done in this run, once in the clean run")


# --- effects counted in executions (issue 48, item 2) ---------------------------------------

def _judge(clean_effects: dict[str, int], keys: tuple[EffectKey, ...], *,
           crashed: tuple[str, ...], codes: tuple[str, ...] = (), status: str = "COMPLETED",
           failure: str | None = None) -> PointResult:
    """A crash at ``crashed`` of a run whose ledger shows ``keys`` (and findings ``codes``
    about the first key's effect), judged against a clean run with ``clean_effects``."""
    clean = replace(clean_run({"ok": True}), effects=clean_effects)
    start = PointResult(point=crashed[0] if crashed else "after:a", kind=KIND_APP,
                        outcome=DIVERGED, detail="", rerun="", instance="wf-app-9f8e")
    name = keys[0].name
    findings = tuple(Finding.make(c, "wf-app-9f8e", 3, "m", effect=EffectRef(name, "k"))
                     for c in codes)
    ledger = {}
    for k in keys:
        ledger[k.name] = ledger.get(k.name, 0) + k.executions()
    ev = Evidence(ledger, findings, tuple(name for _ in findings), keys)
    return judge(start, clean, RunState(status, '{"ok": true}', failure), ev, crashed=crashed)


def test_a_crash_after_an_effects_block_counts_the_attempt_it_cut() -> None:
    """The booking of issue 48: its crashed attempt got through and the retry booked
    again; the ledger holds one done. Two executions, and the point fails although
    effect-uncertain is a warning."""
    booked = EffectKey("wf-app-9f8e", "tool:book_flight", "k", done=1, open=1)
    point = _judge({"tool:book_flight": 1}, (booked,), crashed=("after-effect:tool:book_flight",),
                   codes=("effect-uncertain",))
    assert point.effects == {"tool:book_flight": 2} and point.outcome == FINDINGS
    assert point.doubled == {"tool:book_flight": (2, 1)}
    assert point.failing and str(point.worst) == "warning"
    assert point.detail == "tool:book_flight done 2× (clean run: 1×); effect-uncertain"
    assert point.to_json()["doubled"] == {"tool:book_flight": {"here": 2, "clean": 1}}
    # The same ledger after a crash anywhere else: one done, one execution.
    elsewhere = _judge({"tool:book_flight": 1}, (booked,), crashed=("after:book",),
                       codes=("effect-uncertain",))
    assert elsewhere.effects == {"tool:book_flight": 1} and not elsewhere.failing
    # No finding to explain it: a divergence, the doubled effect named first.
    bare = _judge({"tool:book_flight": 1}, (booked,), crashed=("after-effect:tool:book_flight",))
    assert bare.outcome == DIVERGED and bare.detail.startswith(
        "tool:book_flight done 2× (clean run: 1×)")


def test_a_retry_that_skipped_or_was_told_the_key_adds_no_execution() -> None:
    skipped = EffectKey("wf-app-9f8e", "publish", "k", skipped=True, open=1)
    told = EffectKey("wf-app-9f8e", "publish", "k", done=1, told=True, open=1)
    for key in (skipped, told):
        point = _judge({"publish": 1}, (key,), crashed=("after-effect:publish",),
                       codes=("effect-uncertain",))
        assert point.effects == {"publish": 1} and not point.failing, (key, point.detail)


def test_with_parallel_attempts_open_the_crash_is_put_where_it_proves_least() -> None:
    """Two calls of one tool were open when the worker died; the ledger does not say which
    got through. One retry skipped (its check found it done): that one, so no double."""
    found = EffectKey("wf-app-9f8e", "tool:book", "a", skipped=True, open=1)
    redone = EffectKey("wf-app-9f8e", "tool:book", "b", done=1, open=1)
    point = _judge({"tool:book": 2}, (found, redone), crashed=("after-effect:tool:book",),
                   codes=("effect-uncertain",))
    assert point.effects == {"tool:book": 2} and not point.failing


def test_cut_effects_are_the_after_effect_points() -> None:
    assert cut_effects(["after-effect:tool:x#2", "after:y", "before-effect:z",
                        "after-effect:mail"]) == ["tool:x", "mail"]


def test_a_failed_end_names_the_failure_and_the_clean_runs_end() -> None:
    key = EffectKey("wf-app-9f8e", "mail", "k", done=1)
    point = _judge({"mail": 1}, (key,), crashed=("after:a",), status="FAILED",
                   failure="TaskFailedError: fragile ran twice")
    assert point.outcome == FAILED and point.failing
    assert point.detail == ("workflow FAILED where the clean run COMPLETED: "
                            "TaskFailedError: fragile ran twice")


@pytest.mark.parametrize(("codes", "fail_on", "failing"), [
    (("activity-reexecuted",), "error", False),
    (("activity-reexecuted",), "warning", False),
    (("activity-reexecuted",), "info", True),
    (("effect-uncertain",), "error", False),
    (("effect-uncertain",), "warning", True),
    (("effect-duplicate",), "error", True),
])
def test_fail_on_fails_a_point_with_a_finding_at_or_above_it(
        codes: tuple[str, ...], fail_on: str, failing: bool) -> None:
    key = EffectKey("wf-app-9f8e", "mail", "k", done=1)
    point = _judge({"mail": 1}, (key,), crashed=("after:a",), codes=codes)
    assert not point.doubled
    assert replace(point, fail_on=Severity.parse(fail_on)).failing is failing


def test_the_rerun_command_keeps_fail_on() -> None:
    app = REPO / "examples" / "triage" / "app.py"
    spec = CrashSpec(target=f"{app}:triage", input={}, fail_on="warning")
    assert str(spec.fail_on) == "warning"
    assert spec.rerun_command("after_post", engine_crash=False).endswith(
        "--no-engine-points --fail-on warning")
    assert "--fail-on" not in CrashSpec(target=f"{app}:triage", input={}).rerun_command(
        "after_post", engine_crash=False)
