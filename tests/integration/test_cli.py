"""The ``histaudit`` command, run for real: the installed console script in a subprocess.

Ledgers are built with the library (:class:`histaudit.store.Ledger`) and then examined
only through the CLI: exit status (0 clean, 1 findings at/above ``--fail-on``, 2 bad
input), the human table, and the ``--json`` documents. Every command that touches a
database runs on SQLite and on the real PostgreSQL server (``db_url``).
"""

from __future__ import annotations

import base64
import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from histaudit import __version__, sdk
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, generate_keypair, key_id
from histaudit.ledger.store import Ledger
from support.cli import HISTAUDIT, TIMEOUT, cli, exits, one_error_line
from support.ledgers import ORDER_RESULT, ORDER_SECRET, LedgerDb, World, append_order


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


def one_report(result: subprocess.CompletedProcess[str]) -> Any:
    """The one report of ``verify INSTANCE_ID --json`` ({ok, reports, since_checkpoint})."""
    doc = as_json(result)
    assert set(doc) == {"ok", "reports", "since_checkpoint", "tree"} and len(doc["reports"]) == 1
    assert doc["since_checkpoint"] is None and doc["ok"] is (result.returncode == 0)
    return doc["reports"][0]


# --- building ledgers through the library ------------------------------------------------

SECRET, RESULT = ORDER_SECRET, ORDER_RESULT


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> World:
    """A ledger on ``db_url`` with a clean instance ``order-1`` (4 entries)."""
    key, trust, signer = generate_keypair(tmp_path / "keys", name="ops")
    with Ledger.open(db_url, create=True) as ledger:
        append_order(ledger, signer, "order-1")
    return World(tmp=tmp_path, url=db_url, signer=signer, key=key, trust=trust)


def add_instance(w: World, instance: str, *, reexecuted: bool = False) -> None:
    with Ledger.open(w.url) as ledger:
        append_order(ledger, w.signer, instance, reexecuted=reexecuted)


def tamper_body(url: str, instance: str, seq: int) -> None:
    """Play an attacker with database access: lift the append-only guard, edit one body."""
    with LedgerDb(url) as db:
        db.lift_guards()
        db.rewrite_body(db.entry(instance, seq).leaf, b'"charge"', b'"refund"', rehash=False)
        db.restore_guards()


def stored_payloads(url: str) -> list[bytes]:
    with LedgerDb(url) as db:
        return db.payload_data()


# --- keys generate -----------------------------------------------------------------------

def test_keys_generate_writes_private_0600_and_public_json(tmp_path: Path) -> None:
    r = cli("keys", "generate", "--out", tmp_path / "k", "--name", "ops",
            "--not-before", "2025-01-01T00:00:00Z", "--not-after", "2035-01-01T00:00:00Z",
            cwd=tmp_path)
    exits(r)
    priv, pub = tmp_path / "k" / "ops.key", tmp_path / "k" / "ops.pub.json"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    doc = json.loads(pub.read_bytes())
    raw = base64.b64decode(doc["public_key"])
    assert doc["alg"] == "ed25519" and doc["kid"] == key_id(raw) and doc["name"] == "ops"
    assert doc["not_before"] == "2025-01-01T00:00:00Z"
    assert doc["not_after"] == "2035-01-01T00:00:00Z"
    assert f"key id {doc['kid']}" in r.stdout and str(priv) in r.stdout
    # The written key really is the pair: it loads and its public half is the JSON's.
    assert KeyFileSigner.load(priv).kid == doc["kid"]


def test_keys_generate_private_key_is_0600_under_a_permissive_umask(tmp_path: Path) -> None:
    r = subprocess.run(["sh", "-c", 'umask 000 && exec "$@"', "sh", *HISTAUDIT, "keys",
                        "generate", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=TIMEOUT)
    exits(r)
    assert stat.S_IMODE((tmp_path / "histaudit.key").stat().st_mode) == 0o600


def test_keys_generate_refuses_to_overwrite(tmp_path: Path) -> None:
    exits(cli("keys", "generate", "--out", tmp_path, cwd=tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(before) == {"histaudit.key", "histaudit.pub.json"}
    line = one_error_line(cli("keys", "generate", "--out", tmp_path, cwd=tmp_path),
                          "already exists", "refusing to overwrite")
    assert str(tmp_path / "histaudit.key") in line
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# --- verify ------------------------------------------------------------------------------

def test_verify_clean_instance_exits_0_with_ok(world: World) -> None:
    r = cli("verify", "order-1", "--db", world.url, "--trust", world.trust, cwd=world.tmp)
    exits(r)
    assert "instance order-1: 4 entries, default check — OK" in r.stdout
    assert "FAILED" not in r.stdout


def test_verify_trust_store_may_be_a_directory_or_env(world: World) -> None:
    exits(cli("verify", "order-1", "--db", world.url, "--trust", world.trust.parent,
           cwd=world.tmp))
    r = cli("verify", "order-1", cwd=world.tmp,
            env={"HISTAUDIT_DB": world.url, "HISTAUDIT_TRUST": str(world.trust)})
    exits(r)
    assert "OK" in r.stdout


def test_verify_json_document(world: World) -> None:
    r = cli("verify", "order-1", "--db", world.url, "--trust", world.trust, "--json",
            cwd=world.tmp)
    exits(r)
    doc = one_report(r)
    assert doc["instance"] == "order-1"
    assert doc["ok"] is True
    assert doc["entries"] == 4
    assert doc["mode"] == "default"
    assert doc["findings"] == []


def test_verify_full_checks_signatures_and_payloads(world: World) -> None:
    for workers in ("1", "2"):
        r = cli("verify", "order-1", "--db", world.url, "--trust", world.trust, "--full",
                "--workers", workers, "--json", cwd=world.tmp)
        exits(r)
        doc = one_report(r)
        assert doc["mode"] == "full" and doc["ok"] is True and doc["findings"] == []


def test_behaviour_info_exits_0_by_default_and_1_with_fail_on_info(world: World) -> None:
    add_instance(world, "order-2", reexecuted=True)
    base = ("verify", "order-2", "--db", world.url, "--trust", world.trust)

    r = cli(*base, "--json", cwd=world.tmp)
    exits(r, 0)
    doc = one_report(r)
    assert doc["ok"] is True and doc["entries"] == 5
    assert len(doc["findings"]) == 1
    finding = doc["findings"][0]
    assert {"code", "severity", "seq", "message"} <= set(finding)
    assert finding["code"] == "activity-reexecuted"
    assert finding["severity"] == "info"
    assert finding["seq"] == 3 and finding["instance"] == "order-2"
    # what the finding is about, apart from its message: both deliveries, the task
    assert finding["entries"] == [2, 3]
    assert finding["task_id"] == 1 and finding["activity"] == "charge"
    assert finding["effect"] is None
    assert "charge" in finding["message"] and "2 times" in finding["message"]

    human = cli(*base, cwd=world.tmp)
    exits(human, 0)
    assert "OK" in human.stdout and "activity-reexecuted" in human.stdout
    assert "info" in human.stdout

    exits(cli(*base, "--fail-on", "error", cwd=world.tmp), 0)
    exits(cli(*base, "--fail-on", "warning", cwd=world.tmp), 0)
    r = cli(*base, "--fail-on", "info", "--json", cwd=world.tmp)
    exits(r, 1)
    assert one_report(r)["findings"][0]["code"] == "activity-reexecuted"
    # "ok" agrees with the exit status whatever --fail-on says (issue #40): it said true
    # beside exit 1; the report's own "ok" (no error finding) stays true
    assert one_report(r)["ok"] is True and json.loads(r.stdout)["ok"] is False
    assert json.loads(cli(*base, "--json", cwd=world.tmp).stdout)["ok"] is True


def test_tampered_body_exits_1_and_names_the_entry(world: World) -> None:
    tamper_body(world.url, "order-1", 2)
    base = ("verify", "order-1", "--db", world.url, "--trust", world.trust)
    r = cli(*base, "--json", cwd=world.tmp)
    exits(r, 1)
    doc = one_report(r)
    assert doc["ok"] is False
    codes = {(f["code"], f["seq"]) for f in doc["findings"]}
    assert ("body-changed", 2) in codes
    assert all(f["severity"] in {"error", "warning", "info"} for f in doc["findings"])
    human = cli(*base, cwd=world.tmp)
    exits(human, 1)
    assert "FAILED" in human.stdout and "body-changed" in human.stdout
    full = cli(*base, "--full", "--json", cwd=world.tmp)
    exits(full, 1)
    assert ("signature-invalid", 2) in {(f["code"], f["seq"])
                                        for f in one_report(full)["findings"]}


def test_forged_append_with_another_key_exits_1(world: World) -> None:
    """An attacker who can INSERT (allowed by the triggers) but lacks the key is caught."""
    with Ledger.open(world.url) as ledger:
        chain.append(ledger, "order-1", "workflow.completed", {"status": "FORGED"},
                      signer=KeyFileSigner.generate())
    r = cli("verify", "order-1", "--db", world.url, "--trust", world.trust, "--json",
            cwd=world.tmp)
    exits(r, 1)
    codes = {f["code"] for f in one_report(r)["findings"]}
    assert "key-untrusted" in codes


def test_verify_with_someone_elses_trust_store_exits_1(world: World) -> None:
    _, other, _ = generate_keypair(world.tmp / "other", name="other")
    r = cli("verify", "order-1", "--db", world.url, "--trust", other, "--json", cwd=world.tmp)
    exits(r, 1)
    assert {f["code"] for f in one_report(r)["findings"]} == {"key-untrusted"}


def test_verify_unknown_instance_exits_1(world: World) -> None:
    r = cli("verify", "no-such", "--db", world.url, "--trust", world.trust, "--json",
            cwd=world.tmp)
    exits(r, 1)
    assert [f["code"] for f in one_report(r)["findings"]] == ["instance-missing"]


def test_verify_all(world: World) -> None:
    add_instance(world, "order-2", reexecuted=True)
    add_instance(world, "order-3")
    base = ("verify", "--all", "--db", world.url, "--trust", world.trust)

    r = cli(*base, "--json", cwd=world.tmp)
    exits(r, 0)
    doc = as_json(r)
    assert doc["ok"] is True and doc["since_checkpoint"] is None
    docs = doc["reports"]
    assert {d["instance"] for d in docs} == {"order-1", "order-2", "order-3"}
    assert all(d["ok"] for d in docs)
    by_id = {d["instance"]: d for d in docs}
    assert [f["code"] for f in by_id["order-2"]["findings"]] == ["activity-reexecuted"]
    assert by_id["order-1"]["findings"] == [] and by_id["order-3"]["findings"] == []

    human = cli(*base, cwd=world.tmp)
    exits(human, 0)
    for instance in ("order-1", "order-2", "order-3"):
        assert f"instance {instance}:" in human.stdout
    exits(cli(*base, "--fail-on", "warning", cwd=world.tmp), 0)
    exits(cli(*base, "--fail-on", "info", cwd=world.tmp), 1)

    tamper_body(world.url, "order-3", 2)
    r = cli(*base, "--json", cwd=world.tmp)
    exits(r, 1)
    doc = as_json(r)
    by_id = {d["instance"]: d for d in doc["reports"]}
    assert by_id["order-3"]["ok"] is False and by_id["order-1"]["ok"] is True
    assert doc["ok"] is False


# --- list / show -------------------------------------------------------------------------

def test_list_without_and_with_trust(world: World) -> None:
    add_instance(world, "order-2", reexecuted=True)
    add_instance(world, "order-3")
    tamper_body(world.url, "order-3", 2)

    r = cli("list", "--db", world.url, "--json", cwd=world.tmp)
    exits(r)
    rows = {row["instance"]: row for row in as_json(r)}
    assert set(rows) == {"order-1", "order-2", "order-3"}
    assert rows["order-1"]["entries"] == 4 and rows["order-2"]["entries"] == 5
    assert rows["order-1"]["last_kind"] == "workflow.completed"
    assert rows["order-1"]["workflow"] == "completed"
    assert rows["order-1"]["last_ts"].endswith("Z")
    assert {row["status"] for row in rows.values()} == {"not-checked"}
    assert {row["findings"] for row in rows.values()} == {None}

    r = cli("list", "--db", world.url, "--trust", world.trust, "--json", cwd=world.tmp)
    exits(r)
    rows = {row["instance"]: row for row in as_json(r)}
    assert {i: (row["status"], row["findings"]) for i, row in rows.items()} == {
        "order-1": ("ok", {"error": 0, "warning": 0, "info": 0}),
        "order-2": ("findings", {"error": 0, "warning": 0, "info": 1}),
        "order-3": ("failed", {"error": 2, "warning": 0, "info": 0})}

    human = cli("list", "--db", world.url, "--trust", world.trust, cwd=world.tmp)
    exits(human)
    for word in ("instance", "entries", "order-1", "order-2", "order-3",
                 "workflow.completed", "FAILED (2)", "ok, 1 warning/info"):
        assert word in human.stdout
    # One line per instance, its status on it (grep works), columns aligned.
    header, *lines = human.stdout.splitlines()
    assert header.split() == ["instance", "entries", "last", "activity", "last", "kind",
                              "workflow", "status"]
    by_instance = {line.split()[0]: line for line in lines}
    assert sorted(by_instance) == ["order-1", "order-2", "order-3"] and len(lines) == 3
    assert by_instance["order-3"].endswith("FAILED (2)")
    assert by_instance["order-1"].endswith("  ok")
    assert {line.index("workflow.") for line in lines} == {header.index("last kind")}
    plain = cli("list", "--db", world.url, cwd=world.tmp)
    exits(plain)
    assert "not checked" in plain.stdout and "order-1" in plain.stdout


def test_verify_all_json_is_the_one_object_with_a_list_even_of_one(world: World) -> None:
    r = cli("verify", "--all", "--db", world.url, "--trust", world.trust, "--json",
            cwd=world.tmp)
    exits(r)
    doc = as_json(r)
    assert [d["instance"] for d in doc["reports"]] == ["order-1"]
    assert doc["ok"] is True and doc["since_checkpoint"] is None


def test_empty_ledger(db_url: str, tmp_path: Path) -> None:
    _, trust, _ = generate_keypair(tmp_path / "keys")
    Ledger.open(db_url, create=True).close()
    r = cli("list", "--db", db_url, "--json", cwd=tmp_path)
    exits(r)
    assert as_json(r) == []
    r = cli("verify", "--all", "--db", db_url, "--trust", trust, "--json", cwd=tmp_path)
    exits(r)
    assert as_json(r) == {"ok": True, "reports": [], "since_checkpoint": None,
                          "tree": None}
    exits(cli("verify", "--all", "--db", db_url, "--trust", trust, cwd=tmp_path))


def test_show_human_and_json(world: World) -> None:
    r = cli("show", "order-1", "--db", world.url, cwd=world.tmp)
    exits(r)
    for word in ("instance order-1", "workflow.started", "activity.started",
                 "activity.completed", "workflow.completed", "activity=charge"):
        assert word in r.stdout
    assert "Ada Lovelace" not in r.stdout  # payloads are shown as commitments only

    r = cli("show", "order-1", "--db", world.url, "--json", cwd=world.tmp)
    exits(r)
    doc = as_json(r)
    assert doc["instance"] == "order-1"
    entries = doc["entries"]
    assert [e["seq"] for e in entries] == [1, 2, 3, 4]
    assert [e["kind"] for e in entries] == ["workflow.started", "activity.started",
                                            "activity.completed", "workflow.completed"]
    assert all(e["kid"] == world.signer.kid and e["ts"].endswith("Z") for e in entries)
    ref = entries[0]["data"]["input"]
    assert set(ref) == {"c", "n"} and ref["n"] == len(SECRET)
    assert "Ada Lovelace" not in r.stdout


def test_show_unknown_instance_is_bad_input(world: World) -> None:
    one_error_line(cli("show", "nope", "--db", world.url, cwd=world.tmp),
                   "'nope'", "no entries")


# --- redact ------------------------------------------------------------------------------

def test_redact_then_verify_full_is_still_clean(world: World) -> None:
    assert SECRET in stored_payloads(world.url)
    r = cli("redact", "order-1", "--seq", "1", "--field", "input", "--reason", "GDPR art. 17",
            "--db", world.url, "--key", world.key, cwd=world.tmp)
    exits(r)
    assert r.stdout.strip() == "erased input of entry 1"

    # The payload is gone from the database; the other one is still there.
    assert stored_payloads(world.url) == [RESULT]
    if world.url.startswith("sqlite"):
        path = Path(sa.engine.make_url(world.url).database or "")
        for f in path.parent.glob(path.name + "*"):
            assert b"Ada Lovelace" not in f.read_bytes(), f

    r = cli("verify", "order-1", "--db", world.url, "--trust", world.trust, "--full",
            "--json", cwd=world.tmp)
    exits(r)
    doc = one_report(r)
    assert doc["ok"] is True and doc["entries"] == 5 and doc["findings"] == []

    shown = as_json(cli("show", "order-1", "--db", world.url, "--json", cwd=world.tmp))
    last = shown["entries"][-1]
    assert last["kind"] == "payload.erased"
    assert last["data"]["entry"] == 1 and last["data"]["field"] == "input"
    assert last["data"]["reason"] == "GDPR art. 17"
    assert last["data"]["commitment"] == shown["entries"][0]["data"]["input"]["c"]

    # A second request for the same payload is recorded, not an error.
    again = cli("redact", "order-1", "--seq", "1", "--field", "input", "--db", world.url,
                cwd=world.tmp, env={"HISTAUDIT_KEY": str(world.key)})
    exits(again)
    assert "already erased" in again.stdout
    exits(cli("verify", "order-1", "--db", world.url, "--trust", world.trust, "--full",
           cwd=world.tmp))


# --- global behaviour --------------------------------------------------------------------

def test_version_and_help(tmp_path: Path) -> None:
    r = cli("--version", cwd=tmp_path)
    exits(r)
    assert r.stdout == f"histaudit {__version__}, Dapr workflow SDK: {sdk.layout()}\n"
    r = cli("--help", cwd=tmp_path)
    exits(r)
    for command in ("keys", "list", "redact", "show", "verify"):
        assert command in r.stdout


def test_python_dash_m_runs_the_same_cli(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "histaudit.cli", "--version"],
                       capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    exits(r)
    assert r.stdout.startswith(f"histaudit {__version__}, Dapr workflow SDK: dapr ")


def test_default_ledger_is_histaudit_db_in_the_working_directory(tmp_path: Path) -> None:
    _, trust, signer = generate_keypair(tmp_path / "keys")
    with Ledger.open(f"sqlite:///{tmp_path / 'histaudit.db'}", create=True) as ledger:
        append_order(ledger, signer, "order-1")
    exits(cli("verify", "order-1", "--trust", trust, cwd=tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    one_error_line(cli("list", cwd=elsewhere), "histaudit.db", "does not exist")
    assert not (elsewhere / "histaudit.db").exists()
    shutil.rmtree(elsewhere)
