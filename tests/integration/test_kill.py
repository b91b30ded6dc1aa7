"""SIGKILL during appends, as a family: hundreds of kills at random moments lose nothing.

Writer processes append to a few shared instances from several threads through one
:class:`~histaudit.ledger.writer.GroupWriter` (the interceptor's path: concurrent appends
share a transaction), mixing durable appends with non-durable ones (``durable=False``:
committed without waiting for the disk, as the interceptor does for everything but
activity outcomes and effect intents) and entries with kept payloads. Each thread prints
an append only once it has committed (``GroupWriter.append`` returned); the test kills
every writer with SIGKILL at a random moment — most of the time inside an append,
mid-transaction or mid-fsync — and starts the next batch. A SIGKILL leaves the OS page
cache intact, so a non-durable commit must survive it exactly like a durable one.
Afterwards ``histaudit verify --all --full`` must report 0 findings (nothing committed was
lost or corrupted, no half-written entry or payload, no forked chain) and every append a
writer reported as committed must be stored, byte for byte (its hash), durable or not.
Both stores; 50 kills each in ``make test`` (≈ 20 s of CPU a store), 200 in ``make
test-long``. Fifty random moments already land in every phase an append has (the
interceptor's three-thread group commit runs about 40 appends a writer before its kill,
durable and not, with and without payloads); the longer run only samples them more often.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from histaudit.ledger import records as fmt
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from support.cli import cli, exits
from support.sizes import sized

pytestmark = [pytest.mark.timeout(600), pytest.mark.sized]

KILLS_PER_STORE = sized(50, 200)  # on each store
BATCH = 5              # writers started together, then killed one by one
INSTANCES = ("wf-kill-0", "wf-kill-1", "wf-kill-2")
MAX_DELAY = 0.25       # seconds after a writer's first commit until its kill
THREADS = 3            # appending threads per writer, sharing one GroupWriter

_WRITER = """
import sys, threading
from histaudit.ledger import records as rec
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger
from histaudit.ledger.writer import GroupWriter

url, key, first, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5:]
writer = GroupWriter(Ledger.open(url), KeyFileSigner.load(key))
out = threading.Lock()

def work(t):
    i = 0
    while True:
        name = names[(first + t + i) % len(names)]
        durable = (i + t) % 3 == 0  # one in three waits for the disk
        data, payloads = {"t": t, "i": i, "pad": "x" * (i % 300)}, None
        if i % 4 == 1:  # a kept payload: its row commits with the entry or not at all
            raw, salt = f"payload {t}/{i}".encode(), rec.new_salt()
            c = rec.commit(raw, salt)
            data["p"], payloads = {"c": c, "k": True, "n": len(raw)}, {salt: (c, raw)}
        entry = writer.append(name, "step.done", data, payloads, durable=durable)
        with out:  # reported only once the append returned
            sys.stdout.write(f"{entry.instance} {entry.seq} {entry.hash} {int(durable)}\\n")
            sys.stdout.flush()
        i += 1

for t in range(threads):
    threading.Thread(target=work, args=(t,), daemon=True).start()
threading.Event().wait()
"""


def _committed(out: Path) -> list[tuple[str, int, str, bool]]:
    """The appends a writer reported as committed (complete lines only): instance, seq,
    hash, durable."""
    text = out.read_text()
    lines = text.split("\n")[:-1]  # a line cut by the kill has no newline yet
    return [(a, int(b), c, d == "1") for a, b, c, d in (line.split(" ") for line in lines)]


def _run_batch(url: str, key: Path, outs: list[Path], rng: random.Random) -> int:
    procs = []
    for n, out in enumerate(outs):
        with out.open("w") as fh:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _WRITER, url, str(key), str(n), str(THREADS), *INSTANCES],
                stdout=fh, stderr=subprocess.PIPE))
    killed = 0
    try:
        for proc, out in zip(procs, outs, strict=True):
            deadline = time.monotonic() + 120
            while out.stat().st_size == 0:  # wait for its first commit, then a random moment
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "a writer never committed"
                time.sleep(0.01)
            time.sleep(rng.uniform(0, MAX_DELAY))
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * len(procs)
    return killed


def test_sigkill_during_appends_loses_nothing(db_url: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    priv, pub, _ = generate_keypair(tmp_path / "keys", name="writer")
    Ledger.open(db_url, create=True).close()
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    started = time.monotonic()
    kills, reported = 0, []
    batch = 0
    while kills < KILLS_PER_STORE:
        outs = [tmp_path / f"w{batch}-{n}.out" for n in range(BATCH)]
        kills += _run_batch(db_url, priv, outs, rng)
        for out in outs:
            reported += _committed(out)
        batch += 1
    elapsed = time.monotonic() - started

    r = cli("verify", "--all", "--full", "--json", "--db", db_url, "--trust", pub,
            cwd=tmp_path)
    exits(r, 0)
    reports = json.loads(r.stdout)["reports"]
    assert sorted(d["instance"] for d in reports) == sorted(INSTANCES)
    assert [f for d in reports for f in d["findings"]] == []

    with Ledger.open(db_url) as ledger:
        stored = {(fmt.parse_entry(row.body).instance, fmt.parse_entry(row.body).seq):
                  fmt.sha256_hex(row.body) for row in ledger.all_entries()}
    lost = [(i, s, d) for i, s, h, d in reported if stored.get((i, s)) != h]
    assert lost == [], lost[:10]
    assert len(reported) == len(set(reported))  # no append reported twice
    durable = sum(d for *_, d in reported)
    assert 0 < durable < len(reported)  # both kinds of commit were killed around
    with capsys.disabled():
        print(f"\n[kill] {db_url.split(':')[0]}: {kills} SIGKILLs in {batch} batches, "
              f"{len(reported)} reported commits ({durable} durable), {len(stored)} stored "
              f"entries, "
              f"{len(lost)} lost, verify --all --full clean, {elapsed:.0f}s")
