"""``histaudit replay`` on the golden histories: clean, diverged, JSON, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.cli import cli, one_error_line
from support.repo import HISTORIES, ORDER_HISTORY, REPO, read_json, write_file

ORDER = ORDER_HISTORY


def run(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """The command from the checkout's root, where ``examples.*`` is importable."""
    return cli(*args, cwd=REPO)


def test_cli_replay_clean_diverged_and_json(tmp_path: Path) -> None:
    clean = run("replay", "golden-order", "--workflow", "examples.nondeterminism.workflows:order",
                "--history", ORDER, "--save", tmp_path / "saved.json")
    assert clean.returncode == 0 and clean.stderr == "", clean
    assert "OK" in clean.stdout
    assert (tmp_path / "saved.json").read_bytes() == ORDER.read_bytes()
    diverged = run("replay", "golden-order", "--history", ORDER,
                   "--workflow", "examples.nondeterminism.v2:order_swapped")
    assert diverged.returncode == 1 and diverged.stderr == "", diverged
    assert "DIVERGED: different-order" in diverged.stdout
    assert "history: activity 'reserve'" in diverged.stdout
    assert "code:    activity 'charge'" in diverged.stdout
    as_json = run("replay", "golden-order", "--json", "--history", ORDER,
                  "--workflow", "examples/nondeterminism/workflows.py:order")
    assert as_json.returncode == 0, as_json
    assert json.loads(as_json.stdout)["ok"] is True


@pytest.mark.parametrize(("args", "needle"), [
    (["--workflow", "examples.nondeterminism.nope:order"], "cannot import"),
    (["--workflow", "examples.nondeterminism.workflows:nope"], "has no 'nope'"),
    (["--workflow", "examples.nondeterminism.workflows:dice"], "history is of workflow 'order'"),
    (["--workflow", "no-colon"], "MODULE:FUNCTION"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "TRUNC"],
     "not valid JSON"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "MISSING"],
     "No such file"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "V2"],
     "unsupported version"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "ORDER",
      "--engine", "127.0.0.1:1"], "--engine HOST:PORT or --history FILE"),
    (["--workflow", "examples.nondeterminism.workflows:order"],
     "--engine HOST:PORT or --history FILE"),
    # nan passed click's range check and failed later as "unreachable", exit 1 (#40)
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "ORDER",
      "--timeout", "nan"], "'nan' is not a number of seconds"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "ORDER",
      "--timeout", "inf"], "3600"),
])
def test_cli_replay_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    files = {"TRUNC": write_file(tmp_path / "t.json", ORDER.read_text()[:300]),
             "MISSING": tmp_path / "missing.json", "ORDER": ORDER,
             "V2": write_file(tmp_path / "v2.json", {**read_json(ORDER), "version": 99})}
    if "--history" not in args and "--engine" not in args and "--workflow" in args \
            and needle != "--engine HOST:PORT or --history FILE":
        args = [*args, "--history", "ORDER"]
    args = [str(files.get(a, a)) for a in args]
    one_error_line(run("replay", "golden-order", *args), needle)


# --- many histories in one call (a directory of saved histories) --------------------------

WORKFLOWS = [arg for name in ("order", "approval", "dice")
             for arg in ("--workflow", f"examples.nondeterminism.workflows:{name}")]


def _directory(tmp_path: Path, *stems: str) -> Path:
    d = tmp_path / "histories"
    d.mkdir()
    for stem in stems:
        (d / f"{stem}.json").write_bytes((HISTORIES / f"{stem}.json").read_bytes())
    return d


def test_cli_replays_a_directory_of_saved_histories(tmp_path: Path) -> None:
    out = run("replay", "--history", _directory(tmp_path, "order", "approval"), *WORKFLOWS)
    assert out.returncode == 0 and out.stderr == "", out
    assert out.stdout.count("— OK (replay completed") == 2
    assert "2 of 2 histories replayed: 2 ok, 0 diverged" in out.stdout
    assert "output not compared with the signed one: no ledger given (--db)" in out.stdout


def test_cli_directory_fails_fast_at_a_divergence_and_keep_going_replays_all(
        tmp_path: Path) -> None:
    d = _directory(tmp_path, "approval", "dice", "order")  # replayed by name: dice second
    out = run("replay", "--history", d, *WORKFLOWS)
    assert out.returncode == 1 and out.stderr == "", out
    assert "golden-dice" in out.stdout and "DIVERGED: different-input" in out.stdout
    assert "golden-order" not in out.stdout
    assert "2 of 3 histories replayed: 1 ok, 1 diverged" in out.stdout
    assert "stopped at the first failure (1 not replayed; --keep-going replays all)" in out.stdout

    out = run("replay", "--history", d, *WORKFLOWS, "--keep-going")
    assert out.returncode == 1 and "golden-order" in out.stdout, out
    assert "3 of 3 histories replayed: 2 ok, 1 diverged" in out.stdout
    assert "stopped" not in out.stdout


def test_cli_directory_json_has_one_object_per_history_and_a_summary(tmp_path: Path) -> None:
    d = _directory(tmp_path, "approval", "dice", "order")
    out = run("replay", "--history", d, *WORKFLOWS, "--keep-going", "--json")
    assert out.returncode == 1, out
    doc = json.loads(out.stdout)
    assert set(doc) == {"ok", "results", "summary"} and doc["ok"] is False
    assert doc["summary"] == {"histories": 3, "replayed": 3, "ok": 2, "diverged": 1,
                              "mismatch": 0, "error": 0, "not_completed": 0,
                              "stopped": False}
    by_instance = {r["replay"]["instance"]: r for r in doc["results"]}
    assert [r["source"] for r in doc["results"]] == [str(d / f"{s}.json")
                                                     for s in ("approval", "dice", "order")]
    dice = by_instance["golden-dice"]
    assert dice["status"] == "diverged" and dice["ok"] is False
    assert dice["replay"]["ok"] is False
    assert dice["replay"]["divergence"]["kind"] == "different-input"
    order = by_instance["golden-order"]
    assert order["status"] == "ok" and order["ok"] is True
    assert order["replay"]["ok"] is True and order["replay"]["completed"] is True
    assert order["replay"]["outcome"] == "completed"
    assert order["output_check"]["status"] == "not-compared" and order["error"] is None
    assert json.loads(order["replay"]["output"])["tracking"] == "tracking-A-17"


def test_cli_directory_with_an_unreadable_history_exits_2_after_reporting_it(
        tmp_path: Path) -> None:
    d = _directory(tmp_path, "order")
    write_file(d / "broken.json", ORDER.read_text()[:300])
    out = run("replay", "--history", d, *WORKFLOWS, "--keep-going")
    assert out.returncode == 2, out
    assert "broken.json: ERROR — history" in out.stdout and "not valid JSON" in out.stdout
    assert "2 of 2 histories replayed: 1 ok, 0 diverged, 0 output mismatch, 1 could not" \
        in out.stdout


# --- a history saved mid-run -----------------------------------------------------------------

@pytest.mark.parametrize(("cut", "waiting", "next_"), [
    (8, [], ["activity 'ship' with \"A-17\" (step #3)"]),  # charge done, ship not scheduled
    (9, ["activity 'ship' with \"A-17\" (step #3)"], []),  # ship scheduled, not completed
])
def test_cli_replays_a_history_saved_mid_run_as_far_as_it_goes(
        tmp_path: Path, cut: int, waiting: list[str], next_: list[str]) -> None:
    from histaudit.replay import History

    partial = History.of(History.load(ORDER).events[:cut]).save(tmp_path / "partial.json")
    out = run("replay", "--history", partial, "--workflow",
              "examples.nondeterminism.workflows:order")
    assert out.returncode == 0 and out.stderr == "", out
    assert "OK so far (history not completed" in out.stdout
    assert f"{cut} history events replayed" in out.stdout
    for step in waiting:
        assert f"waiting for: {step}" in out.stdout
    for step in next_:
        assert f"next, today's code would: {step}" in out.stdout
    item = json.loads(run("replay", "--history", partial, "--json", "--workflow",
                          "examples.nondeterminism.workflows:order").stdout)
    doc = item["replay"]
    assert item["ok"] is True and doc["ok"] is True
    assert doc["completed"] is False and doc["outcome"] == "running"
    assert doc["waiting"] == waiting and doc["next"] == next_
    assert doc["last_event"] == ("activity of step #2 completed" if cut == 8
                                 else "activity 'ship' with \"A-17\" (step #3)")

    # Among others in a directory it counts as not completed, and does not fail the run.
    d = _directory(tmp_path, "approval")
    (d / "partial.json").write_bytes(partial.read_bytes())
    out = run("replay", "--history", d, *WORKFLOWS)
    assert out.returncode == 0 and "1 not completed (replayed as far as recorded)" in out.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (["--all", "--history", "ORDER"], "--all lists the engine's instances"),
    (["--engine", "127.0.0.1:1"], "INSTANCE_ID... or --all"),
    (["a", "b", "--history", "ORDER"], "give at most one INSTANCE_ID"),
    (["--history", "DIR", "--save", "OUT"], "--save writes one history"),
    (["--history", "EMPTY"], "has no *.json history files"),
])
def test_cli_replay_many_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    files = {"ORDER": ORDER, "DIR": _directory(tmp_path, "order"), "OUT": tmp_path / "o.json",
             "EMPTY": tmp_path / "empty"}
    (tmp_path / "empty").mkdir()
    args = [str(files.get(a, a)) for a in args]
    one_error_line(run("replay", *args, "--workflow",
                       "examples.nondeterminism.workflows:order"), needle)
