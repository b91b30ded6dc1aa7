"""replay.history: golden history files load, save byte for byte, and refuse bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from examples.nondeterminism import workflows

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
