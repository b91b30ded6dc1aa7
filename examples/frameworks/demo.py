"""`make demo-frameworks`: four agent frameworks on real daprd, crashed, resumed, audited.

Each framework's travel example (``examples/frameworks/<framework>/app.py``: the OpenAI
Agents SDK, LangGraph, Strands and CrewAI, each run durably by Diagrid's runner and audited
with one line) books a trip with the same scripted LLM (``stub_llm.py``: search; a flight
and a hotel in one answer; the hotel again, the first asking for 0 nights, which fails;
the answer). Per framework one daprd stack and one app process serve four cases, each its
own instance: a clean run, a crash right after the flight's tool activity, a crash inside
the flight's tool (after its effect, before its done record), and a crash right after an
LLM call. The app crashes like a power cut at a point scoped to the case's instance and is
started again; Dapr resumes the trip. Then the demo reads the ledger (``histaudit show
--json``, ``histaudit verify --json``) and the stub's own bill, and prints per row: LLM
calls and tokens signed (against what the stub answered and billed), the bookings the
tools made, and the findings.

Expected per framework: clean — flight and hotel booked once, the hotel's 0-night call
signed failed, no warning; after the flight's activity — flight booked once,
``effect-deduplicated``; inside the flight — booked twice, ``effect-uncertain`` on it;
after an LLM call — ``llm-call-repeated`` priced at exactly the stub's bill for the
repeated request. Exit status 0 only when every row is as expected.

Runs in ``.venv-sdk118`` (OpenAI Agents SDK, LangGraph) and starts the Strands and CrewAI
apps with ``.venv-frameworks2``'s Python. Everything goes into a fresh
``demo-out/frameworks/`` (or ``--out DIR``), wiped first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from stub_llm import ScriptedLLM

from histaudit.crash import CRASH_EXIT_CODE, scoped_name
from histaudit.ledger.keys import generate_keypair
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.daprd_wait import wait_for_completion

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
READY_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 180
TASK = {"task": "book a trip to Lisbon"}
CASES = ("clean", "after-flight", "inside-flight", "after-llm")

console = Console(highlight=False, width=150)  # the table is wide; piped output too


@dataclass(frozen=True)
class Framework:
    """One example: where it is, its workflow, which venv runs it, and each crash case's
    point with the task id it is scoped to (an agent runner's tasks: LLM 1, search 2,
    LLM 3, flight 4; a graph runner's differ)."""

    name: str
    folder: str
    workflow: str
    venv: str
    after_tool: str
    after_llm: str
    llm_task: int = 3
    flight_task: int = 4

    def crashes(self) -> dict[str, tuple[str, int]]:
        return {"after-flight": (self.after_tool, self.flight_task),
                "inside-flight": ("after-effect:tool:book_flight", self.flight_task),
                "after-llm": (self.after_llm, self.llm_task)}


FRAMEWORKS = (
    Framework("OpenAI Agents SDK", "openai_agents", "dapr.openai.Travel.workflow",
              ".venv-sdk118", "after:execute_tool_activity", "after:call_llm_activity"),
    # a graph runner's tasks: agent node 1, tools_condition 2, tools node 3, agent 4, ...
    Framework("LangGraph", "langgraph", "dapr.langgraph.Travel.workflow", ".venv-sdk118",
              "after:execute_node_activity", "after:execute_node_activity", llm_task=4,
              flight_task=6),
    Framework("Strands", "strands", "dapr.strands.Travel.workflow", ".venv-frameworks2",
              "after:strands_execute_tool", "after:strands_call_model"),
    Framework("CrewAI", "crewai", "dapr.crewai.Travel.workflow", ".venv-frameworks2",
              "after:execute_tool_activity", "after:call_llm_activity"),
)


@dataclass
class Row:
    framework: Framework
    case: str
    status: str = "?"
    llm_signed: int = -1
    tokens_signed: int = -1
    llm_billed: int = -1
    tokens_billed: int = -1
    repeated_bill: int = 0
    booked: dict[str, int] = field(default_factory=dict)
    failed_tools: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def about(self, effect: str) -> list[str]:
        return [f["code"] for f in self.findings
                if (f.get("effect") or {}).get("name") == effect]

    def check(self) -> None:
        want: list[tuple[bool, str]] = [
            (self.status == "COMPLETED", f"trip {self.status}, expected COMPLETED"),
            (self.llm_signed == self.llm_billed,
             f"{self.llm_signed} LLM calls signed, the stub answered {self.llm_billed}"),
            (self.tokens_signed == self.tokens_billed,
             f"{self.tokens_signed} tokens signed, the stub billed {self.tokens_billed}"),
            (self.booked.get("book_hotel") == 1, f"hotel booked {self.booked.get('book_hotel')}"
                                                 " times, expected 1"),
            (self.failed_tools >= 1, "the hotel's 0-night call was not signed failed"),
        ]
        flight = self.about("tool:book_flight")
        serious = [f["code"] for f in self.findings if f["severity"] in ("warning", "error")]
        if self.case == "clean":
            want += [(self.booked.get("book_flight") == 1, "flight not booked once"),
                     (serious == [], f"findings {serious}, expected none")]
        elif self.case == "after-flight":
            want += [(self.booked.get("book_flight") == 1, "flight not booked once"),
                     ("effect-deduplicated" in flight, "no effect-deduplicated on the flight")]
        elif self.case == "inside-flight":
            want += [(self.booked.get("book_flight") == 2,
                      f"flight booked {self.booked.get('book_flight')} times, expected 2"),
                     ("effect-uncertain" in flight, "no effect-uncertain on the flight")]
        else:
            costs = [_cost(f["message"]) for f in self.findings
                     if f["code"] == "llm-call-repeated"]
            want += [(costs == [(1, self.repeated_bill)],
                      f"llm-call-repeated priced {costs}, the stub billed 1 call and "
                      f"{self.repeated_bill} tokens for the repeat")]
        self.problems += [msg for ok, msg in want if not ok]


def _cost(message: str) -> tuple[int, int]:
    """(calls, tokens) of '... cost N LLM call(s) and T tokens ...'."""
    words = message.split(" cost ", 1)[1].split()
    return int(words[0]), int(words[4]) if words[3] == "and" else 0


def histaudit(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("histaudit")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "histaudit.cli"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, check=False)


class Stack:
    """One framework's daprd stack, stub LLM and app process."""

    def __init__(self, out: Path, fw: Framework, llm: ScriptedLLM) -> None:
        self.out, self.fw, self.llm = out, fw, llm
        out.mkdir(parents=True)
        self.key, _pub, _signer = generate_keypair(out / "keys", name="agent")
        self.db = f"sqlite:///{out / 'ledger.db'}"
        self.engine = DaprdStack(state_dir=out / "engine")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.pending = {scoped_name(point, f"trip-{case}/{task}")
                        for case, (point, task) in fw.crashes().items()}

    def python(self) -> str:
        found = REPO / self.fw.venv / "bin" / "python"
        if not found.exists():
            raise SystemExit(f"demo-frameworks: {found} is missing (make test builds it)")
        return str(found)

    def serve(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self.starts += 1
        base = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
        env = self.engine.env({**base, "HISTAUDIT_DB": self.db, "HISTAUDIT_KEY": str(self.key),
                               "DATA_DIR": str(self.out), "STUB_LLM_URL": self.llm.url,
                               "PYTHONUNBUFFERED": "1", "DO_NOT_TRACK": "1",
                               "HISTAUDIT_CRASH_AT": ",".join(sorted(self.pending))})
        log = self.out / f"app-{self.starts}.log"
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [self.python(), str(HERE / self.fw.folder / "app.py")], env=env,
                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, cwd=self.out)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "ready" not in log.read_text(errors="replace").splitlines():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"{self.fw.name} app did not start; {log}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def booked(self) -> dict[str, int]:
        return {what: len(p.read_text().splitlines()) if (p := self.out / f"{what}.txt")
                .exists() else 0 for what in ("book_flight", "book_hotel")}

    def run(self, case: str) -> Row:
        import dapr.ext.workflow as wf

        row = Row(self.fw, case)
        instance = f"trip-{case}"
        self.serve()
        before, start = self.booked(), len(self.llm.log)
        host, port = self.engine.address.rsplit(":", 1)
        client = wf.DaprWorkflowClient(host=host, port=port)
        try:
            client.schedule_new_workflow(self.fw.workflow, input=TASK, instance_id=instance)
            if case != "clean":
                assert self.proc is not None
                try:
                    rc = self.proc.wait(timeout=RUN_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    rc = None
                if rc != CRASH_EXIT_CODE:
                    row.problems.append(f"the app did not crash (exit {rc})")
                    return row
                self.pending = {p for p in self.pending if f"@{instance}/" not in p}
                self.serve()
            state = wait_for_completion(client, instance, RUN_TIMEOUT_S)
            row.status = state.runtime_status.name if state else "UNKNOWN"
        except TimeoutError:
            row.status = f"not done after {RUN_TIMEOUT_S}s"
        finally:
            client.close()
        log = self.llm.log[start:]
        row.llm_billed, row.tokens_billed = len(log), sum(t for _, t in log)
        if case == "after-llm":  # the repeated request is the one billed twice
            kinds = [k for k, _ in log]
            row.repeated_bill = next((t for k, t in log if kinds.count(k) > 1), 0)
        row.booked = {w: n - before[w] for w, n in self.booked().items()}
        self.read_ledger(row, instance)
        row.check()
        return row

    def read_ledger(self, row: Row, instance: str) -> None:
        shown = histaudit("show", instance, "--json", "--db", self.db)
        entries = json.loads(shown.stdout)["entries"] if shown.returncode == 0 else []
        calls = [e["data"] for e in entries if e["kind"] == "llm.call"]
        row.llm_signed = len(calls)
        row.tokens_signed = sum(c.get("total_tokens") or 0 for c in calls)
        row.failed_tools = sum(1 for e in entries if e["kind"] == "effect.failed")
        verified = histaudit("verify", instance, "--json", "--db", self.db,
                             "--trust", str(self.out / "keys"))
        if verified.returncode not in (0, 1):
            row.problems.append(f"verify exit {verified.returncode}: {verified.stderr[-300:]}")
            return
        row.findings = json.loads(verified.stdout)["reports"][0]["findings"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.engine.stop()


def summary(rows: list[Row]) -> Table:
    table = Table(title="agent frameworks on Dapr, crashed, resumed and audited "
                        "(signed / what the stub LLM answered and billed)",
                  header_style="bold")
    for col in ("framework", "case", "LLM calls", "tokens", "flight, hotel booked",
                "findings (besides activity-reexecuted)", "as expected"):
        table.add_column(col)
    for r in rows:
        codes = sorted({f["code"] for f in r.findings} - {"activity-reexecuted"})
        table.add_row(r.framework.name, r.case, f"{r.llm_signed} / {r.llm_billed}",
                      f"{r.tokens_signed} / {r.tokens_billed}",
                      f"{r.booked.get('book_flight', '?')}, {r.booked.get('book_hotel', '?')}"
                      f" (+{r.failed_tools} failed)", "\n".join(codes) or "none",
                      "yes" if not r.problems else "NO")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "demo-out" / "frameworks",
                        help="work directory, wiped first (default: demo-out/frameworks/)")
    parser.add_argument("--only", action="append", default=None, metavar="FOLDER",
                        help="run only this framework (openai_agents, langgraph, strands, "
                             "crewai); repeatable")
    args = parser.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rows: list[Row] = []
    for fw in FRAMEWORKS:
        if args.only and fw.folder not in args.only:
            continue
        console.rule(fw.name)
        with ScriptedLLM() as llm:
            stack = Stack(out / fw.folder, fw, llm)
            stack.engine.start()
            try:
                for case in CASES:
                    row = stack.run(case)
                    console.print(f"  {case}: {row.status}, {row.llm_signed} LLM calls "
                                  f"signed, booked {row.booked}"
                                  + (f" [red]{'; '.join(row.problems)}[/red]"
                                     if row.problems else ""))
                    rows.append(row)
            finally:
                stack.stop()
    console.print(summary(rows))
    problems = [f"{r.framework.name} {r.case}: {p}" for r in rows for p in r.problems]
    for problem in problems:
        console.print(f"[red]unexpected:[/red] {problem}")
    if not problems:
        console.print("every row as expected: each framework's tools guarded, failures "
                      "signed failed, every LLM call at the provider's bill, every repeat named")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
