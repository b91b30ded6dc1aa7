"""cli.render: the same words for a pipe and for a terminal, colour only on the terminal.

``reports`` writes a clean report's status line straight to the file when it is not a
terminal (rich's layout cost ~100 µs a line of ``verify --all``); on a terminal rich
prints it with its colour. Both must say the same thing.
"""

from __future__ import annotations

import re

import pytest

from histaudit.cli import render
from histaudit.verify.findings import Finding
from histaudit.verify.report import Report

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _reports() -> list[Report]:
    bad = Finding.make("seq-gap", "wf-2", 3, "entry 3 follows entry 1")
    return [Report(instance_id="wf-1", entries=4, mode="default"),
            Report(instance_id="wf-\x1b[31m", entries=2, mode="full", findings=(bad,))]


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_reports_say_the_same_on_a_pipe_and_a_terminal(
        terminal: bool, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    render.reports(_reports())
    out = capsys.readouterr().out
    assert ("\x1b[" in out) is terminal
    lines = _ANSI.sub("", out).splitlines()
    assert lines[0] == "instance wf-1: 4 entries, default check — OK"
    # the stored instance name's ESC is shown escaped, never sent to the terminal raw
    assert lines[1] == "instance wf-\\x1b[31m: 2 entries, full check — FAILED"
    assert any("seq-gap" in line and "entry 3 follows entry 1" in line for line in lines)
