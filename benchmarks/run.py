"""histaudit benchmarks: ``make bench`` (full) or ``.venv/bin/python benchmarks/run.py --quick``.

Every figure is a ratio against a baseline measured in the same run on the same machine
(see benchmarks/README.md for what each figure, baseline and target is). Results go to
``benchmarks/results/latest.json`` (and ``--save-as`` another path) and a table on stdout.

Examples::

    .venv/bin/python benchmarks/run.py --quick                 # all figures, small sizes
    .venv/bin/python benchmarks/run.py                          # all figures, full sizes
    .venv/bin/python benchmarks/run.py --only sqlite,verify --rounds 7
    .venv/bin/python benchmarks/run.py --only verify,memory --entries 300000 \\
        --ledger-cache /var/tmp/histaudit-bench              # reuse the built ledger
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import (
    add_repo_paths,
    cpu_model,
    fmt_num,
    fs_type,
    git_commit,
    git_dirty,
    loadavg,
    log,
    render_table,
    versions,
)

add_repo_paths()

ALL = ("sqlite", "pg", "verify", "memory", "profile")
MIX_VERSION = 2  # bump when bench_synth.workload changes, to invalidate cached ledgers

PRESETS = {
    # quick: minutes on 2 cores; full: the sizes (1M entries)
    "quick": {"entries": 100_000, "sqlite_rounds": 3, "n_append": 150, "n_commit": 150,
              "n_sign": 2000, "pg_rounds": 2, "pg_seconds": 2.0, "verify_rounds": 3,
              "full_rounds": 2, "n_ed": 2000},
    "full": {"entries": 1_000_000, "sqlite_rounds": 5, "n_append": 400, "n_commit": 400,
             "n_sign": 5000, "pg_rounds": 3, "pg_seconds": 5.0, "verify_rounds": 3,
             "full_rounds": 1, "n_ed": 5000},
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--quick", action="store_true",
                   help="small sizes and fewer rounds (100k-entry instance)")
    p.add_argument("--only", default=",".join(ALL),
                   help=f"comma-separated subset of {','.join(ALL)} (default: all)")
    p.add_argument("--skip", default="", help="comma-separated benchmarks to leave out")
    p.add_argument("--entries", type=int, help="entries in the big verify instance "
                   "(default 100,000 quick / 1,000,000 full); a second instance of 1/10 "
                   "that size is built beside it")
    p.add_argument("--rounds", type=int, help="rounds for sqlite/pg/verify (override preset)")
    p.add_argument("--full-rounds", type=int, help="rounds of --full mode verification")
    p.add_argument("--appends", type=int, help="SQLite appends (and raw commits) per round")
    p.add_argument("--pg-seconds", type=float, help="seconds per PostgreSQL measurement")
    p.add_argument("--workdir", type=Path, help="where scratch databases go "
                   "(default: a new temp dir, removed afterwards)")
    p.add_argument("--ledger-cache", type=Path, help="keep the built verify ledger in this "
                   "directory and reuse it on later runs with the same --entries")
    p.add_argument("--out", type=Path, default=HERE / "results" / "latest.json")
    p.add_argument("--save-as", type=Path, help="also write the results JSON here")
    p.add_argument("--show", type=Path, metavar="RESULTS_JSON",
                   help="print the table of an earlier results file and exit")
    p.add_argument("--no-trace", action="store_true",
                   help="skip the tracemalloc heap snapshot in the memory benchmark")
    return p.parse_args(argv)


def selected(args: argparse.Namespace) -> list[str]:
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    bad = [s for s in [*only, *skip] if s not in ALL]
    if bad:
        sys.exit(f"unknown benchmark(s) {bad}; choose from {','.join(ALL)}")
    return [s for s in ALL if s in only and s not in skip]


# --- the verify ledger -----------------------------------------------------------------

def current_schema(where: Path) -> list[str]:
    """The SQL of the schema ``Ledger.open(create=True)`` makes today (cache key)."""
    import sqlite3

    from histaudit.ledger.store import Ledger

    probe = where / "schema-probe.db"
    for p in (probe, Path(f"{probe}-wal"), Path(f"{probe}-shm")):
        p.unlink(missing_ok=True)
    Ledger.open(f"sqlite:///{probe}", create=True).close()
    con = sqlite3.connect(probe)
    try:
        return sorted(r[0] for r in con.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    finally:
        con.close()
        for p in (probe, Path(f"{probe}-wal"), Path(f"{probe}-shm")):
            p.unlink(missing_ok=True)

def verify_ledger(args: argparse.Namespace, workdir: Path, entries: int
                  ) -> tuple[Path, dict[str, int], Any, dict[str, Any], str, str]:
    """Build (or reuse) the SQLite ledger with a big and a small instance."""
    from bench_synth import build_ledger, self_check

    from histaudit.ledger.keys import PublicKey, Signer, TrustStore

    big, small = f"bench-big-{entries}", f"bench-small-{entries // 10}"
    sizes = {small: entries // 10, big: entries}
    where = args.ledger_cache or workdir
    where.mkdir(parents=True, exist_ok=True)
    db, meta_path = where / f"verify-{entries}.db", where / f"verify-{entries}.json"
    meta: dict[str, Any] | None = None
    schema = current_schema(where)
    if args.ledger_cache and db.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if (meta.get("mix_version") != MIX_VERSION or meta.get("sizes") != sizes
                or meta.get("schema") != schema):
            log("cached verify ledger is stale (workload, sizes or store schema changed)")
            meta = None
    build_s = None
    if meta is None:
        for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            p.unlink(missing_ok=True)
        signer = Signer.generate()
        log(f"building verify ledger: {small} ({sizes[small]:,}) + {big} ({entries:,}) "
            f"entries at {db}")
        t0 = time.perf_counter()
        build_ledger(db, [(small, sizes[small]), (big, entries)], signer,
                     workers=os.cpu_count() or 1, progress=log)
        build_s = time.perf_counter() - t0
        meta = {"mix_version": MIX_VERSION, "sizes": sizes, "schema": schema,
                "public_key": signer.public.to_json(), "build_seconds": round(build_s, 1)}
        meta_path.write_text(json.dumps(meta, indent=2))
        log(f"built in {build_s:.1f}s ({db.stat().st_size / 2**20:,.0f} MiB)")
    else:
        log(f"reusing cached verify ledger {db}")
    pub = PublicKey.from_json(meta["public_key"], source="bench")
    trust = TrustStore([pub])
    t0 = time.perf_counter()
    checks = {name: self_check(db, name, pub.raw) for name in sizes}
    log(f"independent self-check of the built ledger passed ({time.perf_counter() - t0:.1f}s)")
    info = {"path": str(db), "sizes": sizes, "file_mib": round(db.stat().st_size / 2**20, 1),
            "build_seconds": meta.get("build_seconds"), "reused": build_s is None,
            "self_check": checks}
    return db, sizes, trust, info, big, small


# --- the table -------------------------------------------------------------------------

def _ratio_cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    return f"{s['median']:.3f} [{s['min']:.3f}–{s['max']:.3f}]"


def _status(value: float | None, target: float, higher_is_better: bool = True,
            absolute: bool = False) -> str:
    if value is None or value != value:
        return "-"
    ok = value >= target if higher_is_better else value < target
    word = "meets" if ok else "below" if higher_is_better else "above"
    return f"{word} (absolute, info)" if absolute else word


def table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["#", "figure", "measured (median)", "baseline (median)", "ratio median [min–max]",
            "target", "status"]
    rows: list[list[str]] = []
    f = results["figures"]
    if "sqlite" in f and "series" in f["sqlite"]:
        s = f["sqlite"]["series"]
        rows.append(["1a", "SQLite appends/s ÷ 1/(2·t_sign + t_commit)",
                     fmt_num(s["append_per_s"]["median"], "/s"),
                     fmt_num(s["combined_limit_per_s"]["median"], "/s"),
                     _ratio_cell(s["ratio_combined"]), "≥ 0.6",
                     _status(s["ratio_combined"]["median"], 0.6)])
        rows.append(["1b", "SQLite appends/s ÷ 1/(t_sign + t_commit)",
                     fmt_num(s["append_per_s"]["median"], "/s"),
                     fmt_num(s["single_limit_per_s"]["median"], "/s"),
                     _ratio_cell(s["ratio_single"]), "(info)", ""])
        if "ratio_cpu_floor_over_append_cpu" in s:
            rows.append(["1c", "SQLite append: unavoidable CPU ÷ CPU spent (diag.)",
                         fmt_num(s["append_client_cpu_us"]["median"], " µs CPU"),
                         "2 signs + bytes + raw txn",
                         _ratio_cell(s["ratio_cpu_floor_over_append_cpu"]), "(info)", ""])
    if "pg" in f and "ratios" in f["pg"]:
        r, q = f["pg"]["rates_per_s"], f["pg"]["ratios"]
        rows.append(["2a", "PG append×1 ÷ raw INSERT-commit×1",
                     fmt_num(r["append×1"]["median"], "/s"), fmt_num(r["raw×1"]["median"], "/s"),
                     _ratio_cell(q["append1_over_raw1"]), "(info)", ""])
        rows.append(["2b", "PG append×4 separate instances ÷ raw×4",
                     fmt_num(r["append×4 separate"]["median"], "/s"),
                     fmt_num(r["raw×4"]["median"], "/s"),
                     _ratio_cell(q["append4_separate_over_raw4"]), "(info)", ""])
        rows.append(["2c", "PG append×4 one shared instance ÷ raw×4",
                     fmt_num(r["append×4 shared"]["median"], "/s"),
                     fmt_num(r["raw×4"]["median"], "/s"),
                     _ratio_cell(q["append4_shared_over_raw4"]), "(info)", ""])
        rows.append(["2d", "PG append×4 separate ÷ 2,000/s",
                     fmt_num(r["append×4 separate"]["median"], "/s"), "2,000/s",
                     _ratio_cell(q["append4_separate_over_target2000"]), "≥ 1",
                     _status(q["append4_separate_over_target2000"]["median"], 1.0,
                             absolute=True)])
        rows.append(["2e", "PG raw+advisory-lock×4 ÷ raw×4 (diagnostic)",
                     fmt_num(r["raw+lock×4"]["median"], "/s"),
                     fmt_num(r["raw×4"]["median"], "/s"),
                     _ratio_cell(q["rawlock4_over_raw4"]), "(info)", ""])
    elif "pg" in f:
        rows.append(["2", "PostgreSQL", "skipped", "", f["pg"].get("skipped", ""), "", ""])
    if "verify" in f:
        d, fu = f["verify"]["default"], f["verify"]["full"]
        n = f["verify"]["params"]["entries"]
        rows.append(["3a", f"verify default ÷ Python floor, per CPU-s ({n:,} entries)",
                     fmt_num(d["default_per_cpu_s"]["median"], "/CPU-s"),
                     fmt_num(d["floor_per_cpu_s"]["median"], "/CPU-s"),
                     _ratio_cell(d["ratio_default_over_floor"]), "(info)", ""])
        rows.append(["3a'", "  same, wall-clock entries/s",
                     fmt_num(d["default_per_s"]["median"], "/s"),
                     fmt_num(d["floor_per_s"]["median"], "/s"),
                     _ratio_cell(d["ratio_default_over_floor_wall"]), "(info)", ""])
        rows.append(["3b", "verify default entries per CPU-second ÷ 250,000",
                     fmt_num(d["default_per_cpu_s"]["median"], "/CPU-s"), "250,000/s",
                     _ratio_cell(d["per_core_over_target250k"]), "≥ 1",
                     _status(d["per_core_over_target250k"]["median"], 1.0, absolute=True)])
        if fu["full_per_s"]["rounds"]:
            cores = f["verify"]["params"]["cores"]
            rows.append(["3c", f"verify --full entries/s ÷ (raw Ed25519 verify/s × {cores})",
                         fmt_num(fu["full_per_s"]["median"], "/s"),
                         fmt_num(fu["raw_verify_x_cores_per_s"]["median"], "/s"),
                         _ratio_cell(fu["ratio_full_over_raw_x_cores"]), "≥ 0.9",
                         _status(fu["ratio_full_over_raw_x_cores"]["median"], 0.9)])
            rows.append(["3d", "verify --full ÷ raw verify run on all cores at once (diag.)",
                         fmt_num(fu["full_per_s"]["median"], "/s"),
                         fmt_num(fu["raw_verify_parallel_per_s"]["median"], "/s"),
                         _ratio_cell(fu["ratio_full_over_parallel_raw"]), "(info)", ""])
            # CPU view (robust to load): raw verify CPU per entry ÷ all CPU (main process +
            # workers) the full mode spends per entry
            effs = [1e3 / r["raw_verify"]["cpu_rate_per_s"] / c for r, c in zip(
                f["verify"]["full_rounds"], fu["cpu_s_per_1k_entries"]["rounds"], strict=True)]
            if effs:
                srt = sorted(effs)
                cell = {"median": srt[len(srt) // 2], "min": srt[0], "max": srt[-1]}
                rows.append(["3e", "verify --full: raw verify CPU ÷ all CPU spent, per entry",
                             fmt_num(fu["cpu_s_per_1k_entries"]["median"] * 1e3, " µs CPU"),
                             fmt_num(1e6 / f["verify"]["full_rounds"][0]["raw_verify"]
                                     ["cpu_rate_per_s"], " µs CPU"),
                             _ratio_cell(cell), "(info)", ""])
    if "memory" in f:
        m = f["memory"]["summary"]
        rows.append(["4a", f"peak RSS verifying {m['big_entries']:,} entries ÷ idle interpreter",
                     fmt_num(m["peak_default_big_mb"], " MiB"), fmt_num(m["idle_mb"], " MiB"),
                     f"{m['ratio_peak_over_idle']:.3f}", "(info)", ""])
        rows.append(["4b", "peak RSS ÷ 100 MiB", fmt_num(m["peak_default_big_mb"], " MiB"),
                     "100 MiB", f"{m['peak_over_target_100mb']:.3f}", "< 1",
                     _status(m["peak_over_target_100mb"], 1.0, higher_is_better=False)])
        rows.append(["4c", "RSS growth per entry (big vs small instance)",
                     fmt_num(m["growth_bytes_per_entry"], " B/entry"), "0 (streaming)", "-",
                     "(info)", ""])
        if "peak_full_big_main_mb" in m:
            rows.append(["4d", "peak RSS --full: main process / largest worker",
                         f"{fmt_num(m['peak_full_big_main_mb'], ' MiB')} / "
                         f"{fmt_num(m['peak_full_big_largest_worker_mb'], ' MiB')}",
                         fmt_num(m["idle_mb"], " MiB"), "-", "(info)", ""])
    return head, rows


def profile_text(p: dict[str, Any]) -> str:
    lines = [f"verify default profile: {p['entries']:,} entries, "
             f"{p['verify_unprofiled_entries_per_s']:,.0f} entries/s unprofiled",
             "  cProfile, categorised (share of profiled time):"]
    for name, v in p["categories"].items():
        lines.append(f"    {v['pct']:5.1f}%  {name}")
    lines.append("  isolated components (µs/entry, % of unprofiled verify time):")
    for name, v in p["isolated"].items():
        if "error" not in v:
            lines.append(f"    {v['us_per_entry']:7.2f} µs  {v['pct_of_verify']:5.1f}%  {name}")
    st = p.get("stream")
    if st:
        lines.append("  reading one instance with Ledger.entries (µs/entry; flat = linear):")
        for inst, v in st["as_built"].items():
            w = st["with_instance_leaf_index"].get(inst, {})
            lines.append(f"    {v['entries']:>9,} entries: {v['ledger_entries_us_per_entry']:8.2f} "
                         f"as built; {w.get('ledger_entries_us_per_entry', float('nan')):6.2f} "
                         f"with an (instance, leaf) index; one raw sqlite3 query "
                         f"{v['single_raw_query_us_per_entry']:.2f}")
        lines.append(f"    plan as built: {' / '.join(st['as_built_plan'])}")
    for name, v in p["isolated"].items():
        if "error" in v:
            lines.append(f"    (n/a: {v['error']})  {name}")
    fl = p["full_mode_payload_lookup"]
    lines.append(f"  --full main-process extras: payload lookups {fl['us_per_lookup']} µs each × "
                 f"{fl['refs_per_entry']} refs/entry = {fl['us_per_entry']} µs/entry; "
                 f"canonical re-check {p.get('full_mode_canonical_check_us_per_entry')} µs/entry")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.show:
        old = json.loads(args.show.read_text())
        head, rows = table(old)
        text = render_table(head, rows)
        if "profile" in old["figures"]:
            text += "\n\n" + profile_text(old["figures"]["profile"])
        print(text)
        return 0
    which = selected(args)
    preset = dict(PRESETS["quick" if args.quick else "full"])
    if args.entries:
        preset["entries"] = args.entries
    if args.rounds:
        preset["sqlite_rounds"] = preset["pg_rounds"] = preset["verify_rounds"] = args.rounds
    if args.full_rounds is not None:
        preset["full_rounds"] = args.full_rounds
    if args.appends:
        preset["n_append"] = preset["n_commit"] = args.appends
    if args.pg_seconds:
        preset["pg_seconds"] = args.pg_seconds

    own_workdir = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="histaudit-bench-")) if own_workdir else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "mode": "quick" if args.quick else "full", "argv": argv,
                 "benchmarks": which, "preset": preset, "git_commit": git_commit(),
                 "git_dirty_src": git_dirty("src"),
                 "cpu": cpu_model(), "cores": os.cpu_count(), "versions": versions(),
                 "workdir_fs": fs_type(workdir), "loadavg_start": loadavg()},
        "figures": {},
    }
    figs = results["figures"]
    t_start = time.perf_counter()
    try:
        if "sqlite" in which:
            import bench_append_sqlite

            log("figure 1: SQLite appends")
            d = workdir / "sqlite-append"
            d.mkdir(exist_ok=True)
            figs["sqlite"] = bench_append_sqlite.run(
                d, rounds=preset["sqlite_rounds"], n_append=preset["n_append"],
                n_commit=preset["n_commit"], n_sign=preset["n_sign"])
        if "pg" in which:
            import bench_append_pg

            log("figure 2: PostgreSQL appends")
            try:
                figs["pg"] = bench_append_pg.run(rounds=preset["pg_rounds"],
                                                 duration=preset["pg_seconds"])
            except ImportError as exc:
                figs["pg"] = {"skipped": f"tests/support/postgres.py unavailable: {exc}"}
        if {"verify", "memory", "profile"} & set(which):
            db, sizes, trust, info, big, small = verify_ledger(args, workdir, preset["entries"])
            results["meta"]["verify_ledger"] = info
            if "verify" in which:
                import bench_verify

                log(f"figure 3: verification speed on {sizes[big]:,} entries")
                figs["verify"] = bench_verify.run(db, big, trust, rounds=preset["verify_rounds"],
                                                  full_rounds=preset["full_rounds"],
                                                  n_ed=preset["n_ed"])
            if "memory" in which:
                import bench_memory

                log("figure 4: peak RSS")
                kids = figs.get("verify", {}).get("_children", {})
                figs["memory"] = bench_memory.run(
                    db, sizes, next(iter(trust)).to_json(), big=big, small=small,
                    big_default=kids.get("default"), big_full=kids.get("full"),
                    full_mode=preset["full_rounds"] > 0, trace=not args.no_trace)
            if "profile" in which:
                import bench_profile

                target = min(sizes, key=lambda k: abs(sizes[k] - 100_000))
                log(f"profiling verify default on {target}")
                figs["profile"] = bench_profile.run(db, target, trust)
                log("stream scaling and the (instance, leaf) index what-if")
                figs["profile"]["stream"] = bench_profile.stream_experiments(db, sizes, workdir)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    figs.get("verify", {}).pop("_children", None)  # kept in figures.memory instead
    results["meta"]["loadavg_end"] = loadavg()
    results["meta"]["elapsed_s"] = round(time.perf_counter() - t_start, 1)

    head, rows = table(results)
    text = render_table(head, rows)
    if "profile" in figs:
        text += "\n\n" + profile_text(figs["profile"])
    seen = figs.get("verify", {}).get("verifier_findings")
    if seen:
        text += ("\n\nNOTE: the verifier reported findings on the benchmark ledger, which "
                 "passed an independent self-check (a verifier bug, not bad data):\n" +
                 "\n".join(f"  {mode}: {msgs[0]}" for mode, msgs in seen.items()))
    results["table"] = [dict(zip(head, r, strict=True)) for r in rows]
    for path in filter(None, (args.out, args.save_as)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        log(f"wrote {path}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
