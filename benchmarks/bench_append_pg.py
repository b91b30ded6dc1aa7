"""Figure 2: PostgreSQL appends/s with 1 and 4 processes against raw INSERT commits.

A private PostgreSQL server (``tests/support/postgres.py``) runs on this machine, with
its default durability (fsync on, synchronous_commit on). Every measurement starts N
fresh processes (spawn), lets each connect and warm up, lines them up on a barrier and
lets them run for a fixed wall time; throughput = all operations / (last end - first
start). Scenarios, interleaved in every round:

* ``raw×1`` / ``raw×4``  baseline: autocommit ``INSERT`` of one entry-sized row per
  transaction, from 1 or 4 processes (4 connections get PostgreSQL's group commit);
* ``raw+lock×4``         diagnostic: the same INSERT inside a transaction that first takes
  one transaction-scoped advisory lock — the ledger's serialization, without the ledger;
* ``append×1``           ``chain.append`` (``histaudit.ledger.chain``) from 1 process;
* ``append×4 separate``  4 processes, each appending to its own instance, one at a time;
* ``append×4 shared``    4 processes appending to one shared instance;
* ``group×4×8``          the realistic case: 4 processes, each with 8 threads (an app's
  worker threads) appending durable entries through one
  ``histaudit.ledger.writer.GroupWriter`` per process, every thread to its own
  instance; concurrent callers share a commit, and ``GroupWriter.batches`` counts the
  commits (batching factor = appends ÷ commits);
* ``many×4×16``          4 processes calling ``chain.append_many`` with 16 entries per
  call (one transaction, one commit per call).

All appends are durable (``durable=True``). Figures: appends/s of group×4×8 and
many×4×16 against the issue's absolute target (≥ 2,000 appends/s with 4 processes,
shown as measured ÷ 2,000) and ÷ raw×4; append×1 / raw×1 and append×4 / raw×4 (one at
a time) for information.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

from bench_common import Series, log

from histaudit.ledger.keys import KeyFileSigner

LOCK_KEY = 0x6265_6E63_686C_6F63  # any key other than the ledger's own
TARGET_4P = 2000.0
THREADS = 8
BATCH = 16


def _threaded(op_for: Any, threads: int, warmup: int, duration: float, barrier: Any,
              mark: Any) -> tuple[int, float, float, float]:
    """Run ``op_for(j)()`` in ``threads`` threads for ``duration`` s after the barrier;
    (operations, first start, last end, process CPU). ``mark()`` is called once warm-up
    is over, just before the timed window."""
    import threading

    ops = [op_for(j) for j in range(threads)]
    counts = [0] * threads
    errors: list[BaseException] = []
    go = threading.Event()
    state = {"deadline": 0.0}

    def work(j: int) -> None:
        try:
            op = ops[j]
            go.wait()
            n, deadline = 0, state["deadline"]
            while True:
                n += op()
                if time.perf_counter() >= deadline:
                    break
            counts[j] = n
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    for op in ops:
        for _ in range(warmup):
            op()
    ts = [threading.Thread(target=work, args=(j,)) for j in range(threads)]
    for t in ts:
        t.start()
    barrier.wait(timeout=300)
    mark()
    c0, t0 = time.process_time(), time.perf_counter()
    state["deadline"] = t0 + duration
    go.set()
    for t in ts:
        t.join()
    t1 = time.perf_counter()
    if errors:
        raise errors[0]
    return sum(counts), t0, t1, time.process_time() - c0


def _worker(kind: str, target: str, instance: str, duration: float, warmup: int,
            seed: int, barrier: Any, queue: Any) -> None:
    """One measuring process. ``target`` is a SQLAlchemy URL (append) or a conninfo (raw)."""
    try:
        body = os.urandom(420)
        if kind in ("append", "group", "many"):
            from bench_synth import workload

            from histaudit.ledger import chain
            from histaudit.ledger.store import Ledger
            from histaudit.ledger.writer import GroupWriter

            ledger = Ledger.open(target)
            signer = KeyFileSigner.generate()

        if kind == "group":
            writer = GroupWriter(ledger, signer)

            def op_for(j: int) -> Any:
                mix = workload(50_000_000, seed=seed * 100 + j,
                               first_task=(seed * 100 + j) * 10_000_000)
                inst = f"{instance}-t{j}"

                def op() -> int:
                    k, data, payloads = next(mix)
                    writer.append(inst, k, data, payloads or None, durable=True)
                    return 1
                return op

            marks: list[int] = []
            count, t0, t1, cpu = _threaded(op_for, THREADS, 3, duration, barrier,
                                           lambda: marks.append(writer.batches))
            # the commits of the timed window only
            queue.put({"count": count, "t0": t0, "t1": t1, "cpu": cpu,
                       "batches": writer.batches - marks[0]})
            return
        if kind == "append":
            mix = workload(50_000_000, seed=seed, first_task=seed * 10_000_000)

            def op() -> int:
                k, data, payloads = next(mix)
                chain.append(ledger, instance, k, data, signer=signer,
                             payloads=payloads or None, durable=True)
                return 1
        elif kind == "many":
            mix = workload(50_000_000, seed=seed, first_task=seed * 10_000_000)

            def op() -> int:
                items = [chain.Item(instance, k, data, payloads or None)
                         for k, data, payloads in (next(mix) for _ in range(BATCH))]
                chain.append_many(ledger, items, signer=signer, durable=True)
                return BATCH
        else:
            import psycopg

            conn = psycopg.connect(target, autocommit=(kind == "raw"))
            if kind == "raw":
                def op() -> int:
                    conn.execute("INSERT INTO raw_t (v) VALUES (%s)", (body,))
                    return 1
            else:
                def op() -> int:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                        conn.execute("INSERT INTO raw_t (v) VALUES (%s)", (body,))
                    return 1
        for _ in range(warmup):
            op()
        barrier.wait(timeout=300)
        count, c0, t0 = 0, time.process_time(), time.perf_counter()
        deadline = t0 + duration
        while True:
            count += op()
            t1 = time.perf_counter()
            if t1 >= deadline:
                break
        queue.put({"count": count, "t0": t0, "t1": t1, "cpu": time.process_time() - c0,
                   "batches": count // BATCH if kind == "many" else count})
    except BaseException as exc:  # noqa: BLE001 - report anything, never hang the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
        try:
            barrier.abort()
        except Exception:  # noqa: BLE001 - already failing; the error above is the report
            pass


def _measure(kind: str, target: str, procs: int, duration: float, *, shared: bool,
             seed0: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    ps = []
    for k in range(procs):
        instance = "shared-instance" if shared else f"proc-{seed0 + k}"
        p = ctx.Process(target=_worker, args=(kind, target, instance, duration, 5,
                                              seed0 + k, barrier, queue))
        p.start()
        ps.append(p)
    results = [queue.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"{kind}×{procs} failed: {errors[0]}")
    total = sum(r["count"] for r in results)
    commits = sum(r["batches"] for r in results)
    span = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    return {"ops": total, "span_s": round(span, 4), "rate_per_s": total / span,
            "per_process": [r["count"] for r in results], "commits": commits,
            "batching_factor": round(total / commits, 3) if commits else None,
            "client_cpu_us_per_op": round(1e6 * sum(r["cpu"] for r in results) / total, 1)}


def run(*, rounds: int, duration: float) -> dict[str, Any]:
    from bench_common import add_repo_paths

    add_repo_paths()
    import psycopg

    from histaudit.ledger.store import Ledger
    from support.postgres import PostgresServer

    server = PostgresServer()
    log("starting a private PostgreSQL server")
    server.start()
    try:
        server.create_database("bench_raw")
        raw_info = server.conninfo("bench_raw")
        with psycopg.connect(raw_info, autocommit=True) as c:
            c.execute("CREATE TABLE raw_t (id BIGSERIAL PRIMARY KEY, v BYTEA NOT NULL)")
            settings = {name: c.execute(f"SHOW {name}").fetchone()[0]
                        for name in ("server_version", "fsync", "synchronous_commit",
                                     "wal_sync_method", "commit_delay", "shared_buffers")}
        urls = {}
        for scen in ("one", "sep", "shared", "group", "many"):
            urls[scen] = server.create_database(f"bench_ledger_{scen}")
            Ledger.open(urls[scen], create=True).close()

        scenarios = [
            ("raw×1", "raw", raw_info, 1, False),
            ("append×1", "append", urls["one"], 1, False),
            ("raw×4", "raw", raw_info, 4, False),
            (f"group×4×{THREADS}", "group", urls["group"], 4, False),
            (f"many×4×{BATCH}", "many", urls["many"], 4, False),
            ("append×4 separate", "append", urls["sep"], 4, False),
            ("append×4 shared", "append", urls["shared"], 4, True),
            ("raw+lock×4", "raw_locked", raw_info, 4, False),
        ]
        group, many = f"group×4×{THREADS}", f"many×4×{BATCH}"
        rates = {name: Series() for name, *_ in scenarios}
        cpu = {name: Series() for name, *_ in scenarios}
        batching = {name: Series() for name in (group, many)}
        ratios = {k: Series() for k in ("group4_over_target2000", "group4_over_raw4",
                                        "many4_over_target2000", "many4_over_raw4",
                                        "append1_over_raw1", "append4_separate_over_raw4",
                                        "append4_shared_over_raw4", "rawlock4_over_raw4",
                                        "append4_separate_over_rawlock4",
                                        "append4_separate_over_append1",
                                        "group4_over_append4_separate",
                                        "append4_separate_over_target2000")}
        raw_rounds = []
        seed = 1
        for r in range(rounds):
            got: dict[str, dict[str, Any]] = {}
            # rotate the order each round, so slow phases of the machine spread out
            for name, kind, target, procs, shared in scenarios[r:] + scenarios[:r]:
                got[name] = _measure(kind, target, procs, duration, shared=shared, seed0=seed)
                seed += procs
                rates[name].add(got[name]["rate_per_s"])
                cpu[name].add(got[name]["client_cpu_us_per_op"])
            for name in (group, many):
                batching[name].add(got[name]["batching_factor"] or float("nan"))
            raw_rounds.append(got)
            rate = {k: v["rate_per_s"] for k, v in got.items()}
            ratios["group4_over_target2000"].add(rate[group] / TARGET_4P)
            ratios["group4_over_raw4"].add(rate[group] / rate["raw×4"])
            ratios["many4_over_target2000"].add(rate[many] / TARGET_4P)
            ratios["many4_over_raw4"].add(rate[many] / rate["raw×4"])
            ratios["append1_over_raw1"].add(rate["append×1"] / rate["raw×1"])
            ratios["append4_separate_over_raw4"].add(rate["append×4 separate"] / rate["raw×4"])
            ratios["append4_shared_over_raw4"].add(rate["append×4 shared"] / rate["raw×4"])
            ratios["rawlock4_over_raw4"].add(rate["raw+lock×4"] / rate["raw×4"])
            ratios["append4_separate_over_rawlock4"].add(
                rate["append×4 separate"] / rate["raw+lock×4"])
            ratios["append4_separate_over_append1"].add(
                rate["append×4 separate"] / rate["append×1"])
            ratios["group4_over_append4_separate"].add(rate[group] / rate["append×4 separate"])
            ratios["append4_separate_over_target2000"].add(rate["append×4 separate"] / TARGET_4P)
            log(f"pg round {r + 1}/{rounds}: " +
                ", ".join(f"{k} {v:,.0f}/s" for k, v in rate.items()) +
                f"; batching {group} {got[group]['batching_factor']}/commit")
        return {"params": {"rounds": rounds, "seconds_per_measurement": duration,
                           "group_threads_per_process": THREADS, "many_batch": BATCH},
                "server": settings,
                "names": {"group": group, "many": many},
                "batching_factor": {k: s.to_json(2) for k, s in batching.items()},
                "rates_per_s": {k: s.to_json(1) for k, s in rates.items()},
                "client_cpu_us_per_op": {k: s.to_json(1) for k, s in cpu.items()},
                "ratios": {k: s.to_json() for k, s in ratios.items()},
                "rounds": raw_rounds}
    finally:
        server.stop()
