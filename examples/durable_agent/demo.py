"""`make demo-agent`: crash a dapr-agents DurableAgent on real daprd, resume it, audit it.

The agent (``app.py``) is told "note hello": it asks its LLM (``stub_llm.py``, served here
on 127.0.0.1), looks the topic up (a read-only tool), writes the line with ``write_note``
(the side effect), and answers. Each case runs it once, on one daprd stack (placement,
scheduler, the example's ``agent-workflow`` state store), with the app's worker crashing
like a power cut at one point (``HISTAUDIT_CRASH_AT``) and started again without it; Dapr
resumes the agent. Then the demo counts the LLM calls and the lines written and runs the
real ``histaudit verify`` on the signed ledger.

    case                                        LLM calls  lines  histaudit verify
    no crash                                         4        1    clean
    crash after write_note's activity body           4        1    effect-deduplicated (info)
    crash inside write_note (after its effect)       4        2    effect-uncertain (warning)
    crash after summarize                            5        1    llm-call-repeated (warning)

Exit status 0 only when every outcome is the expected one. Everything goes into a fresh
``demo-out/agent/`` (or ``--out DIR``), wiped first. Needs dapr-agents (``.venv-sdk118``)
and daprd (``make daprd``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table
from stub_llm import StubLLM

from histaudit.crash import CRASH_EXIT_CODE
from histaudit.ledger.keys import TrustStore, generate_keypair
from histaudit.ledger.store import Ledger
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_wait import wait_for_completion
from histaudit.verify import verify_instance

HERE = Path(__file__).resolve().parent
APP = HERE / "app.py"
REPO = HERE.parents[1]
WORKFLOW = "dapr.agents.scribe.workflow"
READY_TIMEOUT_S = 90.0
RUN_TIMEOUT_S = 120

console = Console(highlight=False)


@dataclass(frozen=True)
class Case:
    label: str
    crash_at: str | None
    llm_calls: int
    lines: int
    code: str | None  # the finding that names what the crash did


CASES = (
    Case("no crash", None, 4, 1, None),
    Case("crash after write_note's activity body", "after:dapr.agents.scribe.run_tool#2",
         4, 1, "effect-deduplicated"),
    Case("crash inside write_note (after its effect)", "after-effect:tool:write_note",
         4, 2, "effect-uncertain"),
    Case("crash after summarize", "after:dapr.agents.scribe.summarize", 5, 1,
         "llm-call-repeated"),
)


@dataclass
class Outcome:
    case: Case
    instance: str
    status: str = "?"
    llm_calls: int = -1
    lines: int = -1
    verify_exit: int = -1
    codes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def check(self) -> None:
        c = self.case
        want = [(self.status == "COMPLETED", f"agent {self.status}, expected COMPLETED"),
                (self.llm_calls == c.llm_calls, f"{self.llm_calls} LLM calls, expected "
                                                f"{c.llm_calls}"),
                (self.lines == c.lines, f"{self.lines} lines written, expected {c.lines}"),
                (self.verify_exit == 0, f"verify exit {self.verify_exit}, expected 0")]
        if c.code is None:
            want.append((self.codes == [], f"findings {self.codes}, expected none"))
        else:
            want.append((c.code in self.codes, f"no {c.code} reported"))
        self.problems += [msg for ok, msg in want if not ok]


def histaudit_cli() -> list[str]:
    script = Path(sys.executable).with_name("histaudit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "histaudit.cli"]


class Demo:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True)
        self.key, _pub, _signer = generate_keypair(out / "keys", name="agent")
        self.trust = out / "keys"
        self.db = f"sqlite:///{out / 'ledger.db'}"
        # The example's components: the agent's state store, a SQLite file that daprd
        # creates in its own directory (out/engine).
        self.engine = DaprdStack(state_dir=out / "engine", app_id="scribe",
                                 resources=HERE / "components")

    def worker(self, name: str, data: Path, llm: StubLLM,
               crash_at: str | None = None) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        env = self.engine.env({**base, "HISTAUDIT_DB": self.db, "HISTAUDIT_KEY": str(self.key),
                               "DATA_DIR": str(data), "STUB_LLM_URL": llm.url,
                               "PYTHONUNBUFFERED": "1",
                               **({"HISTAUDIT_CRASH_AT": crash_at} if crash_at else {})})
        log = self.logs / f"{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen([sys.executable, str(APP)], env=env,
                                    stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "ready" not in log.read_text(errors="replace").splitlines():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"worker {name} did not start; {log}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return proc

    def run_case(self, number: int, case: Case) -> Outcome:
        import dapr.ext.workflow as wf

        outcome = Outcome(case, f"note-{number}")
        data = self.out / f"case{number}"
        data.mkdir()
        console.rule(f"case {number}/{len(CASES)}: {case.label}")
        with StubLLM() as llm:
            first = self.worker(f"case{number}", data, llm, case.crash_at)
            print(f"  worker pid {first.pid}"
                  + (f" started with HISTAUDIT_CRASH_AT={case.crash_at}" if case.crash_at
                     else " started"), flush=True)
            host, port = self.engine.address.rsplit(":", 1)
            client = wf.DaprWorkflowClient(host=host, port=port)
            workers = [first]
            try:
                client.schedule_new_workflow(WORKFLOW, input={"task": "note hello"},
                                             instance_id=outcome.instance)
                print(f"  scheduled {outcome.instance}: \"note hello\"", flush=True)
                if case.crash_at:
                    try:
                        rc = first.wait(timeout=RUN_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        rc = None
                    if rc != CRASH_EXIT_CODE:
                        outcome.problems.append(f"worker did not crash at {case.crash_at} "
                                                f"(exit {rc})")
                        return outcome
                    print(f"  worker crashed at {case.crash_at} (exit {rc}, like a power "
                          f"cut); starting it again without the crash switch", flush=True)
                    workers.append(self.worker(f"case{number}-resume", data, llm))
                try:
                    state = wait_for_completion(client, outcome.instance, RUN_TIMEOUT_S)
                    outcome.status = state.runtime_status.name if state else "UNKNOWN"
                except TimeoutError:
                    outcome.status = f"not done after {RUN_TIMEOUT_S}s"
            finally:
                client.close()
                for proc in workers:
                    if proc.poll() is None:
                        proc.terminate()
                        proc.wait(timeout=10)
            outcome.llm_calls = llm.calls
        notes = data / "notes.txt"
        outcome.lines = len(notes.read_text().splitlines()) if notes.exists() else 0
        print(f"  agent {outcome.status}: {outcome.llm_calls} LLM calls, {outcome.lines} "
              f"line(s) in {notes.relative_to(self.out)}", flush=True)
        self.verify(outcome)
        outcome.check()
        return outcome

    def verify(self, outcome: Outcome) -> None:
        argv = [*histaudit_cli(), "verify", outcome.instance, "--db", self.db,
                "--trust", str(self.trust)]
        print(f"  $ histaudit verify {outcome.instance} --db … --trust …", flush=True)
        outcome.verify_exit = subprocess.run(argv, check=False).returncode
        with Ledger.open(self.db) as ledger:
            report = verify_instance(ledger, outcome.instance, workers=1,
                                     trust=TrustStore.load(str(self.trust)))
        outcome.codes = sorted(c for c in report.codes() if c != "activity-reexecuted")


def summary(outcomes: list[Outcome]) -> Table:
    table = Table(title="a DurableAgent crashed around its tool and its LLM calls, resumed "
                        "and audited", header_style="bold")
    for col in ("case", "LLM calls", "lines written", "histaudit verify", "expected"):
        table.add_column(col)
    for o in outcomes:
        table.add_row(o.case.label, str(o.llm_calls), str(o.lines),
                      f"exit {o.verify_exit}" + "".join(f"\n{c}" for c in o.codes),
                      "yes" if not o.problems else "NO")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "demo-out" / "agent",
                        help="work directory, wiped first (default: demo-out/agent/)")
    out = parser.parse_args().out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    demo = Demo(out)
    demo.engine.start()
    print(f"daprd on {demo.engine.address} (pid {demo.engine.pid}), components from "
          f"{HERE.relative_to(REPO) / 'components'}; ledger {out / 'ledger.db'}", flush=True)
    outcomes: list[Outcome] = []
    try:
        for number, case in enumerate(CASES, 1):
            outcomes.append(demo.run_case(number, case))
    finally:
        demo.engine.stop()
    console.print(summary(outcomes))
    problems = [f"{o.case.label}: {p}" for o in outcomes for p in o.problems]
    for problem in problems:
        console.print(f"[red]unexpected:[/red] {problem}")
    if not problems:
        console.print("every case as expected: the tool's effect done once where the ledger "
                      "could know, and every repeat named")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
