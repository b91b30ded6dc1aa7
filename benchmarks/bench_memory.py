"""Figure 4: peak RSS of a process verifying a big instance, against an idle interpreter.

Each measurement is a fresh subprocess (``python bench_memory.py child ...``) — the very
children bench_verify times — so nothing the benchmark driver allocated counts. The
figure is the child's ``VmHWM`` (peak resident set) from ``/proc/self/status``, read
just before it exits. ``ru_maxrss`` is recorded too (the child's own
``RUSAGE_SELF``, and the parent's ``os.wait4`` view) but is NOT used: Linux carries the
pre-exec high-water mark of the forking parent into the child's ``ru_maxrss``, so it
reports the benchmark driver's size whenever that is bigger. In ``--full`` mode
``RUSAGE_CHILDREN`` of the child gives its largest signature worker (Linux reports the
largest, not a sum).

Baseline: the same interpreter after ``import histaudit.verify`` and
``histaudit.ledger.store`` (together: the verifier, the store, SQLAlchemy, cryptography
and orjson; ``histaudit.verify`` alone no longer loads the store) and nothing else.
Figures: peak ÷ idle and peak − idle. The issue's target (< 64 MiB for 1,000,000
entries) is absolute memory, which does not depend on machine speed, so it is shown as
peak ÷ 64 MiB. The peak is taken at every size of the verify ledger (e.g. 10k, 100k,
1M entries); the slope between the two largest gives the growth per entry, which is
what separates constant-memory streaming from state that grows with the instance.

``child trace`` repeats a verify under ``tracemalloc`` and snapshots the heap at the
moment the behaviour check finishes (``BehaviourCheck.finish``, when per-instance state is
largest), listing the allocation sites that hold the most memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _child(argv: list[str]) -> None:
    sys.path.insert(0, str(HERE.parent / "src"))
    what = argv[0]
    out: dict[str, Any] = {}
    # the baseline: an interpreter that imported what verifying a database needs
    import histaudit.ledger.store
    import histaudit.verify  # noqa: F401

    if what in ("verify", "trace"):
        from histaudit.ledger.keys import PublicKey, TrustStore
        from histaudit.ledger.store import Ledger
        from histaudit.verify.verifier import verify_instance

        db, instance, pub, mode = argv[1:5]
        trust = TrustStore([PublicKey.from_json(json.loads(pub), source="bench")])
        ledger = Ledger.open(f"sqlite:///{db}")
        if what == "trace":
            import tracemalloc

            from histaudit.verify.behaviour import BehaviourCheck

            holder: dict[str, Any] = {}
            original = BehaviourCheck.finish

            def finish(self: Any) -> Any:
                holder["snap"] = tracemalloc.take_snapshot()
                holder["current"], holder["peak"] = tracemalloc.get_traced_memory()
                return original(self)

            BehaviourCheck.finish = finish  # type: ignore[method-assign]
            tracemalloc.start(1)
        import time

        c0, t0 = time.process_time(), time.perf_counter()
        rep = verify_instance(ledger, instance, trust=trust, full=(mode == "full"))
        t1, c1 = time.perf_counter(), time.process_time()
        out["entries"], out["ok"] = rep.entries, rep.ok
        out["wall_s"], out["cpu_s"] = t1 - t0, c1 - c0
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        out["children_cpu_s"] = kids.ru_utime + kids.ru_stime
        out["findings"] = [f"{f.code}: {f.message}" for f in rep.findings[:5]]
        out["findings_count"] = len(rep.findings)
        if what == "trace":
            snap = holder["snap"]
            stats = snap.statistics("lineno")
            out["traced_at_finish_bytes"] = holder["current"]
            out["traced_peak_bytes"] = holder["peak"]
            out["top"] = [{"site": f"{Path(s.traceback[0].filename).name}:"
                                   f"{s.traceback[0].lineno}",
                           "bytes": s.size, "blocks": s.count} for s in stats[:12]]
        ledger.close()
    out["vmhwm_kb"] = _status_kb("VmHWM")
    out["vmrss_kb"] = _status_kb("VmRSS")
    out["maxrss_self_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["maxrss_children_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps(out))


def measure_child(args: list[str]) -> dict[str, Any]:
    """Run one child; add the parent's view of its peak RSS (``os.wait4``)."""
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen([sys.executable, str(Path(__file__)), "child", *args],
                                stdout=subprocess.PIPE, stderr=err_file)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err_file.seek(0)
            err = err_file.read().decode("utf-8", "replace")
            raise RuntimeError(f"memory child {args[:1]} failed: {err[-2000:]}")
    doc = json.loads(out)
    doc["wait4_maxrss_kb"] = usage.ru_maxrss
    return doc


def verify_child(db: Path, instance: str, pub_json: dict[str, Any], mode: str
                 ) -> dict[str, Any]:
    """Verify ``instance`` in a fresh process: its timing and its peak memory together."""
    return measure_child(["verify", str(db), instance, json.dumps(pub_json), mode])


TARGET_MIB = 64.0


def run(db: Path, instances: dict[str, int], pub_json: dict[str, Any], *,
        children: dict[str, dict[str, list[dict[str, Any]]]] | None = None,
        full_mode: bool, trace: bool) -> dict[str, Any]:
    """Peak RSS figures at every size. ``children``: instance -> {"default": [...],
    "full": [...]}, the child results the speed benchmark already produced (the same
    children are timed and measured); a verify is run here where they are absent."""
    pub = json.dumps(pub_json)
    names = sorted(instances, key=lambda k: instances[k])
    children = children or {}
    idle = [measure_child(["idle"]) for _ in range(3)]
    idle_kb = sorted(d["vmhwm_kb"] for d in idle)[1]
    res: dict[str, Any] = {"idle": idle, "idle_vmhwm_kb_median": idle_kb, "by_size": {}}
    for name in names:
        kids = children.get(name, {})
        runs = kids.get("default") or [measure_child(["verify", str(db), name, pub, "default"])]
        # the largest peak over the rounds: a peak is a worst case, not a typical value
        entry: dict[str, Any] = {
            "entries": instances[name],
            "default": dict(max(runs, key=lambda x: x["vmhwm_kb"]),
                            vmhwm_kb_rounds=[x["vmhwm_kb"] for x in runs])}
        if full_mode:
            fr = kids.get("full") or [measure_child(["verify", str(db), name, pub, "full"])]
            entry["full"] = dict(max(fr, key=lambda x: x["vmhwm_kb"]),
                                 vmhwm_kb_rounds=[x["vmhwm_kb"] for x in fr])
        res["by_size"][name] = entry
    # the tracemalloc snapshot: on the instance of ~1/10 the largest (fast enough to trace)
    trace_on = names[-2] if len(names) > 1 else names[-1]
    if trace:
        res["trace_small"] = measure_child(["trace", str(db), trace_on, pub, "default"])
        res["trace_small"]["instance_entries"] = instances[trace_on]
    big, second = names[-1], names[-2] if len(names) > 1 else names[-1]
    big_kb = res["by_size"][big]["default"]["vmhwm_kb"]
    second_kb = res["by_size"][second]["default"]["vmhwm_kb"]
    dn = instances[big] - instances[second]
    res["summary"] = {
        "idle_mb": idle_kb / 1024,
        "peak_default_big_mb": big_kb / 1024,
        "peak_default_small_mb": second_kb / 1024,
        "ratio_peak_over_idle": big_kb / idle_kb,
        "delta_over_idle_mb": (big_kb - idle_kb) / 1024,
        "peak_over_target_64mb": big_kb / 1024 / TARGET_MIB,
        "growth_bytes_per_entry": (big_kb - second_kb) * 1024 / dn if dn else None,
        "big_entries": instances[big], "small_entries": instances[second],
        "peak_mib_by_size": {str(instances[n]): res["by_size"][n]["default"]["vmhwm_kb"] / 1024
                             for n in names},
    }
    if full_mode:
        fb = res["by_size"][big]["full"]
        res["summary"]["peak_full_big_main_mb"] = fb["vmhwm_kb"] / 1024
        res["summary"]["peak_full_big_largest_worker_mb"] = fb["maxrss_children_kb"] / 1024
        res["summary"]["peak_full_mib_by_size"] = {
            str(instances[n]): res["by_size"][n]["full"]["vmhwm_kb"] / 1024 for n in names}
    return res


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "child":
        _child(sys.argv[2:])
    else:
        sys.exit("usage: bench_memory.py child idle|verify|trace ... (run via benchmarks/run.py)")
