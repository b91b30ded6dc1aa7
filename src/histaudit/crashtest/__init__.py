"""The crash matrix: crash a workflow at every point it reaches, recover, and compare.

    from histaudit import crashtest as ct

    spec = ct.CrashSpec(target="examples/triage/app.py:triage", input={"id": "T-1"})
    result = ct.run_matrix(spec, jobs=2)
    ct.render(result)

The package, one idea a module:

* :mod:`~histaudit.crashtest.spec` — :class:`CrashSpec`, what to run; ``parse_input``,
  ``parse_env``, ``parse_events``;
* :mod:`~histaudit.crashtest.matrix` — how a matrix runs: ``run_clean``, ``run_point``,
  ``run_matrix`` and the app and engine crashes of an isolated run;
* :mod:`~histaudit.crashtest.sweep` — the default mode: one instance crashed at every
  point in turn, and what it cannot vouch for confirmed in isolated runs;
* :mod:`~histaudit.crashtest.results` — the frozen results, the :class:`Outcome` of a
  crash and what each means, the assertions;
* :mod:`~histaudit.crashtest.judge` — a run's ledger evidence and its judging;
* :mod:`~histaudit.crashtest.discovery` — crash point names, their selection and
  sampling, and the declared points;
* :mod:`~histaudit.crashtest.ignore` — the output fields (JSONPaths) left out of
  comparisons;
* :mod:`~histaudit.crashtest.reports` — the table, JSON and JUnit XML;
* :mod:`~histaudit.crashtest.sandbox` — one run's engine, ledger, key and workers;
* :mod:`~histaudit.crashtest.worker` — the worker process.

The engines a run starts (durabletask-go alone, or real daprd with placement and
scheduler) come from :mod:`histaudit.testing`, the same launchers users' own tests use.
"""

from .discovery import declared_points, number_points, sample_points, select_points
from .matrix import run_clean, run_matrix, run_point
from .reports import json_report, junit_xml, render
from .results import (
    DIVERGED,
    FAILED,
    FINDINGS,
    IDENTICAL,
    KIND_APP,
    KIND_ENGINE,
    OUTCOMES,
    STUCK,
    CleanRun,
    CrashKind,
    MatrixResult,
    Outcome,
    PointResult,
    assert_no_duplicate_effects,
    assert_recovered,
)
from .spec import CrashSpec, parse_env, parse_events, parse_input

__all__ = [
    "DIVERGED", "FAILED", "FINDINGS", "IDENTICAL", "KIND_APP", "KIND_ENGINE", "OUTCOMES",
    "STUCK", "CleanRun", "CrashKind", "CrashSpec", "MatrixResult", "Outcome", "PointResult",
    "assert_no_duplicate_effects", "assert_recovered", "declared_points", "json_report",
    "junit_xml", "number_points", "parse_env", "parse_events", "parse_input", "render", "run_clean",
    "run_matrix", "run_point", "sample_points", "select_points",
]
