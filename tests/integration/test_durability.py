"""Durable at the boundaries (docs/adr/0004-durability.md), on the real engine.

Only activity outcomes and side-effect intents wait for the disk; every other record rides
on the next durable commit, so a power loss can take the ledger's non-durable suffix while
the engine keeps the decisions it saw. These tests lose that suffix on purpose and check
that the replay puts the decisions back and the verifier is content:

* a workflow waiting on an external event restarts against a fresh, empty ledger (the
  whole suffix lost): once the event arrives, the replayed start and scheduled activity
  are appended with the same identities as the originals, then the rest as usual;
* a ``continue_as_new`` workflow is cut exactly where a power loss could cut it (after the
  last durable record, so the new generation's start and its first scheduled activity are
  gone): the replay re-appends that generation's start, not taken for the old one's;
* without the engine: which commits wait for stable storage, and that concurrent appends
  share commits.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from histaudit.interceptor.recorder import MUST_BE_DURABLE, AuditRecorder
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore, generate_keypair
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli, exits
from support.ledgers import only, read_entries, verify_url

APP = Path(__file__).resolve().parent / "apps" / "durability_app.py"
APP_READY = "APP READY"
TIMEOUT_S = 60.0


class Rig(AppRig):
    def __init__(self, engine: EngineProcess, tmp: Path) -> None:
        super().__init__(engine)
        self.tmp = tmp
        self.data = tmp / "data"
        self.data.mkdir()
        self.key_path, self.pub, self.signer = generate_keypair(tmp / "keys", name="app")
        self.url_a = f"sqlite:///{tmp / 'ledger-a.db'}"
        self.url_b = f"sqlite:///{tmp / 'ledger-b.db'}"
        self.app = self.add_app(AppProcess(
            engine, [APP], log=tmp / "app.log", ready=APP_READY, ready_timeout=30,
            env={"APP_DATA": str(self.data), "HISTAUDIT_DB": self.url_a,
                 "HISTAUDIT_KEY": str(self.key_path), "PYTHONUNBUFFERED": "1"}))

    def use_ledger(self, url: str) -> None:
        self.app.env["HISTAUDIT_DB"] = url

    def until_entry(self, url: str, instance: str, kind: str, **match: Any) -> None:
        wait_until(lambda: bool(Path(url.removeprefix("sqlite:///")).exists()
                                and only(read_entries(url, instance), kind, **match)),
                   TIMEOUT_S, f"{kind} {match} in {instance}", details=self.app.tail)

    def runs(self, name: str) -> int:
        path = self.data / f"{name}.runs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def engine_codes(self, url: str, instance: str) -> set[str]:
        from histaudit.verify.verifier import verify_instance

        with Ledger.open(url) as ledger:
            report = verify_instance(ledger, instance, trust=TrustStore([self.signer.public]),
                                     full=True, engine_history=self.history(instance))
        return report.codes()

    def verify_cli(self, url: str) -> list[dict[str, Any]]:
        """``histaudit verify --all --full`` over ``url``: must exit 0; its reports."""
        r = cli("verify", "--all", "--full", "--json", "--db", url, "--trust", self.pub,
                cwd=self.tmp)
        exits(r, 0)
        reports: list[dict[str, Any]] = json.loads(r.stdout)["reports"]
        return reports


@pytest.fixture
def rig(engine: EngineProcess, tmp_path: Path) -> Iterator[Rig]:
    with Rig(engine, tmp_path) as r:
        yield r


def kinds(entries: list[fmt.Entry]) -> list[str]:
    return [e.kind for e in entries]


def replayed(entries: list[fmt.Entry]) -> list[str]:
    return [e.kind for e in entries if e.data.get("replayed") is True]


def copy_prefix(src: str, dst: str, signer: Signer, *, last_leaf: int) -> None:
    """Make ``dst`` hold exactly ``src``'s leaves 0..``last_leaf``: what a power loss leaves
    when every commit after that leaf's was still in the page cache.

    The stored rows are copied byte for byte (entries, kept payloads); each instance's head
    is signed again over its newest remaining entry, as the last durable commit signed it.
    """
    with Ledger.open(src) as a:
        rows = [row for row in a.all_entries() if row.leaf <= last_leaf]
        parsed = [fmt.parse_entry(row.body) for row in rows]
        payloads = []
        for entry in parsed:
            for ref in entry.data.values():
                if isinstance(ref, dict) and ref.get("k") is True:
                    stored = a.payload(ref["c"])
                    assert stored is not None
                    payloads.append((ref["c"], stored[0], stored[1]))
    tips: dict[str, tuple[fmt.StoredEntry, fmt.Entry]] = {}
    for row, entry in zip(rows, parsed, strict=True):
        tips[entry.instance] = (row, entry)
    with Ledger.open(dst, create=True) as b, b.write("copying a prefix") as tx:
        tx.insert_entries(rows)
        for instance, (row, entry) in tips.items():
            head = fmt.head_body(instance=instance, seq=entry.seq, leaf=row.leaf,
                                 hash=row.hash, ts=entry.ts, kid=signer.kid)
            tx.put_head(fmt.StoredHead(instance, entry.seq, head, signer.sign(head)), new=True)
        tx.insert_payloads(payloads)


# --- a lost suffix, re-appended on replay ---------------------------------------------

@pytest.mark.engine
@pytest.mark.crash
def test_decisions_lost_with_the_ledger_are_reappended_on_replay(rig: Rig) -> None:
    """Waiting on an event with ledger A; restarted on an empty ledger B, then the event."""
    rig.app.start()
    instance = rig.schedule("waiter", 1)
    rig.until_entry(rig.url_a, instance, Kind.ACTIVITY_COMPLETED, activity="step")
    rig.app.kill()
    a = read_entries(rig.url_a, instance)
    assert kinds(a) == ["workflow.started", "workflow.scheduled_activity",
                        "activity.started", "activity.completed"]
    assert replayed(a) == []

    rig.use_ledger(rig.url_b)
    rig.app.start()
    rig.client.raise_workflow_event(instance, "go")
    state = rig.wait(instance, timeout=TIMEOUT_S)
    assert state.runtime_status.name == "COMPLETED", rig.app.tail()
    assert state.serialized_output == "[2, 3, 4]"
    b = read_entries(rig.url_b, instance)
    # The event is signed as it arrives, before the turn that carries it runs. Which turn
    # that is depends on the kill: if it came before the engine ran the turn that took
    # step 1's result, that turn is re-delivered first (and re-appends the lost decisions),
    # and the event arrives in the next one. Either way it precedes the decision it caused.
    received = kinds(b).index("workflow.event_received")
    assert received in (0, 2), kinds(b)
    assert [k for k in kinds(b) if k != "workflow.event_received"] == [
        "workflow.started", "workflow.scheduled_activity",        # replayed: re-appended
        "workflow.scheduled_activity", "activity.started", "activity.completed",
        "workflow.scheduled_child", "workflow.completed"]
    assert replayed(b) == ["workflow.started", "workflow.scheduled_activity"]
    # The same decisions as the lost ones: same generation, task, execution id, input.
    for kind in ("workflow.started", "workflow.scheduled_activity"):
        lost, again = only(a, kind)[0], only(b, kind)[0]
        assert {k: v for k, v in again.data.items() if k not in ("replayed", "worker", "input")} \
            == {k: v for k, v in lost.data.items() if k not in ("worker", "input")}
    assert only(a, "workflow.started")[0].data["started_at"]  # the engine's clock, not None
    first, second = only(b, "workflow.scheduled_activity")
    assert first.data["task_id"] != second.data["task_id"]
    assert first.data["execution_id"] != second.data["execution_id"]
    assert rig.runs("step") == 3  # step 1 ran once, before the restart: replayed, not re-run

    (child,) = only(b, "workflow.scheduled_child")
    kid = read_entries(rig.url_b, child.data["child_instance"])
    assert kinds(kid) == ["workflow.started", "workflow.scheduled_activity",
                          "activity.started", "activity.completed", "workflow.completed"]
    assert replayed(kid) == []

    for inst in (instance, child.data["child_instance"]):
        report = verify_url(rig.url_b, inst, rig.signer, full=True)
        assert report.ok and not report.findings, [f.to_json() for f in report.findings]
    reports = rig.verify_cli(rig.url_b)
    assert sorted(d["instance"] for d in reports) == sorted(
        [instance, child.data["child_instance"]])
    assert [f for d in reports for f in d["findings"]] == []


@pytest.mark.engine
@pytest.mark.crash
def test_power_loss_cut_after_the_last_durable_record_is_repaired(rig: Rig) -> None:
    """Cut where a power loss can: generation 1's start and first decision are lost.

    Generation 0 ran ``step`` and continued as new (both durable); generation 1
    scheduled ``slow``, which started and blocks: nothing durable since the continuation.
    The app dies there; it comes back on the ledger's durable prefix only.
    """
    rig.app.start()
    instance = rig.schedule("generations", 0)
    rig.until_entry(rig.url_a, instance, Kind.ACTIVITY_STARTED, activity="slow")
    # The start is recorded before the body runs: wait for the body too, or the kill can
    # land between the two and slow runs once in all (a CI run on 2026-12-03 saw that).
    wait_until(lambda: rig.runs("slow") == 1, TIMEOUT_S, "slow's body to start",
               details=rig.app.tail)
    rig.app.kill()
    a = read_entries(rig.url_a, instance)
    last_durable = max(i for i, e in enumerate(a) if e.kind in MUST_BE_DURABLE)
    lost = a[last_durable + 1:]
    assert kinds(lost) == ["workflow.started", "workflow.scheduled_activity",
                           "activity.started"]
    copy_prefix(rig.url_a, rig.url_b, rig.signer, last_leaf=a[last_durable].leaf)
    assert kinds(read_entries(rig.url_b, instance)) == kinds(a[:last_durable + 1])

    (rig.data / "release").touch()
    rig.use_ledger(rig.url_b)
    rig.app.start()
    state = rig.wait(instance, timeout=TIMEOUT_S)
    assert state.runtime_status.name == "COMPLETED", rig.app.tail()
    assert state.serialized_output == '["slow-ok", 2]'
    b = read_entries(rig.url_b, instance)
    assert kinds(b[:last_durable + 1]) == kinds(a[:last_durable + 1])
    after = b[last_durable + 1:]
    # slow was re-delivered and ran again; then generation 1's turn replayed and put back
    # its start and the scheduling of slow; continue_as_new is gone for good (its
    # generation's history is gone from the engine too, so nothing replays it).
    assert kinds(after) == ["activity.started", "activity.completed",
                            "workflow.started", "workflow.scheduled_activity",
                            "workflow.scheduled_activity", "activity.started",
                            "activity.completed", "workflow.completed"]
    assert replayed(after) == ["workflow.started", "workflow.scheduled_activity"]
    gen0, gen1 = only(b, "workflow.started")
    assert gen1.data["started_at"] == only(lost, "workflow.started")[0].data["started_at"] \
        != gen0.data["started_at"]
    again = only(after, "workflow.scheduled_activity", activity="slow")[0]
    assert again.data["execution_id"] == lost[2].data["execution_id"]
    assert again.data["task_id"] == lost[2].data["task_id"]
    assert rig.runs("slow") == 2 and rig.runs("step") == 2

    report = verify_url(rig.url_b, instance, rig.signer, full=True)
    assert report.ok and not report.findings, [f.to_json() for f in report.findings]
    assert [f for d in rig.verify_cli(rig.url_b) for f in d["findings"]] == []
    # Every result the engine holds is signed in what survived, with the same output.
    codes = rig.engine_codes(rig.url_b, instance)
    assert not codes & {"engine-unsigned-completion", "replay-mismatch"}, codes


# --- without the engine ---------------------------------------------------------------

class _CountingLedger(Ledger):
    """A real ledger that also notes the ``durable`` flag of every write transaction."""

    commits: list[bool]

    def write(self, what: str = "write", *, durable: bool = True) -> Any:
        self.commits.append(durable)
        return super().write(what, durable=durable)


def _counting(url: str) -> _CountingLedger:
    ledger = Ledger.open(url, create=True)
    ledger.__class__ = _CountingLedger
    assert isinstance(ledger, _CountingLedger)
    ledger.commits = []
    return ledger


def test_only_outcomes_and_intents_wait_for_the_disk(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    with _counting(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        recorder = AuditRecorder(ledger, signer)
        for kind in Kind:
            ledger.commits.clear()
            recorder.append("inst", kind, {"n": 1})
            assert ledger.commits == [kind in MUST_BE_DURABLE], kind
    assert {str(k) for k in MUST_BE_DURABLE} == {
        "activity.completed", "activity.failed", "effect.intent", "llm.call",
        "workflow.completed", "workflow.failed", "workflow.continued_as_new",
        "workflow.terminated"}


def test_a_decision_rides_with_the_next_append_and_counts_as_held(tmp_path: Path) -> None:
    """A workflow decision (re-appended by a replay when missing) has no commit of its
    own: it joins the next append, here the start of the activity it schedules."""
    signer = KeyFileSigner.generate()
    url = f"sqlite:///{tmp_path / 'l.db'}"
    token = ("activity", "exec-1")
    with _counting(url) as ledger:
        recorder = AuditRecorder(ledger, signer)
        recorder.writer.linger = 60  # only the next append takes it
        recorder.append_decision("inst", Kind.WORKFLOW_SCHEDULED_ACTIVITY,
                                 {"task_id": 1, "execution_id": "exec-1"}, token)
        assert ledger.commits == [] and recorder.knows_decision("inst", token)
        recorder.append("inst", Kind.ACTIVITY_STARTED, {"task_id": 1, "execution_id": "exec-1"})
        assert ledger.commits == [False]
        assert recorder.has_decision("inst", token)
    assert kinds(read_entries(url, "inst")) == ["workflow.scheduled_activity",
                                                "activity.started"]


def test_a_decision_whose_commit_fails_is_forgotten_for_the_next_replay(
        tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    bad, token = "evil\u202eid", ("started", "2026-12-07T00:00:00Z")
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True) as ledger:
        recorder = AuditRecorder(ledger, signer)
        recorder.append_decision(bad, Kind.WORKFLOW_STARTED, {"started_at": token[1]}, token)
        recorder.writer.flush()
        assert not recorder.knows_decision(bad, token)


def test_concurrent_appends_share_commits_and_keep_every_entry(tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    url = f"sqlite:///{tmp_path / 'l.db'}"
    threads, per = 8, 40
    with _counting(url) as ledger:
        recorder = AuditRecorder(ledger, signer)
        got: list[tuple[str, int, str]] = []
        lock = threading.Lock()

        def work(n: int) -> None:
            for i in range(per):
                kind = Kind.ACTIVITY_COMPLETED if i % 3 == 0 else Kind.ACTIVITY_STARTED
                entry = recorder.append(f"inst-{n % 3}", kind, {"task_id": 1000 * n + i,
                                                               "execution_id": f"{n}-{i}"})
                with lock:
                    got.append((entry.instance, entry.seq, entry.hash))

        pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert len(ledger.commits) == recorder.writer.batches < threads * per
    stored = {(e.instance, e.seq): e.hash for inst in ("inst-0", "inst-1", "inst-2")
              for e in read_entries(url, inst)}
    assert len(got) == len(stored) == threads * per
    assert all(stored[(i, s)] == h for i, s, h in got)
    for inst in ("inst-0", "inst-1", "inst-2"):
        report = verify_url(url, inst, signer, full=True)
        assert report.ok and not report.findings
