"""A readable ledger holding a broken entry — malformed, or 50 MB: a finding (exit 1) or one
error line, never a crash, and the ledger unchanged; the other commands keep working.
Shared helpers: ``support/bad_input.py``.
Cost: ≈ 35 s of CPU (18 tests; the 50 MB bodies are most of it).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from histaudit.ledger import records as fmt
from support.bad_input import (
    DB_COMMANDS,
    HUGE,
    Ctx,
    append_kept_payload,
    insert_entry_row,
    last_body,
    raw_sql,
    run,
)
from support.cli import exits, one_error_line

# --- 9. a readable ledger holding a broken entry: findings, not crashes -------------------

def _body_not_json(prev: dict[str, Any]) -> bytes:
    return b"\x00\x01 this is not JSON {"


def _body_v2(prev: dict[str, Any]) -> bytes:
    doc = dict(prev, v=2, seq=prev["seq"] + 1)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _body_array(prev: dict[str, Any]) -> bytes:
    return b'[1, 2, 3]'


def _body_wrong_fields(prev: dict[str, Any]) -> bytes:
    doc = dict(prev, seq=prev["seq"] + 1, extra="field")
    del doc["kid"]
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _body_bad_utf8(prev: dict[str, Any]) -> bytes:
    return b'{"v":1,"type":"entry","kind":"\xff\xfe"}'


MALFORMED_BODIES: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "non-JSON": _body_not_json,
    "format v2": _body_v2,
    "JSON array": _body_array,
    "wrong fields": _body_wrong_fields,
    "invalid UTF-8": _body_bad_utf8,
}


@pytest.fixture
def broken_ctx(request: pytest.FixtureRequest, ledger_ctx: Ctx) -> Ctx:
    body = MALFORMED_BODIES[request.param](last_body(ledger_ctx.url, "order-1"))
    seq = insert_entry_row(ledger_ctx.url, "order-1", body)
    assert seq == 5
    return ledger_ctx


@pytest.mark.parametrize("broken_ctx", MALFORMED_BODIES, indirect=True)
def test_malformed_entry_is_a_finding_not_a_crash(broken_ctx: Ctx) -> None:
    ctx = broken_ctx
    before = ctx.state()

    r = run([*DB_COMMANDS["verify"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 1)
    (doc,) = json.loads(r.stdout)["reports"]
    assert doc["ok"] is False and doc["entries"] == 5
    assert ("entry-malformed", 5, "error") in {
        (f["code"], f["seq"], f["severity"]) for f in doc["findings"]}

    for full in ([], ["--full"]):
        r = run([*DB_COMMANDS["verify"](ctx), *full], cwd=ctx.tmp)
        exits(r, 1)
        assert "FAILED" in r.stdout and "entry-malformed" in r.stdout

    r = run([*DB_COMMANDS["verify --all"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 1)
    assert [d["ok"] for d in json.loads(r.stdout)["reports"]] == [False]

    r = run([*DB_COMMANDS["list --trust"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 0)
    (row,) = json.loads(r.stdout)
    assert row["entries"] == 5 and row["status"] == "failed" and row["findings"]["error"]
    exits(run(DB_COMMANDS["list"](ctx), cwd=ctx.tmp), 0)

    r = run(DB_COMMANDS["show"](ctx), cwd=ctx.tmp)
    exits(r, 0)
    assert "(malformed)" in r.stdout
    r = run([*DB_COMMANDS["show"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 0)
    malformed = json.loads(r.stdout)["entries"][-1]
    assert malformed["seq"] == 5 and malformed["error"]
    assert [malformed[k] for k in ("ts", "kind", "kid", "data")] == [None] * 4

    r = run(["redact", "order-1", "--seq", "5", "--field", "input", "--db", ctx.url,
             "--key", str(ctx.key)], cwd=ctx.tmp)
    one_error_line(r, "entry 5", "malformed")

    assert ctx.state() == before, "a read-only command changed the ledger"


def test_malformed_signed_head_is_a_finding(ledger_ctx: Ctx) -> None:
    ctx = ledger_ctx
    if ctx.url.startswith("sqlite"):
        raw_sql(ctx.url, "DROP TRIGGER histaudit_heads_forward",
                "UPDATE histaudit_heads SET body = X'00FF', seq = seq + 1")
    else:
        raw_sql(ctx.url, "ALTER TABLE histaudit_heads DISABLE TRIGGER USER",
                "UPDATE histaudit_heads SET body = '\\x00ff'::bytea, seq = seq + 1",
                "ALTER TABLE histaudit_heads ENABLE TRIGGER USER")
    before = ctx.state()
    r = run([*DB_COMMANDS["verify"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 1)
    (report,) = json.loads(r.stdout)["reports"]
    assert "head-invalid" in {f["code"] for f in report["findings"]}
    exits(run(DB_COMMANDS["list --trust"](ctx), cwd=ctx.tmp), 0)
    exits(run(DB_COMMANDS["show"](ctx), cwd=ctx.tmp), 0)
    assert ctx.state() == before


# --- 10. a huge payload ------------------------------------------------------------------

def _huge_not_json(prev: dict[str, Any]) -> bytes:
    return b"x" * HUGE


def _huge_json(prev: dict[str, Any]) -> bytes:
    """A well-formed, correctly linked entry whose data holds a 50 MB string."""
    prev_body = json.dumps(prev, separators=(",", ":"), sort_keys=True).encode()
    doc = dict(prev, seq=prev["seq"] + 1, leaf=prev["leaf"] + 1, kind="activity.completed",
               prev=fmt.sha256_hex(prev_body), data={"blob": "y" * HUGE, "task_id": 1})
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


HUGE_BODIES = {"50 MB non-JSON body": _huge_not_json, "50 MB JSON string": _huge_json}


@pytest.mark.parametrize("case", HUGE_BODIES)
def test_huge_entry_body(case: str, ledger_ctx: Ctx) -> None:
    ctx = ledger_ctx
    insert_entry_row(ctx.url, "order-1", HUGE_BODIES[case](last_body(ctx.url, "order-1")))
    before = ctx.state()

    started = time.monotonic()
    r = run([*DB_COMMANDS["verify"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 1)
    (doc,) = json.loads(r.stdout)["reports"]
    assert doc["entries"] == 5 and doc["ok"] is False
    codes = {f["code"] for f in doc["findings"]}
    assert codes & {"entry-malformed", "head-mismatch", "link-broken"}, codes
    assert len(r.stdout) < 100_000, "findings must not echo the payload"

    for args in (DB_COMMANDS["verify"](ctx), [*DB_COMMANDS["verify"](ctx), "--full"],
                 DB_COMMANDS["verify --all"](ctx)):
        r = run(args, cwd=ctx.tmp)
        exits(r, 1)
        assert "FAILED" in r.stdout and len(r.stdout) < 100_000

    for command in ("list", "list --trust", "show"):
        r = run(DB_COMMANDS[command](ctx), cwd=ctx.tmp)
        exits(r, 0)
        assert len(r.stdout) < 100_000, f"{command} printed {len(r.stdout)} chars"
    r = run([*DB_COMMANDS["show"](ctx), "--json"], cwd=ctx.tmp)
    exits(r, 0)
    assert len(json.loads(r.stdout)["entries"]) == 5

    r = run(["redact", "order-1", "--seq", "5", "--field", "blob", "--db", ctx.url,
             "--key", str(ctx.key)], cwd=ctx.tmp)
    one_error_line(r, "entry 5")
    assert len(r.stderr) < 1000

    assert time.monotonic() - started < 150, "a huge entry must not stall the CLI"
    assert ctx.state() == before


def test_huge_committed_payload_verifies_and_redacts(ledger_ctx: Ctx) -> None:
    """A 50 MB payload written through the library is no problem at all."""
    ctx = ledger_ctx
    append_kept_payload(ctx, 1, b"z" * HUGE)
    r = run([*DB_COMMANDS["verify"](ctx), "--full", "--json"], cwd=ctx.tmp)
    exits(r, 0)
    assert json.loads(r.stdout)["reports"][0]["findings"] == []
    r = run(["redact", "order-1", "--seq", "5", "--field", "output", "--db", ctx.url,
             "--key", str(ctx.key)], cwd=ctx.tmp)
    exits(r, 0)
    exits(run([*DB_COMMANDS["verify"](ctx), "--full"], cwd=ctx.tmp), 0)
