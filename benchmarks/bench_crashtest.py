"""Crash-matrix cost at the seed's scale: the financial agent at 10, 30 and 100 steps.

    .venv/bin/python benchmarks/bench_crashtest.py                 # 10 / 30 / 100 steps
    .venv/bin/python benchmarks/bench_crashtest.py --steps 10,30 --out r.json

For each size, in one run (the machine is shared; every figure is a ratio of things
measured back to back):

* the clean run (``c``: seconds, the median of three clean runs) and its crash points
  (``P``);
* **the sweep** (the default ``histaudit crashtest`` mode, app crashes): its wall time
  ``S`` from the first crash to the last result, everything included — the sweep, the
  isolated runs that confirm what it attributes, the sweep of the others again; per
  point ``S ÷ P``; and the issue's ratio ``S ÷ (P × c)``, what the whole matrix costs
  against running the workflow once per point (goal at 30 steps: ≤ 0.25);
* where a sweep's seconds go: per crash, the restart (crash → next worker connected)
  and the rest (the engine re-dispatching the step, the workflow replaying its history,
  running on to the next point);
* **an isolated point** (``--mode isolated``): at 10 steps the whole isolated matrix is
  run (``I``, and ``S ÷ I`` measured); at larger sizes ``--sample`` points (first,
  middle, last, ...) are run and ``I`` is estimated as their mean × ``P``, marked so.

* **the default matrix** (``histaudit crashtest`` as run with no option: every point as an
  app crash and as an engine crash) at 30 steps (``D``, over ``P_D`` points, twice ``P``):
  ``D ÷ (P_D × c)`` (issue 54's goal: ≤ 0.25) and the points that were not identical.

Goal of issue 12: the 100-step agent's sweep (every activity boundary, app crashes)
within 600 s, with no false divergence (the outcomes are kept, per size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from histaudit import crashtest as ct
from histaudit.crashtest.sweep import SweepRun

AGENT_REF = "examples/financial_agent/app.py:financial_agent"  # as reported: repo-relative
AGENT = f"{REPO / AGENT_REF}"
GOAL_100_S = 600.0
GOAL_30_RATIO = 0.25
DEFAULT_STEPS = 30  # the size issue 54 measures the default matrix (app and engine) at


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.mean(values), "median": statistics.median(values),
            "max": max(values)} if values else {}


def one_size(steps: int, sample: int) -> dict[str, Any]:
    spec = ct.CrashSpec(target=AGENT, input={"ticker": "ACME", "steps": steps})
    clean = ct.run_clean(spec)
    points = len(clean.points)
    # One clean run's wall is the unit every figure here is divided by; on a shared
    # machine one run can take 3x another, so the unit is the median of three.
    clean_walls = [clean.wall] + [ct.run_clean(spec).wall for _ in range(2)]
    clean_s = statistics.median(clean_walls)
    log(f"{steps} steps: clean run {clean_s:.1f}s (median of "
        f"{', '.join(f'{w:.1f}' for w in clean_walls)}), {points} points")
    sweeps: list[SweepRun] = []
    t0 = time.monotonic()
    swept = ct.run_matrix(spec, clean=clean, engine_points=False, keep_sweeps=sweeps)
    sweep_s = time.monotonic() - t0
    first = sweeps[0]
    gaps = [b.at - a.at for a, b in zip(first.crashes, first.crashes[1:])]
    restart = list(first.resumed)
    log(f"{steps} steps: swept in {sweep_s:.1f}s ({swept.runs}), {swept.summary}")
    doc: dict[str, Any] = {
        "steps": steps, "points": points, "clean_s": clean_s, "clean_walls": clean_walls,
        "sweep_s": sweep_s, "sweep_per_point_s": sweep_s / points,
        "sweep_over_points_x_clean": sweep_s / (points * clean_s),
        "first_sweep_s": first.wall, "runs": swept.runs, "outcomes": swept.summary,
        "not_identical": {p.point: p.outcome.value for p in swept.points
                          if p.outcome != ct.IDENTICAL},
        "per_crash_s": _spread(gaps), "restart_s": _spread(restart),
        "rest_of_crash_s": _spread([g - r for g, r in zip(gaps, restart[:len(gaps)])]),
    }
    if steps <= 10:
        t0 = time.monotonic()
        iso = ct.run_matrix(spec, clean=clean, engine_points=False, mode="isolated")
        doc["isolated_s"] = time.monotonic() - t0
        doc["isolated_measured"] = True
        doc["isolated_outcomes"] = iso.summary
        doc["same_outcomes"] = ({p.point: p.outcome for p in iso.points}
                                == {p.point: p.outcome for p in swept.points})
    else:
        n = min(sample, points)
        chosen = [clean.points[round(i * (points - 1) / max(1, n - 1))] for i in range(n)]
        iso = ct.run_matrix(spec, clean=clean, engine_points=False, mode="isolated",
                            points=chosen)
        per = statistics.mean(p.wall for p in iso.points)
        doc["isolated_sampled"] = {p.point: round(p.wall, 2) for p in iso.points}
        doc["isolated_s"] = per * points
        doc["isolated_measured"] = False
    doc["isolated_per_point_s"] = doc["isolated_s"] / points
    if steps == DEFAULT_STEPS:
        t0 = time.monotonic()
        both = ct.run_matrix(spec, clean=clean)  # app and engine points, the CLI's default
        default_s = time.monotonic() - t0
        doc["default"] = {
            "s": default_s, "points": len(both.points), "runs": both.runs,
            "over_points_x_clean": default_s / (len(both.points) * clean_s),
            "outcomes": both.summary,
            "not_identical": {f"{p.kind.value}:{p.point}": p.outcome.value
                              for p in both.points if p.outcome != ct.IDENTICAL}}
        log(f"{steps} steps: the default matrix (app and engine) in {default_s:.1f}s over "
            f"{len(both.points)} points, {both.summary}")
    doc["sweep_over_isolated"] = sweep_s / doc["isolated_s"]
    log(f"{steps} steps: isolated {'measured' if doc['isolated_measured'] else 'estimated'}"
        f" {doc['isolated_s']:.0f}s")
    return doc


def run(steps: list[int], sample: int = 3) -> dict[str, Any]:
    """Every size in turn; the figures of :mod:`benchmarks.run` (figure 6)."""
    sizes = [one_size(n, sample) for n in steps]
    by = {d["steps"]: d for d in sizes}
    return {"target": AGENT_REF, "sizes": sizes, "loadavg": os.getloadavg(),
            "cores": os.cpu_count(),
            "goals": {"sweep_100_steps_s": GOAL_100_S,
                      "sweep_30_steps_over_points_x_clean": GOAL_30_RATIO},
            "met": {"sweep_100_steps": by[100]["sweep_s"] <= GOAL_100_S if 100 in by
                    else None,
                    "sweep_30_steps": by[30]["sweep_over_points_x_clean"] <= GOAL_30_RATIO
                    if 30 in by else None,
                    "default_30_steps": by[DEFAULT_STEPS]["default"]["over_points_x_clean"]
                    <= GOAL_30_RATIO if DEFAULT_STEPS in by else None}}


def render(doc: dict[str, Any]) -> str:
    head = ("steps", "points", "clean", "sweep", "per point", "S/(P·c)", "restart",
            "isolated", "S/I", "not identical")
    lines = ["  ".join(f"{h:>10}" for h in head)]
    for d in doc["sizes"]:
        iso = f"{d['isolated_s']:.0f}s" + ("" if d["isolated_measured"] else "~")
        lines.append("  ".join(f"{c:>10}" for c in (
            d["steps"], d["points"], f"{d['clean_s']:.1f}s", f"{d['sweep_s']:.0f}s",
            f"{d['sweep_per_point_s']:.2f}s", f"{d['sweep_over_points_x_clean']:.3f}",
            f"{d['restart_s'].get('median', 0):.2f}s", iso, f"{d['sweep_over_isolated']:.2f}",
            len(d["not_identical"]))))
    lines.append("(~ estimated from sampled isolated points; restart: crash → next worker "
                 "connected, median)")
    for d in doc["sizes"]:
        if "default" in d:
            m = d["default"]
            lines.append(f"the default matrix (app and engine points) at {d['steps']} steps: "
                         f"{m['s']:.0f}s over {m['points']} points, D/(P·c) "
                         f"{m['over_points_x_clean']:.3f}, not identical: "
                         f"{len(m['not_identical'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="10,30,100", help="agent sizes (comma-separated)")
    p.add_argument("--sample", type=int, default=3,
                   help="isolated points run per size above 10 steps (cost estimate)")
    p.add_argument("--out", help="write the figures to this JSON file")
    args = p.parse_args(argv)
    doc = run([int(s) for s in args.steps.split(",")], args.sample)
    print(render(doc))
    for goal, met in doc["met"].items():
        if met is not None:
            print(f"{goal}: {'met' if met else 'MISSED'}")
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
