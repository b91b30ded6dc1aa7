"""verify.findings: every stable finding code has a severity and a description."""

from __future__ import annotations

from histaudit.verify.findings import CODES, Finding, Severity


def test_every_code_has_a_severity_and_a_description() -> None:
    for code, (severity, text) in CODES.items():
        assert isinstance(severity, Severity) and text, code
        assert Finding.make(code, "i", None, "m").severity == severity
