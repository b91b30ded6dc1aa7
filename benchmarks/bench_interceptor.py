"""Interceptor overhead: N sequential trivial activities, plain vs audited, on one engine.

    .venv/bin/python benchmarks/bench_interceptor.py [--n 200] [--rounds 3]

One durabletask-go engine serves every run. Each run starts a fresh worker in this
process — ``dapr.ext.workflow.WorkflowRuntime`` ("plain"), ``AuditedWorkflowRuntime``
with its SQLite ledger on the benchmark's disk ("audited", ``synchronous=FULL`` as
shipped) or on ``/dev/shm`` ("audited-shm": the same code without the cost of a real
fsync), or on disk with an OpenTelemetry SDK tracer provider recording histaudit's spans
("audited-traced", issue #42 item 2: histaudit's span of each activity, and the SDK's
own around it, exported to a counter) —
warms it up with a short workflow, then times one workflow of ``--n``
sequential activities that each return their input plus one, from start to completion
as the engine's own history stamps them. Only one worker is connected at a time, and
the variants take turns in a rotating order each round, so drift of the shared machine
hits all of them alike.

Figures (medians over rounds, with the spread):

* throughput, activities/s, per variant, and the ratio audited ÷ plain of the same
  round (target ≥ 0.85); traced ÷ audited of the same round, and spans per activity;
  process CPU per activity (worker, client and ledger are all
  in this process);
* added latency per activity: the time the interceptor spends on each activity's
  critical path — the replayed-result check of the workflow turn, signing and storing
  ``workflow.scheduled_activity``, ``activity.started`` (after counting earlier
  attempts) before the body and ``activity.completed`` after it — from timing wrappers
  around those calls, p50 and p99 over all activities of all rounds; cross-checked
  with the engine's own step time (``TaskCompleted`` to ``TaskCompleted`` in its
  history), audited minus plain;
* where that time goes, per activity: the attempt-count read, the replay check's read
  of the signed completions, payload commitments, ledger appends (``chain.append`` /
  ``append_in`` where still called; the recorder's ``GroupWriter.append`` — a caller's
  whole wait — and each batch's ``append_many`` transaction), and Ed25519 signatures.
* cold operations (figure 5d, :func:`cold_ops`): in the app, each decision and each
  start is appended right after the worker sat waiting for the engine. The CPU of one
  non-durable ``GroupWriter.append`` and of one raw stdlib ``sqlite3`` one-row commit (no
  histaudit code), each measured back to back and each after a sleep as long as the plain
  run's median step, in the same process after the workflow rounds: cold ÷ warm. The raw
  commit's ratio is what this machine charges any operation for following an idle wait.

Results go to ``benchmarks/results/interceptor-latest.json`` (``--out``). ``run.py``
runs this script as a child process (figure 5: audited ÷ plain, target ≥ 0.85) with
``--n``, ``--rounds``, ``--workdir`` and ``--out`` of its own and reads that JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "src"))

import dapr.ext.workflow as wf

from histaudit.interceptor import AuditedWorkflowRuntime
from histaudit.interceptor import activity as hactivity
from histaudit.interceptor.recorder import AuditRecorder
from histaudit.interceptor.replaycheck import ReplayedResultCheck
from histaudit.interceptor.workflow import AuditedWorkflowContext
from histaudit.ledger import chain as hchain
from histaudit.ledger import writer as hwriter
from histaudit.ledger.keys import KeyFileSigner, Signer, generate_keypair
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.replay import History
from histaudit.testing.engine import EngineProcess

OUT = BENCH_DIR / "results" / "interceptor-latest.json"
TARGET_RATIO = 0.85
VARIANTS = ("plain", "audited", "audited-shm", "audited-traced")
WARMUP_ACTIVITIES = 10
WORKFLOW_TIMEOUT_S = 600
# The interceptor's calls on one activity's critical path, in the order they happen: the
# workflow turn checks the replayed result and signs the decision, the activity signs its
# start (after counting earlier attempts) and its completion. Activity i (from 0) is
# scheduled in turn i; the value is the index of its call in each list (the first
# decision recorded is workflow.started, in turn 0 as well).
CRITICAL = {"replay_check": 0, "decide": 1, "start": 0, "completed": 0}


# --- timing hooks -----------------------------------------------------------------------

class Hooks:
    """Timing wrappers around the interceptor's per-activity work (installed once).

    Each wrapped call appends its duration to a list for the current run; outside a run
    (``active`` False) nothing is recorded. Wrappers are module-attribute patches, so
    they see exactly the calls the audited runtime makes.
    """

    def __init__(self) -> None:
        self.active = False
        self.samples: dict[str, list[float]] = defaultdict(list)
        self._installed = False

    def reset(self) -> None:
        self.samples = defaultdict(list)

    def _timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.samples[label].append(time.perf_counter() - t0)
        return wrapper

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        # Critical path of one activity: the decision, the start, the completion. Only the
        # recording part of a decision is timed: the SDK replays the workflow function
        # from the top every turn, so call_activity itself runs n(n+1)/2 times, mostly
        # replaying, in plain and audited runs alike; _decide runs once per new decision.
        # audit_activity looks _start_activity and _completed up in its module at call
        # time, and the recorder calls chain.append, which calls chain.append_in, the same
        # way: patching the module attributes times exactly the calls the runtime makes.
        hactivity._start_activity = self._timed("start", hactivity._start_activity)
        hactivity._completed = self._timed("completed", hactivity._completed)
        ctx = AuditedWorkflowContext
        ctx._decide = self._timed("decide", ctx._decide)  # type: ignore[method-assign]
        # the replayed-result check runs in every workflow turn
        check = ReplayedResultCheck
        check.check_turn = self._timed("replay_check", check.check_turn)  # type: ignore[method-assign]
        check._signed = self._timed("replay_scan", check._signed)  # type: ignore[method-assign]
        # Breakdown: what those calls spend their time on.
        rec = AuditRecorder
        rec.prior_starts = self._timed("attempt_scan", rec.prior_starts)  # type: ignore[method-assign]
        rec.commit = self._timed("payload_commit", rec.commit)  # type: ignore[method-assign]
        hchain.append = self._timed("ledger_append", hchain.append)
        hchain.append_in = self._timed("append_in_txn", hchain.append_in)
        # The recorder appends through one GroupWriter (threads share commits):
        # GroupWriter.append is a caller's whole wait (queueing, the batch's transaction
        # and its commit); append_many, looked up in the writer module at call time, is
        # one batch's transaction (lock, rows, commit), timed on the leader's thread.
        gw = hwriter.GroupWriter
        gw.append = self._timed("writer_append", gw.append)  # type: ignore[method-assign]
        hwriter.append_many = self._timed("batch_txn", hwriter.append_many)
        Signer.sign = self._timed("sign", Signer.sign)  # type: ignore[method-assign]


HOOKS = Hooks()


# --- the workload -----------------------------------------------------------------------

def _register(wfr: wf.WorkflowRuntime) -> None:
    """Register the chain workflow on ``wfr`` (fresh functions: registration marks them)."""

    def bump(ctx: wf.WorkflowActivityContext, x: int) -> int:
        return x + 1

    def chain(ctx: wf.DaprWorkflowContext, n: int) -> Any:
        x = 0
        for _ in range(n):
            x = yield ctx.call_activity(bump, input=x)
        return x

    wfr.register_activity(bump, name="bump")
    wfr.register_workflow(chain, name="chain")


@contextlib.contextmanager
def worker(variant: str, engine: EngineProcess, ledgers: dict[str, str], key: Path
           ) -> Iterator[wf.WorkflowRuntime]:
    host, port = engine.address.rsplit(":", 1)
    wfr: wf.WorkflowRuntime
    if variant == "plain":
        wfr = wf.WorkflowRuntime(host=host, port=port)
    else:
        wfr = AuditedWorkflowRuntime(host=host, port=port, ledger=ledgers[variant],
                                     key=str(key))
    _register(wfr)
    TRACING.on = variant == "audited-traced"
    wfr.start()
    try:
        yield wfr
    finally:
        wfr.shutdown()
        TRACING.on = False


class _Tracing:
    """An OpenTelemetry SDK tracer provider, set once for the process as an app sets it,
    whose sampler records spans only while ``on`` (the "audited-traced" variant; the other
    variants get non-recording spans, as an app with no provider does) and whose batch
    processor hands them to an exporter that only counts them: the figure is the cost of
    making the spans, not of shipping them."""

    def __init__(self) -> None:
        self.on = False
        self.exported = 0
        self.provider: Any = None

    def install(self) -> bool:
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                SpanExporter,
                SpanExportResult,
            )
            from opentelemetry.sdk.trace.sampling import (
                ALWAYS_OFF,
                ALWAYS_ON,
                Sampler,
                SamplingResult,
            )
        except ImportError:
            return False
        tracing = self

        class Switch(Sampler):
            def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
                return (ALWAYS_ON if tracing.on else ALWAYS_OFF).should_sample(*args, **kwargs)

            def get_description(self) -> str:
                return "bench switch"

        class Counting(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                tracing.exported += len(spans)
                return SpanExportResult.SUCCESS

        self.provider = TracerProvider(sampler=Switch())
        self.provider.add_span_processor(BatchSpanProcessor(Counting()))
        trace.set_tracer_provider(self.provider)
        return True

    def flushed(self) -> int:
        """Spans exported so far, after flushing the batch processor."""
        self.provider.force_flush()
        return self.exported


TRACING = _Tracing()


def run_chain(client: wf.DaprWorkflowClient, n: int) -> str:
    """Schedule one chain of ``n`` activities and wait until it completed; its instance id.

    Polls the state instead of ``wait_for_workflow_completion``: the engine's SQLite
    backend answers that call by polling with a back-off of up to 10 s, which would round
    every run up to the next poll. The run is timed from the engine's history instead.
    """
    instance = f"chain-{uuid.uuid4().hex[:10]}"
    client.schedule_new_workflow(workflow="chain", input=n, instance_id=instance)
    deadline = time.monotonic() + WORKFLOW_TIMEOUT_S
    while True:
        state = client.get_workflow_state(instance)
        if state is not None and state.runtime_status not in (
                wf.WorkflowStatus.PENDING, wf.WorkflowStatus.RUNNING):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"workflow {instance} not done after {WORKFLOW_TIMEOUT_S}s")
        time.sleep(0.05)
    if state.runtime_status != wf.WorkflowStatus.COMPLETED:
        raise SystemExit(f"workflow {instance} ended {state.runtime_status}")
    if json.loads(state.serialized_output or "null") != n:
        raise SystemExit(f"workflow {instance} returned {state.serialized_output}")
    return instance


def timeline(engine: EngineProcess, instance: str) -> tuple[float, list[float]]:
    """From the engine's own history: (seconds from start to completion, step times).

    A step is the time between consecutive ``TaskCompleted`` events: one activity's full
    cycle (workflow turn, dispatch, body, completion).
    """
    events = list(History.fetch(engine.address, instance, timeout=60))

    def ts(e: Any) -> float:
        return float(e.timestamp.ToDatetime().timestamp())

    started = next(ts(e) for e in events if e.HasField("executionStarted"))
    ended = next(ts(e) for e in events if e.HasField("executionCompleted"))
    stamps = [ts(e) for e in events if e.HasField("taskCompleted")]
    return ended - started, [b - a for a, b in itertools.pairwise(stamps)]


# --- cold operations (figure 5d) -------------------------------------------------------

COLD_OPS = 100
"""Operations per block of :func:`cold_ops`."""


def cold_ops(work: Path, gap_s: float, rounds: int) -> dict[str, Any]:
    """CPU (thread time) of one ledger operation back to back and after an idle gap.

    Two operations: ``append``, a non-durable :class:`~histaudit.ledger.writer.GroupWriter`
    append of an ``activity.started`` with no input (what an activity's start appends, a
    lone caller committing on its own thread), and ``commit``, a raw stdlib ``sqlite3``
    ``BEGIN IMMEDIATE; INSERT one 530-byte row; COMMIT`` (WAL, ``synchronous=NORMAL``, as
    a non-durable append commits). Each runs in blocks of :data:`COLD_OPS` operations,
    either back to back ("warm") or each after ``time.sleep(gap_s)`` ("cold"), the four
    blocks in rotating order each round. Per round and operation: the median of its
    blocks' operations, and cold ÷ warm.
    """
    ledger = Ledger.open(f"sqlite:///{work / 'cold.db'}", create=True)
    writer = hwriter.GroupWriter(ledger, KeyFileSigner.generate())
    raw = sqlite3.connect(work / "cold-raw.db", isolation_level=None, timeout=60)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = NORMAL")
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, instance TEXT NOT NULL, "
                "seq INTEGER NOT NULL, body BLOB NOT NULL, UNIQUE (instance, seq))")
    body, counter = b"x" * 530, itertools.count(1)

    def append() -> None:
        writer.append("cold-ops", Kind.ACTIVITY_STARTED, {
            "activity": "bump", "task_id": next(counter), "execution_id": uuid.uuid4().hex,
            "attempt": 1, "worker": "bench", "input": None, "input_digest": None},
            durable=False)

    def commit() -> None:
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO t (instance, seq, body) VALUES (?, ?, ?)",
                    ("cold-ops", next(counter), body))
        raw.execute("COMMIT")

    blocks = [(name, fn, cold) for name, fn in (("append", append), ("commit", commit))
              for cold in (False, True)]
    per_round: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        for rnd in range(rounds):
            medians: dict[tuple[str, bool], float] = {}
            for name, fn, cold in blocks[rnd % 4:] + blocks[:rnd % 4]:
                fn()  # the block's first operation follows another block's: not timed
                cpu = []
                for _ in range(COLD_OPS):
                    if cold:
                        time.sleep(gap_s)
                    c0 = time.thread_time()
                    fn()
                    cpu.append(time.thread_time() - c0)
                medians[name, cold] = statistics.median(cpu)
            for name in ("append", "commit"):
                warm, cold_ = medians[name, False], medians[name, True]
                per_round[name].append({"warm_us": us(warm), "cold_us": us(cold_),
                                        "ratio": cold_ / warm})
    finally:
        raw.close()
        ledger.close()
    return {"gap_ms": round(gap_s * 1e3, 2), "ops_per_block": COLD_OPS, "rounds": rounds,
            **{name: {"warm_us": statistics.median(r["warm_us"] for r in rs),
                      "cold_us": statistics.median(r["cold_us"] for r in rs),
                      "ratio": summary([r["ratio"] for r in rs]), "per_round": rs}
               for name, rs in per_round.items()}}


# --- statistics -------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def us(seconds: float) -> float:
    return round(seconds * 1e6, 1)


# --- main -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="activities per workflow (200)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all variants (3)")
    ap.add_argument("--workdir", help="scratch directory for the disk ledger and the engine "
                    "state (default: a new temp dir; it must be on a real disk)")
    ap.add_argument("--out", default=str(OUT), help="results JSON (%(default)s)")
    args = ap.parse_args(argv)

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(
        prefix="histaudit-bench-interceptor-"))
    work.mkdir(parents=True, exist_ok=True)
    shm_root = Path("/dev/shm")
    shm = Path(tempfile.mkdtemp(prefix="histaudit-bench-", dir=shm_root)) \
        if shm_root.is_dir() else None
    key, _pub, _signer = generate_keypair(work / "keys", name="bench")
    ledgers = {"audited": f"sqlite:///{work / 'ledger.db'}",
               "audited-traced": f"sqlite:///{work / 'ledger-traced.db'}"}
    variants = list(VARIANTS)
    if not TRACING.install():
        variants.remove("audited-traced")
    if shm is not None:
        ledgers["audited-shm"] = f"sqlite:///{shm / 'ledger.db'}"
    else:
        variants.remove("audited-shm")

    HOOKS.install()
    engine = EngineProcess(state_dir=work / "engine")
    engine.start()
    host, port = engine.address.rsplit(":", 1)
    client = wf.DaprWorkflowClient(host=host, port=port)
    runs: list[dict[str, Any]] = []
    try:
        print(f"engine {engine.address}; n={args.n} activities, {args.rounds} rounds, "
              f"variants {', '.join(variants)}", flush=True)
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for variant in order:
                with worker(variant, engine, ledgers, key):
                    run_chain(client, WARMUP_ACTIVITIES)
                    HOOKS.reset()
                    HOOKS.active = variant != "plain"
                    spans0 = TRACING.flushed() if variant == "audited-traced" else 0
                    c0 = time.process_time()
                    instance = run_chain(client, args.n)
                    cpu = time.process_time() - c0
                    HOOKS.active = False
                    samples = {k: list(v) for k, v in HOOKS.samples.items()}
                    spans = TRACING.flushed() - spans0 if variant == "audited-traced" else 0
                elapsed, steps = timeline(engine, instance)
                run = {"round": rnd, "variant": variant, "instance": instance,
                       "seconds": elapsed, "activities_per_s": args.n / elapsed,
                       "cpu_s": cpu, "step_s": steps, "hooks": samples, "spans": spans}
                runs.append(run)
                print(f"  round {rnd} {variant:12} {args.n / elapsed:8.1f} act/s  "
                      f"({elapsed:.2f} s, cpu {cpu:.2f} s, step p50 "
                      f"{us(pct(steps, .5)):.0f} us)", flush=True)
    finally:
        client.close()
        engine.stop()

    doc = analyse(runs, args, variants)
    plain_step = statistics.median(s for r in runs if r["variant"] == "plain"
                                   for s in r["step_s"])
    print(f"cold operations: {COLD_OPS} per block, after {us(plain_step):.0f} us sleeps",
          flush=True)
    doc["cold_ops"] = cold_ops(work, plain_step, args.rounds)
    doc["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                      "loadavg": os.getloadavg(), "platform": platform.platform()}
    doc["code"] = code_version()
    doc["runs"] = [{k: v for k, v in r.items() if k not in ("step_s", "hooks")}
                   for r in runs]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print_table(doc)
    print(f"\nresults: {out}")
    shutil.rmtree(work, ignore_errors=True) if not args.workdir else None
    if shm is not None:
        shutil.rmtree(shm, ignore_errors=True)
    return 0


def code_version() -> dict[str, Any]:
    """The commit measured, and whether src/ differed from it (uncommitted changes)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"),
            "src_changes": git("status", "--porcelain", "--", "src").splitlines()}


def analyse(runs: list[dict[str, Any]], args: argparse.Namespace,
            variants: list[str]) -> dict[str, Any]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[r["variant"]].append(r)
    doc: dict[str, Any] = {"n": args.n, "rounds": args.rounds, "target_ratio": TARGET_RATIO,
                           "variants": {}}
    plain_by_round = {r["round"]: r for r in by["plain"]}
    plain_steps = [s for r in by["plain"] for s in r["step_s"]]
    for variant in variants:
        rs = by[variant]
        steps = [s for r in rs for s in r["step_s"]]
        entry: dict[str, Any] = {
            "activities_per_s": summary([r["activities_per_s"] for r in rs]),
            "cpu_ms_per_activity": summary([1e3 * r["cpu_s"] / args.n for r in rs]),
            "step_us": {"p50": us(pct(steps, .5)), "p99": us(pct(steps, .99))},
        }
        if variant != "plain":
            ratios = [r["activities_per_s"] / plain_by_round[r["round"]]["activities_per_s"]
                      for r in rs]
            entry["ratio_vs_plain"] = summary(ratios)
            entry["meets_target"] = statistics.median(ratios) >= TARGET_RATIO
        if variant == "audited-traced":  # spans on ÷ off, both audited on disk, same round
            audited_by_round = {r["round"]: r for r in by["audited"]}
            entry["ratio_vs_audited"] = summary(
                [r["activities_per_s"] / audited_by_round[r["round"]]["activities_per_s"]
                 for r in rs])
            entry["spans_per_activity"] = round(sum(r["spans"] for r in rs)
                                                / (len(rs) * args.n), 2)
        if variant != "plain":
            # Per activity: the three interceptor calls on its critical path.
            added: list[float] = []
            for r in rs:
                h = r["hooks"]
                parts = [(h[k], off) for k, off in CRITICAL.items() if h.get(k)]
                n = min(len(p) - off for p, off in parts)
                added += [sum(p[i + off] for p, off in parts) for i in range(n)]
            entry["added_latency_us"] = {"p50": us(pct(added, .5)), "p99": us(pct(added, .99)),
                                         "mean": us(statistics.fmean(added))}
            entry["step_minus_plain_us"] = {
                "p50": us(pct(steps, .5) - pct(plain_steps, .5)),
                "p99": us(pct(steps, .99) - pct(plain_steps, .99))}
            breakdown: dict[str, dict[str, float]] = {}
            for label in (*CRITICAL, "attempt_scan", "replay_scan", "payload_commit",
                          "ledger_append", "append_in_txn", "writer_append", "batch_txn",
                          "sign"):
                vals = [v for r in rs for v in r["hooks"].get(label, [])]
                if vals:
                    breakdown[label] = {
                        "calls_per_activity": round(len(vals) / (len(rs) * args.n), 2),
                        "us_per_activity": us(sum(vals) / (len(rs) * args.n)),
                        "p50_us": us(pct(vals, .5)), "p99_us": us(pct(vals, .99))}
            entry["breakdown"] = breakdown
        doc["variants"][variant] = entry
    return doc


def print_table(doc: dict[str, Any]) -> None:
    print(f"\n{doc['n']} sequential activities, {doc['rounds']} rounds (median [min-max])")
    for variant, e in doc["variants"].items():
        t = e["activities_per_s"]
        line = f"  {variant:12} {t['median']:8.1f} act/s [{t['min']:.1f}-{t['max']:.1f}]"
        if "ratio_vs_plain" in e:
            r = e["ratio_vs_plain"]
            a = e["added_latency_us"]
            line += (f"  ratio {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]"
                     f" {'ok' if e['meets_target'] else 'BELOW'} {doc['target_ratio']}"
                     f"  added/activity p50 {a['p50']:.0f} us p99 {a['p99']:.0f} us")
        print(line)
    c = doc.get("cold_ops")
    if c:
        print(f"  one operation after a {c['gap_ms']:.1f} ms sleep ÷ back to back (CPU): " +
              ", ".join(f"{name} {c[name]['cold_us']:.0f} / {c[name]['warm_us']:.0f} us = "
                        f"{c[name]['ratio']['median']:.2f}" for name in ("append", "commit")))
    for variant, e in doc["variants"].items():
        if "breakdown" not in e:
            continue
        print(f"  {variant} breakdown (us per activity): " + ", ".join(
            f"{k} {v['us_per_activity']:.0f}" for k, v in e["breakdown"].items()))


if __name__ == "__main__":
    sys.exit(main())
