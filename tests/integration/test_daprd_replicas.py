"""Two replicas of one app on real daprd, sharing one PostgreSQL ledger (issue 15).

In Dapr, two replicas of an app are two app processes, each with its own daprd sidecar,
both with the same app id, placement, scheduler and actor state store (here PostgreSQL:
``DaprdStack(postgres_actor_store=...)`` plus :meth:`DaprdStack.add_replica`). Each app
runs ``AuditedWorkflowRuntime`` against its own daprd and appends to ONE PostgreSQL
histaudit ledger with one signing key.

Placement spreads actors by consistent hashing of the actor id over every daprd whose app
has a workflow worker connected. daprd runs each activity execution as its own actor, id
``<instance>::<task id>::<generation>`` (dapr v1.18.3,
pkg/actors/targets/workflow/orchestrator/activity.go), and the activity runs on the app
connected to the daprd hosting that actor: so a fan-out of one instance spreads over both
replicas. The test proves it from the ledger (the ``worker`` of activity entries names
both app processes), then SIGKILLs the replica holding the most blocked activities: its
daprd drops the workflow actor types from placement (no worker connected), placement moves
the actors to the other replica, the scheduler re-delivers the interrupted activities
there and the workflow completes. ``histaudit verify`` then reports exactly one
``activity-reexecuted`` per activity that ran more than once, by the app's own run log
(every interrupted one, and any that daprd ran again while placement rebalanced, ADR
0008), nothing else, and the one chain the two replicas appended to is contiguous and
verifies.
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from histaudit.errors import EngineError
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_replica import DaprdReplica
from histaudit.verify import verify_instance
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli
from support.postgres import PostgresServer

pytestmark = [pytest.mark.engine, pytest.mark.crash, pytest.mark.daprd,
              pytest.mark.postgres]

APP = Path(__file__).resolve().parent / "apps" / "replica_app.py"
READY = "APP READY"
QUICK = 24  # activities of the first fan-out: enough that both replicas get some
HELD = 4    # blocked activities of the second, in flight when a replica is killed
TIMEOUT_S = 180.0
# daprd logs each placement table it takes; the workflow actor types are in the changed
# types of the one that follows each app's worker registering them.
DISSEMINATED = "Dissemination complete for version"
WORKFLOW_TYPES = ".histaudit.activity"


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _tables(log: Path) -> int:
    """How many placement tables with the app's workflow actor types daprd has taken."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines()
               if DISSEMINATED in line and WORKFLOW_TYPES in line)


def test_replica_needs_a_shared_actor_store(tmp_path: Path) -> None:
    """A SQLite actor store is one sidecar's file: a replica is refused, before any start."""
    stack = DaprdStack(state_dir=tmp_path / "daprd")
    with pytest.raises(EngineError, match="postgres_actor_store"):
        stack.add_replica()
    assert stack.replicas == () and stack.pids == {}


def test_two_replicas_share_one_postgresql_ledger(pg_server: PostgresServer, pg_url: str,
                                                  tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    began = time.monotonic()
    actors_db = f"t_replica_actors_{uuid.uuid4().hex[:8]}"
    pg_server.create_database(actors_db)
    stack = DaprdStack(state_dir=tmp_path / "daprd",
                       postgres_actor_store=pg_server.conninfo(actors_db))
    pids: dict[str, int] = {}
    try:
        stack.start()
        replica = stack.add_replica("b")
        with pytest.raises(EngineError, match="exists already"):
            stack.add_replica("b")
        assert stack.replicas == (replica,) and replica.name == "b"
        assert replica.app_id == stack.app_id and replica.running
        assert replica.port != stack.port and replica.http_port != stack.http_port
        assert set(stack.pids) == {"daprd", "daprd-b", "placement", "scheduler"}
        env = replica.env({})
        assert env["DAPR_GRPC_PORT"] == str(replica.port) != stack.env({})["DAPR_GRPC_PORT"]
        _run_replicas(stack, replica, pg_url, tmp_path)
        pids = stack.pids
    finally:
        teardown(stack)
        pg_server.drop_database(actors_db)
    # Teardown ended every process of the stack, the replica's daprd included.
    assert stack.pids == {} and not replica.running
    assert all(_gone(pid) for pid in pids.values()), pids
    with capsys.disabled():
        print(f"\n[daprd replicas] two replicas, one ledger, one killed: "
              f"{time.monotonic() - began:.1f}s")


def test_a_replica_daprd_is_killed_and_restarted_alone(pg_server: PostgresServer,
                                                        tmp_path: Path) -> None:
    """The replica handle: SIGKILL reaps only that daprd (the stack's daprd, placement and
    scheduler keep their pids); restart brings it back healthy on the same ports."""
    actors_db = f"t_replica_restart_{uuid.uuid4().hex[:8]}"
    pg_server.create_database(actors_db)
    stack = DaprdStack(state_dir=tmp_path / "daprd",
                       postgres_actor_store=pg_server.conninfo(actors_db))
    try:
        stack.start()
        first, second = stack.add_replica(), stack.add_replica()
        assert (first.name, second.name) == ("r1", "r2")
        assert len({stack.port, first.port, second.port}) == 3
        others = {k: v for k, v in stack.pids.items() if k != "daprd-r1"}
        old = first.pid
        assert old is not None
        first.kill()
        assert not first.running and _gone(old)
        assert stack.pids == others
        port = first.port
        first.restart()
        assert first.running and first.pid != old and first.port == port
        assert "level=info" in first.log_tail() and first.log_path.name == "daprd-r1.log"
        pids = stack.pids
        assert set(pids) == {*others, "daprd-r1"}
    finally:
        teardown(stack)
        pg_server.drop_database(actors_db)
    assert stack.pids == {} and not first.running and not second.running
    assert all(_gone(pid) for pid in pids.values()), pids


def _run_replicas(stack: DaprdStack, replica: DaprdReplica, pg_url: str, tmp: Path) -> None:
    data = tmp / "data"
    data.mkdir()
    key, _pub, _signer = generate_keypair(tmp / "keys", name="replicas")
    Ledger.open(pg_url, create=True).close()
    app_env = {"APP_DATA": str(data), "HISTAUDIT_DB": pg_url, "HISTAUDIT_KEY": str(key),
               "PYTHONUNBUFFERED": "1"}
    host = socket.gethostname()

    with AppRig(stack) as rig:  # type: ignore[arg-type]  # the EngineProcess interface
        apps: dict[str, AppProcess] = {}
        sidecars: list[tuple[str, DaprdStack | DaprdReplica]] = [("a", stack), ("b", replica)]
        for n, (name, sidecar) in enumerate(sidecars, 1):
            app = AppProcess(sidecar, [APP], log=tmp / f"app-{name}.log",  # type: ignore[arg-type]
                             env=app_env, ready=READY)
            rig.add_app(app).start()
            apps[name] = app
            # The worker's connection registers the workflow actor types with placement;
            # wait until the table that has this replica reached the stack's daprd, and
            # the replica's (otherwise the first activities could all land on one).
            wait_until(_placed(stack.log_path, n, sidecar.log_path), 30,
                       f"placement to add replica {name}", details=stack.log_tail)
        worker = {f"{host}:{app.pid}": name for name, app in apps.items()}
        assert len(worker) == 2

        instance = rig.schedule("spread", {"quick": QUICK, "held": HELD})
        read = _reader(pg_url, instance)
        wait_until(lambda: len(_starts(read(), "hold")) == HELD, TIMEOUT_S,
                   f"all {HELD} held activities to start",
                   details=lambda: "\n".join(a.tail() for a in apps.values()))

        entries = read()
        quick_by = Counter(worker[e.data["worker"]] for e in _starts(entries, "quick"))
        assert sum(quick_by.values()) == QUICK  # each ran once, all before the kill
        assert set(quick_by) == {"a", "b"}, quick_by  # placement used both replicas
        held = {e.data["task_id"]: worker[e.data["worker"]] for e in _starts(entries, "hold")}
        # Task ids are given in the order the workflow schedules: hold i is the i-th.
        quick_ids = sorted(e.data["task_id"] for e in _starts(entries, "quick"))
        hold_ids = sorted(held)
        assert quick_ids == list(range(quick_ids[0], quick_ids[0] + QUICK))
        assert hold_ids == list(range(quick_ids[-1] + 1, quick_ids[-1] + 1 + HELD))
        held_by = Counter(held.values())
        victim = max(("a", "b"), key=lambda n: held_by[n])
        survivor = "b" if victim == "a" else "a"
        interrupted = {t for t, n in held.items() if n == victim}
        assert interrupted and not _of(entries, "activity.completed", "hold")

        # A crashed app container; its daprd stays up and, with no worker connected,
        # drops the workflow actor types from placement. Release the holds only once the
        # survivor's daprd has taken the table without the victim: while placement
        # rebalances, daprd holds calls to workflow actors (up to its 2 s "in-flight lock
        # claims" timeout) and then cancels them, and an activity whose result was being
        # delivered then is run again although it was never interrupted. Waiting makes that
        # rarer, not impossible (it happened in CI), so the checks below take the run log
        # as the truth of what ran.
        survivor_log = (stack if survivor == "a" else replica).log_path
        tables = _tables(survivor_log)
        apps[victim].kill()
        wait_until(lambda: _tables(survivor_log) > tables, 30,
                   f"placement to drop replica {victim}", details=stack.log_tail)
        (data / "release").touch()
        state = rig.wait(instance, TIMEOUT_S)
        assert state.runtime_status.name == "COMPLETED", apps[survivor].tail()
        assert orjson.loads(state.serialized_output) == \
            sum(range(QUICK)) + sum(1000 + i for i in range(HELD))
        assert apps[survivor].running and stack.running and replica.running

    entries = read()
    # The app's own run log is the ground truth of how often each body ran; the ledger
    # must tell the same story. Every interrupted activity ran again on the survivor. An
    # activity that finished on the survivor while placement rebalanced may have run
    # again too: daprd cancelled its result delivery (ADR 0008). Either way the ledger
    # holds one start per run, attempts numbered 1..k, only the first off the survivor.
    story = [(e.seq, e.kind, e.data.get("task_id"), e.data.get("attempt"),
              e.data.get("execution_id"), worker.get(e.data.get("worker", ""), "?"))
             for e in entries if e.data.get("activity") == "hold"]
    runs = Counter(tuple(line.split()[:2]) for line in
                   (data / "runs.txt").read_text().splitlines())
    assert {k: v for k, v in runs.items() if k[0] == "quick"} == \
        {("quick", str(i)): 1 for i in range(QUICK)}, runs
    ran = {t: runs[("hold", str(hold_ids.index(t)))] for t in held}
    assert sum(ran.values()) == sum(v for k, v in runs.items() if k[0] == "hold"), runs
    starts = Counter((e.data["task_id"], e.data["attempt"], worker[e.data["worker"]])
                     for e in _starts(entries, "hold"))
    assert starts == Counter({**{(t, 1, n): 1 for t, n in held.items()},
                              **{(t, a, survivor): 1 for t in held
                                 for a in range(2, ran[t] + 1)}}), (victim, ran, story)
    rerun = {t for t, k in ran.items() if k > 1}
    assert interrupted <= rerun, (victim, ran, story)
    # A finished body records its completion: every run but the victim's killed ones.
    done = Counter((e.data["task_id"], worker[e.data["worker"]])
                   for e in _of(entries, "activity.completed", "hold"))
    assert done == Counter({(t, survivor): ran[t] - (t in interrupted) for t in held}), done
    # The workflow's turns ran where placement put its actor; the last on the survivor.
    turns = [(e.kind, worker[e.data["worker"]]) for e in entries
             if e.kind.startswith("workflow.")]
    assert turns[-1] == ("workflow.completed", survivor), turns

    _check_one_chain(pg_url, instance, tmp / "keys")
    # `histaudit verify`, as a user runs it: exit 0, and exactly one activity-reexecuted
    # (info) per activity that ran more than once; nothing else.
    r = cli("verify", instance, "--db", pg_url, "--trust", tmp / "keys", "--full", "--json",
            cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    reports = orjson.loads(r.stdout)["reports"]
    assert len(reports) == 1 and reports[0]["ok"], reports
    findings = reports[0]["findings"]
    assert sorted((f["code"], f["task_id"]) for f in findings) == \
        sorted(("activity-reexecuted", t) for t in rerun), findings
    print(f"[daprd replicas] quick by replica {dict(quick_by)}, held by replica "
          f"{dict(held_by)}, killed {victim}; re-run on the survivor as placement "
          f"rebalanced: {sorted(rerun - interrupted)}; workflow turns by replica "
          f"{dict(Counter(n for _, n in turns))}; {len(entries)} entries")


def _placed(main: Path, tables: int, own: Path) -> Callable[[], bool]:
    return lambda: _tables(main) >= tables and _tables(own) >= 1


def _reader(url: str, instance: str) -> Callable[[], list[fmt.Entry]]:
    def read() -> list[fmt.Entry]:
        with Ledger.open(url) as ledger:
            return [fmt.parse_entry(r.body) for r in ledger.entries(instance)]
    return read


def _of(entries: list[fmt.Entry], kind: str, activity: str) -> list[fmt.Entry]:
    return [e for e in entries if e.kind == kind and e.data.get("activity") == activity]


def _starts(entries: list[fmt.Entry], activity: str) -> list[fmt.Entry]:
    return _of(entries, "activity.started", activity)


def _check_one_chain(url: str, instance: str, keys: Path) -> None:
    """The two replicas' appends form one chain: seq 1..n, each entry linked to the one
    before, the ledger-wide leaf index contiguous, and both processes in it, interleaved;
    the full verify (signatures included) finds nothing but the re-executions."""
    with Ledger.open(url) as ledger:
        rows = list(ledger.entries(instance))
        assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
        assert [r.leaf for r in ledger.all_entries()] == list(range(len(rows)))
        prev, writers = fmt.GENESIS_PREV, []
        for r in rows:
            e = fmt.parse_entry(r.body)
            assert (e.seq, e.leaf, e.prev, e.instance) == (r.seq, r.leaf, prev, instance)
            prev = r.hash
            if "worker" in e.data:
                writers.append(e.data["worker"])
        head = ledger.head(instance)
        assert head is not None and head.seq == len(rows)
        report = verify_instance(ledger, instance, full=True, trust=TrustStore.load(str(keys)))
    assert report.ok and report.codes() <= {"activity-reexecuted"}, report.findings
    switches = sum(1 for x, y in itertools.pairwise(writers) if x != y)
    assert len(set(writers)) == 2 and switches >= 2, writers
    print(f"[daprd replicas] {len(rows)} entries in one chain, writer switched {switches} "
          f"times")
