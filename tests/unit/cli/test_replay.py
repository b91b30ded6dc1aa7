"""``histaudit replay`` on the golden histories: clean, diverged, JSON, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.cli import cli, one_error_line
from support.repo import ORDER_HISTORY, REPO, read_json, write_file

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
