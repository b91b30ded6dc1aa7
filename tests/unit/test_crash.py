"""crash_point: a named, repeatable power cut, and a trace of every point reached.

Each case runs a tiny script in a child process, because the behaviour under test is
the process ending (no ``finally``, no ``atexit``, a distinct exit status).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from histaudit.crash import CRASH_EXIT_CODE, ENV_CRASH_AT, ENV_CRASH_TRACE, read_trace

SCRIPT = textwrap.dedent("""
    import atexit, sys
    from histaudit import crash_point

    atexit.register(lambda: print("atexit ran", flush=True))
    print("start", flush=True)
    try:
        crash_point("before:step")
        print("did step", flush=True)
        for i in range(3):
            crash_point("loop")
            print(f"loop {i}", flush=True)
        crash_point("after:step")
    finally:
        print("finally ran", flush=True)
    print("end", flush=True)
""")


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in (ENV_CRASH_AT, ENV_CRASH_TRACE)}
    return subprocess.run([sys.executable, "-c", SCRIPT], env={**base, **env}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)


def test_without_the_switch_nothing_happens(tmp_path: Path) -> None:
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["start", "did step", "loop 0", "loop 1", "loop 2",
                                        "finally ran", "end", "atexit ran"]
    assert proc.stderr == ""


def test_named_point_ends_the_process_like_a_power_cut(tmp_path: Path) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: "after:step"})
    assert proc.returncode == CRASH_EXIT_CODE
    # Everything before the point happened; no finally block, no atexit hook after it.
    assert proc.stdout.splitlines() == ["start", "did step", "loop 0", "loop 1", "loop 2"]
    assert f"crash point 'after:step' reached ({ENV_CRASH_AT})" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_first_point_crashes_before_anything_else(tmp_path: Path) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: "before:step"})
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["start"]


@pytest.mark.parametrize("spec", ["nothing,loop", " nothing , loop ", "loop,after:step"])
def test_comma_list_crashes_at_the_first_listed_point_reached(tmp_path: Path,
                                                              spec: str) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: spec})
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["start", "did step"]


def test_nth_occurrence(tmp_path: Path) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: "loop#3"})
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["start", "did step", "loop 0", "loop 1"]
    assert "crash point 'loop'" in proc.stderr


def test_unknown_name_does_not_crash(tmp_path: Path) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: "after:other,loop#9"})
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-2:] == ["end", "atexit ran"]


def test_trace_lists_every_point_reached_in_order(tmp_path: Path) -> None:
    trace = tmp_path / "points.txt"
    proc = run(tmp_path, **{ENV_CRASH_TRACE: str(trace)})
    assert proc.returncode == 0, proc.stderr
    assert read_trace(trace) == ["before:step", "loop", "loop", "loop", "after:step"]

    # With a crash, the trace ends at the point that fired (appended across runs).
    proc = run(tmp_path, **{ENV_CRASH_TRACE: str(trace), ENV_CRASH_AT: "loop#2"})
    assert proc.returncode == CRASH_EXIT_CODE
    assert read_trace(trace)[5:] == ["before:step", "loop", "loop"]


def test_read_trace_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_trace(tmp_path / "absent") == []


def test_switch_is_read_at_call_time_not_import_time(tmp_path: Path) -> None:
    script = ("import os\nfrom histaudit import crash_point\ncrash_point('x')\n"
              f"os.environ['{ENV_CRASH_AT}'] = 'x'\nprint('armed', flush=True)\n"
              "crash_point('x')\nprint('survived', flush=True)\n")
    base = {k: v for k, v in os.environ.items() if k not in (ENV_CRASH_AT, ENV_CRASH_TRACE)}
    proc = subprocess.run([sys.executable, "-c", script], env=base, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["armed"]


def test_importing_histaudit_does_not_load_the_dapr_sdk(tmp_path: Path) -> None:
    """crash_point is cheap to import: the Dapr-facing names load lazily."""
    script = ("import sys, histaudit\nassert 'dapr' not in sys.modules, 'eager dapr import'\n"
              "histaudit.crash_point('x')\nassert histaudit.side_effect.__name__ == "
              "'side_effect'\nassert 'dapr' in sys.modules\nprint('ok')\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
