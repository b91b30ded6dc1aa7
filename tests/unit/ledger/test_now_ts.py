"""``records.now_ts`` formats the date and time of day once per second: the text must be
what ``datetime`` gives for every instant, across second, day and year boundaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from histaudit.ledger import records

INSTANTS_NS = [
    1_700_000_000_999_999_999,  # the last nanosecond of a second...
    1_700_000_001_000_000_000,  # ...and the first of the next: the cached text must change
    1_700_000_001_000_000_999,  # the same microsecond: truncated, not rounded
    1_700_000_001_123_456_789,
    1_704_067_199_999_999_000,  # 2023-12-31T23:59:59.999999Z
    1_704_067_200_000_001_000,  # 2024-01-01T00:00:00.000001Z
    1_704_067_199_500_000_000,  # back in time (a clock step): the old second again
]


def _expected(ns: int) -> str:
    """datetime's own text of the instant, truncated to the microsecond (exact integers)."""
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize("order", [INSTANTS_NS, INSTANTS_NS[::-1]])
def test_now_ts_is_datetimes_text_at_every_instant(order: list[int],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    got = []
    for ns in order:
        monkeypatch.setattr(records.time, "time_ns", lambda ns=ns: ns)
        got.append(records.now_ts())
    assert got == [_expected(ns) for ns in order]
    assert got[order.index(1_704_067_200_000_001_000)] == "2024-01-01T00:00:00.000001Z"
    assert all(records._TS.fullmatch(ts) for ts in got)


def test_now_ts_agrees_with_the_clock() -> None:
    before = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ts = records.now_ts()
    after = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert before <= ts <= after
