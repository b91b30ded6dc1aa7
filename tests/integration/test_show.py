"""``histaudit show``, run as a user runs it: filters, compact mode, payload values, bundles,
80-column tables and the errors for bad input (docs/guide.md, "Using the commands").

The ledger is built through the library (signed entries with committed payloads, as the
interceptor writes them) and then only read through the console script, on SQLite and on
PostgreSQL like the rest of the CLI tests.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import Signer, generate_keypair
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from support.bundles import edit_lines
from support.cli import cli, exits, one_error_line, verification_failed
from support.ledgers import World, committed

INSTANCE = "order-7"
ORDER = b'{"order":7,"holder":"Ada Lovelace"}'
CHARGED = b'{"charged":true,"amount":42}'
SHIPPED = b'{"tracking":"TRACK-123"}'
MAILED = b'{"message_id":"mail-1"}'
#: (seq, kind, task, activity) of the instance's entries, as built by ``_order``.
LAYOUT = [
    (1, "workflow.started", None, None),
    (2, "workflow.scheduled_activity", 1, "charge"),
    (3, "activity.started", 1, "charge"),
    (4, "activity.completed", 1, "charge"),
    (5, "workflow.scheduled_activity", 2, "ship"),
    (6, "activity.started", 2, "ship"),
    (7, "effect.intent", 2, "ship"),
    (8, "effect.done", 2, "ship"),
    (9, "activity.completed", 2, "ship"),
    (10, "workflow.completed", None, None),
]


def _order(ledger: Ledger, signer: Signer, instance: str) -> None:
    """Ten entries (``LAYOUT``): two activities, a side effect, four committed payloads."""
    def add(kind: str, data: dict[str, Any], payload: bytes | None = None,
            field: str = "output") -> None:
        rows = None
        if payload is not None:
            ref, rows = committed(payload)
            data = {**data, field: ref, f"{field}_digest": fmt.sha256_hex(payload)}
        chain.append(ledger, instance, kind, data, signer=signer, payloads=rows)

    add("workflow.started", {"workflow": "order"}, ORDER, "input")
    for task, name, out in ((1, "charge", CHARGED), (2, "ship", SHIPPED)):
        ids = {"task_id": task, "activity": name}
        add("workflow.scheduled_activity", ids)
        add("activity.started", ids)
        if name == "ship":
            effect = {**ids, "name": "email", "key": "k-1"}
            add("effect.intent", effect)
            add("effect.done", {**effect, "intent_seq": 7}, MAILED, "result")
        add("activity.completed", ids, out)
    add("workflow.completed", {"status": "COMPLETED"})


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> World:
    key, trust, signer = generate_keypair(tmp_path / "keys", name="ops")
    with Ledger.open(db_url, create=True) as ledger:
        _order(ledger, signer, INSTANCE)
    return World(tmp=tmp_path, url=db_url, signer=signer, key=key, trust=trust)


def show(w: World, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return cli("show", *args, "--db", w.url, cwd=w.tmp, env=env)


def shown(w: World, *args: str) -> dict[str, Any]:
    r = show(w, INSTANCE, *args, "--json")
    exits(r)
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def seqs(doc: dict[str, Any]) -> list[int]:
    return [e["seq"] for e in doc["entries"]]


NO_FILTERS = {"kinds": None, "task": None, "activity": None, "seq": None}


# --- filters ---------------------------------------------------------------------------------

def test_no_filter_keeps_the_json_shape_and_adds_hashes_and_filters(world: World) -> None:
    doc = shown(world)
    assert set(doc) == {"instance", "entries", "filters", "usage"}
    assert doc["instance"] == INSTANCE and doc["filters"] == NO_FILTERS
    # an order workflow: no LLM call, and its side effect is no tool (test_show_usage.py)
    assert doc["usage"] == {"llm": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                    "total_tokens": 0, "unreported": 0, "failed": 0,
                                    "models": []},
                            "tools": [], "runs": [], "crashes": []}
    assert [(e["seq"], e["kind"]) for e in doc["entries"]] == [(s, k) for s, k, _, _ in LAYOUT]
    first = doc["entries"][0]
    assert set(first) == {"seq", "ts", "kind", "kid", "data", "hash", "error"}
    assert all(e["error"] is None for e in doc["entries"])
    with Ledger.open(world.url) as ledger:
        bodies = [row.body for row in ledger.entries(INSTANCE)]
    assert [e["hash"] for e in doc["entries"]] == [hashlib.sha256(b).hexdigest()
                                                   for b in bodies]
    assert "Ada Lovelace" not in json.dumps(doc)  # no payloads without --payloads


@pytest.mark.parametrize(("kinds", "expected"), [
    (["activity.completed"], [4, 9]),
    (["activity"], [3, 4, 6, 9]),
    (["activity."], [3, 4, 6, 9]),
    (["effect"], [7, 8]),
    (["workflow.started", "effect.done"], [1, 8]),
    (["workflow"], [1, 2, 5, 10]),
])
def test_kind_filter_takes_kinds_and_families(world: World, kinds: list[str],
                                              expected: list[int]) -> None:
    doc = shown(world, *[a for k in kinds for a in ("--kind", k)])
    assert seqs(doc) == expected
    meant = {k.value for k in Kind for name in kinds
             if k.value == name or k.value.startswith(name.removesuffix(".") + ".")}
    assert doc["filters"]["kinds"] == sorted(meant)
    assert ("activity.failed" in meant) == (kinds[0] in {"activity", "activity."})


def test_task_and_activity_filters(world: World) -> None:
    doc = shown(world, "--task", "2")
    assert seqs(doc) == [s for s, _, task, _ in LAYOUT if task == 2]
    assert doc["filters"] == {**NO_FILTERS, "task": 2}
    doc = shown(world, "--activity", "charge")
    assert seqs(doc) == [2, 3, 4]
    assert doc["filters"] == {**NO_FILTERS, "activity": "charge"}
    assert seqs(shown(world, "--activity", "refund")) == []


@pytest.mark.parametrize(("seq", "expected", "bounds"), [
    ("3..5", [3, 4, 5], {"from": 3, "to": 5}),
    ("8..", [8, 9, 10], {"from": 8, "to": None}),
    ("..2", [1, 2], {"from": None, "to": 2}),
    ("4", [4], {"from": 4, "to": 4}),
    ("11..", [], {"from": 11, "to": None}),
])
def test_seq_range(world: World, seq: str, expected: list[int],
                   bounds: dict[str, int | None]) -> None:
    doc = shown(world, "--seq", seq)
    assert seqs(doc) == expected
    assert doc["filters"] == {**NO_FILTERS, "seq": bounds}


def test_filters_combine_and_an_empty_match_is_not_an_error(world: World) -> None:
    doc = shown(world, "--kind", "activity", "--task", "2", "--seq", "..8")
    assert seqs(doc) == [6]
    r = show(world, INSTANCE, "--kind", "effect", "--activity", "charge")
    exits(r)
    assert "no entries match (the instance has 10)" in r.stdout


# --- human output ----------------------------------------------------------------------------

def test_table_shortens_digests_and_json_has_them_whole(world: World) -> None:
    doc = shown(world)
    digest = doc["entries"][3]["data"]["output_digest"]
    commitment = doc["entries"][3]["data"]["output"]["c"]
    r = show(world, INSTANCE)
    exits(r)
    for word in ("instance order-7", "activity.completed", "activity=charge", "task_id=1",
                 f"output_digest={digest[:12]}…", f"⟨{commitment[:12]}… {len(CHARGED)}B⟩"):
        assert word in r.stdout, word
    assert digest not in r.stdout and commitment not in r.stdout
    assert digest[:13] not in r.stdout  # twelve characters, not more


def test_compact_is_one_line_per_entry(world: World) -> None:
    doc = shown(world, "--kind", "activity")
    r = show(world, INSTANCE, "--compact", "--kind", "activity")
    exits(r)
    lines = r.stdout.splitlines()
    assert len(lines) == len(doc["entries"]) == 4
    for line, entry in zip(lines, doc["entries"]):
        words = line.split()
        assert words[0] == str(entry["seq"]) and words[1] == entry["kind"]
        assert words[-1] == entry["hash"][:12] + "…"
        task = entry["data"]["task_id"]
        assert f"{entry['data']['activity']} #{task}" in line
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.parametrize("mode", [[], ["--compact"], ["--payloads"]])
def test_80_columns_split_no_digest(world: World, mode: list[str]) -> None:
    r = show(world, INSTANCE, *mode, env={"COLUMNS": "80"})
    exits(r)
    lines = r.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    doc = shown(world)
    wanted = ([e["hash"][:12] + "…" for e in doc["entries"]] if mode == ["--compact"] else
              [e["data"][k][:12] + "…" for e in doc["entries"] for k in e["data"]
               if k.endswith("_digest")])
    assert wanted
    for digest in wanted:
        assert any(digest in line for line in lines), digest  # whole, on one line


# --- payloads --------------------------------------------------------------------------------

def test_payloads_shown_and_an_erased_one_said_so(world: World) -> None:
    exits(cli("redact", INSTANCE, "--seq", "1", "--field", "input", "--db", world.url,
              "--key", world.key, cwd=world.tmp))
    doc = shown(world, "--payloads")
    entries = {e["seq"]: e for e in doc["entries"]}
    assert entries[1]["payloads"] == {"input": {"state": "erased"}}
    assert entries[4]["payloads"] == {"output": {"state": "kept", "text": CHARGED.decode()}}
    assert entries[8]["payloads"] == {"result": {"state": "kept", "text": MAILED.decode()}}
    assert entries[2]["payloads"] == {}
    assert entries[11]["kind"] == "payload.erased"

    r = show(world, INSTANCE, "--payloads")
    exits(r)
    assert "input: ⟨erased⟩" in r.stdout
    assert 'output: {"charged":true,"amount":42}' in r.stdout
    assert "Ada Lovelace" not in r.stdout
    r = show(world, INSTANCE, "--payloads", "--compact", "--seq", "..4")
    exits(r)
    lines = r.stdout.splitlines()
    assert lines[0].endswith("input=⟨erased⟩") and lines[3].endswith(f"output={CHARGED.decode()}")


def test_a_payload_never_stored_is_absent(world: World) -> None:
    ref, _ = committed(b"lost before it was stored")
    with Ledger.open(world.url) as ledger:
        chain.append(ledger, "gappy", "workflow.started", {"input": ref}, signer=world.signer)
    r = cli("show", "gappy", "--payloads", "--db", world.url, "--json", cwd=world.tmp)
    exits(r)
    assert json.loads(r.stdout)["entries"][0]["payloads"] == {"input": {"state": "absent"}}
    r = cli("show", "gappy", "--payloads", "--db", world.url, cwd=world.tmp)
    exits(r)
    assert "input: ⟨not stored⟩" in r.stdout


# --- bundles ---------------------------------------------------------------------------------

def export(w: World, *args: str) -> Path:
    out = w.tmp / f"bundle{len(list(w.tmp.glob('bundle*')))}"
    exits(cli("export", INSTANCE, "--out", out, *args, "--db", w.url, "--key", w.key,
              "--trust", w.trust, cwd=w.tmp))
    return out


def from_bundle(w: World, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("show", INSTANCE, "--bundle", bundle, "--trust", w.trust, *args, cwd=w.tmp)


def test_show_from_a_bundle_matches_the_database(world: World) -> None:
    exits(cli("redact", INSTANCE, "--seq", "1", "--field", "input", "--db", world.url,
              "--key", world.key, cwd=world.tmp))
    bundle = export(world, "--with-payloads")
    for args in (["--payloads"], ["--kind", "effect", "--payloads"], ["--seq", "3..4"]):
        r = from_bundle(world, bundle, *args, "--json")
        exits(r)
        assert json.loads(r.stdout) == shown(world, *args)
    r = from_bundle(world, bundle, "--payloads", "--task", "1")
    exits(r)
    assert 'output: {"charged":true,"amount":42}' in r.stdout


def test_bundle_errors(world: World) -> None:
    bare = export(world)
    one_error_line(from_bundle(world, bare, "--payloads"), "without --with-payloads")
    exits(from_bundle(world, bare, "--compact"))
    one_error_line(cli("show", INSTANCE, "--bundle", bare, cwd=world.tmp), "--trust")
    one_error_line(cli("show", "nope", "--bundle", bare, "--trust", world.trust,
                       cwd=world.tmp), "'nope'", "no entries")
    other = generate_keypair(world.tmp / "other", name="other")[1]
    verification_failed(cli("show", INSTANCE, "--bundle", bare, "--trust", other,
                            cwd=world.tmp), "not signed by a trusted key")

    def change(lines: list[dict[str, Any]]) -> None:
        lines.pop()
    edit_lines(bare / "entries.jsonl", change)
    verification_failed(from_bundle(world, bare), "entries.jsonl",
                        "does not match the signed manifest")


# --- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "needles"), [
    (["--seq", "3-5"], ["--seq '3-5'", "A..B"]),
    (["--seq", "a..b"], ["A..B"]),
    (["--seq", ".."], ["A..B"]),
    (["--seq", "5..3"], ["5 is after 3"]),
    (["--seq", "0..2"], ["numbered from 1"]),
    (["--kind", "activity.bogus"], ["unknown entry kind 'activity.bogus'", "effect.done"]),
    (["--kind", "nope"], ["unknown entry kind 'nope'"]),
    (["--task", "two"], ["'two'"]),
    (["--compact", "--json"], ["--compact", "--json"]),
])
def test_bad_input_is_one_line_exit_2(world: World, args: list[str], needles: list[str]
                                      ) -> None:
    one_error_line(show(world, INSTANCE, *args), *needles)


def test_no_such_instance(world: World) -> None:
    one_error_line(show(world, "nope"), "'nope'", "no entries")
    one_error_line(show(world, "nope", "--kind", "effect"), "'nope'", "no entries")
