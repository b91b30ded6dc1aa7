"""The crash matrix: crash a workflow at every point it reaches, recover, and compare.

See :mod:`histaudit.crashtest.matrix` for how a matrix runs and what its outcomes mean;
:mod:`histaudit.crashtest.engine` runs the real workflow engine as a child process.
"""

from .matrix import (
    DIVERGED,
    FAILED,
    FINDINGS,
    IDENTICAL,
    KIND_APP,
    KIND_ENGINE,
    OUTCOMES,
    STUCK,
    CleanRun,
    MatrixResult,
    PointResult,
    assert_no_duplicate_effects,
    assert_recovered,
    declared_points,
    json_report,
    junit_xml,
    number_points,
    parse_env,
    parse_input,
    render,
    run_clean,
    run_matrix,
    run_point,
)

__all__ = ["DIVERGED", "FAILED", "FINDINGS", "IDENTICAL", "KIND_APP", "KIND_ENGINE",
           "OUTCOMES", "STUCK", "CleanRun", "MatrixResult", "PointResult",
           "assert_no_duplicate_effects", "assert_recovered", "declared_points", "json_report",
           "junit_xml", "number_points",
           "parse_env", "parse_input", "render", "run_clean", "run_matrix", "run_point"]
