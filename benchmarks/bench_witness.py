"""Checkpoint + cosign round trip with 1 and 3 real witnesses (litewitness on loopback).

Each round appends 10 entries (not timed), then times ``histaudit.witness.cosign.cosign``:
sign and store a checkpoint over the whole ledger, send it with its consistency proof to
every witness at once, verify and store the cosignatures, judge the quorum. The same-run
baseline is ``make_checkpoint`` alone on the same ledger size (what checkpointing cost
before witnesses), so the ratio says what the witnesses add. One end-to-end run of the
``histaudit checkpoint cosign`` command per witness count is timed too (process start
included). Goal (issue 14): p50 ≤ 1 s on loopback.

    .venv/bin/python benchmarks/bench_witness.py [--rounds 30] [--json FILE]

Needs ``scripts/install-witness.sh`` (``make test`` runs it) and ssh-agent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from histaudit.ledger import chain
from histaudit.ledger.chain import make_checkpoint
from histaudit.ledger.checkpoint import origin_of, verifier_key
from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.witness.cosign import cosign
from histaudit.witness.policy import read_policy
from support.witness import Witness, write_policy


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(n_witnesses: int, rounds: int, tmp: Path) -> dict[str, float]:
    key, _, signer = generate_keypair(tmp / "keys", name="bench")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    witnesses = [Witness(tmp / f"w{i}", name=f"bench.test/w{i}").start()
                 for i in range(n_witnesses)]
    try:
        with Ledger.open(url, create=True) as ledger:
            origin = origin_of(ledger)
            for w in witnesses:
                w.add_log(origin, verifier_key(origin, signer.public))
            policy_file = write_policy(tmp / "policy.txt", witnesses, quorum="all")
            policy = read_policy(str(policy_file))
            cosigned, plain = [], []
            for rnd in range(rounds):
                for i in range(10):
                    chain.append(ledger, f"wf-{i % 4}", "step.done", {"r": rnd, "i": i},
                                 signer=signer)
                t0 = time.perf_counter()
                make_checkpoint(ledger, signer)
                plain.append(time.perf_counter() - t0)
                chain.append(ledger, "wf-x", "step.done", {"r": rnd}, signer=signer)
                t0 = time.perf_counter()
                result = cosign(ledger, signer, policy)
                cosigned.append(time.perf_counter() - t0)
                if not result.ok:
                    raise SystemExit(f"cosign failed: {result.summary()}")
            size = ledger.leaf_count()
        with Ledger.open(url) as ledger:
            chain.append(ledger, "wf-x", "step.done", {"cli": True}, signer=signer)
        t0 = time.perf_counter()
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "histaudit"), "checkpoint", "cosign",
                               "--db", url, "--key", str(key), "--witness-policy",
                               str(policy_file)], capture_output=True, text=True, check=False)
        cli_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"histaudit checkpoint cosign failed: {done.stderr}")
    finally:
        for w in witnesses:
            w.close()
    p50, p50_plain = statistics.median(cosigned), statistics.median(plain)
    return {"witnesses": n_witnesses, "rounds": rounds, "final_size": size,
            "cosign_p50_s": p50, "cosign_p95_s": _pct(cosigned, 0.95),
            "checkpoint_only_p50_s": p50_plain, "checkpoint_only_p95_s": _pct(plain, 0.95),
            "ratio_p50": p50 / p50_plain, "cli_end_to_end_s": cli_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    results = []
    for n in (1, 3):
        with tempfile.TemporaryDirectory(prefix="bench-witness-") as tmp:
            results.append(run(n, args.rounds, Path(tmp)))
    print(f"{'witnesses':>9} {'cosign p50':>11} {'p95':>8} {'ckpt p50':>9} {'ratio':>6} "
          f"{'CLI':>7}")
    for r in results:
        print(f"{r['witnesses']:>9.0f} {r['cosign_p50_s'] * 1000:>9.1f}ms "
              f"{r['cosign_p95_s'] * 1000:>6.1f}ms {r['checkpoint_only_p50_s'] * 1000:>7.1f}ms "
              f"{r['ratio_p50']:>6.1f} {r['cli_end_to_end_s'] * 1000:>5.0f}ms")
    print("goal: p50 <= 1000 ms on loopback:",
          "met" if all(r["cosign_p50_s"] <= 1.0 for r in results) else "NOT met")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
