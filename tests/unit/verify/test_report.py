"""verify.report.Report: truthiness, thresholds, raising, and its JSON document."""

from __future__ import annotations

import pytest

from histaudit.errors import HistauditError, UsageError, VerificationError
from histaudit.verify.findings import CODES, Finding, Severity
from histaudit.verify.report import MODES, Report, Scope, mode_json


def _finding(code: str, seq: int | None = 1) -> Finding:
    return Finding.make(code, "wf-1", seq, f"{code} at {seq}")


def _report(*codes: str) -> Report:
    return Report(instance_id="wf-1", entries=3, mode="default",
                  findings=tuple(_finding(c, n) for n, c in enumerate(codes, 1)))


def _codes_of(severity: Severity) -> list[str]:
    return sorted(c for c, code in CODES.items() if code.severity == severity)


def test_report_without_findings_is_ok_and_truthy() -> None:
    report = _report()
    assert report.ok and bool(report) is True
    assert report.failing(Severity.INFO) == []
    assert report.codes() == set()
    report.raise_for_findings()
    report.raise_for_findings(Severity.INFO)
    doc = report.to_json()
    assert doc == {"instance": "wf-1", "scope": "instance", "ok": True, "entries": 3,
                   "mode": "default", "findings": []}


def test_report_json_mode_is_one_of_the_closed_set() -> None:
    """The display parts of a mode stay out of JSON: a proof's sizes, spaces."""
    assert mode_json("consistency 4->9") == "consistency"
    assert mode_json("leaf index") == "leaf-index"
    assert mode_json("default+engine") == "default+engine"
    assert mode_json("consistency 4->9+witness policy") == "consistency+witness-policy"
    report = Report(instance_id="(ledger)", entries=9, mode="consistency 4->9",
                    scope=Scope.LEDGER)
    assert report.to_json()["mode"] == "consistency" and report.mode == "consistency 4->9"
    assert {mode_json(m) for m in MODES} == set(MODES)


def test_report_with_an_error_is_falsy_and_raises() -> None:
    error = _codes_of(Severity.ERROR)[0]
    report = _report(error)
    assert not report.ok and bool(report) is False
    assert [f.code for f in report.failing(Severity.ERROR)] == [error]
    with pytest.raises(VerificationError) as info:
        report.raise_for_findings()
    assert isinstance(info.value, HistauditError)
    assert info.value.report is report
    assert error in str(info.value) and "wf-1" in str(info.value)
    assert report.to_json()["ok"] is False
    assert report.to_json()["findings"][0]["severity"] == "error"


def test_failing_applies_the_threshold() -> None:
    error, warning, info = (_codes_of(s)[0] for s in
                            (Severity.ERROR, Severity.WARNING, Severity.INFO))
    report = _report(info, warning, error)
    assert [f.code for f in report.failing(Severity.ERROR)] == [error]
    assert [f.code for f in report.failing(Severity.WARNING)] == [warning, error]
    assert [f.code for f in report.failing(Severity.INFO)] == [info, warning, error]
    assert report.codes() == {info, warning, error}


def test_warnings_and_infos_keep_a_report_ok_unless_the_threshold_is_lowered() -> None:
    warning, info = _codes_of(Severity.WARNING)[0], _codes_of(Severity.INFO)[0]
    report = _report(warning, info)
    assert report.ok and bool(report)
    report.raise_for_findings()  # default threshold: errors only
    with pytest.raises(VerificationError, match=warning):
        report.raise_for_findings(Severity.WARNING)
    info_only = _report(info)
    info_only.raise_for_findings(Severity.WARNING)
    with pytest.raises(VerificationError):
        info_only.raise_for_findings(Severity.INFO)


@pytest.mark.parametrize("threshold", [Severity.ERROR + 1, 99, 30, None, "fatal"])
def test_a_threshold_that_is_no_severity_is_refused(threshold: object) -> None:
    """Issue #50 item 8, widened: every threshold of a report is checked as
    ``Verdict.passes``'s is (an int above every severity would fail nothing)."""
    report = _report("body-changed")
    with pytest.raises(UsageError, match="threshold must be a Severity"):
        report.failing(threshold)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="threshold must be a Severity"):
        report.raise_for_findings(threshold)  # type: ignore[arg-type]
    assert report.failing("error") == report.failing(Severity.ERROR) != []
    with pytest.raises(UsageError, match="unknown severity"):
        Severity.parse(None)  # type: ignore[arg-type]
