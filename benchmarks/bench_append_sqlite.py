"""Figure 1: SQLite appends/s against the machine's raw sign and raw commit rates.

Each round measures, back to back in one process and one directory:

* ``t_sign``   raw Ed25519 sign of a typical entry body (cryptography/OpenSSL, no wrapper);
* ``t_commit`` raw stdlib ``sqlite3``: ``BEGIN IMMEDIATE; INSERT one entry-sized row;
  COMMIT`` with the ledger's pragmas (WAL, synchronous=FULL, busy_timeout);
* ``t_txn``    (diagnostic) the append's exact write set in raw ``sqlite3`` on a real
  ledger schema: the two lookups, the entry INSERT, the head INSERT/UPDATE and the
  payload INSERT, with precomputed bodies and dummy signatures — storage cost only;
* ``t_txn_unguarded``, ``t_txn_entry`` (diagnostic, figure 1i) the same on a ledger whose
  append-only triggers are dropped, and the entry row alone (no head, no payloads, no
  triggers): where the write set's cost beyond a one-row commit lies;
* ``t_build``  (diagnostic) building the entry and head canonical bytes + SHA-256;
* ``t_append`` ``chain.append`` (``histaudit.ledger.chain``) of the workload mix, one
  at a time, durable, round-robin over 8 instances;
* ``group``    (info) ``histaudit.ledger.writer.GroupWriter`` from 8 threads at once,
  each its own instance, durable: concurrent callers share a commit, and
  ``GroupWriter.batches`` gives the batching factor (appends ÷ commits).

:func:`run_growth` (figure 1e) measures ``chain.append`` into the largest instance of a
small ledger (built with ``bench_synth.build_ledger``) and of a copy of the big cached
verify ledger, interleaved with the same two baselines, so the ratio shows what a big
index costs an append.

Each round is cut into 10 slices that run a block of every measurement in rotating
order (fsync latency on a shared virtual disk drifts within seconds; slicing makes the
baseline and the subject sample the same drift). Ratios per round: combined limit =
1 / (2 t_sign + t_commit) (an append signs the entry and the head) and single-sign
limit = 1 / (t_sign + t_commit); the figure is appends/s divided by the limit. The
figure reported is the median round. Figure 1g divides by the limit of the append's own
write set instead, 1 / (2 t_sign + t_build + t_txn): what is left between the two is the
code's, while the gap between 1g's limit and 1a's is the cost of the rows an append must
write beyond a one-row commit (the entry's indexes, the head, the payloads). Figure 1h is
that gap as a ratio, 1g's limit ÷ 1a's: the figure 1a that code with no cost of its own
beyond the raw write set would reach (1a = 1g × 1h).

The raw connections set the ledger's busy_timeout, WAL and synchronous=FULL; the
store's ``secure_delete`` is not set: it only changes what DELETE writes (and Debian's
SQLite turns it on by default anyway).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import Series, Timing, log, measure
from bench_synth import raw_private, ts_for, workload
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer
from histaudit.ledger.store import Ledger
from histaudit.ledger.writer import GroupWriter

INSTANCES = 8
THREADS = 8
SLICES = 10
Plan = list[tuple[str, Callable[[int], int], int]]


def sliced_round(plan: Plan) -> dict[str, Timing]:
    """One round: SLICES slices, each running a block of every measurement of ``plan``
    in a rotating order; the blocks of each measurement are summed."""
    acc = {name: Timing(0, 0.0, 0.0) for name, _fn, _n in plan}
    for sl in range(SLICES):
        order = plan[sl % len(plan):] + plan[:sl % len(plan)]
        for name, fn, total in order:
            n = total // SLICES + (1 if sl < total % SLICES else 0)
            if n == 0:
                continue
            t = measure(lambda fn=fn, n=n: fn(n))
            a = acc[name]
            acc[name] = Timing(a.ops + t.ops, a.wall + t.wall, a.cpu + t.cpu)
    return acc


def baselines(workdir: Path, signer: Signer, bodies: list[bytes]
              ) -> tuple[Callable[[int], int], Callable[[int], int], sqlite3.Connection]:
    """The raw sign and raw commit loops (figure 1's two baselines)."""
    key = Ed25519PrivateKey.from_private_bytes(raw_private(signer))
    body_len = int(statistics.median(len(b) for b in bodies))
    raw = _raw_conn(workdir / "raw-commit.db")
    raw.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    row_value = os.urandom(body_len)

    def do_sign(n: int) -> int:
        sign = key.sign
        for i in range(n):
            sign(bodies[i & 63])
        return n

    def do_commit(n: int) -> int:
        for _ in range(n):
            raw.execute("BEGIN IMMEDIATE")
            raw.execute("INSERT INTO t (v) VALUES (?)", (row_value,))
            raw.execute("COMMIT")
        return n

    return do_sign, do_commit, raw


def group_appender(ledger: Ledger, signer: Signer, threads: int = THREADS
                   ) -> tuple[GroupWriter, Callable[[int], int]]:
    """A GroupWriter and a block function: ``n`` durable appends from ``threads`` threads
    at once, each appending the mix to its own instance (an app's worker threads)."""
    writer = GroupWriter(ledger, signer)
    mixes = [workload(10_000_000, seed=100 + j) for j in range(threads)]

    def do_group(n: int) -> int:
        share = [n // threads + (1 if j < n % threads else 0) for j in range(threads)]
        errors: list[BaseException] = []

        def work(j: int) -> None:
            try:
                mix, inst = mixes[j], f"thread-{j}"
                for _ in range(share[j]):
                    kind, data, payloads = next(mix)
                    writer.append(inst, kind, data, payloads or None, durable=True)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)

        ts = [threading.Thread(target=work, args=(j,)) for j in range(threads) if share[j]]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        return n

    return writer, do_group


def _sample_bodies(signer: Signer, n: int) -> list[bytes]:
    bodies, prev = [], fmt.GENESIS_PREV
    for seq, (kind, data, _p) in enumerate(workload(n), start=1):
        body = fmt.entry_body(instance=f"wf-{seq % INSTANCES}", seq=seq, leaf=seq - 1,
                              prev=prev, kind=kind, ts=ts_for(seq), kid=signer.kid, data=data)
        prev = fmt.sha256_hex(body)
        bodies.append(body)
    return bodies


def _raw_conn(path: Path) -> sqlite3.Connection:
    """A stdlib connection with exactly the ledger's connection settings."""
    db = sqlite3.connect(path, isolation_level=None, timeout=60)
    db.execute("PRAGMA busy_timeout = 60000")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def _raw_ledger(path: Path, *, guards: bool) -> sqlite3.Connection:
    """A raw connection to a new ledger (the real schema), its triggers dropped unless
    ``guards``."""
    Ledger.open(f"sqlite:///{path}", create=True).close()
    db = _raw_conn(path)
    if not guards:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                  ).fetchall():
            db.execute(f'DROP TRIGGER "{name}"')
    return db


def raw_write_set(db: sqlite3.Connection, bodies: list[bytes], work: list[Any], kid: str, *,
                  entry_only: bool = False) -> Callable[[int], int]:
    """A block function: ``n`` raw transactions storing what an append stores — the two
    lookups, the entry, the head (insert or update) and the payloads — with precomputed
    bodies and dummy signatures; ``entry_only``: the lookups and the entry row alone."""
    state = {"leaf": 0}
    dummy_sig = os.urandom(64)

    def do_txn(n: int) -> int:
        for _ in range(n):
            leaf = state["leaf"]
            inst = f"wf-{leaf % INSTANCES}"
            payloads = work[leaf % len(work)][2]
            db.execute("BEGIN IMMEDIATE")
            last = db.execute("SELECT seq, hash FROM histaudit_entries WHERE instance = ? "
                              "ORDER BY seq DESC LIMIT 1", (inst,)).fetchone()
            db.execute("SELECT max(leaf) FROM histaudit_entries").fetchone()
            seq = 1 if last is None else last[0] + 1
            db.execute("INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
                       "VALUES (?,?,?,?,?,?)",
                       (leaf, inst, seq, fmt.GENESIS_PREV, bodies[leaf & 63], dummy_sig))
            if not entry_only:
                # the schema's head triggers check the head body against the newest
                # entry, so the head is a real one (its µs of canonical bytes count too)
                head = fmt.head_body(instance=inst, seq=seq, leaf=leaf, hash=fmt.GENESIS_PREV,
                                     ts="2026-11-29T12:00:00.000000Z", kid=kid)
                if last is None:
                    db.execute("INSERT INTO histaudit_heads (instance, seq, body, sig) "
                               "VALUES (?,?,?,?)", (inst, seq, head, dummy_sig))
                else:
                    db.execute("UPDATE histaudit_heads SET seq = ?, body = ?, sig = ? "
                               "WHERE instance = ?", (seq, head, dummy_sig, inst))
                for salt, (c, p) in payloads.items():
                    # fresh commitment per row: the payload table's key must stay unique
                    db.execute("INSERT INTO histaudit_payloads (commitment, salt, data) "
                               "VALUES (?,?,?)",
                               (fmt.sha256_hex(c.encode() + bytes(8) + leaf.to_bytes(8, "big")),
                                salt, p))
            db.execute("COMMIT")
            state["leaf"] = leaf + 1
        return n

    return do_txn


def _warm(block: Any, wal: Path, *, max_blocks: int = 300) -> int:
    """Run ``block`` (10 operations) until the WAL file has stopped growing."""
    sizes: list[int] = []
    for i in range(max_blocks):
        block()
        sizes.append(wal.stat().st_size if wal.exists() else 0)
        # grown past one checkpoint's worth and flat over the last 5 blocks
        if i >= 5 and sizes[-1] > 0 and sizes[-1] == sizes[-6]:
            return 10 * (i + 1)
    return 10 * max_blocks


def run(workdir: Path, *, rounds: int, n_append: int, n_commit: int, n_sign: int
        ) -> dict[str, Any]:
    signer = KeyFileSigner.generate()
    bodies = _sample_bodies(signer, 64)
    body_len = int(statistics.median(len(b) for b in bodies))
    do_sign, do_commit, raw = baselines(workdir, signer, bodies)

    # raw append-shaped transactions on a real ledger schema: the whole write set, and
    # (figure 1i) the same without the append-only triggers and the entry row alone
    txn_work = list(itertools.islice(workload(10_000_000, seed=11), 5_000))
    txn_dbs = {name: _raw_ledger(workdir / f"raw-{name}.db", guards=name == "txn")
               for name in ("txn", "txn_unguarded", "txn_entry")}
    do_txn = raw_write_set(txn_dbs["txn"], bodies, txn_work, signer.kid)
    do_txn_unguarded = raw_write_set(txn_dbs["txn_unguarded"], bodies, txn_work, signer.kid)
    do_txn_entry = raw_write_set(txn_dbs["txn_entry"], bodies, txn_work, signer.kid,
                                 entry_only=True)

    # the real thing
    ledger = Ledger.open(f"sqlite:///{workdir / 'append.db'}", create=True)
    mix = workload(10_000_000, seed=3)
    counter = itertools.count()
    # GroupWriter from 8 threads, on a ledger of its own
    group_ledger = Ledger.open(f"sqlite:///{workdir / 'group.db'}", create=True)
    writer, do_group = group_appender(group_ledger, signer)

    def do_build(n: int) -> int:
        for i in range(n):
            kind, data, _p = txn_work[i % len(txn_work)]
            body = fmt.entry_body(instance="wf-1", seq=i + 1, leaf=i, prev=fmt.GENESIS_PREV,
                                  kind=kind, ts="2026-11-29T12:00:00.000000Z", kid=signer.kid,
                                  data=data)
            digest = fmt.sha256_hex(body)
            fmt.head_body(instance="wf-1", seq=i + 1, leaf=i, hash=digest,
                          ts="2026-11-29T12:00:00.000000Z", kid=signer.kid)
        return n

    def do_append(n: int) -> int:
        for _ in range(n):
            i = next(counter)
            kind, data, payloads = next(mix)
            chain.append(ledger, f"wf-{i % INSTANCES}", kind, data, signer=signer,
                         payloads=payloads or None, durable=True)
        return n

    # Warm-up, untimed: connection pools, statement caches, the first head rows — and
    # each database's WAL file. While a WAL file still grows, every fsync also commits
    # file-size metadata (ext4 journal) and costs several times more than once the WAL
    # has been checkpointed and is rewritten in place (SQLite's default autocheckpoint at
    # 1000 pages). Each database is written until its WAL stops growing, so baseline and
    # subject are both measured in that steady state.
    warm = {"append": _warm(lambda: do_append(10), workdir / "append.db-wal"),
            "commit": _warm(lambda: do_commit(10), workdir / "raw-commit.db-wal"),
            "txn": _warm(lambda: do_txn(10), workdir / "raw-txn.db-wal"),
            "txn_unguarded": _warm(lambda: do_txn_unguarded(10),
                                   workdir / "raw-txn_unguarded.db-wal"),
            "txn_entry": _warm(lambda: do_txn_entry(10), workdir / "raw-txn_entry.db-wal"),
            "group": _warm(lambda: do_group(10 * THREADS), workdir / "group.db-wal")}
    log(f"sqlite warm-up (operations until the WAL stopped growing): {warm}")

    series = {k: Series() for k in ("ratio_combined", "ratio_single", "append_per_s",
                                    "combined_limit_per_s", "single_limit_per_s",
                                    "t_sign_us", "t_commit_us", "t_txn_us", "t_build_us",
                                    "t_txn_unguarded_us", "t_txn_entry_us",
                                    "commit_over_txn", "commit_over_txn_unguarded",
                                    "commit_over_txn_entry",
                                    "t_append_us", "append_client_cpu_us",
                                    "ratio_cpu_floor_over_append_cpu",
                                    "write_set_limit_per_s", "ratio_write_set",
                                    "ceiling_write_set_over_combined", "group_per_s",
                                    "ratio_group_combined", "group_over_append",
                                    "group_batching_factor",
                                    "group_client_cpu_us")}
    round_rows: list[dict[str, Any]] = []
    n_group = THREADS * max(1, n_append // THREADS) * 2  # ≈ twice the one-at-a-time count
    for r in range(rounds):
        # Fine-grained interleaving: the round is cut into SLICES; each slice runs a
        # small block of every measurement, in a rotating order, and the blocks are
        # summed. fsync latency on a shared virtual disk drifts within seconds, and this
        # makes baseline and subject sample the same drift.
        plan: Plan = [("sign", do_sign, n_sign), ("commit", do_commit, n_commit),
                      ("append", do_append, n_append), ("txn", do_txn, n_commit),
                      ("txn_unguarded", do_txn_unguarded, n_commit),
                      ("txn_entry", do_txn_entry, n_commit),
                      ("build", do_build, n_sign), ("group", do_group, n_group)]
        batches0 = writer.batches
        acc = sliced_round(plan)
        group_t = acc["group"]
        batches = writer.batches - batches0
        sign_t, commit_t, append_t = acc["sign"], acc["commit"], acc["append"]
        txn_t, build_t = acc["txn"], acc["build"]
        ts_, tc, ta = sign_t.per_op, commit_t.per_op, append_t.per_op
        combined, single = 1 / (2 * ts_ + tc), 1 / (ts_ + tc)
        series["ratio_combined"].add(append_t.rate / combined)
        series["ratio_single"].add(append_t.rate / single)
        series["append_per_s"].add(append_t.rate)
        series["combined_limit_per_s"].add(combined)
        series["single_limit_per_s"].add(single)
        series["t_sign_us"].add(ts_ * 1e6)
        series["t_commit_us"].add(tc * 1e6)
        series["t_txn_us"].add(txn_t.per_op * 1e6)
        series["t_build_us"].add(build_t.per_op * 1e6)
        # Figure 1i, where 1h's gap lies: the one-row commit ÷ the raw write set, whole,
        # without the append-only triggers, and of the entry row alone (its two indexes)
        unguarded_t, entry_t = acc["txn_unguarded"], acc["txn_entry"]
        series["t_txn_unguarded_us"].add(unguarded_t.per_op * 1e6)
        series["t_txn_entry_us"].add(entry_t.per_op * 1e6)
        series["commit_over_txn"].add(tc / txn_t.per_op)
        series["commit_over_txn_unguarded"].add(tc / unguarded_t.per_op)
        series["commit_over_txn_entry"].add(tc / entry_t.per_op)
        series["t_append_us"].add(ta * 1e6)
        series["append_client_cpu_us"].add(append_t.cpu / append_t.ops * 1e6)
        # CPU-time view, robust to other tenants' load: the CPU an append cannot avoid
        # (two signatures, canonical bytes + SHA-256, the raw write set's own SQLite CPU)
        # over the CPU the appending process really spends per append
        floor_cpu = (2 * sign_t.cpu / sign_t.ops + build_t.cpu / build_t.ops
                     + txn_t.cpu / txn_t.ops)
        series["ratio_cpu_floor_over_append_cpu"].add(floor_cpu / (append_t.cpu / append_t.ops))
        # The wall-clock limit of the append's own write set: two signatures, the bytes,
        # and the raw transaction that stores exactly what an append stores (figure 1g)
        write_set = 1 / (2 * ts_ + build_t.per_op + txn_t.per_op)
        series["write_set_limit_per_s"].add(write_set)
        series["ratio_write_set"].add(append_t.rate / write_set)
        # Figure 1h: what figure 1a would be for code with no cost beyond that write set
        # (1a = 1g × 1h): the part of 1a's gap that is the storage an append must write
        series["ceiling_write_set_over_combined"].add(write_set / combined)
        series["group_per_s"].add(group_t.rate)
        series["ratio_group_combined"].add(group_t.rate / combined)
        series["group_over_append"].add(group_t.rate / append_t.rate)
        series["group_batching_factor"].add(group_t.ops / batches if batches else float("nan"))
        series["group_client_cpu_us"].add(group_t.cpu / group_t.ops * 1e6)
        round_rows.append({"sign": sign_t.to_json(), "commit": commit_t.to_json(),
                           "append": append_t.to_json(), "txn": txn_t.to_json(),
                           "txn_unguarded": unguarded_t.to_json(),
                           "txn_entry": entry_t.to_json(),
                           "build": build_t.to_json(), "group": group_t.to_json(),
                           "group_batches": batches})
        log(f"sqlite append round {r + 1}/{rounds}: {append_t.rate:,.0f} appends/s, "
            f"limit {combined:,.0f}/s, ratio {append_t.rate / combined:.3f}; GroupWriter×"
            f"{THREADS} {group_t.rate:,.0f}/s, {group_t.ops / max(1, batches):.1f}/commit")
    ledger.close()
    group_ledger.close()
    raw.close()
    for db in txn_dbs.values():
        db.close()

    med = {k: s.median for k, s in series.items()}
    decomposition = {
        "two_signatures_us": 2 * med["t_sign_us"],
        "raw_commit_us": med["t_commit_us"],
        "extra_storage_of_real_write_set_us": med["t_txn_us"] - med["t_commit_us"],
        "of_which_append_only_triggers_us": med["t_txn_us"] - med["t_txn_unguarded_us"],
        "of_which_head_and_payload_rows_us": (med["t_txn_unguarded_us"]
                                              - med["t_txn_entry_us"]),
        "of_which_entry_row_and_indexes_us": med["t_txn_entry_us"] - med["t_commit_us"],
        "canonical_bytes_and_sha256_us": med["t_build_us"],
        "remaining_python_sqlalchemy_overhead_us": (med["t_append_us"] - 2 * med["t_sign_us"]
                                                    - med["t_txn_us"] - med["t_build_us"]),
        "append_total_us": med["t_append_us"],
    }
    return {
        "warmup_ops": warm,
        "params": {"rounds": rounds, "appends_per_round": n_append,
                   "commits_per_round": n_commit, "signs_per_round": n_sign,
                   "instances": INSTANCES, "entry_body_bytes_median": body_len,
                   "group_threads": THREADS, "group_appends_per_round": n_group},
        "series": {k: s.to_json() for k, s in series.items()},
        "decomposition_us_median": {k: round(v, 1) for k, v in decomposition.items()},
        "rounds": round_rows,
    }


def _ledger_entries(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM histaudit_entries").fetchone()[0])
    finally:
        db.close()


def run_growth(workdir: Path, ledgers: dict[str, tuple[Path, str]], *, rounds: int,
               n_append: int, n_commit: int, n_sign: int) -> dict[str, Any]:
    """Figure 1e: ``chain.append`` (one at a time, durable) into ledgers of different sizes.

    ``ledgers``: label -> (a scratch copy of a ledger, the instance to append to — its
    largest, so the per-instance and the ledger-wide indexes are both big). Interleaved
    with the raw sign and raw commit baselines of figure 1, in the same slices. Each
    ratio is appends/s ÷ 1/(2·t_sign + t_commit) of the same round.
    """
    signer = KeyFileSigner.generate()
    bodies = _sample_bodies(signer, 64)
    do_sign, do_commit, raw = baselines(workdir, signer, bodies)
    opened: dict[str, Ledger] = {}
    plan: Plan = [("sign", do_sign, n_sign), ("commit", do_commit, n_commit)]
    sizes: dict[str, int] = {}
    for i, (label, (path, instance)) in enumerate(ledgers.items()):
        sizes[label] = _ledger_entries(path)
        led = Ledger.open(f"sqlite:///{path}")
        opened[label] = led
        mix = workload(10_000_000, seed=500 + i, first_task=10_000_000)

        def do_append(n: int, led: Ledger = led, mix: Any = mix, instance: str = instance
                      ) -> int:
            for _ in range(n):
                kind, data, payloads = next(mix)
                chain.append(led, instance, kind, data, signer=signer,
                             payloads=payloads or None, durable=True)
            return n

        plan.append((label, do_append, n_append))
    warm = {"commit": _warm(lambda: do_commit(10), workdir / "raw-commit.db-wal")}
    for label, fn, _n in plan[2:]:
        warm[label] = _warm(lambda fn=fn: fn(10), Path(f"{ledgers[label][0]}-wal"))
    log(f"sqlite growth warm-up (operations until the WAL stopped growing): {warm}")
    labels = list(ledgers)
    series: dict[str, Series] = {"t_sign_us": Series(), "t_commit_us": Series(),
                                 "combined_limit_per_s": Series()}
    for label in labels:
        series[f"append_per_s[{label}]"] = Series()
        series[f"ratio_combined[{label}]"] = Series()
    series["ratio_last_over_first"] = Series()
    rows = []
    try:
        for r in range(rounds):
            acc = sliced_round(plan)
            ts_, tc = acc["sign"].per_op, acc["commit"].per_op
            combined = 1 / (2 * ts_ + tc)
            series["t_sign_us"].add(ts_ * 1e6)
            series["t_commit_us"].add(tc * 1e6)
            series["combined_limit_per_s"].add(combined)
            for label in labels:
                series[f"append_per_s[{label}]"].add(acc[label].rate)
                series[f"ratio_combined[{label}]"].add(acc[label].rate / combined)
            series["ratio_last_over_first"].add(acc[labels[-1]].rate / acc[labels[0]].rate)
            rows.append({k: t.to_json() for k, t in acc.items()})
            log(f"sqlite growth round {r + 1}/{rounds}: " + ", ".join(
                f"{label} ({sizes[label]:,} entries) {acc[label].rate:,.0f}/s "
                f"ratio {acc[label].rate / combined:.3f}" for label in labels))
    finally:
        for led in opened.values():
            led.close()
        raw.close()
    return {"params": {"rounds": rounds, "appends_per_round": n_append,
                       "commits_per_round": n_commit, "signs_per_round": n_sign,
                       "ledgers": {label: {"entries": sizes[label], "instance": inst}
                                   for label, (_p, inst) in ledgers.items()}},
            "warmup_ops": warm,
            "series": {k: s.to_json() for k, s in series.items()}, "rounds": rows}
