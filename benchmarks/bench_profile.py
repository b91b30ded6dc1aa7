"""Where the time of default-mode verification goes.

Two complementary views of ``verify_instance(ledger, instance, trust=trust)``:

1. **cProfile, categorised.** The profiler's raw per-code-object stats (so the many
   generated ``<string>:__init__`` of dataclasses stay apart) are folded into named
   categories: a Python function by its module/name, a C function (``set()``,
   ``isinstance``, ``dict.get`` ...) by the function that called it, except the few C
   functions that are a category of their own (``orjson.loads``, hashlib, the sqlite3
   driver). Shares are of the profiled total. cProfile's per-call overhead inflates
   categories made of many tiny calls, hence view 2.

2. **Isolated components, no profiler.** The same rows pushed through one stage at a
   time: the stream only; ``verify_chain`` on pre-loaded rows; the check loop
   (``run_checks`` with no checks: ``parse_entry`` of each row); ``parse_entry`` and
   ``orjson.loads`` alone; and each check the default mode composes
   (:mod:`histaudit.verify.check`: ``IntegrityCheck``, ``KeyCheck``, ``HeadCheck``,
   ``BehaviourCheck``) fed the same pre-parsed rows through ``observe(row, parsed)`` and
   ``finish()``. Each is timed on its own and shown as µs/entry and % of the unprofiled
   ``verify_instance`` time.

Plus, for ``--full`` mode: the cost of one payload-commitment lookup
(``Ledger.payload``), which full mode does for every committed payload reference, and of
the canonical-form re-check (``IntegrityCheck(canonical=True)`` minus the same check
without it).
"""

from __future__ import annotations

import cProfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from bench_common import log
from bench_verify import floor_pass

from histaudit.ledger import records as fmt
from histaudit.ledger.keys import PublicKey, TrustStore
from histaudit.ledger.records import StoredEntry, StoredHead
from histaudit.ledger.store import Ledger
from histaudit.verify.behaviour import BehaviourCheck
from histaudit.verify.check import ChainCheck, Parsed, run_checks
from histaudit.verify.integrity import HeadCheck, IntegrityCheck
from histaudit.verify.signatures import KeyCheck
from histaudit.verify.verifier import verify_chain, verify_instance

CATS = {
    "sqlalchemy": "SQLAlchemy: execute, result & Row objects",
    "driver": "sqlite3 C driver (execute/fetch)",
    "stream": "stream: cursor rows into StoredEntry (store/snapshot.py, sql.py, columns.py)",
    "stored": "StoredEntry(...) construction",
    "scan": "ChainScan fast loop: field checks, tip, dispatch (verify/scan.py)",
    "sha": "SHA-256 (records.sha256_hex)",
    "orjson": "orjson.loads",
    "parse": "parse_entry field checks (set(), _str/_int/_hex64)",
    "entry": "Entry(...) construction (frozen dataclass)",
    "key": "key checks (KeyCheck, key_findings, TrustStore.get, valid_at)",
    "behaviour": "behaviour check: event tuples, spill, finish (verify/behaviour*.py)",
    "loop": "slow path: run_checks loop + IntegrityCheck (seq/link bookkeeping)",
    "head": "head check + report",
    "other": "other",
}


def _own_category(code: Any) -> str | None:
    if isinstance(code, str):  # a C function
        if "orjson" in code:
            return "orjson"
        if "_hashlib" in code or "sha256" in code:
            return "sha"
        if "sqlite3" in code:
            return "driver"
        return None
    fn, name = code.co_filename.replace("\\", "/"), code.co_qualname
    if fn == "<string>":
        return None
    if "/sqlalchemy/" in fn:
        return "sqlalchemy"
    if "histaudit/ledger/store/" in fn:
        return "stream"
    if fn.endswith("histaudit/verify/scan.py"):
        return "scan"
    if fn.endswith("histaudit/ledger/records.py"):
        if name == "sha256_hex":
            return "sha"
        if name == "parse_head":
            return "head"
        return "parse"
    if fn.endswith(("histaudit/verify/behaviour.py", "histaudit/verify/behaviour_events.py",
                    "histaudit/verify/behaviour_spill.py")):
        return "behaviour"
    if fn.endswith("histaudit/ledger/keys.py"):
        return "key" if name in ("TrustStore.get", "PublicKey.valid_at", "parse_time") \
            else "head"
    if fn.endswith("histaudit/verify/signatures.py"):
        return "key"
    if fn.endswith("histaudit/verify/check.py"):
        return "loop"
    if fn.endswith("histaudit/verify/integrity.py"):
        return "loop" if name in ("IntegrityCheck.observe", "IntegrityCheck._add",
                                  "HeadCheck.observe") else "head"
    if fn.endswith(("histaudit/verify/verifier.py", "histaudit/verify/report.py",
                    "histaudit/verify/findings.py")):
        return "head"
    if "/sqlite3/" in fn:
        return "driver"
    return "other"


def categorise(prof: cProfile.Profile) -> tuple[dict[str, float], list[dict[str, Any]]]:
    stats = prof.getstats()
    callers: dict[Any, list[tuple[Any, float, float]]] = defaultdict(list)
    for e in stats:
        for s in e.calls or ():
            callers[s.code].append((e.code, s.inlinetime, s.totaltime))

    memo: dict[Any, str] = {}

    def cat_of(code: Any, depth: int = 0) -> str:
        if code in memo:
            return memo[code]
        own = _own_category(code)
        if own is None:
            if not isinstance(code, str) and code.co_filename == "<string>" \
                    and code.co_name == "__init__":
                src = max(callers.get(code, [(None, 0, 0)]), key=lambda c: c[2])[0]
                own = ("entry" if src is not None and not isinstance(src, str)
                       and src.co_filename.endswith("records.py") else
                       "stored" if src is not None and not isinstance(src, str)
                       and "histaudit/ledger/store/" in src.co_filename else "other")
            elif depth > 20 or not callers.get(code):
                own = "other"
            else:
                src = max(callers[code], key=lambda c: c[2])[0]
                own = cat_of(src, depth + 1)
        memo[code] = own
        return own

    totals: dict[str, float] = defaultdict(float)
    funcs: list[dict[str, Any]] = []
    for e in stats:
        code = e.code
        if _own_category(code) is None and isinstance(code, str) and callers.get(code):
            # C helper: split its time over its callers' categories
            for src, inline, _tot in callers[code]:
                totals[cat_of(src)] += inline
        else:
            totals[cat_of(code)] += e.inlinetime
        label = code if isinstance(code, str) else \
            f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"
        funcs.append({"function": label, "calls": e.callcount,
                      "tottime_s": round(e.inlinetime, 4), "cumtime_s": round(e.totaltime, 4)})
    funcs.sort(key=lambda f: -f["tottime_s"])
    return dict(totals), funcs[:25]


def _t(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(db: Path, instance: str, trust: TrustStore, *, repeats: int = 3) -> dict[str, Any]:
    ledger = Ledger.open(f"sqlite:///{db}")
    try:
        # unprofiled reference time (best of repeats: the least disturbed run)
        t_total = min(_t(lambda: verify_instance(ledger, instance, trust=trust))
                      for _ in range(repeats))
        prof = cProfile.Profile()
        rep = prof.runcall(verify_instance, ledger, instance, trust=trust)
        n = rep.entries
        totals, top = categorise(prof)
        prof_total = sum(totals.values())
        log(f"profile: {n:,} entries, {t_total:.2f}s unprofiled, {prof_total:.2f}s profiled")
        iso, extras = _isolated(ledger, db, instance, trust, n=n, t_total=t_total,
                                repeats=repeats)
    finally:
        ledger.close()
    return {
        "instance": instance, "entries": n,
        "verify_unprofiled_s": round(t_total, 4),
        "verify_unprofiled_entries_per_s": round(n / t_total, 1),
        "profiled_total_s": round(prof_total, 4),
        "categories": {CATS[k]: {"seconds": round(v, 4), "pct": round(100 * v / prof_total, 1)}
                       for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "top_functions": top,
        "isolated": iso,
        **extras,
    }


def _feed(make: Any, pairs: list[tuple[StoredEntry, Parsed]]) -> Any:
    """A stage that feeds ``pairs`` to a fresh check from ``make()`` and finishes it."""
    def go() -> None:
        check: ChainCheck = make()
        for row, parsed in pairs:
            check.observe(row, parsed)
        list(check.finish())
    return go


def _isolated(ledger: Ledger, db: Path, instance: str, trust: TrustStore, *, n: int,
              t_total: float, repeats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """View 2, and the full-mode extras: every stage timed alone on pre-loaded rows."""
    head: StoredHead | None = ledger.head(instance)
    rows = list(ledger.entries(instance))
    bodies = [r.body for r in rows]
    pairs: list[tuple[StoredEntry, Parsed]] = [(r, fmt.parse_entry(r.body)) for r in rows]
    parsed = [e for _, e in pairs if isinstance(e, fmt.Entry)]
    key = next(iter(trust))
    windowed = TrustStore([PublicKey(kid=key.kid, raw=key.raw,
                                     not_before="2020-01-01T00:00:00.000000Z",
                                     not_after="2030-01-01T00:00:00.000000Z")])

    def stream() -> None:
        for _ in ledger.entries(instance):
            pass

    def raw_read() -> None:
        floor_pass(db, instance, parse=False, hash_=False)

    def chain() -> None:
        verify_chain(instance, rows, head, trust=trust)

    def loop() -> None:
        run_checks(rows, [])

    def parse() -> None:
        for b in bodies:
            fmt.parse_entry(b)

    def loads() -> None:
        for b in bodies:
            orjson.loads(b)

    def sha() -> None:
        for b in bodies:
            fmt.sha256_hex(b)

    integrity_done = IntegrityCheck(instance)  # the tip HeadCheck compares the head with
    for row, p in pairs:
        integrity_done.observe(row, p)

    def head_check() -> HeadCheck:
        return HeadCheck(instance, head, integrity_done, trust)

    parts = {
        "stream (Snapshot.entries: sqlite3 cursor rows into StoredEntry)": stream,
        "raw sqlite3 read of the same rows (for comparison)": raw_read,
        "verify_chain on pre-loaded rows (everything but the stream)": chain,
        "  run_checks with no checks (the loop + parse_entry of each row)": loop,
        "    parse_entry (incl. orjson.loads)": parse,
        "      of which orjson.loads alone": loads,
        "  IntegrityCheck.observe + finish (SHA-256, seq, links, leaves)":
            _feed(lambda: IntegrityCheck(instance), pairs),
        "    of which SHA-256 of each body": sha,
        "  KeyCheck.observe + finish, key without validity window":
            _feed(lambda: KeyCheck(instance, trust), pairs),
        "  KeyCheck.observe + finish, key WITH a validity window (for comparison)":
            _feed(lambda: KeyCheck(instance, windowed), pairs),
        "  HeadCheck.observe + finish": _feed(head_check, pairs),
        "  BehaviourCheck.observe + finish": _feed(lambda: BehaviourCheck(instance), pairs),
    }
    iso = {}
    for label, fn in parts.items():
        best = min(_t(fn) for _ in range(repeats))
        iso[label] = {"us_per_entry": round(best / n * 1e6, 3),
                      "pct_of_verify": round(100 * best / t_total, 1)}

    # --full mode extra: the canonical-form re-check of every entry, as the integrity
    # check's canonical=True costs over the same check without it
    sample = pairs[:20_000]
    t_on = min(_t(_feed(lambda: IntegrityCheck(instance, canonical=True), sample))
               for _ in range(repeats))
    t_off = min(_t(_feed(lambda: IntegrityCheck(instance), sample)) for _ in range(repeats))
    t_canon = (t_on - t_off) / max(1, len(sample))

    # --full mode extra: one payload lookup per committed reference
    commitments = [e.data["output"]["c"] for e in parsed
                   if isinstance(e.data.get("output"), dict)][:2000]
    refs_per_entry = sum(1 for e in parsed for v in e.data.values()
                         if isinstance(v, dict) and isinstance(v.get("c"), str)) / n
    t_lookup = min(_t(lambda: [ledger.payload(c) for c in commitments])
                   for _ in range(2)) / max(1, len(commitments))
    return iso, {
        "full_mode_payload_lookup": {
            "us_per_lookup": round(t_lookup * 1e6, 1),
            "refs_per_entry": round(refs_per_entry, 3),
            "us_per_entry": round(t_lookup * refs_per_entry * 1e6, 1)},
        "full_mode_canonical_check_us_per_entry": round(t_canon * 1e6, 2),
    }


def stream_experiments(db: Path, sizes: dict[str, int]) -> dict[str, Any]:
    """How reading one instance scales as the ledger is built.

    ``Ledger.entries`` reads an instance with one forward cursor over the store's own
    statement ``entries_of`` (``WHERE instance = ? ORDER BY leaf``, on the schema's
    (instance, leaf) index). Timed per instance (µs/entry: flat = linear, growing =
    super-linear), next to one plain ``sqlite3`` query over the same rows; the plan is
    SQLite's for the store's statement.
    """
    import sqlite3

    from histaudit.ledger.store.sql import statements

    def plan(path: Path, inst: str) -> list[str]:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return [r[3] for r in con.execute(
                "EXPLAIN QUERY PLAN " + statements("sqlite").entries_of, (inst,))]
        finally:
            con.close()

    def stream_us(path: Path, inst: str) -> float:
        ledger = Ledger.open(f"sqlite:///{path}")
        try:
            t0, n = time.perf_counter(), 0
            for _ in ledger.entries(inst):
                n += 1
            return (time.perf_counter() - t0) / n * 1e6
        finally:
            ledger.close()

    out: dict[str, Any] = {"as_built": {}}
    for inst, n in sorted(sizes.items(), key=lambda kv: kv[1]):
        t0 = time.perf_counter()
        floor_pass(db, inst, parse=False, hash_=False)
        raw_us = (time.perf_counter() - t0) / n * 1e6
        us = stream_us(db, inst)
        out["as_built"][inst] = {"entries": n, "ledger_entries_us_per_entry": round(us, 2),
                                 "single_raw_query_us_per_entry": round(raw_us, 2)}
        log(f"stream {inst}: Ledger.entries {us:.1f} µs/entry, one raw query {raw_us:.2f}")
    out["as_built_plan"] = plan(db, max(sizes, key=sizes.get))
    return out
