"""`make demo-87`: the 100-step agent crashes at step 87, Dapr resumes it, histaudit audits.

The worker runs with a crash switch that ends it like a power cut right after step 87's
body ran — before the engine heard the step finished. A second worker (no switch) takes
over; Dapr replays steps 1–86 from its history and runs step 87 again. Then the demo
counts what the agent did and runs the real ``histaudit verify``:

* steps 1–86 executed once each (replayed, not re-executed), step 87 twice, 88–100 once;
* the LLM stand-in ran once per analysis step; the report went out once;
* ``histaudit verify`` exits 0: the chain is complete and signed, and the second run of
  step 87 is reported (info) with both executions' evidence.

``--engine daprd`` (or ``$HISTAUDIT_DEMO_ENGINE=daprd``; ``make demo-87-daprd``) runs it
on real daprd with its placement and scheduler (``make daprd``) instead of the standalone
durabletask-go engine. Exit status 0 only when all of that holds. Everything goes into a
fresh ``demo-out/agent`` (or ``--out DIR``), wiped first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import dapr.ext.workflow as wf
from rich.console import Console

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from steps import STEPS, plan  # noqa: E402 - the example's own module

from histaudit.crash import CRASH_EXIT_CODE  # noqa: E402
from histaudit.errors import HistauditError  # noqa: E402
from histaudit.ledger.keys import TrustStore, generate_keypair  # noqa: E402
from histaudit.ledger.store import Ledger  # noqa: E402
from histaudit.testing.daprd import DaprdStack  # noqa: E402
from histaudit.testing.daprd_wait import wait_for_completion  # noqa: E402
from histaudit.testing.engine import EngineProcess  # noqa: E402
from histaudit.verify import verify_instance  # noqa: E402

CRASH_STEP = 87
READY = "worker ready"
TIMEOUT_S = 300.0
ENGINES = ("durabletask", "daprd")
ENV_ENGINE = "HISTAUDIT_DEMO_ENGINE"
console = Console(highlight=False)


def histaudit_cli() -> list[str]:
    script = Path(sys.executable).with_name("histaudit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "histaudit.cli"]


class Run:
    def __init__(self, out: Path, engine: str) -> None:
        self.out = out
        self.data = out / "data"
        self.data.mkdir(parents=True)
        self.key, _pub, _signer = generate_keypair(out / "keys", name="agent")
        self.db = f"sqlite:///{out / 'ledger.db'}"
        self.engine: EngineProcess | DaprdStack = (
            DaprdStack(state_dir=out / "engine", app_id="financial-agent")
            if engine == "daprd" else EngineProcess(state_dir=out / "engine"))
        self.workers: list[subprocess.Popen[bytes]] = []

    def worker(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        env = self.engine.env({**base, "HISTAUDIT_DB": self.db, "HISTAUDIT_KEY": str(self.key),
                               "DATA_DIR": str(self.data), "PYTHONUNBUFFERED": "1", **extra})
        log = self.out / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen([sys.executable, str(HERE / "app.py"), "worker"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT)
        self.workers.append(proc)
        deadline = time.monotonic() + 60
        while READY not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise HistauditError(f"worker {name} did not start; see {log}")
            time.sleep(0.05)
        return proc

    def stop(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if isinstance(self.engine, DaprdStack):
            self.engine.kill_all()  # and its etcd data (~120 MB); the logs stay
            shutil.rmtree(self.engine.state_dir / "etcd", ignore_errors=True)
        else:
            self.engine.kill()

    def client(self) -> wf.DaprWorkflowClient:
        host, port = self.engine.address.rsplit(":", 1)
        return wf.DaprWorkflowClient(host=host, port=port)


def executions(data: Path) -> Counter[int]:
    path = data / "executions.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(int(line.split()[0]) for line in lines)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("demo-out") / "agent")
    parser.add_argument("--engine", choices=ENGINES,
                        default=os.environ.get(ENV_ENGINE) or "durabletask",
                        help=f"durabletask (the standalone engine) or daprd (real daprd, "
                             f"placement and scheduler); default ${ENV_ENGINE}, else "
                             f"durabletask")
    args = parser.parse_args()
    if args.engine not in ENGINES:  # from the environment, which argparse does not check
        parser.error(f"{ENV_ENGINE}={args.engine}: expected one of {', '.join(ENGINES)}")
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    run = Run(out, args.engine)
    # Right after step 87's body: the N-th activity the workflow scheduled is step N.
    instance, point = "acme-research-1", f"after:step:{CRASH_STEP}"
    problems: list[str] = []
    try:
        run.engine.start()
        where = (f"real daprd pid {run.engine.pid} (placement, scheduler)"
                 if isinstance(run.engine, DaprdStack)
                 else f"standalone {run.engine.binary.name} pid {run.engine.pid}")
        print(f"workflow engine: {where} on {run.engine.address}", flush=True)
        console.rule(f"{STEPS}-step agent, crash after step {CRASH_STEP} ({point})")
        # The worker is connected before the instance is scheduled: daprd holds
        # schedule_new_workflow until one is (docs/adr/0008-daprd.md).
        first = run.worker("crash", HISTAUDIT_CRASH_AT=point)
        client = run.client()
        client.schedule_new_workflow("financial_agent", input={"ticker": "ACME"},
                                     instance_id=instance, start_at=datetime.now(UTC))
        began = time.monotonic()
        rc = first.wait(timeout=TIMEOUT_S)
        done_before = executions(run.data)
        print(f"  worker pid {first.pid} died at {point} (exit {rc}, like a power cut) "
              f"after {time.monotonic() - began:.1f}s; steps executed so far: "
              f"{len(done_before)}", flush=True)
        if rc != CRASH_EXIT_CODE:
            problems.append(f"the worker exited {rc}, not at the crash point")
        resumed = time.monotonic()
        second = run.worker("resume")
        state = wait_for_completion(client, instance, TIMEOUT_S)
        status = state.runtime_status.name if state else "UNKNOWN"
        print(f"  worker pid {second.pid} resumed it: {status} "
              f"{time.monotonic() - resumed:.1f}s later", flush=True)
        client.close()
        problems += check(run, status)
        problems += verify(run, instance)
    except (HistauditError, TimeoutError, subprocess.TimeoutExpired) as exc:
        problems.append(str(exc))
    finally:
        run.stop()
    for p in problems:
        console.print(f"[red]PROBLEM[/red] {p}")
    console.print(f"[green]as expected[/green] on {args.engine}" if not problems
                  else f"[red]FAILED[/red] on {args.engine}")
    return 1 if problems else 0


def check(run: Run, status: str) -> list[str]:
    ran = executions(run.data)
    analyses = plan().count("analyze")
    twice = sorted(step for step, n in ran.items() if n > 1)
    never = sorted(set(range(1, STEPS + 1)) - set(ran))
    llm, sent = lines(run.data / "llm_calls.txt"), lines(run.data / "reports_sent.txt")
    print(f"  executions: {sum(ran.values())} for {STEPS} steps; run twice: {twice or 'none'}; "
          f"never run: {never or 'none'}", flush=True)
    print(f"  LLM calls: {llm} (one per analysis step: {analyses}); reports sent: {sent}",
          flush=True)
    want = [(status == "COMPLETED", f"workflow {status}, expected COMPLETED"),
            (twice == [CRASH_STEP], f"steps run twice: {twice}, expected only {CRASH_STEP}"),
            (not never, f"steps never run: {never}"),
            (llm == analyses, f"{llm} LLM calls, expected {analyses}"),
            (sent == 1, f"{sent} reports sent, expected 1")]
    return [msg for ok, msg in want if not ok]


def verify(run: Run, instance: str) -> list[str]:
    argv = [*histaudit_cli(), "verify", instance, "--db", run.db, "--trust",
            str(run.out / "keys"), "--full"]
    print(f"  $ histaudit {' '.join(argv[len(histaudit_cli()):])}", flush=True)
    rc = subprocess.run(argv, check=False).returncode
    with Ledger.open(run.db) as ledger:
        report = verify_instance(ledger, instance, full=True,
                                 trust=TrustStore.load(str(run.out / "keys")))
    print(f"  (exit status {rc}; {report.entries} signed entries; findings: "
          f"{sorted(report.codes()) or 'none'})", flush=True)
    return [] if rc == 0 else [f"histaudit verify exited {rc}, expected 0"]


if __name__ == "__main__":
    sys.exit(main())
