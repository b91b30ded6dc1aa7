"""The fixed sets the ``--json`` schemas (schemas/*.output.schema.json) list are the code's:
finding codes and severities, report scopes, replay and crash-matrix statuses. A code or
status added in src/ without the schema (or the reverse) fails here, not in a consumer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from histaudit.crashtest.results import CrashKind, Outcome
from histaudit.ledger.timeline import PayloadState
from histaudit.replay import result as replay_result
from histaudit.replay.batch import ItemStatus
from histaudit.replay.signed import OutputStatus
from histaudit.verify.findings import CODES, Severity
from histaudit.verify.report import Scope
from support.repo import SCHEMAS


def schema(name: str) -> Any:
    return json.loads((SCHEMAS / f"{name}.output.schema.json").read_bytes())


def enum_at(name: str, *path: str) -> set[Any]:
    node = schema(name)
    for key in path:
        node = node[key]
    return set(node["enum"])


def test_finding_codes_are_the_verifiers() -> None:
    assert enum_at("finding", "$defs", "fields", "properties", "code") == set(CODES)


@pytest.mark.parametrize(("name", "path", "expected"), [
    ("finding", ("$defs", "fields", "properties", "severity"), {str(s) for s in Severity}),
    ("report", ("properties", "scope"), {str(s) for s in Scope}),
    ("replay", ("$defs", "replayed", "properties", "status"),
     {str(s) for s in ItemStatus} - {"error"}),
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
])
def test_schema_enums_are_the_codes(name: str, path: tuple[str, ...],
                                    expected: set[str]) -> None:
    assert enum_at(name, *path) == expected


def test_replay_summary_counts_every_item_status() -> None:
    summary = schema("replay")["$defs"]["batch"]["properties"]["summary"]
    assert {str(s) for s in ItemStatus} <= set(summary["required"])
