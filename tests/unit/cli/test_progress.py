"""The progress helper's switches: a TTY and $HISTAUDIT_PROGRESS decide; nothing is drawn
before the delay; the bar goes to its stream only, and erases itself."""

from __future__ import annotations

import io
import re
import time

import pytest

from histaudit.cli.progress import PROGRESS_ENV, Meter, wanted


class Terminal(io.StringIO):
    """A stream that says it is a terminal; :meth:`text` is what it shows, colours off."""

    def isatty(self) -> bool:
        return True

    def text(self) -> str:
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.getvalue())


def test_drawn_only_on_a_terminal_and_not_when_turned_off() -> None:
    assert wanted(Terminal(), env={})
    assert wanted(Terminal(), env={PROGRESS_ENV: "1"})
    assert not wanted(Terminal(), env={PROGRESS_ENV: "0"})
    assert not wanted(Terminal(), env={PROGRESS_ENV: " 0 "})
    assert not wanted(io.StringIO(), env={})  # a pipe, a file, CI
    closed = io.StringIO()
    closed.close()
    assert not wanted(closed, env={})  # isatty raises ValueError


def test_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "0")
    meter = Meter("work", stream=Terminal())
    assert not meter.enabled and meter.callback is None


def test_nothing_is_drawn_when_disabled() -> None:
    out = Terminal()
    with Meter("work", enabled=False, delay=0, stream=out) as meter:
        assert meter.callback is None
        assert list(meter.count(range(3))) == [0, 1, 2]
        time.sleep(0.1)
    assert not meter.shown and out.getvalue() == ""


def test_quick_work_ends_before_the_delay_and_draws_nothing() -> None:
    out = Terminal()
    with Meter("work", total=10, enabled=True, delay=0.5, stream=out) as meter:
        assert meter.callback is meter
        for n in range(10):
            meter(n + 1)
    assert not meter.shown and out.getvalue() == ""
    time.sleep(0.6)  # the cancelled timer does not draw later either
    assert not meter.shown and out.getvalue() == ""


def _wait_shown(meter: Meter) -> None:
    deadline = time.monotonic() + 10
    while not meter.shown and time.monotonic() < deadline:
        time.sleep(0.01)
    assert meter.shown


def test_long_work_draws_a_bar_with_counts_after_the_delay() -> None:
    out = Terminal()
    with Meter("verifying", total=200, enabled=True, delay=0.05, stream=out) as meter:
        _wait_shown(meter)
        for n in range(0, 201, 50):
            meter(n)
            time.sleep(0.15)
    text = out.text()
    assert "verifying" in text and "200/200 entries" in text


def test_unknown_total_is_a_spinner_with_counts_and_a_late_total_is_taken() -> None:
    out = Terminal()
    with Meter("reading", enabled=True, delay=0.0, stream=out) as meter:
        _wait_shown(meter)
        meter(7)
        time.sleep(0.25)
        meter(8, 16)
        time.sleep(0.25)
    assert meter.total == 16
    assert "reading" in out.text() and "8/16" in out.text()


def test_without_counts_only_the_description_and_time() -> None:
    out = Terminal()
    with Meter("verifying job-1 (9 entries)", counts=False, enabled=True, delay=0.0,
               stream=out) as meter:
        _wait_shown(meter)
        time.sleep(0.25)
    text = out.text()
    assert "verifying job-1 (9 entries)" in text and "/" not in text
