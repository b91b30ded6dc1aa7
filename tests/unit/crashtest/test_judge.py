"""Judging a crash run against the clean run: outputs compared modulo each run's own
instance id, and a diff that names the first differing field."""

from __future__ import annotations

from typing import Any

import pytest

from histaudit.crashtest.judge import INSTANCE_PLACEHOLDER, first_difference, without_instance
from histaudit.crashtest.results import DIVERGED, IDENTICAL
from support.crashtest import clean_run, judged


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
