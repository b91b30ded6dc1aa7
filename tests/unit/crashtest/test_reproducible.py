"""Reproducible and comparable matrices: a seeded sample of the points, output fields left
out of comparisons by JSONPath (``--ignore``), and the seed, sample, ignored paths and
git commit recorded in every report."""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from histaudit.cli import main
from histaudit.cli.crashtest import crashtest
from histaudit.crashtest import (
    DIVERGED,
    IDENTICAL,
    CrashSpec,
    MatrixResult,
    json_report,
    junit_xml,
    render,
    sample_points,
)
from histaudit.crashtest.spec import git_commit
from histaudit.errors import UsageError
from support.crashtest import clean_run, judged

POINTS = [f"after:step:{i}" for i in range(1, 101)]


# --- sample_points ------------------------------------------------------------------------

def test_the_same_seed_chooses_the_same_points_in_clean_run_order() -> None:
    chosen = sample_points(POINTS, 10, seed=7)
    assert chosen == sample_points(POINTS, 10, seed=7)
    assert len(set(chosen)) == 10 and set(chosen) <= set(POINTS)
    assert chosen == sorted(chosen, key=POINTS.index)


def test_different_seeds_choose_differently() -> None:
    choices = {tuple(sample_points(POINTS, 10, seed)) for seed in range(20)}
    assert len(choices) == 20


def test_the_choice_does_not_depend_on_the_process() -> None:
    """A seed in a report chooses the same points when the command runs again: nothing
    depends on string hashing, which differs from one interpreter to the next."""
    code = ("import json; from histaudit.crashtest import sample_points; "
            f"print(json.dumps(sample_points({POINTS!r}, 10, 42)))")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
            for hash_seed in ("1", "2")]
    assert [json.loads(r.stdout) for r in runs] == [sample_points(POINTS, 10, 42)] * 2


@pytest.mark.parametrize("k", [100, 101, 10_000])
def test_a_sample_as_large_as_the_points_is_all_of_them(k: int) -> None:
    assert sample_points(POINTS, k, seed=3) == POINTS


@pytest.mark.parametrize("k", [0, -1])
def test_a_sample_below_one_is_a_usage_error(k: int) -> None:
    with pytest.raises(UsageError, match=f"--sample must be at least 1, not {k}"):
        sample_points(POINTS, k, seed=3)


# --- judging with ignored paths -------------------------------------------------------------

CLEAN = {"total": 3, "generated_at": "2026-12-01T10:00:00Z",
         "items": [{"id": "a-1", "at": 1.5, "n": 1}, {"id": "b-2", "at": 2.5, "n": 2}]}


@pytest.mark.parametrize("ignore", [
    ["$.generated_at", "$.items[*].at", "$.items[*].id"],
    ["$..at", "$..id", "$['generated_at']"],
    ["$"],
])
def test_an_output_differing_only_in_ignored_fields_is_identical(ignore: list[str]) -> None:
    crashed = {"total": 3, "generated_at": "2026-12-01T10:00:07Z",
               "items": [{"id": "x-9", "at": 8.0, "n": 1}, {"id": "y-8", "at": 9.0, "n": 2}]}
    point = judged(clean_run(CLEAN), json.dumps(crashed), ignore=ignore)
    assert point.outcome == IDENTICAL and point.output_matches, point.detail
    assert point.output == crashed  # the report keeps the output as it was


def test_without_the_ignore_paths_the_same_output_diverges() -> None:
    crashed = {**CLEAN, "generated_at": "2026-12-01T10:00:07Z"}
    point = judged(clean_run(CLEAN), json.dumps(crashed))
    assert point.outcome == DIVERGED
    assert point.diff == ('output $.generated_at: "2026-12-01T10:00:00Z" -> '
                          '"2026-12-01T10:00:07Z"',)


def test_a_difference_outside_the_ignored_fields_still_diverges() -> None:
    crashed = {**CLEAN, "generated_at": "2026-12-01T10:00:07Z", "items": [
        {"id": "a-1", "at": 1.5, "n": 1}, {"id": "b-2", "at": 2.5, "n": 5}]}
    point = judged(clean_run(CLEAN), json.dumps(crashed), ignore=["$.generated_at"])
    assert point.outcome == DIVERGED and not point.output_matches
    assert point.diff == ("output $.items[1].n: 2 -> 5",)


def test_a_filter_removes_list_items_from_both_sides() -> None:
    clean = clean_run({"events": [{"kind": "ping"}, {"kind": "done", "n": 1}]})
    crashed = {"events": [{"kind": "done", "n": 1}, {"kind": "ping"}, {"kind": "ping"}]}
    ignore = ["$.events[?@.kind == 'ping']"]
    assert judged(clean, json.dumps(crashed), ignore=ignore).outcome == IDENTICAL
    crashed["events"][0]["n"] = 2
    assert judged(clean, json.dumps(crashed), ignore=ignore).diff == (
        "output $.events[0].n: 1 -> 2",)


@pytest.mark.parametrize("path", ["$.a[", "generated_at", "$.a.keys()", "$..", ""])
def test_a_path_that_is_not_jsonpath_is_a_usage_error(path: str) -> None:
    with pytest.raises(UsageError, match="is not an RFC 9535 JSONPath") as err:
        judged(clean_run(CLEAN), json.dumps(CLEAN), ignore=[path])
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match="is not an RFC 9535 JSONPath"):
        CrashSpec(target="app:wf", input={}, ignore=("$.ok", path))


# --- the spec ---------------------------------------------------------------------------------

def test_one_string_is_not_taken_for_a_list_of_paths() -> None:
    with pytest.raises(UsageError, match="not the string"):
        CrashSpec(target="app:wf", input={}, ignore="$.at")  # type: ignore[arg-type]


def test_a_sample_without_a_seed_gets_one_and_keeps_it() -> None:
    spec = CrashSpec(target="app:wf", input={}, sample=5)
    assert isinstance(spec.seed, int)
    assert CrashSpec(target="app:wf", input={}, sample=5, seed=11).seed == 11
    assert CrashSpec(target="app:wf", input={}).seed is None


@pytest.mark.parametrize(("fields", "message"), [
    ({"sample": 0}, "--sample must be at least 1, not 0"),
    ({"seed": 4}, "--seed without --sample"),
])
def test_a_bad_sample_is_a_usage_error(fields: dict[str, int], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        CrashSpec(target="app:wf", input={}, **fields)  # type: ignore[arg-type]


def test_a_rerun_command_keeps_the_ignored_paths_and_needs_no_seed() -> None:
    spec = CrashSpec(target="app:wf", input={"id": 1}, ignore=("$.at", "$..id"), sample=3,
                     seed=9)
    argv = shlex.split(spec.rerun_command("after:a", engine_crash=False))
    assert "--sample" not in argv and "--seed" not in argv
    ctx = crashtest.make_context("crashtest", argv[2:])
    assert ctx.params["ignore"] == ("$.at", "$..id") and ctx.params["points"] == ("after:a",)


# --- the reports ------------------------------------------------------------------------------

def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "commit.gpgsign=false", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The current directory a git checkout with one commit; returns the commit."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "code under test")
    return _git(tmp_path, "rev-parse", "HEAD")


def test_every_report_carries_the_seed_sample_ignored_paths_and_commit(checkout: str) -> None:
    spec = CrashSpec(target="app:wf", input={}, ignore=("$.at",), sample=4, seed=1234)
    result = MatrixResult(spec=spec, clean=clean_run(CLEAN), points=(), wall=1.0)
    doc = json.loads(json_report(result))
    assert {k: doc[k] for k in ("commit", "sample", "seed", "ignore")} == {
        "commit": checkout, "sample": 4, "seed": 1234, "ignore": ["$.at"]}
    props = {p.get("name"): p.get("value")
             for p in ET.fromstring(junit_xml(result)).iter("property")}
    assert {k: props[k] for k in ("commit", "sample", "seed", "ignore")} == {
        "commit": checkout, "sample": "4", "seed": "1234", "ignore": '["$.at"]'}
    out = io.StringIO()
    render(result, Console(file=out, width=200, markup=False, highlight=False))
    header = out.getvalue().splitlines()[1]
    assert header == f"commit {checkout}, sample 4 points (seed 1234), ignoring $.at"


def test_outside_a_checkout_the_commit_is_none(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    assert git_commit() is None
    _git(tmp_path, "init", "-q")
    assert git_commit() is None  # no commit yet
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    spec = CrashSpec(target="app:wf", input={})
    doc = MatrixResult(spec=spec, clean=clean_run(CLEAN), points=(), wall=1.0).to_json()
    assert (doc["commit"], doc["sample"], doc["seed"], doc["ignore"]) == (None, None, None, [])


# --- the command line: bad input, before any engine starts ---------------------------------

@pytest.mark.parametrize(("args", "needles"), [
    (["--ignore", "$.ok", "--ignore", "$.a["], ["--ignore '$.a['", "RFC 9535"]),
    (["--sample", "0"], ["--sample", "0"]),
    (["--seed", "7"], ["--seed without --sample"]),
])
def test_cli_bad_reproducibility_options_are_one_line_exit_2(args: list[str],
                                                             needles: list[str]) -> None:
    with CliRunner().isolation() as streams:
        with pytest.raises(SystemExit) as exited:
            main(["crashtest", "app:wf", "--input", "{}", *args])
        out, err = (s.getvalue().decode() for s in streams[:2])
    assert exited.value.code == 2 and out == ""
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("histaudit: error: ")
    for needle in needles:
        assert needle in err, err
