"""Figure 7: what auditing costs one agent turn — the example DurableAgent, audited ÷ plain.

    .venv-sdk118/bin/python benchmarks/bench_agent.py [--rounds 3] [--turns 3]

Runs in the dapr-agents venv (``.venv-sdk118``), on one real daprd stack with the
example's components (examples/durable_agent). One agent turn is one run of the agent's
workflow on "note hello": three LLM calls, two tool calls (one signed as a side effect),
the summary's LLM call — ten activities. Its time is the engine's own: the instance's
``last_updated_at − created_at``.

Two variants of the same app process (examples/durable_agent/app.py):

* **audited**: as shipped; every activity, decision, LLM call and the tool's effect
  signed into a SQLite ledger on this disk (``synchronous=FULL``);
* **plain**: ``HISTAUDIT_ENABLED=0``, which makes the runtime the SDK's own
  ``WorkflowRuntime`` with nothing wrapped and no ledger; what ``audit_agent`` added to the
  agent's tool executor and LLM client then finds no audited activity and calls straight
  through (a name lookup per call).

The stub LLM answers after 0 ms (the interceptor's cost laid bare) and after 200 ms (a
fast real model). In each round each variant's worker is started, warmed with one turn,
then timed over ``--turns`` turns; the variants alternate which goes first. The ratio
audited ÷ plain of the median turns is taken per round; the figure is the median round
with the spread. After the rounds, one more audited worker runs ``--turns`` turns with its
appends and the rest of the interceptor's path timed (``agent_appends.py``): that timing
costs ≈ 200 clock reads a turn, so it is kept out of the ratio's workers. Results: JSON
at ``--out`` (``run.py`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
EXAMPLE = REPO / "examples" / "durable_agent"
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(EXAMPLE))

import dapr.ext.workflow as wf
from stub_llm import StubLLM

from histaudit.ledger.keys import generate_keypair
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_wait import wait_for_completion

WORKFLOW = "dapr.agents.scribe.workflow"
VARIANTS = ("plain", "audited")


def start_worker(stack: DaprdStack, work: Path, llm: StubLLM, variant: str,
                 log: Path, *, timed: bool = False) -> subprocess.Popen[bytes]:
    key = work / "keys" / "bench.key"
    env = stack.env({k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")})
    env.update({"DATA_DIR": str(work), "STUB_LLM_URL": llm.url, "PYTHONUNBUFFERED": "1",
                "HISTAUDIT_DB": f"sqlite:///{work / 'ledger.db'}", "HISTAUDIT_KEY": str(key)})
    command = [sys.executable, str(EXAMPLE / "app.py")]
    if variant == "plain":
        env["HISTAUDIT_ENABLED"] = "0"
    elif timed:  # its appends timed inside the worker (agent_appends.py)
        env["BENCH_APPEND_STATS"] = str(log.with_suffix(".appends.json"))
        command.insert(1, str(BENCH_DIR / "agent_appends.py"))
    with open(log, "wb") as fh:
        proc = subprocess.Popen(command, env=env,
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while "ready" not in log.read_text(errors="replace").splitlines():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{variant} worker did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc


def one_turn(client: Any, instance: str) -> float:
    client.schedule_new_workflow(WORKFLOW, input={"task": "note hello"}, instance_id=instance)
    state = wait_for_completion(client, instance, 300)
    if state is None or state.runtime_status.name != "COMPLETED":
        raise RuntimeError(f"{instance}: {state.runtime_status.name if state else 'gone'}")
    return (state.last_updated_at - state.created_at).total_seconds()


def run_worker(stack: DaprdStack, client: Any, work: Path, llm: StubLLM, variant: str,
               name: str, turns: int, *, timed: bool = False) -> list[float]:
    """Start one worker, warm it with a turn, and time ``turns`` turns on it."""
    proc = start_worker(stack, work, llm, variant, work / f"{name}.log", timed=timed)
    try:
        one_turn(client, f"{name}-warm")
        return [one_turn(client, f"{name}-{t}") for t in range(turns)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def measure(stack: DaprdStack, work: Path, delays: list[float], rounds: int,
            turns: int) -> dict[str, Any]:
    host, port = stack.address.rsplit(":", 1)
    client = wf.DaprWorkflowClient(host=host, port=port)
    out: dict[str, Any] = {}
    try:
        for delay in delays:
            per_variant: dict[str, list[float]] = {v: [] for v in VARIANTS}
            ratios = []
            with StubLLM(delay=delay) as llm:
                for r in range(rounds):
                    order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
                    medians = {}
                    for variant in order:
                        name = f"d{int(delay * 1000)}-r{r}-{variant}"
                        times = run_worker(stack, client, work, llm, variant, name, turns)
                        per_variant[variant] += times
                        medians[variant] = statistics.median(times)
                        print(f"  delay {delay * 1000:.0f} ms, round {r + 1}, {variant}: "
                              f"median turn {medians[variant] * 1000:.0f} ms", flush=True)
                    ratios.append(medians["audited"] / medians["plain"])
                name = f"d{int(delay * 1000)}-timed"
                run_worker(stack, client, work, llm, "audited", name, turns, timed=True)
                # the timed worker's totals, over its 1 + turns turns
                timed = json.loads((work / f"{name}.appends.json").read_text())
                sections = {label: t["wall_s"] / (1 + turns)
                            for label, t in timed.pop("sections").items()}
                appends = {mode: {k: v / (1 + turns) for k, v in t.items()}
                           for mode, t in timed.items()}
            out[f"{int(delay * 1000)}ms"] = {
                "llm_delay_s": delay,
                "turn_s": {v: {"median": statistics.median(t), "min": min(t), "max": max(t)}
                           for v, t in per_variant.items()},
                "ratio": {"median": statistics.median(ratios), "min": min(ratios),
                          "max": max(ratios), "rounds": ratios},
                # per turn of the timed audited worker (its warm-up turn included)
                "appends_per_turn": {m: {k: round(v, 5) for k, v in t.items()}
                                     for m, t in appends.items()},
                # the rest of the interceptor's work on the path (agent_appends.SECTIONS),
                # each section's wall time without the appends and sections inside it
                "sections_per_turn_s": {label: round(v, 5) for label, v in sections.items()}}
    finally:
        client.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--turns", type=int, default=3, help="timed turns per variant per round")
    p.add_argument("--delays", default="0,0.2", help="stub LLM answer delays, seconds")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "agent-latest.json")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="histaudit-bench-agent-"))
    stack = DaprdStack(state_dir=work / "engine", app_id="scribe",
                       resources=EXAMPLE / "components")
    began = time.monotonic()
    try:
        generate_keypair(work / "keys", name="bench")
        stack.start()
        figures = measure(stack, work, [float(d) for d in args.delays.split(",")],
                          args.rounds, args.turns)
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)
    doc = {"workflow": WORKFLOW, "rounds": args.rounds, "turns": args.turns,
           "activities_per_turn": 10, "llm_calls_per_turn": 4, "delays": figures,
           "elapsed_s": round(time.monotonic() - began, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for label, fig in figures.items():
        r = fig["ratio"]
        print(f"LLM {label}: audited ÷ plain agent turn {r['median']:.3f} "
              f"[{r['min']:.3f}–{r['max']:.3f}] (plain median "
              f"{fig['turn_s']['plain']['median'] * 1000:.0f} ms, audited "
              f"{fig['turn_s']['audited']['median'] * 1000:.0f} ms)")
        a = fig["appends_per_turn"]
        print("  the audited turn's appends: " + ", ".join(
            f"{t['appends']:.0f} {m} {t['wall_s'] * 1000:.1f} ms ({t['cpu_s'] * 1000:.1f} ms "
            f"CPU)" for m, t in a.items()))
        sections = sorted(fig["sections_per_turn_s"].items(), key=lambda kv: -kv[1])
        print("  and the interceptor's other work on it: " + ", ".join(
            f"{label} {wall * 1000:.1f} ms" for label, wall in sections
            if not label.startswith("(")) + "; " + ", ".join(
            f"{label[1:-1]}: {wall * 1000:.1f} ms" for label, wall in sections
            if label.startswith("(")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
