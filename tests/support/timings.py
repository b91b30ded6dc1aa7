"""Where the suite's time goes, and a budget per test file so it cannot quietly grow back.

A pytest plugin (loaded by ``tests/conftest.py``). On each worker it measures every test's
CPU — the worker's own and that of the child processes it reaped (engines, apps, CLI runs)
— and sends it to the controller on the teardown report. The controller sums wall and CPU
per test file, prints the ten slowest tests and the slowest files after the run, writes
every figure to ``--timings-json`` when given, and names every file that passes its
budget: 120 CPU seconds, or five times that in wall time, scaled by how slow this machine
is. Naming is all ``make test`` does (a report, never a failure: a timing must not fail CI
on a slower or busier machine); ``--file-budget SECONDS`` (or ``HISTAUDIT_FILE_BUDGET``)
makes a file over it **fail the run**, unscaled, for whoever wants the guard enforced.

The scale: a fixed CPU workload (:func:`calibrate`) is timed at the start and the end of
the run on the controller; its slower time divided by the time it took on the machine the
budget was set on (:data:`REFERENCE_CALIBRATION_S`) is the factor, never below 1. On the
machine of issue 54 (2 cores at load 6-11) files cost up to 1.4x their CPU on a quiet one;
the workload, run in the same contention, grows with it.

Why CPU: the suite is CPU-bound (on 2 cores the run's wall is ≈ its CPU ÷ 2), and a
file's summed wall under xdist is about twice its CPU even on an idle machine, and more
under load — a wall budget would either fail a loaded CI or let a file double unseen. CPU
hardly moves with load. The wall limit catches a file that sleeps or waits its time away.
Wall is the sum of the file's tests' setup + call + teardown, as pytest's ``--durations``
counts them. CPU is the worker's own, its reaped children's (engines, apps, CLI runs) and
the forked commands' (:func:`support.cli.forked_cpu_s`). The last test on a worker also
tears down that worker's session fixtures, among them its PostgreSQL server, whose CPU
over the whole run is reaped then: that teardown is measured on its own and printed as the
workers' session teardown, charged to no file. (Before, it was charged to whichever file
ran last — tests/unit/witness/test_policy.py, 158 s of CPU in a CI run for 1 s of its
own, issue 54.)
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from support.cli import forked_cpu_s

DEFAULT_FILE_BUDGET_S = 120.0
WALL_PER_CPU_BUDGET = 5.0
REFERENCE_CALIBRATION_S = 0.25
"""CPU seconds :func:`calibrate` took on the 2-core machine the budget was set on
(0.24-0.26 over five runs, one core busy with a build, 2026-12-07)."""


def calibrate() -> float:
    """CPU seconds of a fixed workload (interpreter loop and hashing, as the suite spends)."""
    began = time.process_time()
    digest = hashlib.sha256()
    block = b"x" * 65536
    x = 0
    for i in range(3_000_000):
        x = (x * 31 + i) % 1_000_003
    for _ in range(3000):
        digest.update(block)
    return time.process_time() - began
_CPU_KEY = pytest.StashKey[float]()
_LAST_KEY = pytest.StashKey[float]()
_LAST_WALL_KEY = pytest.StashKey[float]()


def _cpu_now() -> float:
    """This process's CPU plus that of the children it has reaped and of the commands
    forked for it (:mod:`support.cli`), in seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
            + forked_cpu_s())


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("histaudit timings")
    group.addoption("--file-budget", type=float, default=None, metavar="SECONDS",
                    help="fail the run when one test file's summed CPU time passes this, or "
                         f"its wall time {WALL_PER_CPU_BUDGET:.0f} times this (env "
                         "HISTAUDIT_FILE_BUDGET; 0: no check). Without it, files over "
                         f"{DEFAULT_FILE_BUDGET_S:.0f} s scaled by the machine's speed are "
                         "named, and the run's outcome is left alone")
    group.addoption("--file-budget-report", type=float, default=DEFAULT_FILE_BUDGET_S,
                    metavar="SECONDS", help="the budget named without failing (scaled by "
                    f"the calibration; default {DEFAULT_FILE_BUDGET_S:.0f})")
    group.addoption("--timings-json", default=None, metavar="PATH",
                    help="write every test's wall and CPU seconds, and each file's sums, here")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_KEY] = _cpu_now()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is None:  # the worker's last test: its teardown ends the session's fixtures
        item.stash[_LAST_KEY] = _cpu_now()
        item.stash[_LAST_WALL_KEY] = time.monotonic()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and _CPU_KEY in item.stash:
        now = _cpu_now()
        before = item.stash.get(_LAST_KEY, now)
        report.user_properties.append(("cpu_s", before - item.stash[_CPU_KEY]))
        if now > before:
            report.user_properties.append(("session_cpu_s", now - before))
        if _LAST_WALL_KEY in item.stash:  # the session's teardown: its wall is no file's
            session_wall = min(report.duration, time.monotonic() - item.stash[_LAST_WALL_KEY])
            report.duration -= session_wall
            report.user_properties.append(("session_wall_s", session_wall))


class _Totals:
    """What the controller collects from the reports (workers send theirs to it)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.started = time.monotonic()
        self.calibrations: list[float] = []
        self.session_cpu = 0.0
        self.session_wall = 0.0

    def factor(self) -> float:
        """How much slower this machine ran the workload than the reference (>= 1)."""
        if not self.calibrations:
            return 1.0
        return max(1.0, max(self.calibrations) / REFERENCE_CALIBRATION_S)

    def add(self, report: pytest.TestReport) -> None:
        self.wall[report.nodeid] += report.duration
        for key, value in report.user_properties:
            if key == "cpu_s":
                self.cpu[report.nodeid] += float(value)
            elif key == "session_cpu_s":
                self.session_cpu += float(value)
            elif key == "session_wall_s":
                self.session_wall += float(value)

    def per_file(self) -> dict[str, tuple[float, float, int]]:
        files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for nodeid, wall in self.wall.items():
            row = files[nodeid.split("::", 1)[0]]
            row[0] += wall
            row[1] += self.cpu.get(nodeid, 0.0)
            row[2] += 1
        return {f: (w, c, int(n)) for f, (w, c, n) in files.items()}


def _enforced(config: pytest.Config) -> float | None:
    """The budget that fails the run (``--file-budget``), or None: report only."""
    given = config.getoption("--file-budget")
    if given is None and os.environ.get("HISTAUDIT_FILE_BUDGET"):
        given = float(os.environ["HISTAUDIT_FILE_BUDGET"])
    return None if given is None else float(given)


def _budget(config: pytest.Config) -> float:
    enforced = _enforced(config)
    if enforced is not None:
        return enforced
    return float(config.getoption("--file-budget-report")) * _CURRENT.factor()


_CURRENT = _Totals()


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput") and _enforced(session.config) is None:
        _CURRENT.calibrations.append(calibrate())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the controller this sees every worker's reports; on a worker, its own (unused).
    _CURRENT.add(report)


def _over_budget(config: pytest.Config) -> list[str]:
    """One line for each file over its budget."""
    budget = _budget(config)
    if budget <= 0:
        return []
    over = []
    for name, (wall, cpu, _) in sorted(_CURRENT.per_file().items()):
        if cpu > budget:
            over.append(f"{name} took {cpu:.0f} s of CPU, over the {budget:g} s a file "
                        "may take")
        elif wall > budget * WALL_PER_CPU_BUDGET:
            over.append(f"{name} took {wall:.0f} s of wall time, over the "
                        f"{budget * WALL_PER_CPU_BUDGET:.0f} s a file may take")
    return over


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _CURRENT.wall:
        return
    if _enforced(config) is None:
        _CURRENT.calibrations.append(calibrate())
    write = terminalreporter.write_line
    elapsed = time.monotonic() - _CURRENT.started
    files = _CURRENT.per_file()
    write("")
    write(f"histaudit timings: {len(_CURRENT.wall)} tests, {elapsed:.0f} s wall for the run; "
          f"summed over tests {sum(_CURRENT.wall.values()):.0f} s wall, "
          f"{sum(_CURRENT.cpu.values()):.0f} s CPU; the workers' session teardown "
          f"(their PostgreSQL servers, reaped at the end) {_CURRENT.session_cpu:.0f} s CPU")
    write("slowest tests (wall s, CPU s):")
    for nodeid, wall in sorted(_CURRENT.wall.items(), key=lambda kv: -kv[1])[:10]:
        write(f"  {wall:7.1f} {_CURRENT.cpu.get(nodeid, 0.0):7.1f}  {nodeid}")
    scale = ("enforced" if _enforced(config) is not None else
             f"reported only; calibration {', '.join(f'{c:.2f}' for c in _CURRENT.calibrations)}"
             f" s against {REFERENCE_CALIBRATION_S} s, factor {_CURRENT.factor():.2f}")
    write(f"slowest files (wall s, CPU s, tests; budget {_budget(config):.0f} s of CPU, "
          f"{scale}):")
    for name, (wall, cpu, count) in sorted(files.items(), key=lambda kv: -kv[1][0])[:15]:
        write(f"  {wall:7.1f} {cpu:7.1f} {count:5d}  {name}")
    path = config.getoption("--timings-json")
    if path:
        Path(path).write_text(json.dumps({
            "elapsed_s": elapsed,
            "session_teardown_cpu_s": _CURRENT.session_cpu,
            "session_teardown_wall_s": _CURRENT.session_wall,
            "tests": {n: {"wall_s": w, "cpu_s": _CURRENT.cpu.get(n, 0.0)}
                      for n, w in sorted(_CURRENT.wall.items())},
            "files": {f: {"wall_s": w, "cpu_s": c, "tests": n}
                      for f, (w, c, n) in sorted(files.items())},
        }, indent=1))
    verdict = "FAILED budget" if _enforced(config) is not None else "OVER budget (reported)"
    for line in _over_budget(config):
        write(f"{verdict}: {line} (tests/support/timings.py; split it, or move its "
              "largest sizes to make test-long)", red=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or _enforced(session.config) is None:
        return
    if _over_budget(session.config) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
