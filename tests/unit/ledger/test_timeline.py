"""The parts of ``histaudit show`` that are pure: kind names, ``--seq`` ranges, filters."""

from __future__ import annotations

import pytest

from histaudit.errors import UsageError
from histaudit.ledger.kinds import EFFECT_KINDS, Kind
from histaudit.ledger.timeline import EntryFilter, kinds_named, parse_seq_range


def test_a_kind_or_a_family() -> None:
    assert kinds_named("effect.done") == ("effect.done",)
    assert set(kinds_named("effect")) == set(kinds_named("effect.")) == set(EFFECT_KINDS)
    assert Kind.ACTIVITY_FAILED in kinds_named("activity")
    for bad in ("effects", "activity.bogus", "", "."):
        with pytest.raises(UsageError, match="unknown entry kind"):
            kinds_named(bad)


@pytest.mark.parametrize(("text", "bounds"), [
    ("3..5", (3, 5)), ("10..", (10, None)), ("..20", (None, 20)), ("7", (7, 7)),
    (" 4..4 ", (4, 4)),
])
def test_seq_ranges(text: str, bounds: tuple[int | None, int | None]) -> None:
    assert parse_seq_range(text) == bounds


@pytest.mark.parametrize("text", ["..", "3-5", "a..b", "1...3", "-1..2", "5..3", "0..", "",
                                  "9" * 5000, "1.." + "9" * 5000, "1" * 21,
                                  "\u0663", "1..\u0663", "\uff13"])  # Arabic-Indic, fullwidth 3
def test_bad_seq_ranges(text: str) -> None:
    with pytest.raises(UsageError, match="--seq"):
        parse_seq_range(text)


def test_filter_json_names_what_was_given() -> None:
    f = EntryFilter.parse(kinds=["effect.done"], task=3, seq="..9")
    assert f.as_json() == {"kinds": ["effect.done"], "task": 3, "activity": None,
                           "seq": {"from": None, "to": 9}}
    assert f.by_content and not EntryFilter.parse().by_content
    assert EntryFilter.parse().as_json()["seq"] is None
