"""`make demo`: crash the triage agent three ways on the real Dapr engine, then audit it.

For each case the app's worker runs with a crash switch (HISTAUDIT_CRASH_AT), dies like
a power cut inside ``post_comment``, and is started again without it; Dapr resumes the
workflow. Then the demo counts what the agent did (comment lines, LLM calls) and runs the
real ``histaudit verify`` on the signed ledger. In the first case the workflow engine
is SIGKILLed too, while the new workflow waits for its start time, and started again on
the same port and state file.

``--engine durabletask`` (the default, or ``$HISTAUDIT_DEMO_ENGINE``) runs the standalone
durabletask-go engine (``make demo``); ``--engine daprd`` runs real daprd with its
placement and scheduler, built by ``make daprd`` (``make demo-daprd``). The same code
drives both: the crashing worker connects before the ticket is scheduled, because daprd
holds ``schedule_new_workflow`` until a worker is connected (docs/adr/0008-daprd.md).

    case                             comments  LLM calls  histaudit
    crash before_post + engine kill      1         1       clean (re-execution is info)
    crash after_post                     2         1       effect-duplicate (error)
    crash after_post, IDEMPOTENT         1         1       effect-deduplicated (info)

Exit status 0 only when every outcome is the expected one. Everything goes into a fresh
``demo-out/`` (or ``--out DIR``), which is wiped first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.errors import HistauditError
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_binaries import find_daprd_bin_dir
from histaudit.testing.daprd_wait import wait_for_completion
from histaudit.testing.engine import EngineProcess
from histaudit.verify import verify_instance

HERE = Path(__file__).resolve().parent
APP = HERE / "app.py"
REPO = HERE.parents[1]
READY = "worker ready"
READY_TIMEOUT_S = 30.0
CRASH_TIMEOUT_S = 30.0
WORKFLOW_TIMEOUT_S = 60
# The engine is killed while the workflow waits to start: nothing is dispatched then, so
# nothing is locked, and the restarted engine runs it without waiting out a lock.
START_DELAY_S = 5.0
ENGINES = ("durabletask", "daprd")
ENV_ENGINE = "HISTAUDIT_DEMO_ENGINE"

console = Console(highlight=False)


@dataclass(frozen=True)
class Case:
    number: int
    crash_at: str
    idempotent: bool
    comments: int  # expected comment lines
    engine_crash: bool = False  # SIGKILL the engine too, before the workflow starts

    @property
    def extras(self) -> list[str]:
        return ["IDEMPOTENT=1"] * self.idempotent + ["engine kill"] * self.engine_crash

    @property
    def label(self) -> str:
        return ", ".join([f"crash {self.crash_at}", *self.extras])


CASES = (Case(1, "before_post", False, 1, engine_crash=True),
         Case(2, "after_post", False, 2),
         Case(3, "after_post", True, 1))


@dataclass
class Outcome:
    case: Case
    instance: str
    status: str = "?"
    comments: int = -1
    llm_calls: int = -1
    verify_exit: int = -1
    codes: list[str] = field(default_factory=list)
    worst: str = "-"  # highest finding severity, or "-" when there is none
    problems: list[str] = field(default_factory=list)

    def verdict(self) -> str:
        if self.verify_exit == 0 and self.worst in ("-", "info"):
            return "clean"
        return {0: "ok, with warnings", 1: "FAILED"}.get(self.verify_exit, "error")

    def check(self) -> None:
        c = self.case
        want: list[tuple[bool, str]] = [
            (self.status == "COMPLETED", f"workflow {self.status}, expected COMPLETED"),
            (self.comments == c.comments, f"{self.comments} comment lines, expected {c.comments}"),
            (self.llm_calls == 1, f"LLM ran {self.llm_calls} times, expected once"),
        ]
        if c.number == 1:
            want.append((self.verdict() == "clean", f"verdict {self.verdict()}, expected clean"))
        elif c.number == 2:
            want += [("effect-duplicate" in self.codes, "no effect-duplicate reported"),
                     (self.verify_exit == 1, f"verify exit {self.verify_exit}, expected 1")]
        else:
            want += [("effect-deduplicated" in self.codes, "no effect-deduplicated reported"),
                     ("effect-duplicate" not in self.codes, "effect-duplicate reported"),
                     (self.verify_exit == 0, f"verify exit {self.verify_exit}, expected 0")]
        self.problems += [msg for ok, msg in want if not ok]


def rel(path: Path) -> str:
    """``path`` as the user would type it from the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def histaudit_cli() -> list[str]:
    script = Path(sys.executable).with_name("histaudit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "histaudit.cli"]


def make_engine(kind: str, state_dir: Path) -> EngineProcess | DaprdStack:
    """The workflow engine the demo runs on, configured but not started."""
    if kind == "daprd":
        return DaprdStack(state_dir=state_dir, app_id="triage")
    return EngineProcess(state_dir=state_dir)


def describe(engine: EngineProcess | DaprdStack) -> str:
    """Which engine runs, where, and where it keeps the workflow state."""
    if isinstance(engine, DaprdStack):
        pids = engine.pids
        return (f"real daprd (pid {pids.get('daprd')}; placement pid {pids.get('placement')}, "
                f"scheduler pid {pids.get('scheduler')}; binaries from "
                f"{rel(find_daprd_bin_dir())}) on {engine.address}, actor state "
                f"{rel(engine.db_path)}")
    return (f"standalone {engine.binary.name} pid {engine.pid} on {engine.address}, state "
            f"{rel(engine.db_path)}")


class Demo:
    def __init__(self, out: Path, engine: str) -> None:
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True)
        self.key, _pub, _signer = generate_keypair(out / "keys", name="triage")
        self.trust = out / "keys"
        self.db = f"sqlite:///{rel(out / 'ledger.db')}"
        self.kind = engine
        self.engine = make_engine(engine, out / "engine")
        self.workers: list[subprocess.Popen[bytes]] = []

    # -- processes ---------------------------------------------------------------------

    def worker(self, name: str, data: Path, **extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``app.py worker`` with a clean environment plus ``extra``; wait until ready."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("HISTAUDIT_") and k not in ("IDEMPOTENT", "DATA_DIR")}
        env = self.engine.env({**base, "HISTAUDIT_DB": self.db, "HISTAUDIT_KEY": str(self.key),
                               "DATA_DIR": str(data), "PYTHONUNBUFFERED": "1", **extra})
        log = self.logs / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen([sys.executable, str(APP), "worker"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT)
        self.workers.append(proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while READY not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; {rel(log)}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return proc, log

    def stop_workers(self, *, wait: bool = True) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
        if not wait:
            return
        for proc in self.workers:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.workers.clear()

    @contextmanager
    def client(self) -> Iterator[Any]:
        import dapr.ext.workflow as wf

        host, port = self.engine.address.rsplit(":", 1)
        c = wf.DaprWorkflowClient(host=host, port=port)
        try:
            yield c
        finally:
            c.close()

    # -- one case ----------------------------------------------------------------------

    def run_case(self, case: Case) -> Outcome:
        instance = f"ticket-{100 + case.number}"
        outcome = Outcome(case, instance)
        data = self.out / f"case{case.number}"  # this case's "ticket system" and LLM bill
        data.mkdir()
        extra = {"IDEMPOTENT": "1"} if case.idempotent else {}
        console.rule(f"case {case.number}/3: {case.label}")
        delay = START_DELAY_S if case.engine_crash else 0.0
        # The worker first: daprd holds schedule_new_workflow until one is connected.
        first, log = self.worker(f"case{case.number}-crash", data,
                                 HISTAUDIT_CRASH_AT=case.crash_at, **extra)
        print(f"  worker pid {first.pid} started with HISTAUDIT_CRASH_AT={case.crash_at}"
              f"{' IDEMPOTENT=1' if case.idempotent else ''}", flush=True)
        with self.client() as client:
            client.schedule_new_workflow("triage", input={"id": instance,
                                                          "title": "Login page 500s"},
                                         instance_id=instance,
                                         start_at=datetime.now(UTC) + timedelta(seconds=delay))
        print(f"  scheduled {instance}" + (f" to start in {delay:.0f}s" if delay else ""),
              flush=True)
        if case.engine_crash:  # the worker stays up and reconnects to the restarted engine
            outcome.problems += self.crash_engine(instance)
        with self.client() as client:
            try:
                rc = first.wait(timeout=CRASH_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                rc = None
            if rc != CRASH_EXIT_CODE:
                self.stop_workers()
                outcome.problems.append(f"worker did not crash at {case.crash_at} (exit {rc}; "
                                        f"log {rel(log)})")
                return outcome
            print(f"  worker crashed at {case.crash_at} (exit {rc}, like a power cut)",
                  flush=True)
            started = time.monotonic()
            second, _ = self.worker(f"case{case.number}-resume", data, **extra)
            try:
                state = wait_for_completion(client, instance, WORKFLOW_TIMEOUT_S)
                outcome.status = state.runtime_status.name if state is not None else "UNKNOWN"
            except TimeoutError:
                outcome.status = f"not done after {WORKFLOW_TIMEOUT_S}s"
            print(f"  worker pid {second.pid} started without the crash switch: workflow "
                  f"{outcome.status} after {time.monotonic() - started:.1f}s", flush=True)
        self.stop_workers(wait=False)  # they shut down while we count and verify
        outcome.comments = count_lines(data / "comments.txt")
        outcome.llm_calls = count_lines(data / "llm_calls.txt")
        print(f"  {rel(data / 'comments.txt')}: {outcome.comments} line(s) (expected "
              f"{case.comments})   {rel(data / 'llm_calls.txt')}: {outcome.llm_calls} "
              f"(expected 1)", flush=True)
        self.verify(outcome)
        self.stop_workers()
        outcome.check()
        return outcome

    def verify(self, outcome: Outcome) -> None:
        argv = [*histaudit_cli(), "verify", outcome.instance, "--db", self.db,
                "--trust", rel(self.trust), "--full"]
        print(f"  $ histaudit {' '.join(argv[len(histaudit_cli()):])}", flush=True)
        outcome.verify_exit = subprocess.run(argv, check=False).returncode
        print(f"  (exit status {outcome.verify_exit})", flush=True)
        # The same check in-process, for the summary's codes (saves starting the CLI twice).
        with Ledger.open(self.db) as ledger:
            report = verify_instance(ledger, outcome.instance, full=True, workers=1,
                                     trust=TrustStore.load(str(self.trust)))
        outcome.codes = sorted(report.codes())
        outcome.worst = str(max(f.severity for f in report.findings)) if report.findings else "-"

    # -- the engine crash ----------------------------------------------------------------

    def crash_engine(self, instance: str) -> list[str]:
        """SIGKILL the engine while ``instance`` waits to start; start the engine again."""
        old_pid = self.engine.pid
        name = "daprd" if isinstance(self.engine, DaprdStack) else "engine"
        self.engine.kill()
        kept = "; placement and scheduler keep running" if name == "daprd" else ""
        print(f"  engine SIGKILLed ({name} pid {old_pid}) with {instance} waiting in it{kept}",
              flush=True)
        self.engine.start()
        with self.client() as client:
            state = client.get_workflow_state(instance)
        status = state.runtime_status.name if state is not None else "missing"
        print(f"  engine restarted: {name} pid {self.engine.pid}, same port and state; "
              f"{instance} is {status}", flush=True)
        return [] if status == "PENDING" else [f"{instance} is {status} after the engine "
                                               f"restart, expected PENDING"]


def summary(outcomes: list[Outcome], engine: str) -> Table:
    table = Table(title="triage agent: three crashes, resumed and audited",
                  caption=f"engine: {engine}", header_style="bold")
    for col in ("crash at", "comments", "LLM calls", "histaudit verify", "expected"):
        table.add_column(col)
    for o in outcomes:
        c = o.case
        label = "\n  + ".join([f"{c.number} {c.crash_at}", *c.extras])
        verdict = "\n".join([f"{o.verdict()} (exit {o.verify_exit})", *o.codes])
        table.add_row(label, str(o.comments), str(o.llm_calls), verdict,
                      "yes" if not o.problems else "NO")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "demo-out",
                        help="work directory, wiped first (default: demo-out/)")
    parser.add_argument("--engine", choices=ENGINES,
                        default=os.environ.get(ENV_ENGINE) or "durabletask",
                        help="durabletask: the standalone engine (make demo); daprd: real "
                             f"daprd, placement and scheduler (make demo-daprd); default "
                             f"${ENV_ENGINE}, else durabletask")
    args = parser.parse_args()
    if args.engine not in ENGINES:  # from the environment, which argparse does not check
        parser.error(f"{ENV_ENGINE}={args.engine}: expected one of {', '.join(ENGINES)}")
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    began = time.monotonic()
    outcomes: list[Outcome] = []
    extra_problems: list[str] = []
    try:
        demo = Demo(out, args.engine)
    except HistauditError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    try:
        demo.engine.start()
        print(f"workflow engine: {describe(demo.engine)}", flush=True)
        print(f"ledger: {demo.db}   signing key: {rel(demo.key)}   trust: {rel(demo.trust)}",
              flush=True)
        for case in CASES:
            outcomes.append(demo.run_case(case))
    except (HistauditError, RuntimeError) as exc:  # the engine or a worker would not start
        extra_problems.append(str(exc))
    finally:
        demo.stop_workers()
        if isinstance(demo.engine, DaprdStack):
            demo.engine.kill_all()  # and its etcd data (~120 MB); the logs stay
            shutil.rmtree(demo.engine.state_dir / "etcd", ignore_errors=True)
        else:
            demo.engine.kill()
    console.print()
    console.print(summary(outcomes, args.engine))
    print("expected: comments 1, 2, 1; the LLM once in every case; histaudit clean,\n"
          "then effect-duplicate, then effect-deduplicated without a duplicate")
    ok = len(outcomes) == len(CASES) and not any(o.problems for o in outcomes)
    ok = ok and not extra_problems
    for problem in extra_problems + [f"case {o.case.number}: {p}" for o in outcomes
                                     for p in o.problems]:
        print(f"problem: {problem}")
    print(f"{'all outcomes as expected' if ok else 'UNEXPECTED OUTCOME'} on {args.engine} "
          f"({time.monotonic() - began:.1f}s; logs in {rel(demo.logs)})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
