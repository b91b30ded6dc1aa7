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

from histaudit.crash import (
    CRASH_EXIT_CODE,
    ENV_CRASH_AT,
    ENV_CRASH_INSTANCE,
    ENV_CRASH_SWEEP,
    ENV_CRASH_TRACE,
    fired_path,
    read_trace,
    read_trace_entries,
    scoped_name,
)
from histaudit.crashtest.discovery import point_aliases, select_points
from histaudit.errors import UsageError

SCRIPT = textwrap.dedent("""
    import atexit, sys
    from histaudit import crash_point
    from histaudit.crash import step_aliases

    atexit.register(lambda: print("atexit ran", flush=True))
    print("start", flush=True)
    try:
        crash_point("before:step")
        print("did step", flush=True)
        for i in range(3):
            crash_point("loop", step_aliases("after", i + 1))
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


@pytest.mark.parametrize("spec", ["step:3", "after:step:3", "nothing,after:step:3"])
def test_an_alias_names_the_point_whatever_this_process_counted(tmp_path: Path,
                                                                 spec: str) -> None:
    proc = run(tmp_path, **{ENV_CRASH_AT: spec})
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["start", "did step", "loop 0", "loop 1"]


def test_trace_keeps_each_pass_aliases(tmp_path: Path) -> None:
    trace = tmp_path / "points.txt"
    assert run(tmp_path, **{ENV_CRASH_TRACE: str(trace)}).returncode == 0
    entries = read_trace_entries(trace)
    assert entries[1:4] == [("loop", (f"after:step:{n}", f"step:{n}")) for n in (1, 2, 3)]
    assert entries[0] == ("before:step", ())
    assert point_aliases(entries) == {"after:step:1": "loop", "step:1": "loop",
                                      "after:step:2": "loop#2", "step:2": "loop#2",
                                      "after:step:3": "loop#3", "step:3": "loop#3"}


GATED = textwrap.dedent("""
    from histaudit import crash_point
    from histaudit.crash import crash_scope

    crash_point("outside")
    for instance in ("source", "rerun"):
        with crash_scope(f"{instance}/3"):
            crash_point("before:step")
            print(f"passed {instance}", flush=True)
""")


def test_an_instance_gate_keeps_other_instances_passes_out(tmp_path: Path) -> None:
    """``$HISTAUDIT_CRASH_INSTANCE``: a rerun's source runs in the same worker first;
    its passes (and those outside any activity) are neither traced nor fired at."""
    trace = tmp_path / "points.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_CRASH")}
    env.update({ENV_CRASH_TRACE: str(trace), ENV_CRASH_AT: "before:step",
                ENV_CRASH_INSTANCE: "rerun"})
    r = subprocess.run([sys.executable, "-c", GATED], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == CRASH_EXIT_CODE and r.stdout == "passed source\n", r
    assert read_trace_entries(trace) == [("before:step", ("before:step@rerun/3",))]


POINTS = ["before:fetch", "after:fetch", "before:fetch#2", "after:fetch#2", "before:post",
          "after:post", "after_post"]
ALIASES = {"before:step:1": "before:fetch", "after:step:1": "after:fetch",
           "step:1": "after:fetch", "before:step:2": "before:fetch#2",
           "after:step:2": "after:fetch#2", "step:2": "after:fetch#2",
           "before:step:3": "before:post", "after:step:3": "after:post", "step:3": "after:post"}


@pytest.mark.parametrize(("patterns", "chosen"), [
    (["after:fetch#2"], ["after:fetch#2"]),
    (["step:2"], ["after:fetch#2"]),
    (["before:step:3", "step:1"], ["after:fetch", "before:post"]),  # clean-run order
    (["after:*"], ["after:fetch", "after:fetch#2", "after:post"]),
    (["*post"], ["before:post", "after:post", "after_post"]),
    (["step:2-9"], ["after:fetch#2", "after:post"]),
    (["before:step:1-2"], ["before:fetch", "before:fetch#2"]),
    (["step:1", "after:step:1", "after:fetch"], ["after:fetch"]),  # each point once
])
def test_select_points(patterns: list[str], chosen: list[str]) -> None:
    assert select_points(patterns, POINTS, ALIASES) == chosen


@pytest.mark.parametrize("pattern", ["after:nothing*", "step:40-50", "before:step:9-9"])
def test_a_pattern_that_matches_nothing_is_a_usage_error(pattern: str) -> None:
    with pytest.raises(UsageError, match="matches none of the 7 points"):
        select_points([pattern], POINTS, ALIASES)


@pytest.mark.parametrize(("pattern", "nearest"), [
    ("after:step:2#2", "after:step:2"),  # a pass the run never made (issue #39)
    ("after:fech", "after:fetch"),        # a typo
    ("before:post#5", "before:post"),
])
def test_a_name_that_is_no_point_is_a_usage_error_naming_the_nearest(pattern: str,
                                                                      nearest: str) -> None:
    with pytest.raises(UsageError, match="is none of the 7 points the clean run reached; "
                                         "nearest: ") as raised:
        select_points([pattern], POINTS, ALIASES)
    assert nearest in str(raised.value).split("nearest: ")[1].split(" (see")[0].split(", ")


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


SCOPED = textwrap.dedent("""
    from histaudit import crash_point
    from histaudit.crash import crash_scope

    crash_point("outside")
    for task in (1, 2):
        with crash_scope(f"wf-1/{task}"):
            crash_point("before:act")
            crash_point("tick")
            crash_point("tick")
            print(f"task {task} done", flush=True)
""")


def run_scoped(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_CRASH")}
    return subprocess.run([sys.executable, "-c", SCOPED], env={**base, **env}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)


def test_points_in_a_scope_get_an_alias_counted_within_the_scope(tmp_path: Path) -> None:
    trace = tmp_path / "points.txt"
    assert run_scoped(tmp_path, **{ENV_CRASH_TRACE: str(trace)}).returncode == 0
    assert read_trace_entries(trace) == [
        ("outside", ()),
        ("before:act", ("before:act@wf-1/1",)), ("tick", ("tick@wf-1/1",)),
        ("tick", ("tick@wf-1/1#2",)),
        ("before:act", ("before:act@wf-1/2",)), ("tick", ("tick@wf-1/2",)),
        ("tick", ("tick@wf-1/2#2",))]
    assert scoped_name("tick", "wf-1/2", 2) == "tick@wf-1/2#2"


def test_a_scoped_alias_names_its_pass_as_crash_at_does(tmp_path: Path) -> None:
    proc = run_scoped(tmp_path, **{ENV_CRASH_AT: "tick@wf-1/2#2"})
    assert proc.returncode == CRASH_EXIT_CODE
    assert proc.stdout.splitlines() == ["task 1 done"]


def test_a_sweep_crashes_each_process_at_the_next_listed_pass(tmp_path: Path) -> None:
    """What the sweep harness does: list the passes, let each process die at the first one
    it reaches, take the fired one off the list, start the next process."""
    todo = tmp_path / "sweep.txt"
    wanted = ["before:act@wf-1/1", "tick@wf-1/1#2", "tick@wf-1/2"]
    todo.write_text("\n".join(wanted) + "\n")
    printed = []
    for expected in wanted:
        proc = run_scoped(tmp_path, **{ENV_CRASH_SWEEP: str(todo)})
        assert proc.returncode == CRASH_EXIT_CODE, proc.stderr
        printed.append(proc.stdout.splitlines())
        fired = fired_path(todo).read_text().split()
        assert fired[-1] == expected
        todo.write_text("".join(f"{k}\n" for k in wanted if k not in fired))
    assert printed == [[], [], ["task 1 done"]]
    last = run_scoped(tmp_path, **{ENV_CRASH_SWEEP: str(todo)})
    assert last.returncode == 0
    assert last.stdout.splitlines() == ["task 1 done", "task 2 done"]
    assert fired_path(todo).read_text().split() == wanted


def test_a_sweep_never_fires_outside_a_scope(tmp_path: Path) -> None:
    todo = tmp_path / "sweep.txt"
    todo.write_text("outside\noutside@\n")
    proc = run_scoped(tmp_path, **{ENV_CRASH_SWEEP: str(todo)})
    assert proc.returncode == 0
    assert not fired_path(todo).exists()


CONCURRENT = textwrap.dedent("""
    import threading
    from histaudit.crash import crash_point, crash_scope

    def act(task):
        with crash_scope(f"wf-1/{task}"):
            crash_point("before:act")

    threads = [threading.Thread(target=act, args=(t,)) for t in (1, 2, 3)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("all done", flush=True)
""")


def test_engine_mode_holds_one_point_at_a_time(tmp_path: Path) -> None:
    """A fan-out's activities reach their points together; in engine mode the harness
    restarts the engine once per point, so each point waits for the hold before it to end
    (three holds in turn, never two markers at once)."""
    import time

    from histaudit.crash import CRASH_MODE_ENGINE, ENV_CRASH_MODE, ENV_CRASH_SIGNAL

    todo = tmp_path / "sweep.txt"
    todo.write_text("".join(f"before:act@wf-1/{t}\n" for t in (1, 2, 3)))
    marker = tmp_path / "signal"
    base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_CRASH")}
    proc = subprocess.Popen([sys.executable, "-c", CONCURRENT], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={
                                **base, ENV_CRASH_SWEEP: str(todo),
                                ENV_CRASH_MODE: CRASH_MODE_ENGINE,
                                ENV_CRASH_SIGNAL: str(marker)})
    held = []
    deadline = time.monotonic() + 30
    while len(held) < 3:
        assert time.monotonic() < deadline, "the holds did not come one after another"
        if marker.exists():
            time.sleep(0.2)  # a second point, if it fired now, would note itself
            fired = fired_path(todo).read_text().split()
            assert len(fired) == len(held) + 1, fired
            held.append(fired[-1])
            marker.unlink()
        time.sleep(0.01)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["all done"]
    assert sorted(held) == [f"before:act@wf-1/{t}" for t in (1, 2, 3)]


def test_step_aliases_name_the_root_instances_first_generation_only() -> None:
    """A child and a continued generation count their tasks again: with the root given,
    ``step:1`` is the root's task 1, wherever the run reached the others first."""
    entries = [
        ("after:negotiate", ("after:step:1", "step:1", "after:negotiate@wf-1-neg/1")),
        ("after:quote", ("after:step:1", "step:1", "after:quote@wf-1/1")),
        ("after:check", ("after:step:1", "step:1", "after:check@wf-1/g2/1")),
        ("after:quote", ("after:step:2", "step:2", "after:quote@wf-1/2#2")),
    ]
    assert point_aliases(entries)["step:1"] == "after:negotiate"  # the first pass, as before
    rooted = point_aliases(entries, "wf-1")
    assert rooted["step:1"] == rooted["after:step:1"] == "after:quote"
    assert rooted["step:2"] == "after:quote#2"
    assert rooted["after:check@wf-1/g2/1"] == "after:check"  # scoped aliases all kept
