"""Figure 3: verification speed on a big SQLite instance.

Default mode (hashes, links, keys, behaviour, signed head) is single-threaded; its
baseline is the *Python floor* on the same rows, measured in the same round: stdlib
``sqlite3`` streaming ``body, hash`` of the instance in leaf order, SHA-256 of every body
and ``orjson.loads`` of every body — the least any Python verifier that hashes and parses
each entry must do. Figure = verify entries per CPU-second ÷ floor entries per CPU-second
(both single-threaded; CPU time leaves out the time other tenants held the core; the
wall-clock ratio is kept in the JSON too). Target ≥ 0.8.

``--full`` mode adds an Ed25519 verify per entry on a process pool (one worker per core)
and payload-commitment checks. Baseline: the raw single-thread Ed25519 verify rate
(cryptography/OpenSSL, on real entry bodies and signatures from the same ledger)
× the number of cores. Figure = full-mode entries/s ÷ that (target ≥ 0.9). A second,
diagnostic baseline runs the raw verify loop in one process per core at the same time,
which shows what the cores really deliver on this shared machine.

Figure 3h (info) is the *bound*: the least loop a CPython verifier that reports these
findings must run per row, measured like the floor and divided by it: the columns the
verifier reads (as it does, the instance's slot NULL), SHA-256 and ``orjson.loads`` of
each body, the chain's comparisons (hash, seq, prev, leaf, instance) and, for each tracked
entry, one hash of its task or effect key kept (what spotting a repeat takes). It reports
nothing; it is the ceiling 3a can reach in CPython, and 3a ÷ 3h is how far the verifier's
code is from it.
Figure 3i (info) adds to that loop every other test the verifier's fast path makes of
each row (:func:`checked_pass`): the ceiling of a CPython verifier with those tests and no
behaviour bookkeeping beyond the one hash.

Every figure is measured on each instance of the verify ledger (e.g. 10k, 100k and 1M
entries), so the JSON shows how it grows with size (``by_size``); the headline figures
are the largest instance's.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from bench_common import Series, Timing, log, measure
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from histaudit.ledger import records
from histaudit.ledger.keys import TrustStore


def floor_pass(path: Path, instance: str, *, parse: bool = True, hash_: bool = True) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = db.execute("SELECT body, hash FROM histaudit_entries WHERE instance = ? "
                         "ORDER BY leaf", (instance,))
        n = 0
        sha, loads = hashlib.sha256, orjson.loads
        while True:
            rows = cur.fetchmany(5000)
            if not rows:
                return n
            for body, _h in rows:
                if hash_:
                    sha(body).hexdigest()
                if parse:
                    loads(body)
            n += len(rows)
    finally:
        db.close()


_KEYED = {"workflow.scheduled_activity": ("task_id", "execution_id"),
          "activity.started": ("task_id", "execution_id"),
          "activity.completed": ("task_id", "execution_id"),
          "effect.intent": ("name", "key"), "effect.done": ("name", "key")}


@contextlib.contextmanager
def _chunks(path: Path, instance: str) -> Iterator[Iterator[list[Any]]]:
    """The columns the verifier reads of ``instance`` (the instance's slot NULL), in leaf
    order, 256 rows a fetch (as ``Snapshot.entry_chunks`` reads them), on a read-only
    connection."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = db.execute("SELECT leaf, NULL, seq, hash, body, sig FROM histaudit_entries "
                         "WHERE instance = ? ORDER BY leaf", (instance,))
        yield iter(lambda: cur.fetchmany(256), [])
    finally:
        db.close()


def bound_pass(path: Path, instance: str) -> int:
    """Figure 3h's loop (module doc); raises if a row of the bench ledger fails a check,
    so the comparisons are real ones."""
    with _chunks(path, instance) as chunks:
        sha, loads, keyed = hashlib.sha256, orjson.loads, _KEYED
        tip_seq, tip_hash, last_leaf, n, bad = 0, "0" * 64, -1, 0, 0
        keys: list[int] = []
        for rows in chunks:
            for leaf_c, _instance, seq_c, hash_c, body, _sig in rows:
                digest = sha(body).hexdigest()
                doc = loads(body)
                seq, leaf = doc["seq"], doc["leaf"]
                if not (digest == hash_c and seq == tip_seq + 1 and seq == seq_c
                        and doc["prev"] == tip_hash and leaf == leaf_c and leaf > last_leaf
                        and doc["instance"] == instance):
                    bad += 1
                fields = keyed.get(doc["kind"])
                if fields is not None:
                    data = doc["data"]
                    keys.append(hash((data[fields[0]], data[fields[1]])))
                tip_seq, tip_hash, last_leaf = seq, digest, leaf
            n += len(rows)
        if bad:
            raise RuntimeError(f"bound pass: {bad} rows of {instance} failed a chain check")
        return n


def checked_pass(path: Path, instance: str) -> int:
    """Figure 3i's loop: :func:`bound_pass` with every other per-row test of the
    verifier's fast path (``ChainScan.run``) added — the types of the columns and fields
    it compares, ten names, ``v`` 1, ``type`` "entry", ``data`` an object, the inline
    ``ts`` test, a dict lookup of the kind and of the key id. Still no report and no
    behaviour state beyond one hash per tracked entry; raises if a row fails."""
    with _chunks(path, instance) as chunks:
        sha, loads, keyed = hashlib.sha256, orjson.loads, _KEYED
        tip_seq, tip_hash, last_leaf, n, bad = 0, "0" * 64, -1, 0, 0
        keys: list[int] = []
        kids: dict[str, bool] = {}
        prefix, stamp = "\x00" * 28, records._TS  # the verifier's regex, as it uses it
        for rows in chunks:
            for leaf_c, _instance, seq_c, hash_c, body, _sig in rows:
                digest = sha(body).hexdigest()
                doc = loads(body)
                seq, leaf, data, v = doc["seq"], doc["leaf"], doc["data"], doc["v"]
                kind, kid, ts = doc["kind"], doc["kid"], doc["ts"]
                if not (digest == hash_c and body.__class__ is bytes and seq == tip_seq + 1
                        and seq.__class__ is int and seq == seq_c and seq_c.__class__ is int
                        and doc["prev"] == tip_hash and leaf.__class__ is int
                        and leaf == leaf_c and leaf_c.__class__ is int and leaf > last_leaf
                        and doc["instance"] == instance and len(doc) == 10 and v == 1
                        and doc["type"] == "entry" and data.__class__ is dict
                        and ((ts.__class__ is str and len(ts) == 27
                              and ts.startswith(prefix) and ts[20:26].isdecimal()
                              and ts[26] == "Z") or stamp.fullmatch(ts))):
                    bad += 1
                prefix = ts[:20]
                fields = keyed.get(kind)
                if kids.get(kid) is None:
                    kids[kid] = True
                if fields is not None:
                    keys.append(hash((data[fields[0]], data[fields[1]])))
                tip_seq, tip_hash, last_leaf = seq, digest, leaf
            n += len(rows)
        if bad:
            raise RuntimeError(f"checked pass: {bad} rows of {instance} failed a check")
        return n


def sample_sigs(path: Path, instance: str, n: int) -> list[tuple[bytes, bytes]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [(bytes(b), bytes(s)) for b, s in db.execute(
            "SELECT body, sig FROM histaudit_entries WHERE instance = ? ORDER BY leaf LIMIT ?",
            (instance, n))]
    finally:
        db.close()


def raw_verify_loop(raw_key: bytes, items: list[tuple[bytes, bytes]], n: int) -> int:
    key = Ed25519PublicKey.from_public_bytes(raw_key)
    verify, m = key.verify, len(items)
    for i in range(n):
        body, sig = items[i % m]
        verify(sig, body)
    return n


def sodium_verify_loop(raw_key: bytes, items: list[tuple[bytes, bytes]], n: int) -> int:
    """The same loop through libsodium (what ``--full`` verifies with first): the floor
    of the primitive actually used, beside OpenSSL's, the issue's baseline."""
    from nacl.bindings import crypto_sign_open

    m = len(items)
    for i in range(n):
        body, sig = items[i % m]
        crypto_sign_open(sig + body, raw_key)
    return n


def _parallel_worker(raw_key: bytes, items: list[tuple[bytes, bytes]], n: int,
                     barrier: Any, queue: Any) -> None:
    barrier.wait(timeout=300)
    t0 = time.perf_counter()
    raw_verify_loop(raw_key, items, n)
    queue.put((n, t0, time.perf_counter()))


def parallel_raw_verify(raw_key: bytes, items: list[tuple[bytes, bytes]], n_each: int,
                        procs: int) -> float:
    """Raw Ed25519 verifies/s with ``procs`` processes running at once (diagnostic)."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_parallel_worker, args=(raw_key, items, n_each, barrier, queue))
          for _ in range(procs)]
    for p in ps:
        p.start()
    got = [queue.get(timeout=600) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    return sum(g[0] for g in got) / (max(g[2] for g in got) - min(g[1] for g in got))


def note_findings(seen: dict[str, list[str]], mode: str, child: dict[str, Any]) -> None:
    """The built ledger is checked independently (bench_synth.self_check), so a finding
    here is the verifier's, not the data's: record it and warn, but keep measuring."""
    if child.get("findings") and mode not in seen:
        seen[mode] = child["findings"]
        log(f"WARNING: verify ({mode}) reported {child['findings_count']} finding(s) on a "
            f"ledger that passed the independent self-check, first: {seen[mode][0]}")


def run(path: Path, instances: dict[str, int], trust: TrustStore, *, rounds: int,
        full_rounds: int, n_ed: int) -> dict[str, Any]:
    """Figure 3 at every size: ``instances`` maps instance -> entries (one ledger).

    Each round measures every size back to back (floor, verify, floor extras); the
    ``--full`` rounds likewise. The headline figures are those of the largest instance;
    ``by_size`` holds each size's series (growth with size)."""
    names = sorted(instances, key=lambda k: instances[k])
    cores = os.cpu_count() or 1
    pub = next(iter(trust))
    by_size: dict[str, dict[str, Any]] = {}
    state = {name: _SizeState(path, name) for name in names}
    findings_seen: dict[str, list[str]] = {}
    for r in range(rounds):
        for name in names:
            state[name].default_round(pub, findings_seen, r, rounds)
    for r in range(full_rounds):
        for name in names:
            state[name].full_round(pub, findings_seen, r, full_rounds, n_ed, cores)
    for name in names:
        by_size[name] = state[name].to_json()
    big = names[-1]
    return {"params": {"instance": big, "entries": by_size[big]["entries"], "rounds": rounds,
                       "full_rounds": full_rounds, "cores": cores,
                       "raw_verifies_per_round": n_ed,
                       "sizes": {n: instances[n] for n in names}},
            "verifier_findings": findings_seen,
            "default": by_size[big]["default"], "full": by_size[big]["full"],
            "rounds": by_size[big]["rounds"], "full_rounds": by_size[big]["full_rounds"],
            "by_size": {n: {k: v for k, v in d.items() if k != "_children"}
                        for n, d in by_size.items()},
            "_children": {n: d["_children"] for n, d in by_size.items()}}


class _SizeState:
    """The series of one instance (one size) of figure 3."""

    def __init__(self, path: Path, instance: str) -> None:
        self.path, self.instance = path, instance
        self.items = sample_sigs(path, instance, 256)
        # warm the page cache once, untimed
        floor_pass(path, instance, parse=False, hash_=False)
        self.series = {k: Series() for k in (
            "default_per_s", "default_per_cpu_s", "floor_per_s", "floor_per_cpu_s",
            "ratio_default_over_floor", "ratio_default_over_floor_wall",
            "read_only_per_s", "read_hash_per_s", "per_core_over_250k", "peak_rss_mib",
            "bound_per_cpu_s", "ratio_bound_over_floor", "ratio_default_over_bound",
            "checked_per_cpu_s", "ratio_checked_over_floor")}
        self.fseries = {k: Series() for k in (
            "full_per_s", "raw_verify_1core_per_s", "raw_verify_x_cores_per_s",
            "ratio_full_over_raw_x_cores", "raw_verify_parallel_per_s",
            "ratio_full_over_parallel_raw", "main_process_cpu_share", "cpu_s_per_1k_entries",
            "ratio_raw_cpu_over_full_cpu", "peak_rss_mib", "raw_sodium_x_cores_per_s",
            "ratio_full_over_sodium_x_cores")}
        self.rounds: list[dict[str, Any]] = []
        self.full_rounds: list[dict[str, Any]] = []
        self.children: dict[str, list[dict[str, Any]]] = {"default": [], "full": []}
        self.entries = 0

    def default_round(self, pub: Any, seen: dict[str, list[str]], r: int, rounds: int) -> None:
        from bench_memory import verify_child

        path, instance, series = self.path, self.instance, self.series
        floor_t = measure(lambda: floor_pass(path, instance))
        child = verify_child(path, instance, pub.to_json(), "default")
        self.children["default"].append(child)
        note_findings(seen, "default", child)
        self.entries = child["entries"]
        ver_t = Timing(self.entries, child["wall_s"], child["cpu_s"])
        read_t = measure(lambda: floor_pass(path, instance, parse=False, hash_=False))
        rh_t = measure(lambda: floor_pass(path, instance, parse=False))
        bound_t = measure(lambda: bound_pass(path, instance))
        checked_t = measure(lambda: checked_pass(path, instance))
        series["default_per_s"].add(ver_t.rate)
        series["default_per_cpu_s"].add(ver_t.cpu_rate)
        series["floor_per_s"].add(floor_t.rate)
        series["floor_per_cpu_s"].add(floor_t.cpu_rate)
        # CPU-time rates: both sides are single-threaded, and CPU seconds do not count
        # the time other tenants of this machine held the core (wall ratio kept too)
        series["ratio_default_over_floor"].add(ver_t.cpu_rate / floor_t.cpu_rate)
        series["ratio_default_over_floor_wall"].add(ver_t.rate / floor_t.rate)
        series["read_only_per_s"].add(read_t.rate)
        series["read_hash_per_s"].add(rh_t.rate)
        series["per_core_over_250k"].add(ver_t.cpu_rate / 250_000)
        series["peak_rss_mib"].add(child["vmhwm_kb"] / 1024)
        series["bound_per_cpu_s"].add(bound_t.cpu_rate)
        series["ratio_bound_over_floor"].add(bound_t.cpu_rate / floor_t.cpu_rate)
        series["ratio_default_over_bound"].add(ver_t.cpu_rate / bound_t.cpu_rate)
        series["checked_per_cpu_s"].add(checked_t.cpu_rate)
        series["ratio_checked_over_floor"].add(checked_t.cpu_rate / floor_t.cpu_rate)
        self.rounds.append({"default": ver_t.to_json(), "floor": floor_t.to_json(),
                            "read_only": read_t.to_json(), "read_hash": rh_t.to_json(),
                            "bound": bound_t.to_json(), "checked": checked_t.to_json(),
                            "default_vmhwm_kb": child["vmhwm_kb"]})
        log(f"verify default {self.entries:,} entries, round {r + 1}/{rounds}: "
            f"{ver_t.rate:,.0f} entries/s ({ver_t.cpu_rate:,.0f}/CPU-s), floor "
            f"{floor_t.rate:,.0f}/s ({floor_t.cpu_rate:,.0f}/CPU-s), ratio "
            f"{ver_t.cpu_rate / floor_t.cpu_rate:.3f}, peak RSS "
            f"{child['vmhwm_kb'] / 1024:.1f} MiB")

    def full_round(self, pub: Any, seen: dict[str, list[str]], r: int, full_rounds: int,
                   n_ed: int, cores: int) -> None:
        from bench_memory import verify_child

        items, fseries = self.items, self.fseries
        ed_t = measure(lambda: raw_verify_loop(pub.raw, items, n_ed))
        na_t = measure(lambda: sodium_verify_loop(pub.raw, items, n_ed))
        child = verify_child(self.path, self.instance, pub.to_json(), "full")
        self.children["full"].append(child)
        note_findings(seen, "full", child)
        full_t = Timing(child["entries"], child["wall_s"], child["cpu_s"])
        par = parallel_raw_verify(pub.raw, items, n_ed, cores)
        base = ed_t.rate * cores
        total_cpu = child["cpu_s"] + child["children_cpu_s"]
        fseries["full_per_s"].add(full_t.rate)
        fseries["raw_verify_1core_per_s"].add(ed_t.rate)
        fseries["raw_verify_x_cores_per_s"].add(base)
        fseries["ratio_full_over_raw_x_cores"].add(full_t.rate / base)
        fseries["raw_sodium_x_cores_per_s"].add(na_t.rate * cores)
        fseries["ratio_full_over_sodium_x_cores"].add(full_t.rate / (na_t.rate * cores))
        fseries["raw_verify_parallel_per_s"].add(par)
        fseries["ratio_full_over_parallel_raw"].add(full_t.rate / par)
        fseries["main_process_cpu_share"].add(child["cpu_s"] / total_cpu if total_cpu else 0)
        fseries["cpu_s_per_1k_entries"].add(1000 * total_cpu / max(1, full_t.ops))
        # CPU view: raw verify CPU per entry ÷ all CPU (main process + workers) per entry
        fseries["ratio_raw_cpu_over_full_cpu"].add(
            (1 / ed_t.cpu_rate) / (total_cpu / max(1, full_t.ops)) if total_cpu else 0)
        fseries["peak_rss_mib"].add(child["vmhwm_kb"] / 1024)
        self.full_rounds.append({"full": full_t.to_json(), "raw_verify": ed_t.to_json(),
                                 "raw_verify_sodium": na_t.to_json(),
                                 "raw_verify_parallel_per_s": round(par, 1),
                                 "workers_cpu_s": round(child["children_cpu_s"], 3),
                                 "full_vmhwm_kb": child["vmhwm_kb"],
                                 "largest_worker_maxrss_kb": child["maxrss_children_kb"]})
        log(f"verify --full {full_t.ops:,} entries, round {r + 1}/{full_rounds}: "
            f"{full_t.rate:,.0f} entries/s, raw verify {ed_t.rate:,.0f}/s x {cores} cores, "
            f"ratio {full_t.rate / base:.3f}; main-process CPU {child['cpu_s']:.1f}s, "
            f"workers {child['children_cpu_s']:.1f}s")

    def to_json(self) -> dict[str, Any]:
        return {"entries": self.entries,
                "default": {k: s.to_json() for k, s in self.series.items()},
                "full": {k: s.to_json() for k, s in self.fseries.items()},
                "rounds": self.rounds, "full_rounds": self.full_rounds,
                "_children": self.children}
