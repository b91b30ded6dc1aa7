"""Figure 3f/3g (info): the cost of many small instances against one big one.

A real ledger holds many workflow instances of tens of entries, not one of a million: what
``verify --all`` pays per instance (reading its head, checking the head's signature, the
behaviour checks' set-up, a status line) comes on top of what it pays per entry. Two
ledgers of the same bench_synth workload and the same number of entries, built side by
side: ``instances`` instances of ``per_instance`` entries, and one instance of all of
them. Each round runs the real command on both, back to back, as child processes:

* 3f: ``verify --all`` CPU per entry on the big instance ÷ the same on the many small
  ones (1.0: an instance costs nothing beyond its entries);
* 3g: the same for ``verify --all --full``, in wall time (it uses every core).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from bench_common import Series, log
from bench_synth import build_ledger

from histaudit.ledger.keys import KeyFileSigner


def _child(args: list[str], reports: int) -> tuple[float, float]:
    """(wall s, CPU s of the child and its workers) of one ``histaudit`` run, which must
    print ``reports`` status lines (exit 1 is the synthetic workload's own findings)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "histaudit.cli", *args],
                          capture_output=True, check=False)
    lines = done.stdout.count(" check \u2014 ".encode())
    if done.returncode not in (0, 1) or lines != reports:
        raise RuntimeError(f"histaudit {' '.join(args)} exited {done.returncode} with "
                           f"{lines} status lines: {done.stderr.decode()[-300:]}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def run(workdir: Path, *, instances: int, per_instance: int, rounds: int) -> dict[str, Any]:
    signer = KeyFileSigner.generate()
    trust = workdir / "trust.pub.json"
    trust.write_bytes(orjson.dumps(signer.public.to_json()))
    many, one = workdir / "many.db", workdir / "one.db"
    total = instances * per_instance
    log(f"figure 3f: building {instances:,} instances x {per_instance} entries and one of "
        f"{total:,}")
    build_ledger(many, [(f"wf-{i:06d}", per_instance) for i in range(instances)], signer)
    build_ledger(one, [("wf-one", total)], signer)
    series = {k: Series() for k in ("default_ratio", "full_ratio", "many_cpu_us_per_entry",
                                    "one_cpu_us_per_entry", "many_full_wall_s",
                                    "one_full_wall_s")}
    for r in range(rounds):
        common = ["--trust", str(trust)]
        _, one_cpu = _child(["verify", "wf-one", "--db", f"sqlite:///{one}", *common], 1)
        _, many_cpu = _child(["verify", "--all", "--db", f"sqlite:///{many}", *common],
                             instances)
        one_wall, _ = _child(["verify", "wf-one", "--full", "--db", f"sqlite:///{one}",
                              *common], 1)
        many_wall, _ = _child(["verify", "--all", "--full", "--db", f"sqlite:///{many}",
                               *common], instances)
        series["default_ratio"].add(one_cpu / many_cpu)
        series["full_ratio"].add(one_wall / many_wall)
        series["many_cpu_us_per_entry"].add(many_cpu / total * 1e6)
        series["one_cpu_us_per_entry"].add(one_cpu / total * 1e6)
        series["many_full_wall_s"].add(many_wall)
        series["one_full_wall_s"].add(one_wall)
        log(f"figure 3f round {r + 1}/{rounds}: verify --all CPU {many_cpu:.2f} s for "
            f"{instances:,} instances vs {one_cpu:.2f} s for one (ratio "
            f"{one_cpu / many_cpu:.3f}); --full wall {many_wall:.2f} s vs {one_wall:.2f} s")
    for p in workdir.glob("*.db*"):
        p.unlink(missing_ok=True)
    return {"params": {"instances": instances, "per_instance": per_instance,
                       "entries": total, "rounds": rounds},
            "series": {k: s.to_json() for k, s in series.items()}}
