"""Crash-matrix cost on the triage example: per crash point, and with --jobs 1 vs 2.

    .venv/bin/python benchmarks/bench_crashtest.py            # 2 rounds
    .venv/bin/python benchmarks/bench_crashtest.py --rounds 3 --engine-points 2 --out r.json

Figures (each a ratio measured within one round, back to back, because the machine is
shared and noisy; the table shows the median round and the [min–max] spread):

* **app point / (clean + restart)** — mean wall time of one app-crash point (fresh
  engine, ledger, key; crashed worker, second worker, completion, verification) divided
  by what recovering by hand costs at the least: one clean run of the workflow plus one
  worker restart (spawn to connected, measured in that clean run). Target ≤ 1.5.
* **engine point / (clean + restart)** — the same for engine-crash points, which also
  wait out the engine's lock timeout (3 s) and the SDK's reconnect back-off; shown for
  information.
* **jobs 2 speed-up** — wall time of all app points with ``jobs=1`` divided by the same
  with ``jobs=2`` (both reuse the round's clean run). Two cores: at most 2, and only as
  much as the machine has idle cores: the CPU seconds per point and the cores kept busy
  (CPU-s ÷ wall-s, this process and its reaped children) show which it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from histaudit import crashtest as ct

TARGET = f"{REPO / 'examples' / 'triage' / 'app.py'}:triage"
TICKET = {"id": "T-1", "title": "Login page 500s"}
SPEC = ct.CrashSpec(target=TARGET, input=TICKET)
TARGET_RATIO = 1.5


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpu_now() -> float:
    """CPU seconds of this process plus every child it has reaped (workers, engines)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def matrix(clean: ct.CleanRun, **kw: Any) -> tuple[ct.MatrixResult, float]:
    """One matrix run and the CPU seconds it took (harness + workers + engines)."""
    c0 = cpu_now()
    result = ct.run_matrix(SPEC, clean=clean, **kw)
    return result, cpu_now() - c0


def one_round(r: int, engine_points: int) -> dict[str, Any]:
    t0 = time.monotonic()
    clean = ct.run_clean(SPEC)
    baseline = clean.wall + clean.worker_start
    log(f"round {r}: clean {clean.wall:.1f}s + restart {clean.worker_start:.1f}s "
        f"= {baseline:.1f}s, {len(clean.points)} points")
    seq, seq_cpu = matrix(clean, jobs=1, engine_points=False)
    app_walls = [p.wall for p in seq.points]
    log(f"round {r}: jobs 1, {len(app_walls)} app points in {seq.wall:.1f}s "
        f"(mean {statistics.mean(app_walls):.1f}s, {seq_cpu:.1f} CPU-s)")
    par, par_cpu = matrix(clean, jobs=2, engine_points=False)
    log(f"round {r}: jobs 2, {len(par.points)} app points in {par.wall:.1f}s "
        f"({par_cpu:.1f} CPU-s)")
    eng_walls: list[float] = []
    if engine_points:
        eng = ct.run_matrix(SPEC, clean=clean, jobs=1, app_points=False,
                            points=clean.points[:engine_points])
        eng_walls = [p.wall for p in eng.points]
        log(f"round {r}: {len(eng_walls)} engine points, mean "
            f"{statistics.mean(eng_walls):.1f}s")
    outcomes = [p.outcome for p in seq.points + par.points]
    return {
        "clean_s": clean.wall, "restart_s": clean.worker_start, "baseline_s": baseline,
        "app_point_s": app_walls, "app_point_mean_s": statistics.mean(app_walls),
        "app_ratio": statistics.mean(app_walls) / baseline,
        "engine_point_s": eng_walls,
        "engine_ratio": statistics.mean(eng_walls) / baseline if eng_walls else None,
        "jobs1_s": seq.wall, "jobs2_s": par.wall, "speedup": seq.wall / par.wall,
        "cpu_per_app_point_s": seq_cpu / len(seq.points),
        "cores_used_jobs1": seq_cpu / seq.wall, "cores_used_jobs2": par_cpu / par.wall,
        "outcomes": {o: outcomes.count(o) for o in ct.OUTCOMES if outcomes.count(o)},
        "round_s": time.monotonic() - t0,
    }


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    return (f"{fmt.format(statistics.median(values))} "
            f"[{fmt.format(min(values))}–{fmt.format(max(values))}]")


def starved_note(rounds: list[dict[str, Any]]) -> str:
    """Whether jobs 2 could use a second core at all."""
    j1 = statistics.median(x["cores_used_jobs1"] for x in rounds)
    j2 = statistics.median(x["cores_used_jobs2"] for x in rounds)
    if j2 < 1.25 * j1:
        return "≈ jobs 1: no idle core for the second job"
    return f"{j2 / j1:.2f}× the cores of jobs 1"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--engine-points", type=int, default=2,
                   help="how many triage points to also crash the engine at (0: none)")
    p.add_argument("--out", help="write every round's figures to this JSON file")
    args = p.parse_args(argv)
    rounds = [one_round(r + 1, args.engine_points) for r in range(args.rounds)]

    def col(key: str) -> list[float]:
        return [x[key] for x in rounds if x[key] is not None]

    rows = [
        ("clean run + one restart (s)", spread(col("baseline_s"), "{:.1f}"), ""),
        ("app crash point (s, mean)", spread(col("app_point_mean_s"), "{:.1f}"), ""),
        ("app point / (clean + restart)", spread(col("app_ratio")),
         f"target ≤ {TARGET_RATIO}"),
        ("engine point / (clean + restart)", spread(col("engine_ratio")), "info"),
        ("all app points, jobs 1 (s)", spread(col("jobs1_s"), "{:.1f}"), ""),
        ("all app points, jobs 2 (s)", spread(col("jobs2_s"), "{:.1f}"), ""),
        ("jobs 2 speed-up (jobs1 / jobs2)", spread(col("speedup")), "2 cores: ≤ 2"),
        ("CPU per app point (s)", spread(col("cpu_per_app_point_s"), "{:.1f}"),
         "harness + workers + engine"),
        ("cores busy, jobs 1", spread(col("cores_used_jobs1")), "CPU-s / wall-s"),
        ("cores busy, jobs 2", spread(col("cores_used_jobs2")), starved_note(rounds)),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"crash matrix on {TARGET.rsplit('/', 3)[-3:]} — {args.rounds} round(s), "
          f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}")
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:<22} {note}")
    ratios = col("app_ratio")
    verdict = "meets" if statistics.median(ratios) <= TARGET_RATIO else "MISSES"
    print(f"  median app-point ratio {statistics.median(ratios):.2f} {verdict} the "
          f"{TARGET_RATIO}× target", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({
            "target": TARGET, "rounds": rounds, "loadavg": os.getloadavg(),
            "cpus": os.cpu_count()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
