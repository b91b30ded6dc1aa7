"""Offline replay of golden histories recorded on the real engine — no engine needed here.

The files in tests/golden/histories/ were recorded by tests/golden/record_histories.py
from the workflows in examples/nondeterminism/workflows.py. Replaying them runs the Dapr
SDK's own orchestration executor (histaudit.replay), so these tests tell in CI whether
workflow code still replays the histories it produced, and name the difference when not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.nondeterminism import v2, workflows  # noqa: E402
from histaudit.errors import InputError  # noqa: E402
from histaudit.replay import (
    History,
    DIFFERENT_ACTIVITY,
    DIFFERENT_INPUT,
    DIFFERENT_OUTCOME,
    HISTORY_FORMAT,
    assert_replays,
    replay,
    )

GOLDEN = ROOT / "tests" / "golden" / "histories"
ORDER = GOLDEN / "order.json"


def _doc(path: Path = ORDER) -> dict[str, Any]:
    return json.loads(path.read_text())


def _write(tmp_path: Path, doc: Any, name: str = "h.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


# --- deterministic code replays its own history ------------------------------------------

@pytest.mark.parametrize("stem", ["order", "approval"])
def test_deterministic_workflow_replays_its_golden_history(stem: str) -> None:
    result = assert_replays(GOLDEN / f"{stem}.json", getattr(workflows, stem))
    assert result.ok and result.divergence is None and result.divergences == ()
    assert result.outcome == "completed"
    assert result.events == _doc(GOLDEN / f"{stem}.json")["count"]
    assert result.instance_id == f"golden-{stem}"
    assert "OK" in result.explain()


def test_a_refactoring_that_keeps_the_steps_replays() -> None:
    assert replay(ORDER, v2.order_refactored, "golden-order").ok


def test_workflow_may_be_given_as_mapping_or_runtime() -> None:
    import dapr.ext.workflow as wf

    assert replay(History.load(ORDER).events, {"order": workflows.order}).ok
    runtime = wf.WorkflowRuntime(host="127.0.0.1", port="1")
    runtime.register_workflow(v2.order_new_input)
    assert replay(ORDER, runtime).divergence.kind == DIFFERENT_INPUT  # type: ignore[union-attr]


def test_replay_leaves_the_function_registrable() -> None:
    """Replay must not mark the user's function as registered (the SDK refuses twice)."""
    import dapr.ext.workflow as wf

    assert replay(ORDER, workflows.order).ok
    assert replay(ORDER, workflows.order).ok
    wf.WorkflowRuntime(host="127.0.0.1", port="1").register_workflow(v2.order_refactored)


# --- changed code: one divergence of each kind, both sides shown ---------------------------

EXPECTED_SIDES = {  # variant -> (kind, text in the history side, text in the code side)
    "order_new_activity": ("different-activity", "activity 'charge'", "activity 'authorize'"),
    "order_new_input": ("different-input", '"amount": 42}', '"amount": 4200}'),
    "order_swapped": ("different-order", "activity 'reserve'", "activity 'charge'"),
    "order_new_result": ("different-outcome", '"at": "', '"status": "shipped"'),
    "order_timer_first": ("nondeterminism-error", "activity 'reserve'", "timer firing at"),
}


@pytest.mark.parametrize("variant", sorted(EXPECTED_SIDES))
def test_changed_code_diverges_with_a_clear_explanation(variant: str) -> None:
    kind, history_side, code_side = EXPECTED_SIDES[variant]
    assert v2.VARIANTS[variant] == kind
    result = replay(ORDER, getattr(v2, variant), "golden-order")
    assert not result.ok and not bool(result)
    d = result.divergence
    assert d is not None and d.kind == kind
    assert history_side in d.expected and code_side in d.actual, d
    assert code_side not in d.expected
    text = result.explain()
    assert f"DIVERGED: {kind}" in text and d.expected in text and d.actual in text
    doc = result.to_json()
    assert doc["ok"] is False and doc["divergence"]["kind"] == kind
    json.dumps(doc)  # serialisable as is
    with pytest.raises(AssertionError, match=kind):
        assert_replays(ORDER, getattr(v2, variant))


def test_the_sdk_would_miss_a_changed_input_but_replay_does_not() -> None:
    d = replay(ORDER, v2.order_new_input).divergence
    assert d is not None and d.event_id == 2 and d.index == 5
    assert "SDK does not check inputs" in d.message


def test_code_that_ends_early_is_a_different_outcome() -> None:
    def order(ctx: Any, o: dict[str, Any]) -> Generator[Any, Any, str]:
        yield ctx.call_activity(workflows.reserve, input=o)
        return "done early"

    d = replay(ORDER, order).divergence
    assert d is not None and d.kind == DIFFERENT_OUTCOME and d.event_id == 2
    assert "activity 'charge'" in d.expected and "done early" in d.actual


def test_code_that_goes_on_after_the_recorded_end_is_a_different_outcome() -> None:
    def order(ctx: Any, o: dict[str, Any]) -> Generator[Any, Any, Any]:
        result = yield from workflows.order(ctx, o)
        yield ctx.call_activity(workflows.ship, input="again")
        return result

    d = replay(ORDER, order).divergence
    assert d is not None and d.kind == DIFFERENT_OUTCOME
    assert "workflow completed" in d.expected and "activity 'ship'" in d.actual


def test_a_running_history_replays_clean_as_running() -> None:
    events = History.load(ORDER).events[:-3]  # drop the last turn: still waiting for ship
    result = replay(events, workflows.order)
    assert result.ok and result.outcome == "running"


def test_code_with_more_steps_than_a_running_history_diverges() -> None:
    events = History.load(ORDER).events[:-3]
    events = [e for e in events if e.eventId != 3]  # the history never scheduled ship
    d = replay(events, workflows.order).divergence
    assert d is not None and d.kind == DIFFERENT_ACTIVITY and "activity 'ship'" in d.actual


# --- non-deterministic code -----------------------------------------------------------------

def test_wall_clock_branch_diverges_once_the_clock_moved_on() -> None:
    doc = _doc(GOLDEN / "wall_clock.json")
    started = next(e for e in doc["events"] if "executionStarted" in e)
    deadline = datetime.fromisoformat(json.loads(started["executionStarted"]["input"])["deadline"])
    assert datetime.now(UTC) > deadline, "re-recorded seconds ago: run again in a moment"
    d = replay(GOLDEN / "wall_clock.json", workflows.wall_clock).divergence
    assert d is not None and d.kind == DIFFERENT_ACTIVITY
    assert "'fast_path'" in d.expected and "'slow_path'" in d.actual


def test_random_number_in_the_workflow_body_diverges() -> None:
    d = replay(GOLDEN / "dice.json", workflows.dice).divergence
    assert d is not None and d.kind == DIFFERENT_INPUT and "activity 'roll'" in d.actual


# --- histories that cannot be replayed -------------------------------------------------------

def test_history_of_another_workflow_is_bad_input() -> None:
    with pytest.raises(InputError, match="history is of workflow 'order'.*'dice'"):
        replay(ORDER, workflows.dice)


def test_history_of_another_instance_is_bad_input() -> None:
    with pytest.raises(InputError, match="instance 'golden-order', not 'other'"):
        replay(ORDER, workflows.order, "other")


def test_empty_history_and_history_without_start_are_bad_input() -> None:
    with pytest.raises(InputError, match="empty"):
        replay([], workflows.order)
    events = [e for e in History.load(ORDER).events if not e.HasField("executionStarted")]
    with pytest.raises(InputError, match="ExecutionStarted"):
        replay(events, workflows.order)


def _bad_files() -> dict[str, Any]:
    text = ORDER.read_text()
    doc = _doc()
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
    path = _write(tmp_path, _bad_files()[case])
    with pytest.raises(InputError, match=str(path)):
        History.load(path).events
    with pytest.raises(InputError):
        replay(path, workflows.order)


def test_missing_history_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="No such file"):
        History.load(tmp_path / "nope.json").events
    with pytest.raises(InputError):
        History.load(tmp_path).events  # a directory


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    events = History.load(ORDER).events
    out = History.of(events).save(tmp_path / "sub" / "copy.json")
    again = History.load(out).events
    assert [e.SerializeToString(deterministic=True) for e in again] == \
        [e.SerializeToString(deterministic=True) for e in events]
    assert History.of(again).save(tmp_path / "copy2.json").read_bytes() == out.read_bytes()
    assert out.read_bytes() == ORDER.read_bytes()  # the golden files are in this exact form
    doc = _doc(out)
    assert doc["format"] == HISTORY_FORMAT and doc["version"] == 1 and doc["count"] == 12


# --- the command ------------------------------------------------------------------------------

_SCRIPT = Path(sys.executable).with_name("histaudit")
HISTAUDIT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "histaudit.cli"]


def run(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env.update({"COLUMNS": "200", "NO_COLOR": "1"})
    return subprocess.run([*HISTAUDIT, *map(str, args)], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=120)


def test_cli_replay_clean_diverged_and_json(tmp_path: Path) -> None:
    clean = run("replay", "golden-order", "--workflow", "examples.nondeterminism.workflows:order",
                "--history", ORDER, "--save", tmp_path / "saved.json")
    assert clean.returncode == 0 and clean.stderr == "", clean
    assert "OK" in clean.stdout
    assert (tmp_path / "saved.json").read_bytes() == ORDER.read_bytes()
    diverged = run("replay", "golden-order", "--history", ORDER,
                   "--workflow", "examples.nondeterminism.v2:order_swapped")
    assert diverged.returncode == 1 and diverged.stderr == "", diverged
    assert "DIVERGED: different-order" in diverged.stdout
    assert "history: activity 'reserve'" in diverged.stdout
    assert "code:    activity 'charge'" in diverged.stdout
    as_json = run("replay", "golden-order", "--json", "--history", ORDER,
                  "--workflow", "examples/nondeterminism/workflows.py:order")
    assert as_json.returncode == 0, as_json
    assert json.loads(as_json.stdout)["ok"] is True


@pytest.mark.parametrize(("args", "needle"), [
    (["--workflow", "examples.nondeterminism.nope:order"], "cannot import"),
    (["--workflow", "examples.nondeterminism.workflows:nope"], "has no 'nope'"),
    (["--workflow", "examples.nondeterminism.workflows:dice"], "history is of workflow 'order'"),
    (["--workflow", "no-colon"], "MODULE:FUNCTION"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "TRUNC"],
     "not valid JSON"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "MISSING"],
     "No such file"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "V2"],
     "unsupported version"),
    (["--workflow", "examples.nondeterminism.workflows:order", "--history", "ORDER",
      "--engine", "127.0.0.1:1"], "--engine HOST:PORT or --history FILE"),
    (["--workflow", "examples.nondeterminism.workflows:order"],
     "--engine HOST:PORT or --history FILE"),
])
def test_cli_replay_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    files = {"TRUNC": _write(tmp_path, ORDER.read_text()[:300], "t.json"),
             "MISSING": tmp_path / "missing.json", "ORDER": ORDER,
             "V2": _write(tmp_path, {**_doc(), "version": 99}, "v2.json")}
    if "--history" not in args and "--engine" not in args and "--workflow" in args \
            and needle != "--engine HOST:PORT or --history FILE":
        args = [*args, "--history", "ORDER"]
    args = [str(files.get(a, a)) for a in args]
    result = run("replay", "golden-order", *args)
    assert result.returncode == 2, result
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("histaudit: error: ") and needle in lines[0], \
        result.stderr
