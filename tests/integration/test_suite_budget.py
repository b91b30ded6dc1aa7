"""The suite's own guard (``tests/support/timings.py``): with ``--file-budget`` a test file
that passes its CPU budget fails the run, naming the file; one inside it passes, and the
slowest tests are listed either way. Without it (``make test``, CI) a file over the
calibrated budget is named and the run still passes: a timing never fails CI. Runs pytest
in a subprocess on generated files. Cost: ≈ 9 s of CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

BURN = """
import time

def test_burns_cpu():
    end = time.process_time() + 1.0
    while time.process_time() < end:
        pass
"""


def _run(pytester: pytest.Pytester, budget: str, option: str = "--file-budget"
         ) -> pytest.RunResult:
    pytester.makepyfile(test_burn=BURN)
    tests = Path(__file__).resolve().parents[1]
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(tests)!r})\n"
                          "pytest_plugins = ['support.timings']\n")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", option, budget,
                                         "--timings-json", "t.json")


def test_a_file_over_its_cpu_budget_fails_the_run(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "0.5")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*slowest tests*", "*test_burn.py::test_burns_cpu*",
        "FAILED budget: test_burn.py took * s of CPU, over the 0.5 s a file may take*"])
    assert result.parseoutcomes()["passed"] == 1
    doc = json.loads((pytester.path / "t.json").read_text())
    assert doc["files"]["test_burn.py"]["cpu_s"] >= 1.0


def test_a_file_inside_its_budget_passes(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "30")
    assert result.ret == pytest.ExitCode.OK
    assert "FAILED budget" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*slowest files*", "*test_burn.py"])


def test_without_an_enforced_budget_a_file_over_it_is_named_and_the_run_passes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HISTAUDIT_FILE_BUDGET", raising=False)
    result = _run(pytester, "0.5", option="--file-budget-report")
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str()
    assert "FAILED budget" not in out
    result.stdout.fnmatch_lines([
        "*reported only; calibration *, * s against 0.25 s, factor *",
        "OVER budget (reported): test_burn.py took * s of CPU, over the * s a file may take*"])


SESSION_CHILD = """
import subprocess, sys
import pytest

@pytest.fixture(scope="session")
def server():
    # a server the whole run shares, burning a second of CPU, reaped when the session ends
    proc = subprocess.Popen([sys.executable, "-c",
        "import time\\nend = time.process_time() + 1.0\\n"
        "while time.process_time() < end: pass\\nimport sys; sys.stdin.read()"],
        stdin=subprocess.PIPE)
    yield proc
    proc.stdin.close()
    proc.wait()
"""

USES_IT = """
def test_uses_the_server(server):
    assert server.pid > 0
"""

LAST = """
def test_the_last_file_run():
    assert True
"""


def test_a_session_servers_cpu_is_charged_to_no_file(pytester: pytest.Pytester) -> None:
    """The worker's session fixtures end in its last test's teardown: their reaped CPU is
    printed on its own line, not added to the file that happened to run last, and the
    teardown's wall is no file's either."""
    pytester.makepyfile(test_a_uses=USES_IT, test_z_last=LAST)
    tests = Path(__file__).resolve().parents[1]
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(tests)!r})\n"
                          "pytest_plugins = ['support.timings']\n" + SESSION_CHILD)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--file-budget", "0.8",
                                           "--timings-json", "t.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    doc = json.loads((pytester.path / "t.json").read_text())
    assert doc["files"]["test_z_last.py"]["cpu_s"] < 0.5
    assert doc["session_teardown_cpu_s"] >= 0.9
    # its wall too (a loaded CI took 4 s to reap the server and failed the last file's
    # wall limit): the trivial last test is charged less than the server's teardown took
    assert doc["files"]["test_z_last.py"]["wall_s"] < doc["session_teardown_wall_s"]
    result.stdout.fnmatch_lines(["*the workers' session teardown (their PostgreSQL servers,"
                                 " reaped at the end) * s CPU"])
