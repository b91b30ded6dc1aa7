"""replay.history: golden history files load, save byte for byte, and refuse bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from examples.nondeterminism import workflows
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.errors import InputError
from histaudit.replay import HISTORY_FORMAT, History, replay
from support.repo import ORDER_HISTORY, read_json, write_file

ORDER = ORDER_HISTORY


def _bad_files() -> dict[str, Any]:
    text = ORDER.read_text()
    doc = read_json(ORDER)
    missing_event = {**doc, "events": doc["events"][:-1]}
    unknown_field = json.loads(text)
    unknown_field["events"][2]["taskScheduled"]["nonsense"] = 1
    wrong_type = json.loads(text)
    wrong_type["events"][2]["eventId"] = "three"
    no_type = json.loads(text)
    no_type["events"][3] = {"eventId": 1}
    renamed = json.loads(text)
    renamed["workflow"] = "dice"
    return {
        "truncated": text[: len(text) // 2],
        "garbled": text.replace('"events"', '"events" "'),
        "binary": "\x00\x01\x02",
        "not an object": "[1, 2]",
        "unknown version": {**doc, "version": 2},
        "version as string": {**doc, "version": "1"},
        "version as bool": {**doc, "version": True},
        "other format": {**doc, "format": "something-else"},
        "event removed": missing_event,
        "events not a list": {**doc, "events": {}},
        "unknown field": unknown_field,
        "wrong field type": wrong_type,
        "event without a type": no_type,
        "header names another workflow": renamed,
    }


@pytest.mark.parametrize("case", sorted(_bad_files()))
def test_bad_history_file_is_input_error(tmp_path: Path, case: str) -> None:
    path = write_file(tmp_path / "h.json", _bad_files()[case])
    with pytest.raises(InputError, match=str(path)):
        _ = History.load(path).events
    with pytest.raises(InputError):
        replay(path, workflows.order)


def test_missing_history_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="No such file"):
        _ = History.load(tmp_path / "nope.json").events
    with pytest.raises(InputError):
        _ = History.load(tmp_path).events  # a directory


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    events = History.load(ORDER).events
    out = History.of(events).save(tmp_path / "sub" / "copy.json")
    again = History.load(out).events
    assert [e.SerializeToString(deterministic=True) for e in again] == \
        [e.SerializeToString(deterministic=True) for e in events]
    assert History.of(again).save(tmp_path / "copy2.json").read_bytes() == out.read_bytes()
    assert out.read_bytes() == ORDER.read_bytes()  # the golden files are in this exact form
    doc = read_json(out)
    assert doc["format"] == HISTORY_FORMAT and doc["version"] == 1 and doc["count"] == 12


# --- edited histories: a finding or an input error, never a traceback ---------------------

def _golden_events() -> list[dict[str, Any]]:
    return list(read_json(ORDER)["events"])


_EVENT_EDITS = st.sampled_from(["delete", "duplicate", "swap", "id", "scheduled-id",
                                "name", "input", "result", "timestamp", "type"])
_ODD_INTS = st.sampled_from([-1, 0, 1, 2, 3, 4, 99, -(1 << 31), (1 << 31) - 1])
_ODD_TEXT = st.one_of(st.sampled_from(["", "null", "{", '"x"', "reserve", "charge", "ship",
                                       "order", "\u0000", "9" * 400]), st.text(max_size=8))


@st.composite
def _edited(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The golden order history with one to four edits an attacker or a bad export makes:
    events dropped, repeated or reordered, ids and names and payloads changed."""
    events = json.loads(json.dumps(_golden_events()))
    for _ in range(draw(st.integers(1, 4))):
        if not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        what = draw(_EVENT_EDITS)
        body = next(v for k, v in events[i].items() if k not in ("eventId", "timestamp",
                                                                 "router"))
        if what == "delete":
            del events[i]
        elif what == "duplicate":
            events.insert(draw(st.integers(0, len(events))), json.loads(json.dumps(events[i])))
        elif what == "swap":
            j = draw(st.integers(0, len(events) - 1))
            events[i], events[j] = events[j], events[i]
        elif what == "id":
            events[i]["eventId"] = draw(_ODD_INTS)
        elif what == "timestamp":
            events[i]["timestamp"] = draw(st.sampled_from(
                ["1970-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
                 "2026-11-29T15:12:30Z"]))
        elif what == "type":  # the same body under another event type
            kind = next(k for k in events[i] if k not in ("eventId", "timestamp", "router"))
            other = draw(st.sampled_from(["taskScheduled", "taskCompleted", "taskFailed",
                                          "executionCompleted", "timerFired", "eventRaised"]))
            events[i][other] = events[i].pop(kind)
        elif isinstance(body, dict):
            field = {"scheduled-id": "taskScheduledId", "name": "name", "input": "input",
                     "result": "result"}[what]
            body[field] = draw(_ODD_INTS if field == "taskScheduledId" else _ODD_TEXT)
    return events


@settings(max_examples=300, deadline=None)
@given(events=_edited())
def test_an_edited_history_replays_to_a_verdict_or_is_an_input_error(
        tmp_path_factory: pytest.TempPathFactory, events: list[dict[str, Any]]) -> None:
    doc = {**read_json(ORDER), "events": events, "count": len(events)}
    path = write_file(tmp_path_factory.mktemp("edited") / "h.json", doc)
    try:
        result = replay(path, workflows.order)
    except InputError as exc:
        error = str(exc)
    else:
        error = ""
    if error:
        assert "\n" not in error, error
        return
    assert result.outcome  # replay gave its verdict (ok, or the step where it diverged)
    if events == _golden_events():
        assert result.ok


def test_a_timer_is_described_by_what_it_is_for() -> None:
    """The SDK waits for an event with no timeout by a timer due in year 9999: a waiting
    replay names the event instead (issue #39)."""
    from histaudit import sdk
    from histaudit.replay.describe import describe_event

    def timer(seconds: int, **origin: Any) -> Any:
        event = sdk.protos.HistoryEvent(eventId=3)
        event.timerCreated.fireAt.FromSeconds(seconds)
        for name, value in origin.items():
            getattr(event.timerCreated, name).CopyFrom(value)
        return event

    forever = 253402300799  # 9999-12-31T23:59:59Z
    approved = sdk.protos.TimerOriginExternalEvent(name="approved")
    assert describe_event(timer(forever, externalEvent=approved)) == \
        "waiting for event 'approved' (no timeout) (step #3)"
    assert describe_event(timer(1_800_000_000, externalEvent=approved)) == \
        "waiting for event 'approved', timing out at 2027-01-15T08:00:00Z (step #3)"
    assert describe_event(timer(1_800_000_000)) == \
        "timer firing at 2027-01-15T08:00:00Z (step #3)"
