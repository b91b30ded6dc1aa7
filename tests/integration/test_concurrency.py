"""Concurrent appends, on SQLite and on PostgreSQL.

Many processes (spawned, each with its own Ledger and its own Signer loaded from a 0600
key file) and many threads (sharing one Ledger) append at once. Appends are serialized
ledger-wide, so afterwards every instance's ``seq`` is 1..n with no gap and no fork, the
ledger-wide ``leaf`` index is contiguous, and the whole ledger verifies in full mode.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
import threading
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from histaudit.errors import KeyMaterialError
from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.verify.verifier import verify_all, verify_instance
from support.cli import cli
from support.ledgers import committed

# Thousands of fsynced appends from many processes: minutes on a loaded shared machine.
pytestmark = pytest.mark.timeout(1200)

PROCS, PER_PROC = 8, 500
THREADS, PER_THREAD = 8, 200
MIX_PROCS, MIX_INSTANCES, MIX_ROUNDS = 4, 4, 100
LIVE_WRITERS, LIVE_VERIFIERS, LIVE_ROUNDS, LIVE_CLI = 2, 2, 300, 6
LIVE_FAST_ROUNDS, LIVE_SLOW_PERIOD = 1500, 0.5
"""A live writer's rounds 10 ms apart, then one every LIVE_SLOW_PERIOD s: see _write_until."""
JOIN_TIMEOUT = 600.0  # correctness, not speed: a loaded shared machine fsyncs slowly


# --- run inside spawned worker processes (module level, so spawn can import them) --------

def _append_worker(url: str, key_path: str, instances: list[str], rounds: int, worker: int,
                   barrier: threading.Barrier) -> None:
    signer = KeyFileSigner.load(key_path)  # refuses a key file others can read
    with Ledger.open(url) as ledger:
        barrier.wait(timeout=120)  # start together, so the appends really contend
        for i in range(rounds):
            for instance in instances:
                data = {"worker": worker, "i": i}
                stored = None
                if i % 50 == 0:
                    data["arg"], stored = committed(f"w{worker} i{i}".encode())
                chain.append(ledger, instance, "step.done", data, signer=signer, payloads=stored)


def _write_until(url: str, key_path: str, instances: list[str], worker: int,
                 stop: threading.Event, started: threading.Event) -> None:
    signer = KeyFileSigner.load(key_path)
    with Ledger.open(url) as ledger:
        i = 0
        while not stop.is_set():
            for instance in instances:
                chain.append(ledger, instance, "step.done", {"worker": worker, "i": i},
                             signer=signer)
            i += 1
            started.set()
            # A steady stream, so the chains stay small enough to re-verify. Past
            # LIVE_FAST_ROUNDS (3,000 entries a writer: about what an idle machine appends
            # during the whole test) the rounds slow down: the two writers still commit
            # about eight times a second, during verifies that then take longer than that,
            # but a loaded machine no longer grows the chains as fast as it slows their
            # verifies (a CI run took 550 s at a constant 10 ms, another passed 1,200 s).
            stop.wait(0.01 if i < LIVE_FAST_ROUNDS else LIVE_SLOW_PERIOD)


def _verify_loop(url: str, trust_path: str, rounds: int, worker: int,
                 results: mp.Queue) -> None:  # type: ignore[type-arg]
    """Verify while the writers append: one instance, the whole ledger, and list --trust's
    way, alternately; report how many verifies ran and every finding they made."""
    trust = TrustStore.load(trust_path)
    findings: list[str] = []
    verifies = 0
    with Ledger.open(url) as ledger:
        for n in range(rounds):
            if n % 3 == 2:
                reports = list(verify_all(ledger, trust=trust))
            else:
                reports = [verify_instance(ledger, f"wf-live-{(n + worker) % 2}", trust=trust,
                                           full=n % 6 == 1, workers=1)]
            verifies += len(reports)
            findings += [f"{f.code}: {f.message}" for r in reports for f in r.findings]
    results.put((worker, verifies, findings[:20], len(findings)))


# --- helpers -----------------------------------------------------------------------------

def _key(tmp_path: Path) -> tuple[Path, TrustStore]:
    priv, _pub, signer = generate_keypair(tmp_path / "keys", name="writer")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    return priv, TrustStore([signer.public])


def _run_processes(url: str, key: Path, jobs: list[list[str]], rounds: int) -> float:
    """Start one spawned process per job, all released together; return elapsed seconds."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(jobs) + 1)
    procs = [ctx.Process(target=_append_worker, args=(url, str(key), instances, rounds, n,
                                                      barrier), daemon=True)
             for n, instances in enumerate(jobs)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)
        started = time.monotonic()
        deadline = started + JOIN_TIMEOUT
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        elapsed = time.monotonic() - started
        assert not [p.pid for p in procs if p.is_alive()], "append workers hung"
        assert [p.exitcode for p in procs] == [0] * len(procs)
        return elapsed
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def _check_chain(ledger: Ledger, instance: str, expected: int, trust: TrustStore,
                 per_worker: dict[int, int]) -> None:
    """Contiguous seq, no fork, each writer's entries in its own order, full verify clean."""
    rows = list(ledger.entries(instance))
    assert len(rows) == expected
    assert [r.seq for r in rows] == list(range(1, expected + 1))
    assert len({r.seq for r in rows}) == expected  # no two entries share a seq: no fork
    leaves = [r.leaf for r in rows]
    assert leaves == sorted(leaves) and len(set(leaves)) == expected
    prev, seen = fmt.GENESIS_PREV, defaultdict(list)
    for r in rows:
        e = fmt.parse_entry(r.body)
        assert (e.seq, e.leaf, e.prev, e.instance) == (r.seq, r.leaf, prev, instance)
        prev = r.hash
        seen[e.data["worker"]].append(e.data["i"])
    assert {w: len(v) for w, v in seen.items()} == per_worker
    for w, order in seen.items():
        assert order == sorted(order), f"writer {w}'s appends were reordered"
    head = ledger.head(instance)
    assert head is not None and head.seq == expected
    report = verify_instance(ledger, instance, trust=trust, full=True)
    assert report.findings == (), report.findings[:5]
    assert report.entries == expected


# --- tests -------------------------------------------------------------------------------

def test_processes_append_to_one_instance(db_url: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    key, trust = _key(tmp_path)
    Ledger.open(db_url, create=True).close()
    elapsed = _run_processes(db_url, key, [["wf-hot"]] * PROCS, PER_PROC)
    total = PROCS * PER_PROC
    with Ledger.open(db_url) as ledger:
        assert ledger.instance_ids() == ["wf-hot"]
        assert [r.leaf for r in ledger.all_entries()] == list(range(total))
        t0 = time.monotonic()
        _check_chain(ledger, "wf-hot", total, trust, dict.fromkeys(range(PROCS), PER_PROC))
        verified = time.monotonic() - t0
    with capsys.disabled():
        print(f"\n[concurrency] {db_url.split(':')[0]}: "
              f"{PROCS} processes x {PER_PROC} = {total} entries appended in {elapsed:.1f}s "
              f"({total / elapsed:.0f}/s), checked + verified --full in {verified:.1f}s")


def test_threads_append_through_one_ledger(db_url: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    with Ledger.open(db_url, create=True) as ledger:
        def work(worker: int) -> None:
            try:
                barrier.wait(timeout=60)
                for i in range(PER_THREAD):
                    chain.append(ledger, "wf-threads", "step.done", {"worker": worker, "i": i},
                                  signer=signer)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,), daemon=True)
                   for n in range(THREADS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=JOIN_TIMEOUT)
        elapsed = time.monotonic() - started
        assert not [t for t in threads if t.is_alive()], "append threads hung"
        assert errors == []
        total = THREADS * PER_THREAD
        assert [r.leaf for r in ledger.all_entries()] == list(range(total))
        _check_chain(ledger, "wf-threads", total, trust,
                     dict.fromkeys(range(THREADS), PER_THREAD))
    with capsys.disabled():
        print(f"\n[concurrency] {db_url.split(':')[0]}: {THREADS} threads x {PER_THREAD} = "
              f"{total} entries in {elapsed:.1f}s")


def test_processes_append_to_many_instances(db_url: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    key, trust = _key(tmp_path)
    Ledger.open(db_url, create=True).close()
    names = [f"wf-mix-{n}" for n in range(MIX_INSTANCES)]
    # Every process writes to every instance, each starting at a different one.
    jobs = [names[p % MIX_INSTANCES:] + names[:p % MIX_INSTANCES] for p in range(MIX_PROCS)]
    elapsed = _run_processes(db_url, key, jobs, MIX_ROUNDS)
    per_instance = MIX_PROCS * MIX_ROUNDS
    total = per_instance * MIX_INSTANCES
    with Ledger.open(db_url) as ledger:
        assert sorted(ledger.instance_ids()) == names
        leaves = [r.leaf for r in ledger.all_entries()]
        assert leaves == list(range(total))  # ledger-wide index: contiguous, no duplicate
        for name in names:
            _check_chain(ledger, name, per_instance, trust,
                         dict.fromkeys(range(MIX_PROCS), MIX_ROUNDS))
    with capsys.disabled():
        print(f"\n[concurrency] {db_url.split(':')[0]}: {MIX_PROCS} processes x "
              f"{MIX_INSTANCES} instances x {MIX_ROUNDS} = {total} entries in {elapsed:.1f}s")


def test_worker_refuses_a_key_file_others_can_read(tmp_path: Path) -> None:
    """The workers above load their key with Signer.load, which insists on mode 0600."""
    key, _ = _key(tmp_path)
    os.chmod(key, 0o644)
    with pytest.raises(KeyMaterialError, match="readable by others"):
        KeyFileSigner.load(key)


def test_verifiers_beside_writers_see_no_false_findings(db_url: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """Issue 10: a verify run while writers append read the head before an append and the
    entries after it, and reported a false head-mismatch (7% of mid-write verifies). Each
    verify now reads one snapshot: hundreds of verifies beside live writers, 0 findings."""
    priv, pub, _ = generate_keypair(tmp_path / "keys", name="writer")
    Ledger.open(db_url, create=True).close()
    ctx = mp.get_context("spawn")
    stop, results = ctx.Event(), ctx.Queue()
    started = [ctx.Event() for _ in range(LIVE_WRITERS)]
    writers = [ctx.Process(target=_write_until, daemon=True,
                           args=(db_url, str(priv), ["wf-live-0", "wf-live-1"], n, stop,
                                 started[n]))
               for n in range(LIVE_WRITERS)]
    # Not daemonic: verify --full checks signatures in a process pool of its own.
    verifiers = [ctx.Process(target=_verify_loop, daemon=False,
                             args=(db_url, str(pub), LIVE_ROUNDS, n, results))
                 for n in range(LIVE_VERIFIERS)]
    try:
        for p in writers:
            p.start()
        for e in started:
            assert e.wait(timeout=120), "a writer never appended"
        for p in verifiers:
            p.start()
        cli_findings, cli_runs = [], 0
        while any(p.is_alive() for p in verifiers) or cli_runs < LIVE_CLI:
            args = (["verify", "--all", "--json"] if cli_runs % 2 else
                    ["list", "--trust", str(pub), "--json"])
            if args[0] == "verify":
                args += ["--trust", str(pub)]
            r = cli(*args, "--db", db_url, cwd=tmp_path)
            assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
            doc = orjson.loads(r.stdout)
            if args[0] == "verify":
                cli_findings += [f for d in doc["reports"] for f in d["findings"]]
            else:
                cli_findings += [d for d in doc if d["status"] != "ok"]
            cli_runs += 1
        outcome = [results.get(timeout=JOIN_TIMEOUT) for _ in verifiers]
        for p in verifiers:
            p.join(timeout=60)
        assert [p.exitcode for p in verifiers] == [0] * LIVE_VERIFIERS
        assert all(p.is_alive() for p in writers), "a writer died while verifiers ran"
    finally:
        stop.set()
        for p in writers + verifiers:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    verifies = sum(v for _, v, _, _ in outcome)
    false = sum(n for _, _, _, n in outcome)
    examples = [f for _, _, fs, _ in outcome for f in fs]
    assert false == 0, examples
    assert cli_findings == [], cli_findings[:5]
    assert verifies >= LIVE_VERIFIERS * LIVE_ROUNDS
    trust = TrustStore.load(pub)
    with Ledger.open(db_url) as ledger:
        appended = sum(1 for _ in ledger.all_entries())
        reports = list(verify_all(ledger, trust=trust, full=True))
    assert [r.findings for r in reports] == [(), ()]
    with capsys.disabled():
        print(f"\n[concurrency] {db_url.split(':')[0]}: {verifies} library verifies and "
              f"{cli_runs} CLI verify/list runs beside {LIVE_WRITERS} writers "
              f"({appended} entries appended meanwhile): {false} false findings")
