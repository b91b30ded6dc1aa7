"""The crash matrix (``histaudit crashtest``, :mod:`histaudit.crashtest`, the pytest plugin)
on the real engine, against the triage example.

Nothing names the triage example's crash points: the clean run finds them. What is
checked is what a user relies on — every point found; the non-idempotent post reported as
a duplicated side effect (exit 1), after a crash inside it that it got through too; the
idempotent one as deduplicated and identical; an engine crash recovered; the table, the
JSON and the JUnit file; bad input exiting 2 with one line; the pytest marker giving one
test per point. Every point of the
research-report example, two at a time: ``test_crashtest_research.py``.

Runtime is kept down on a loaded 2-core machine by crashing the engine at only two
triage points. The same small matrix on real daprd beside durabletask-go:
``test_crashtest_daprd.py``. Cost: ≈ 75 s of CPU on a slow 2-core machine (9 tests).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from histaudit import crashtest as ct
from histaudit.crash import CRASH_EXIT_CODE
from histaudit.verify.findings import EffectRef, Finding, Severity

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.engine, pytest.mark.crash]

REPO = Path(__file__).resolve().parents[2]
TRIAGE = REPO / "examples" / "triage" / "app.py"
HISTAUDIT = str(Path(sys.executable).with_name("histaudit"))
TICKET = {"id": "T-1", "title": "Login page 500s"}
TRIAGE_POINTS = {
    "before:summarize", "after:summarize",                      # automatic, activity 1
    "before:post_comment", "after:post_comment",                # automatic, activity 2
    "before-effect:post-comment", "after-effect:post-comment",  # automatic, side effect
    "before_post", "after_post",                                # named in app.py
}
TRIAGE_SPEC = ct.CrashSpec(target=f"{TRIAGE}:triage", input=TICKET)


def crashtest(*args: str, env: dict[str, str] | None = None,
              timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it."""
    return subprocess.run([HISTAUDIT, "crashtest", *args],
                          env={**os.environ, "COLUMNS": "220", **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)


def table_row(stdout: str, point: str, kind: str = "app") -> list[str]:
    """The cells of ``point``'s row in the printed table."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)[1:-1]]
        if len(cells) == 5 and cells[0] == point and cells[1] == kind:
            return cells
    raise AssertionError(f"no table row for {point} ({kind}) in:\n{stdout}")


@pytest.fixture(scope="module")
def triage_clean() -> ct.CleanRun:
    return ct.run_clean(TRIAGE_SPEC)


# --- triage ---------------------------------------------------------------------------

@pytest.mark.timeout(900)
def test_cli_triage_matrix_finds_every_point_and_the_duplicate(tmp_path: Path) -> None:
    json_file, junit_file = tmp_path / "matrix.json", tmp_path / "matrix.xml"
    run = crashtest(f"{TRIAGE}:triage", "--input", json.dumps(TICKET), "--jobs", "2",
                    "--no-engine-points", "--json", str(json_file),
                    "--junit", str(junit_file))
    assert run.returncode == 1, run.stdout + run.stderr  # effect-duplicate is an error

    doc = json.loads(json_file.read_text())
    assert doc["target"] == f"{TRIAGE}:triage" and doc["input"] == TICKET
    assert doc["clean"]["status"] == "COMPLETED" and doc["clean"]["output"] == "done"
    assert doc["clean"]["effects"] == {"post-comment": 1}
    assert doc["clean"]["findings"] == []
    points = {p["point"]: p for p in doc["points"]}
    assert set(points) == TRIAGE_POINTS == set(doc["clean"]["points"])
    assert {p["kind"] for p in doc["points"]} == {"app"}
    assert doc["coverage"]["not_reached"] == []
    assert set(doc["coverage"]["declared"]) == TRIAGE_POINTS

    # Crashing before the post, or anywhere in summarize: recovered, nothing to see.
    for name in ("before:summarize", "after:summarize", "before:post_comment", "before_post"):
        assert points[name]["outcome"] == "identical", points[name]
        assert points[name]["codes"] == ["activity-reexecuted"]  # info: listed, allowed
    # After the comment was posted: the re-run posts again. Reported, and it fails.
    for name in ("after_post", "after:post_comment"):
        p = points[name]
        assert p["outcome"] == "findings" and p["failing"], p
        assert "effect-duplicate" in p["codes"] and p["worst"] == "error"
        assert p["effects"] == {"post-comment": 2} and p["output_matches"]
        (dup,) = [f for f in p["findings"] if f["code"] == "effect-duplicate"]
        assert dup["effect"] == {"name": "post-comment", "key": TICKET["id"]}
        assert p["rerun"].endswith(f"--point {name} --no-engine-points")
    # In the middle of the effect: the ledger cannot know; a warning. Before the block
    # nothing was posted, so not a failure; after it, the crashed attempt posted and the
    # retry posted again: two executions (issue 48), a failure whatever the warning says.
    for name in ("before-effect:post-comment", "after-effect:post-comment"):
        p = points[name]
        doubled = name.startswith("after")
        assert p["outcome"] == "findings" and p["failing"] is doubled, p
        assert p["codes"][0] == "effect-uncertain" and p["worst"] == "warning"
        assert p["effects"] == {"post-comment": 2 if doubled else 1}, p
    assert doc["exit_code"] == 1 and doc["summary"] == {"identical": 4, "findings": 4}

    # The table, as printed.
    out = run.stdout
    assert out.startswith(f"clean run of {TRIAGE}:triage: COMPLETED")
    for name in TRIAGE_POINTS:
        cells = table_row(out, name)
        assert cells[2] == points[name]["outcome"] and re.fullmatch(r"\d+\.\ds", cells[4])
    assert "effect-duplicate" in table_row(out, "after_post")[3]
    assert "rerun: histaudit crashtest" in out
    # The default mode: one sweep of the 8 points, the points its findings are attributed
    # to run alone (each finding reproduced there, so the sweep vouches for the rest).
    assert re.search(r"8 points in 1 sweep\(s\) of 8 crashes and \d isolated run", out)
    assert "Traceback" not in run.stderr

    # JUnit: one testcase per point; failures exactly for the posts done twice.
    root = ET.parse(junit_file).getroot()
    cases = list(root.iter("testcase"))
    assert sorted(c.get("name") for c in cases) == sorted(TRIAGE_POINTS)
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {"after_post", "after:post_comment", "after-effect:post-comment"}
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "8" and suite.get("failures") == "3"


@pytest.mark.timeout(600)
def test_cli_idempotent_post_is_deduplicated_and_identical(tmp_path: Path) -> None:
    json_file = tmp_path / "one.json"
    run = crashtest(f"{TRIAGE}:triage", "--input", json.dumps(TICKET), "--point", "after_post",
                    "--no-engine-points", "--env", "IDEMPOTENT=1", "--json", str(json_file))
    assert run.returncode == 0, run.stdout + run.stderr
    [point] = json.loads(json_file.read_text())["points"]
    assert point["point"] == "after_post" and point["kind"] == "app"
    assert point["outcome"] == "identical", point
    assert "effect-deduplicated" in point["codes"] and "effect-duplicate" not in point["codes"]
    assert point["effects"] == {"post-comment": 1}
    assert "--env IDEMPOTENT=1" in point["rerun"]
    assert table_row(run.stdout, "after_post")[2] == "identical"


@pytest.mark.xdist_group("triage_clean")  # one worker makes the clean run once
@pytest.mark.timeout(600)
def test_engine_crash_points_on_triage(triage_clean: ct.CleanRun) -> None:
    """The engine SIGKILLed while the app is inside a step; restarted; the step re-run."""
    result = ct.run_matrix(TRIAGE_SPEC, clean=triage_clean,
                           points=["before:summarize", "after_post"], app_points=False,
                           engine_points=True, jobs=2)
    by_point = {p.point: p for p in result.points}
    assert {p.kind for p in result.points} == {"engine"} and len(result.points) == 2
    summarize, post = by_point["before:summarize"], by_point["after_post"]
    assert summarize.outcome == "identical", (summarize.detail, summarize.log_tail)
    assert summarize.status == "COMPLETED" and summarize.output == "done"
    assert post.outcome == "findings", (post.detail, post.log_tail)
    assert "effect-duplicate" in post.codes and post.failing
    assert post.rerun.endswith("--point after_post --engine-crash")
    assert result.exit_code == 1
    with pytest.raises(AssertionError, match="post-comment"):
        ct.assert_no_duplicate_effects(post)
    ct.assert_recovered(summarize)


@pytest.mark.xdist_group("triage_clean")  # one worker makes the clean run once
def test_a_point_never_reached_is_failed(triage_clean: ct.CleanRun) -> None:
    result = ct.run_point(TRIAGE_SPEC, "after_post#2", clean=triage_clean)
    assert result.outcome == "failed" and "never reached" in result.detail
    assert result.failing


@pytest.mark.xdist_group("triage_clean")  # one worker makes the clean run once
def test_clean_run_round_trips_through_json(triage_clean: ct.CleanRun) -> None:
    """The pytest plugin shares a clean run across xdist workers as asdict() JSON."""
    text = json.dumps(dataclasses.asdict(triage_clean))
    assert ct.CleanRun.from_dict(json.loads(text)) == triage_clean
    assert triage_clean.points and triage_clean.findings == ()
    finding = Finding.make("effect-duplicate", triage_clean.instance, 7, "posted twice",
                           entries=[5, 7], effect=EffectRef("post-comment", "t-1"))
    with_finding = dataclasses.replace(triage_clean, findings=(finding,),
                                       finding_effects=("post-comment",))
    back = ct.CleanRun.from_dict(json.loads(json.dumps(dataclasses.asdict(with_finding))))
    assert back == with_finding and back.findings[0].severity is Severity.ERROR
    # the report writes each finding as every --json output does, its effect included
    (doc,) = back.to_json()["findings"]
    assert doc == finding.to_json()
    assert (doc["effect"], doc["entries"]) == ({"name": "post-comment", "key": "t-1"}, [5, 7])
    # a report read back (Finding.to_json) is the same finding
    assert ct.CleanRun.from_dict({**dataclasses.asdict(with_finding),
                                  "findings": [doc]}).findings == (finding,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        triage_clean.status = "FAILED"  # type: ignore[misc]


def test_engine_mode_crash_point_waits_for_the_marker(tmp_path: Path) -> None:
    """HISTAUDIT_CRASH_MODE=engine: the point writes the marker, waits, then carries on."""
    marker = tmp_path / "signal"
    code = ("from histaudit.crash import crash_point\n"
            "crash_point('a'); crash_point('b'); print('carried on', flush=True)\n")
    env = {**os.environ, "HISTAUDIT_CRASH_AT": "b#1", "HISTAUDIT_CRASH_MODE": "engine",
           "HISTAUDIT_CRASH_SIGNAL": str(marker)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no marker"
            time.sleep(0.02)
        assert marker.read_text().splitlines()[0] == "b"
        time.sleep(0.3)
        assert proc.poll() is None  # held at the point
        marker.unlink()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and out == "carried on\n"
    assert "engine mode" in err
    # Without a marker file name the mode does not apply: a plain crash.
    env.pop("HISTAUDIT_CRASH_SIGNAL")
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=30, check=False)
    assert plain.returncode == CRASH_EXIT_CODE and plain.stdout == ""


def test_points_are_numbered_and_declarations_found(tmp_path: Path) -> None:
    assert ct.number_points(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]
    source = tmp_path / "app.py"
    source.write_text("from histaudit import crash_point, once, side_effect\n"
                      "import histaudit\n"
                      "def act(ctx):\n"
                      "    crash_point('one')\n"
                      "    histaudit.crash_point('two')\n"
                      "    crash_point(name_in_a_variable)\n"
                      "    with side_effect(ctx, 'charge', key='k'):\n"
                      "        pass\n"
                      "    once(ctx, 'mail', send)\n")
    assert ct.declared_points([source], ["act"]) == [
        "before:act", "after:act", "one", "two", "before-effect:charge",
        "after-effect:charge", "before-effect:mail", "after-effect:mail"]
    assert set(ct.declared_points([TRIAGE], ["summarize", "post_comment"])) == TRIAGE_POINTS


# --- bad input ------------------------------------------------------------------------

def _bad_cases(tmp: Path) -> dict[str, tuple[list[str], dict[str, str], str]]:
    broken = tmp / "broken_app.py"
    broken.write_text("import a_module_that_does_not_exist_xyz\n")
    fake_engine = tmp / "bin" / "durabletask-go"
    fake_engine.parent.mkdir()
    fake_engine.write_text("#!/bin/sh\necho 'no engine today' >&2\nexit 3\n")
    fake_engine.chmod(0o755)
    ticket = json.dumps(TICKET)
    components, empty, clashing = tmp / "components", tmp / "empty", tmp / "clashing"
    for d in (components, empty, clashing):
        d.mkdir()
    (components / "store.yaml").write_text("kind: Component\n")
    (clashing / "statestore.yaml").write_text("kind: Component\n")
    return {
        "input-not-json": ([f"{TRIAGE}:triage", "--input", "{id: 1"], {},
                           "--input is not JSON"),
        "module-does-not-import": ([f"{broken}:triage", "--input", ticket], {},
                                   "a_module_that_does_not_exist_xyz"),
        "workflow-not-registered": ([f"{TRIAGE}:no_such_workflow", "--input", ticket], {},
                                    "'no_such_workflow' is not registered"),
        "engine-does-not-start": ([f"{TRIAGE}:triage", "--input", ticket],
                                  {"HISTAUDIT_ENGINE_BIN": str(fake_engine)},
                                  "exited with status 3"),
        "no-such-file": ([f"{tmp / 'missing.py'}:triage", "--input", ticket], {},
                         "no such file"),
        "target-without-workflow": ([str(TRIAGE), "--input", ticket], {},
                                    "expected MODULE_OR_FILE:WORKFLOW_NAME"),
        "env-without-value": ([f"{TRIAGE}:triage", "--input", ticket, "--env", "IDEMPOTENT"],
                              {}, "expected NAME=VALUE"),
        "unknown-engine": ([f"{TRIAGE}:triage", "--input", ticket, "--engine", "dapr"], {},
                           "--engine"),
        "daprd-not-built": ([f"{TRIAGE}:triage", "--input", ticket, "--engine", "daprd"],
                            {"HISTAUDIT_DAPRD_BIN_DIR": str(fake_engine.parent)},
                            "make daprd"),
        "event-without-data": ([f"{TRIAGE}:triage", "--input", ticket, "--event", "approved"],
                               {}, "expected NAME=JSON"),
        "event-data-not-json": ([f"{TRIAGE}:triage", "--input", ticket, "--event",
                                 "approved={by: ops}"], {}, "the data is not JSON"),
        "resources-without-daprd": ([f"{TRIAGE}:triage", "--input", ticket, "--resources",
                                     str(components)], {}, "--resources needs --engine daprd"),
        "resources-missing": ([f"{TRIAGE}:triage", "--input", ticket, "--engine", "daprd",
                               "--resources", str(tmp / "nowhere")], {}, "no such directory"),
        "resources-empty": ([f"{TRIAGE}:triage", "--input", ticket, "--engine", "daprd",
                             "--resources", str(empty)], {}, "no component files"),
        "resources-actor-store": ([f"{TRIAGE}:triage", "--input", ticket, "--engine", "daprd",
                                   "--resources", str(clashing)], {},
                                  "statestore.yaml is the name of the actor state store"),
        # refused before the run, not after it (issue #40, item 9); the engine given here
        # cannot start, so a check made after the clean run would say that instead
        "junit-unwritable": ([f"{TRIAGE}:triage", "--input", ticket, "--junit",
                              str(tmp / "no-dir" / "m.xml")],
                             {"HISTAUDIT_ENGINE_BIN": str(fake_engine)},
                             f"cannot write {tmp / 'no-dir' / 'm.xml'}"),
        "json-unwritable": ([f"{TRIAGE}:triage", "--input", ticket, "--json", str(empty)],
                            {"HISTAUDIT_ENGINE_BIN": str(fake_engine)},
                            f"cannot write {empty}: Is a directory"),
    }


@pytest.mark.timeout(600)
def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    problems = []
    for name, (args, env, expected) in _bad_cases(tmp_path).items():
        run = crashtest(*args, env=env, timeout=300)
        lines = run.stderr.splitlines()
        if not (run.returncode == 2 and len(lines) == 1 and run.stdout == ""
                and lines[0].startswith("histaudit: error: ") and expected in lines[0]):
            problems.append(f"{name}: exit {run.returncode}, stdout {run.stdout[-300:]!r}, "
                            f"stderr {run.stderr[-600:]!r}")
    assert not problems, "\n".join(problems)


# --- on real daprd ---------------------------------------------------------------------

# --- the pytest plugin ----------------------------------------------------------------

@pytest.mark.timeout(900)
def test_pytest_plugin_one_test_per_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_triage_crashes=f"""
        import pytest
        from histaudit.pytest_plugin import assert_recovered

        @pytest.mark.crashmatrix({str(TRIAGE) + ':triage'!r}, input={TICKET!r})
        def test_triage(crash_outcome):
            assert_recovered(crash_outcome)
        """)
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed")) == (5, 3), result.stdout.str()
    # posted twice: after the post's done, and after its block (the crashed attempt posted)
    doubled = ("after_post", "after:post_comment", "after-effect:post-comment")
    for point in TRIAGE_POINTS:
        verdict = "FAILED" if point in doubled else "PASSED"
        result.stdout.fnmatch_lines([f"*test_triage[[]{point}[]] {verdict}*"])
    result.stdout.fnmatch_lines(["*not recovered*side effect post-comment duplicated*"])
