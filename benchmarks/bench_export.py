"""Compliance export and offline bundle verification on a 20,000-entry ledger.

    .venv/bin/python benchmarks/bench_export.py                    # SQLite in a temp dir
    .venv/bin/python benchmarks/bench_export.py --entries 5000 --rounds 3
    .venv/bin/python benchmarks/bench_export.py --db postgresql+psycopg://u@host/db --json

A ledger of ``--entries`` entries over ``--instances`` interleaved instances (every 4th
entry commits to a stored payload) is written in one transaction with histaudit's own
record builders and signatures, so it verifies clean. Each round then

1. exports every instance with payloads and the HTML report
   (``histaudit.bundle.export.export``: checkpoint over the whole tree, one inclusion
   proof per entry, the exporter's own verification for the report, DSSE-signed
   manifest);
2. verifies the bundle offline (``histaudit.bundle.verify.verify_bundle``: manifest
   signature, file hashes, checkpoint note, every inclusion proof, every chain in full
   mode with one Ed25519 verification per entry, payload commitments), single process;
3. measures the baseline in the same round: raw single-thread Ed25519 verifications per
   second (``cryptography``/OpenSSL) over the same entry bodies and signatures.

Figures (median over rounds): export entries/s, bundle-verify entries/s, bundle bytes per
entry, and bundle-verify entries/s ÷ raw Ed25519 verify/s — the share of the unavoidable
signature cost that the rest of bundle verification leaves. Wall-clock and process-CPU
variants are both reported; the machine is shared, so compare ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from histaudit.bundle.export import export
from histaudit.bundle.verify import verify_bundle
from histaudit.ledger import records as fmt
from histaudit.ledger import store
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore
from histaudit.ledger.store import Ledger

PAYLOAD_EVERY = 4


def synthesize(url: str, signer: Signer, entries: int, instances: int) -> None:
    """Write a ledger of ``entries`` interleaved entries, heads and payloads in one go."""
    start = datetime(2025, 6, 1, tzinfo=UTC)
    rows, payloads = [], []
    state: dict[str, tuple[int, str, int]] = {}  # instance -> (seq, hash, leaf)
    tss: dict[str, str] = {}
    for leaf in range(entries):
        instance = f"wf-{leaf % instances:05d}"
        seq, prev, _ = state.get(instance, (0, fmt.GENESIS_PREV, -1))
        seq += 1
        ts = (start + timedelta(milliseconds=leaf)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        data: dict[str, Any] = {"activity": "charge_card", "task_id": seq, "attempt": 1,
                                "worker": "bench-worker-7.internal:4242"}
        if leaf % PAYLOAD_EVERY == 0:
            payload = b'{"amount_cents":%d,"currency":"EUR","customer":"c-%d"}' % (leaf, seq)
            salt = fmt.new_salt()
            c = fmt.commit(payload, salt)
            data["input"] = {"c": c, "n": len(payload)}
            payloads.append({"commitment": c, "salt": salt, "data": payload})
        body = fmt.entry_body(instance=instance, seq=seq, leaf=leaf, prev=prev,
                              kind="step.done", ts=ts, kid=signer.kid, data=data)
        digest = fmt.sha256_hex(body)
        rows.append({"leaf": leaf, "instance": instance, "seq": seq, "hash": digest,
                     "body": body, "sig": signer.sign(body)})
        state[instance], tss[instance] = (seq, digest, leaf), ts
    heads = []
    for instance, (seq, digest, leaf) in state.items():
        hbody = fmt.head_body(instance=instance, seq=seq, leaf=leaf, hash=digest,
                              ts=tss[instance], kid=signer.kid)
        heads.append({"instance": instance, "seq": seq, "body": hbody,
                      "sig": signer.sign(hbody)})
    with Ledger.open(url, create=True) as ledger, ledger.db.begin() as conn:
        conn.execute(store.entries.insert(), rows)
        conn.execute(store.heads.insert(), heads)
        conn.execute(store.payloads.insert(), payloads)


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def raw_ed25519(pairs: list[tuple[bytes, bytes]], raw_key: bytes) -> int:
    key = Ed25519PublicKey.from_public_bytes(raw_key)
    verify = key.verify
    for body, sig in pairs:
        verify(sig, body)  # raises InvalidSignature on a bad one: none here
    return len(pairs)


def run(*, url: str | None, entries: int, instances: int, rounds: int,
        workdir: Path) -> dict[str, Any]:
    signer = KeyFileSigner.generate()
    trust = TrustStore([signer.public])
    url = url or f"sqlite:///{workdir / 'ledger.db'}"
    t0 = time.perf_counter()
    synthesize(url, signer, entries, instances)
    built = time.perf_counter() - t0
    with Ledger.open(url) as ledger:
        pairs = [(r.body, r.sig) for r in ledger.all_entries()]
    assert len(pairs) == entries

    samples: dict[str, list[float]] = {k: [] for k in (
        "export_per_s", "export_per_cpu_s", "verify_per_s", "verify_per_cpu_s",
        "ed25519_per_s", "ed25519_per_cpu_s", "ratio_wall", "ratio_cpu", "bytes_per_entry")}
    files: dict[str, int] = {}
    for rnd in range(rounds):
        out = workdir / f"bundle-{rnd}"
        with Ledger.open(url) as ledger:
            result, wall, cpu = timed(functools.partial(export, ledger, [], out, signer=signer,
                                                        trust=trust, with_payloads=True))
        assert result.entries == entries
        samples["export_per_s"].append(entries / wall)
        samples["export_per_cpu_s"].append(entries / cpu)
        report, wall, cpu = timed(functools.partial(verify_bundle, out, trust))
        assert report.ok and sum(r.entries for r in report.reports) == entries, \
            "the bundle does not verify clean"
        samples["verify_per_s"].append(entries / wall)
        samples["verify_per_cpu_s"].append(entries / cpu)
        _, wall, cpu = timed(lambda: raw_ed25519(pairs, signer.public.raw))
        samples["ed25519_per_s"].append(entries / wall)
        samples["ed25519_per_cpu_s"].append(entries / cpu)
        samples["ratio_wall"].append(samples["verify_per_s"][-1] / samples["ed25519_per_s"][-1])
        samples["ratio_cpu"].append(samples["verify_per_cpu_s"][-1]
                                    / samples["ed25519_per_cpu_s"][-1])
        files = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
        samples["bytes_per_entry"].append(sum(files.values()) / entries)
        shutil.rmtree(out)
    median = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "benchmark": "export",
        "store": url.split(":", 1)[0],
        "entries": entries, "instances": instances, "rounds": rounds,
        "payload_every": PAYLOAD_EVERY, "ledger_build_s": round(built, 3),
        "median": {k: round(v, 4) for k, v in median.items()},
        "samples": {k: [round(x, 4) for x in v] for k, v in samples.items()},
        "bundle_files_bytes": files,
        "bundle_bytes_per_entry_by_file": {k: round(v / entries, 1) for k, v in files.items()},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform(), "loadavg": list(os.getloadavg())},
    }


def render(res: dict[str, Any]) -> str:
    m = res["median"]
    lines = [
        f"histaudit bundle export/verify — {res['entries']} entries, {res['instances']} "
        f"instances, {res['store']}, median of {res['rounds']} rounds",
        f"  export                 {m['export_per_s']:>10,.0f} entries/s   "
        f"({m['export_per_cpu_s']:,.0f} per CPU-s)",
        f"  bundle verify          {m['verify_per_s']:>10,.0f} entries/s   "
        f"({m['verify_per_cpu_s']:,.0f} per CPU-s)",
        f"  raw Ed25519 verify     {m['ed25519_per_s']:>10,.0f} verifies/s  "
        f"({m['ed25519_per_cpu_s']:,.0f} per CPU-s)   [baseline, same rounds]",
        f"  verify / raw Ed25519   {m['ratio_wall']:>10.3f}              "
        f"(CPU: {m['ratio_cpu']:.3f})",
        f"  bundle size            {m['bytes_per_entry']:>10,.0f} bytes/entry  "
        + ", ".join(f"{k} {v:,.0f}" for k, v in res["bundle_bytes_per_entry_by_file"].items()),
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", help="ledger URL (default: a fresh SQLite file in a temp dir); "
                                 "must name an empty database")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="histaudit-bench-export-"))
    try:
        res = run(url=args.db, entries=args.entries, instances=args.instances,
                  rounds=args.rounds, workdir=workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(res, indent=2) if args.json else render(res))


if __name__ == "__main__":
    main()
