"""The fixed sets the ``--json`` schemas (schemas/*.output.schema.json) list are the code's:
finding codes and severities, report scopes and modes, list statuses, replay outcomes and
statuses, crash-matrix statuses. A code or
status added in src/ without the schema (or the reverse) fails here, not in a consumer."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from histaudit.bundle.usage import ENDED
from histaudit.cli.ledger import ListStatus
from histaudit.crashtest.results import CrashKind, Outcome
from histaudit.ledger.timeline import PayloadState
from histaudit.replay import result as replay_result
from histaudit.replay.batch import ItemStatus
from histaudit.replay.signed import OutputStatus
from histaudit.verify.findings import CODES, Severity
from histaudit.verify.report import MODES, Scope
from support.repo import SCHEMAS


def schema(name: str) -> Any:
    return json.loads((SCHEMAS / f"{name}.output.schema.json").read_bytes())


def enum_at(name: str, *path: str) -> set[Any]:
    node = schema(name)
    for key in path:
        node = node[key]
    return set(node["enum"])


def test_every_finding_code_is_one_the_schema_takes() -> None:
    """The codes are an open set (a release may add one: issue #51), so the schema gives
    their form, not their list; each of this release's codes has that form, and a code of
    another form does not."""
    pattern = re.compile(schema("finding")["properties"]["code"]["pattern"])
    assert all(pattern.fullmatch(code) for code in CODES)
    assert not any(pattern.fullmatch(bad) for bad in ("", "Body-Changed", "seq_gap",
                                                       "-gap", "gap-", "a--b", "a b"))


@pytest.mark.parametrize(("name", "path", "expected"), [
    ("finding", ("properties", "severity"), {str(s) for s in Severity}),
    ("report", ("properties", "scope"), {str(s) for s in Scope}),
    ("report", ("properties", "mode"), set(MODES)),
    ("list", ("items", "properties", "status"), {str(s) for s in ListStatus}),
    ("replay", ("$defs", "item", "properties", "status"), {str(s) for s in ItemStatus}),
    ("replay", ("$defs", "replay", "properties", "outcome"), set(replay_result.OUTCOMES)),
    ("replay", ("$defs", "output_check", "properties", "status"),
     {str(s) for s in OutputStatus}),
    ("replay", ("$defs", "divergence", "properties", "kind"),
     {replay_result.DIFFERENT_ACTIVITY, replay_result.DIFFERENT_INPUT,
      replay_result.DIFFERENT_ORDER, replay_result.DIFFERENT_OUTCOME,
      replay_result.NONDETERMINISM_ERROR}),
    ("crashtest", ("$defs", "point", "properties", "outcome"), {str(o) for o in Outcome}),
    ("crashtest", ("$defs", "point", "properties", "kind"), {str(k) for k in CrashKind}),
    ("show", ("$defs", "payload", "properties", "state"),
     {PayloadState.KEPT, PayloadState.ERASED, PayloadState.ABSENT, PayloadState.MISMATCH}),
    ("show", ("$defs", "run", "properties", "ended"), set(ENDED)),
])
def test_schema_enums_are_the_codes(name: str, path: tuple[str, ...],
                                    expected: set[str]) -> None:
    assert enum_at(name, *path) == expected


def test_replay_summary_counts_every_item_status() -> None:
    summary = schema("replay")["$defs"]["batch"]["properties"]["summary"]
    assert {str(s) for s in ItemStatus} <= set(summary["required"])


def test_replay_outcomes_cover_every_status_the_replayer_names() -> None:
    """Every orchestration status word, the SDK's refusal and an unknown status map into
    the closed set; the display words themselves stay out of JSON."""
    from histaudit.replay.describe import STATUS

    assert {replay_result.outcome_json(w) for w in STATUS.values()} <= set(
        replay_result.OUTCOMES)
    assert replay_result.outcome_json("refused by the SDK") == "refused"
    assert replay_result.outcome_json("status 42") == "unknown"


def test_every_finding_key_is_required() -> None:
    """Finding.to_json always writes every key (null where it does not apply)."""
    from histaudit.verify.findings import Finding

    finding = schema("finding")
    keys = set(Finding.make("link-broken", "i", 1, "m").to_json())
    assert keys == set(finding["required"]) == set(finding["properties"])
