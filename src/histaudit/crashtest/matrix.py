"""Crash matrix: crash a workflow at every point it reaches, recover, and compare.

``run_matrix("examples/triage/app.py:triage", input={...})`` first runs the workflow once
without any crash, on a fresh engine with a fresh ledger, key pair and ``DATA_DIR``, and
with ``$HISTAUDIT_CRASH_TRACE`` set, so the worker writes down every crash point it passes
(:mod:`histaudit.crash`: the named ``crash_point`` calls and the automatic ``before:`` /
``after:`` / ``before-effect:`` / ``after-effect:`` points). A point reached more than once
is numbered: ``after:fetch_source#2`` is its second pass.

Then, for every point P, the same workflow runs again from nothing (its own engine, ledger,
key and data directory, so parallel runs never meet) and is crashed at P:

* **app crash** — the worker has ``HISTAUDIT_CRASH_AT=P`` and dies there like a power cut
  (exit 86). A second worker without the crash switch takes over. It is spawned together
  with the first and held before it connects, so recovery does not wait for Python to
  import the app a second time; it connects only once the first one is dead.
* **engine crash** — the worker runs with ``HISTAUDIT_CRASH_MODE=engine``: at P it writes a
  marker file and waits. The harness SIGKILLs the engine, starts it again on the same port
  and state file (with a short lock timeout, see :class:`histaudit.engine.Engine`), removes
  the marker, and the worker carries on. The step it was in the middle of is handed out
  again by the restarted engine.

After completion every instance in the ledger (child workflows too) is verified, and the
run is compared with the clean one. Outcomes:

``identical``
    completed, same output, same number of ``effect.done`` records per effect name, no
    finding at warning or above (info findings such as ``activity-reexecuted`` are listed).
``findings``
    completed; a warning or error behaviour finding (``effect-duplicate``,
    ``effect-uncertain``, …) is present and explains any difference in effect counts.
``diverged``
    output or effect counts differ from the clean run and no finding explains it.
``stuck``
    no completion within the time limit.
``failed``
    the workflow failed, the point was never reached, a worker died on its own, or the
    ledger has an integrity finding.

The app module must hold a module-level ``WorkflowRuntime`` (usually an
``AuditedWorkflowRuntime``); an app that builds its runtime in a factory instead can
expose a zero-argument function annotated to return one (``def build_runtime() ->
AuditedWorkflowRuntime``), which is used when no instance is found. The worker process is
``python -m histaudit.crashtest worker --app MODULE_OR_FILE``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import atexit
import importlib
import importlib.util
import inspect
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..crash import (
    CRASH_EXIT_CODE,
    CRASH_MODE_ENGINE,
    ENV_CRASH_AT,
    ENV_CRASH_MODE,
    ENV_CRASH_SIGNAL,
    ENV_CRASH_TRACE,
    read_trace,
)
from .. import usercode
from ..errors import EngineError, HistauditError, InputError, UsageError
from ..verify.findings import BEHAVIOUR_CODES

__all__ = [
    "BEHAVIOUR_CODES", "DIVERGED", "FAILED", "FINDINGS", "IDENTICAL", "KIND_APP",
    "KIND_ENGINE", "OUTCOMES", "STUCK", "CleanRun", "MatrixResult", "PointResult",
    "assert_no_duplicate_effects", "assert_recovered", "json_report", "junit_xml", "parse_env",
    "parse_input", "render", "run_clean", "run_matrix", "run_point",
]

IDENTICAL, FINDINGS, DIVERGED, STUCK, FAILED = (
    "identical", "findings", "diverged", "stuck", "failed")
OUTCOMES = (IDENTICAL, FINDINGS, DIVERGED, STUCK, FAILED)
KIND_APP, KIND_ENGINE = "app", "engine"

ENGINE_LOCK_TIMEOUT_S = 3.0
"""Lock timeout of the engine in engine-crash runs: how soon a step the killed engine had
handed out is handed out again (upstream's fixed value is two minutes)."""

READY_TIMEOUT_S = 90.0
"""How long a worker may take to import the app and connect (a loaded machine is slow)."""

WORKER_READY = "histaudit-crashtest: worker ready"
WORKER_HELD = "histaudit-crashtest: worker held"
WORKER_ERROR = "histaudit-crashtest: error: "
EXIT_WORKER_SETUP = 3
"""Worker exit status when the app cannot be imported or has no usable runtime."""

_POLL_S = 0.1
_TAIL_CHARS = 1500
_TERMINAL = ("COMPLETED", "FAILED", "TERMINATED")

# Workers still running when the interpreter exits are killed (engines are, by engine.py).
_LIVE_WORKERS: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _kill_live_workers() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE_WORKERS)
        _LIVE_WORKERS.clear()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.kill()
            proc.wait(timeout=5)


atexit.register(_kill_live_workers)


# --- input ------------------------------------------------------------------------------

def parse_input(text: str) -> Any:
    """The workflow input from its JSON text; InputError (one line) when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise InputError(f"--input is not JSON: {exc}") from None


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    """``K=V`` strings into a dict; UsageError on anything else."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or "\0" in pair or not key.replace("_", "a").isalnum():
            raise UsageError(f"--env {pair!r}: expected NAME=VALUE")
        env[key] = value
    return env


def _input_json(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"workflow input is not JSON-serialisable: {exc}") from None


@dataclass(frozen=True)
class _Target:
    """What to run: the workflow's module and name, and the module holding the runtime."""

    text: str  # as the user wrote it, for rerun commands
    module: str  # dotted name, or an absolute path to a .py file
    workflow: str
    app: str  # the module (or file) whose runtime the workers start
    app_text: str | None


def _parse_target(target: str, app: str | None) -> _Target:
    module, sep, workflow = target.rpartition(":")
    if not sep or not module or not workflow:
        raise UsageError(f"target {target!r}: expected MODULE_OR_FILE:WORKFLOW_NAME")
    module_ref = usercode.resolve_ref(module, "target")
    app_ref = usercode.resolve_ref(app, "--app") if app else module_ref
    return _Target(target, module_ref, workflow, app_ref, app)


@dataclass(frozen=True)
class _Spec:
    """Everything every run of one matrix shares."""

    target: _Target
    input: Any
    input_json: str
    env: Mapping[str, str]
    timeout: float
    lock_timeout: float
    engine_binary: str | None


def _spec(target: str, input: Any, app: str | None, env: Mapping[str, str] | None,
          timeout: float, lock_timeout: float, engine_binary: str | None) -> _Spec:
    if timeout <= 0:
        raise UsageError(f"timeout must be positive, not {timeout}")
    return _Spec(_parse_target(target, app), input, _input_json(input), dict(env or {}),
                 float(timeout), float(lock_timeout), engine_binary)


# --- results ----------------------------------------------------------------------------

@dataclass
class CleanRun:
    """The reference run: no crash, every point passed recorded in order."""

    target: str
    instance: str
    status: str
    output: Any
    output_text: str | None
    effects: dict[str, int]
    findings: list[dict[str, Any]]
    points: list[str]
    """Every point reached, in order, repeats numbered (``after:fetch_source#2``)."""
    workflows: list[str]
    activities: list[str]
    declared: list[str]
    """Points the app declares: ``crash_point("…")`` literals, ``before:``/``after:`` of
    every registered activity, ``before-effect:``/``after-effect:`` of literal effect names."""
    wall: float
    worker_start: float
    """Seconds from spawning the worker to its being connected (what a restart costs)."""

    @property
    def reached(self) -> list[str]:
        """The distinct points reached (without repeat numbers), in first-reached order."""
        return list(dict.fromkeys(_base(p) for p in self.points))

    @property
    def not_reached(self) -> list[str]:
        reached = set(self.reached)
        return [p for p in self.declared if p not in reached]

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "status": self.status, "output": self.output,
                "effects": self.effects, "findings": self.findings, "points": self.points,
                "workflows": self.workflows, "activities": self.activities,
                "wall_s": round(self.wall, 3), "worker_start_s": round(self.worker_start, 3)}


@dataclass
class PointResult:
    """One crash at one point, recovered (or not) and compared with the clean run."""

    point: str
    kind: str
    outcome: str
    detail: str
    rerun: str
    wall: float = 0.0
    status: str | None = None
    output: Any = None
    output_matches: bool = False
    effects: dict[str, int] = field(default_factory=dict)
    clean_effects: dict[str, int] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    diff: list[str] = field(default_factory=list)
    instance: str | None = None
    log_tail: str = ""

    @property
    def codes(self) -> list[str]:
        """Finding codes present, worst severity first, each once."""
        order = {"error": 0, "warning": 1, "info": 2}
        seen = sorted(self.findings, key=lambda f: (order.get(f["severity"], 3), f["code"]))
        return list(dict.fromkeys(f["code"] for f in seen))

    @property
    def worst(self) -> str | None:
        """The highest finding severity (``error``/``warning``/``info``), or None."""
        for level in ("error", "warning", "info"):
            if any(f["severity"] == level for f in self.findings):
                return level
        return None

    @property
    def failing(self) -> bool:
        """Counts against the exit status (and is a JUnit failure)."""
        return self.outcome in (DIVERGED, STUCK, FAILED) or (
            self.outcome == FINDINGS and self.worst == "error")

    @property
    def duplicated_effects(self) -> list[str]:
        """Effect names done more often than in the clean run, or reported duplicate."""
        names = {n for n, c in self.effects.items() if c > self.clean_effects.get(n, 0)}
        names |= {f.get("effect") for f in self.findings
                  if f["code"] == "effect-duplicate" and f.get("effect")}
        return sorted(names)

    @property
    def test_id(self) -> str:
        return self.point if self.kind == KIND_APP else f"engine:{self.point}"

    def to_json(self) -> dict[str, Any]:
        return {"point": self.point, "kind": self.kind, "outcome": self.outcome,
                "codes": self.codes, "worst": self.worst, "failing": self.failing,
                "detail": self.detail, "status": self.status, "output": self.output,
                "output_matches": self.output_matches, "effects": self.effects,
                "diff": self.diff, "findings": self.findings, "instance": self.instance,
                "wall_s": round(self.wall, 3), "rerun": self.rerun}


@dataclass
class MatrixResult:
    target: str
    input: Any
    clean: CleanRun
    points: list[PointResult]
    wall: float
    app: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    jobs: int = 1

    @property
    def coverage(self) -> dict[str, list[str]]:
        return {"declared": self.clean.declared, "reached": self.clean.reached,
                "not_reached": self.clean.not_reached}

    @property
    def summary(self) -> dict[str, int]:
        counts = Counter(p.outcome for p in self.points)
        return {o: counts[o] for o in OUTCOMES if counts[o]}

    @property
    def exit_code(self) -> int:
        """0 when every point is identical or has findings below error, else 1."""
        return 1 if any(p.failing for p in self.points) else 0

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "app": self.app, "input": self.input,
                "env": self.env, "jobs": self.jobs, "clean": self.clean.to_json(),
                "points": [p.to_json() for p in self.points], "coverage": self.coverage,
                "summary": self.summary, "exit_code": self.exit_code,
                "wall_s": round(self.wall, 3)}


# --- points -----------------------------------------------------------------------------

def _split(point: str) -> tuple[str, int]:
    """``name#3`` → (``name``, 3); ``name`` → (``name``, 1)."""
    name, sep, n = point.rpartition("#")
    if sep and name and n.isdigit() and int(n) >= 1:
        return name, int(n)
    return point, 1


def _base(point: str) -> str:
    return _split(point)[0]


def number_points(trace: Iterable[str]) -> list[str]:
    """Trace lines → point names, the n-th pass of a point as ``name#n`` (n ≥ 2)."""
    seen: Counter[str] = Counter()
    out = []
    for name in trace:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def _crash_at(point: str) -> str:
    """The ``HISTAUDIT_CRASH_AT`` value that fires exactly once, at this pass."""
    name, n = _split(point)
    return f"{name}#{n}"


def _rerun(spec: _Spec, point: str, kind: str) -> str:
    argv = ["histaudit", "crashtest", spec.target.text, "--input", spec.input_json,
            "--point", point]
    argv.append("--engine-crash" if kind == KIND_ENGINE else "--no-engine-points")
    if spec.target.app_text:
        argv += ["--app", spec.target.app_text]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    if spec.timeout != 60:
        argv += ["--timeout", f"{spec.timeout:g}"]
    return shlex.join(argv)


# --- processes --------------------------------------------------------------------------

class _Worker:
    """One ``python -m histaudit.crashtest worker`` process, its output in a log file."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name, self.proc, self.log = name, proc, log
        self.spawned = time.monotonic()
        self.ready_at: float | None = None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, chars: int = _TAIL_CHARS) -> str:
        return self.output()[-chars:]

    def setup_error(self) -> str | None:
        """The worker's one-line reason when it could not load the app."""
        for line in self.output().splitlines():
            if line.startswith(WORKER_ERROR):
                return line[len(WORKER_ERROR):]
        return None

    def wait_for(self, marker: str, timeout: float) -> bool:
        """Wait until the log shows ``marker``; False if the process ended first."""
        deadline = time.monotonic() + timeout
        while marker not in self.output():
            if self.proc.poll() is not None:
                return marker in self.output()
            if time.monotonic() > deadline:
                return False
            time.sleep(0.03)
        return True

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        if not self.wait_for(WORKER_READY, timeout):
            raise _RunProblem(self._why_not_ready(timeout), self.tail())
        self.ready_at = time.monotonic()

    def _why_not_ready(self, timeout: float) -> str:
        rc = self.proc.poll()
        error = self.setup_error()
        if error:
            return error
        if rc is None:
            return f"worker {self.name} not connected after {timeout:.0f}s"
        return f"worker {self.name} exited with status {rc} before it was ready"

    def release(self) -> None:
        """Let a held worker connect."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died while held; wait_ready reports that

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        with _LIVE_LOCK:
            _LIVE_WORKERS.discard(self.proc)


class _RunProblem(Exception):
    """A run could not go on (worker died, never connected …); becomes ``failed``."""

    def __init__(self, message: str, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


def _quiet_logger_options() -> Any:
    from dapr.ext.workflow.logger import LoggerOptions

    return LoggerOptions(log_level=logging.CRITICAL, log_handler=logging.NullHandler())


@dataclass(frozen=True)
class _State:
    status: str
    output_text: str | None
    failure: str | None


class _Sandbox:
    """One run's world: engine, ledger, key pair, data directory, workers, client."""

    def __init__(self, spec: _Spec, *, lock_timeout: float | None = None,
                 label: str = "run") -> None:
        from ..ledger.keys import generate_keypair

        self.spec = spec
        self.dir = Path(tempfile.mkdtemp(prefix=f"histaudit-crashtest-{label}-"))
        self.workers: list[_Worker] = []
        self._client: Any = None
        try:
            self.data = self.dir / "data"
            self.data.mkdir()
            self.keys = self.dir / "keys"
            key, _pub, _signer = generate_keypair(self.keys, name="crashtest")
            self.db_url = f"sqlite:///{self.dir / 'ledger.db'}"
            _create_ledger(self.db_url)
            self.engine = _make_engine(spec, self.dir / "engine", lock_timeout)
            base = {k: v for k, v in os.environ.items()
                    if not k.startswith("HISTAUDIT_") and k not in ("DATA_DIR",)}
            base.update({"HISTAUDIT_DB": self.db_url, "HISTAUDIT_KEY": str(key),
                         "DATA_DIR": str(self.data), "PYTHONUNBUFFERED": "1"})
            base.update(spec.env)
            self._base_env = base
            self.instance = f"crashtest-{uuid.uuid4().hex[:12]}"
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def __enter__(self) -> _Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_engine(self) -> None:
        self.engine.start()

    @property
    def env(self) -> dict[str, str]:
        """Worker environment; asked after the engine started (its port may have moved)."""
        return self.engine.env(self._base_env)

    def spawn(self, name: str, extra: Mapping[str, str] | None = None, *, hold: bool = False,
              info: Path | None = None) -> _Worker:
        argv = [sys.executable, "-m", "histaudit.crashtest", "worker",
                "--app", self.spec.target.app, "--parent", str(os.getpid())]
        if info is not None:
            argv += ["--info", str(info), "--module", self.spec.target.module]
        if hold:
            argv.append("--hold")
        log = self.dir / f"worker-{name}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(argv, env={**self.env, **(extra or {})},
                                    stdin=subprocess.PIPE if hold else subprocess.DEVNULL,
                                    stdout=fh, stderr=subprocess.STDOUT, close_fds=True)
        with _LIVE_LOCK:
            _LIVE_WORKERS.add(proc)
        worker = _Worker(name, proc, log)
        self.workers.append(worker)
        return worker

    @property
    def client(self) -> Any:
        if self._client is None:
            import dapr.ext.workflow as wf

            host, port = self.engine.address.rsplit(":", 1)
            self._client = wf.DaprWorkflowClient(host=host, port=port,
                                                 logger_options=_quiet_logger_options())
        return self._client

    def reset_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
        self._client = None

    def schedule(self) -> None:
        # start_at: queued at once, whether or not a worker is connected yet.
        self.client.schedule_new_workflow(self.spec.target.workflow, input=self.spec.input,
                                          instance_id=self.instance,
                                          start_at=datetime.now(UTC))

    def state(self) -> _State | None:
        try:
            st = self.client.get_workflow_state(self.instance, fetch_payloads=True)
        except Exception:  # noqa: BLE001 - engine restarting; ask again
            return None
        if st is None:
            return None
        failure = None
        details = getattr(st, "failure_details", None)
        if details is not None:
            failure = f"{details.error_type}: {details.message}"
        return _State(st.runtime_status.name, st.serialized_output, failure)

    def wait_terminal(self, timeout: float, *, watch: Callable[[], bool] | None = None
                      ) -> _State | None:
        """Poll until the instance is terminal (its state) or ``watch()`` is true (None).

        Returns the last state seen when the time runs out (possibly not terminal).
        """
        deadline = time.monotonic() + timeout
        last: _State | None = None
        while True:
            if watch is not None and watch():
                return None
            st = self.state()
            if st is not None:
                last = st
                if st.status in _TERMINAL:
                    return st
            if time.monotonic() > deadline:
                return last
            time.sleep(_POLL_S)

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.reset_client()
        with contextlib.suppress(Exception):
            self.engine.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _create_ledger(url: str) -> None:
    """Create the ledger before any worker opens it: two workers starting side by side
    (the crashing one and the held one) then never race to create one schema."""
    from ..ledger.store import Ledger

    Ledger.open(url, create=True).close()


def _make_engine(spec: _Spec, state_dir: Path, lock_timeout: float | None) -> Any:
    from .engine import EngineProcess

    return EngineProcess(binary=spec.engine_binary, state_dir=state_dir, lock_timeout=lock_timeout)


# --- ledger evidence --------------------------------------------------------------------

@dataclass
class _Evidence:
    effects: dict[str, int]
    findings: list[dict[str, Any]]


def _evidence(db_url: str, trust_dir: Path) -> _Evidence:
    """Effect counts and the verifier's findings over every instance in the ledger."""
    from ..ledger import records as rec
    from ..ledger.keys import TrustStore
    from ..ledger.kinds import Kind
    from ..ledger.store import Ledger
    from ..verify.verifier import verify_instance

    trust = TrustStore.load(trust_dir)
    effects: Counter[str] = Counter()
    findings: list[dict[str, Any]] = []
    if not Path(db_url.removeprefix("sqlite:///")).exists():
        return _Evidence({}, [])
    with Ledger.open(db_url) as ledger:
        for instance in ledger.instance_ids():
            names: dict[int, str] = {}
            for row in ledger.entries(instance):
                try:
                    entry = rec.parse_entry(row.body)
                except HistauditError:
                    continue
                if entry.kind.startswith("effect."):
                    names[entry.seq] = str(entry.data.get("name"))
                    if entry.kind == Kind.EFFECT_DONE:
                        effects[str(entry.data.get("name"))] += 1
            report = verify_instance(ledger, instance, trust=trust, full=True, workers=1)
            for f in report.findings:
                doc = f.to_json()
                if f.seq is not None and f.seq in names:
                    doc["effect"] = names[f.seq]
                findings.append(doc)
    return _Evidence(dict(sorted(effects.items())), findings)


def _decode(text: str | None) -> Any:
    if text is None or text == "":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- discovery --------------------------------------------------------------------------

_EFFECT_CALLS = {"side_effect", "once"}


def declared_points(sources: Iterable[str | os.PathLike[str]],
                    activities: Iterable[str] = ()) -> list[str]:
    """Crash points the code declares, found without running it.

    ``crash_point("literal")`` calls (as a name or an attribute), ``before-effect:`` /
    ``after-effect:`` of ``side_effect(ctx, "literal")`` and ``once(ctx, "literal", …)``,
    and ``before:``/``after:`` of every activity in ``activities``.
    """
    points: list[str] = []
    for activity in activities:
        points += [f"before:{activity}", f"after:{activity}"]
    for source in sources:
        try:
            tree = ast.parse(Path(source).read_text(encoding="utf-8"), filename=str(source))
        except (OSError, SyntaxError, ValueError):
            continue
        found: list[tuple[int, int, list[str]]] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None)
            if name == "crash_point" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, node.col_offset, [arg.value]))
            elif name in _EFFECT_CALLS and len(node.args) >= 2:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, node.col_offset,
                                  [f"before-effect:{arg.value}", f"after-effect:{arg.value}"]))
        for _line, _col, names in sorted(found):
            points += names
    return list(dict.fromkeys(points))


# --- one clean run ----------------------------------------------------------------------

def _clean(spec: _Spec) -> CleanRun:
    began = time.monotonic()
    with _Sandbox(spec, label="clean") as sb:
        trace = sb.dir / "trace.txt"
        info_path = sb.dir / "info.json"
        sb.start_engine()
        worker = sb.spawn("clean", {ENV_CRASH_TRACE: str(trace)}, info=info_path)
        try:
            worker.wait_ready()
        except _RunProblem as exc:
            error = worker.setup_error()
            if error:
                raise InputError(error) from None
            raise EngineError(f"clean run of {spec.target.text}: {exc}; worker output: "
                              f"{_one_line(exc.tail[-400:])}") from None
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if spec.target.workflow not in info["workflows"]:
            known = ", ".join(info["workflows"]) or "none"
            raise UsageError(f"workflow {spec.target.workflow!r} is not registered in "
                             f"{spec.target.app} (registered: {known})")
        worker_start = (worker.ready_at or time.monotonic()) - worker.spawned
        sb.schedule()
        state = sb.wait_terminal(spec.timeout)
        if state is None or state.status not in _TERMINAL:
            raise HistauditError(f"clean run of {spec.target.text} did not complete within "
                                 f"{spec.timeout:g}s (status "
                                 f"{state.status if state else 'unknown'}); "
                                 f"nothing to compare crashes with")
        if state.status != "COMPLETED":
            raise HistauditError(f"clean run of {spec.target.text} ended {state.status}"
                                 f"{': ' + state.failure if state.failure else ''}; "
                                 f"nothing to compare crashes with")
        evidence = _evidence(sb.db_url, sb.keys)
        declared = declared_points(info["sources"],
                                   info["activities"] if info["audited"] else ())
        return CleanRun(target=spec.target.text, instance=sb.instance, status=state.status,
                        output=_decode(state.output_text), output_text=state.output_text,
                        effects=evidence.effects, findings=evidence.findings,
                        points=number_points(read_trace(trace)), workflows=info["workflows"],
                        activities=info["activities"], declared=declared,
                        wall=time.monotonic() - began, worker_start=worker_start)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- one crash --------------------------------------------------------------------------

def _crash_once(spec: _Spec, clean: CleanRun, point: str, kind: str) -> PointResult:
    began = time.monotonic()
    rerun = _rerun(spec, point, kind)
    result = PointResult(point=point, kind=kind, outcome=FAILED, detail="", rerun=rerun,
                         clean_effects=dict(clean.effects))
    if point not in clean.points:
        result.detail = "point never reached in the clean run"
        return result
    lock = spec.lock_timeout if kind == KIND_ENGINE else None
    try:
        with _Sandbox(spec, lock_timeout=lock, label=kind) as sb:
            result.instance = sb.instance
            try:
                state = (_app_crash(sb, point) if kind == KIND_APP
                         else _engine_crash(sb, point))
            except _RunProblem as exc:
                result.detail = str(exc)
                result.log_tail = exc.tail
                state = None
            else:
                if state is None or state.status not in _TERMINAL:
                    result.outcome = STUCK
                    result.status = state.status if state else None
                    result.detail = (f"not complete {spec.timeout:g}s after the crash "
                                     f"(status {result.status or 'unknown'})")
                    result.log_tail = sb.workers[-1].tail() if sb.workers else ""
            if state is not None and state.status in _TERMINAL:
                _judge(result, clean, state, _evidence(sb.db_url, sb.keys))
                if result.outcome in (FAILED, DIVERGED) and sb.workers:
                    result.log_tail = sb.workers[-1].tail()
    except EngineError as exc:
        result.detail = f"engine: {_one_line(str(exc))[:300]}"
    except Exception as exc:  # noqa: BLE001 - one point's trouble must not end the matrix
        result.detail = f"harness: {type(exc).__name__}: {_one_line(str(exc))[:300]}"
    result.wall = time.monotonic() - began
    return result


def _app_crash(sb: _Sandbox, point: str) -> _State | None:
    timeout = sb.spec.timeout
    sb.start_engine()
    crashing = sb.spawn("crash", {ENV_CRASH_AT: _crash_at(point)})
    resume = sb.spawn("resume", hold=True)  # imports now, connects after the crash
    crashing.wait_ready()
    sb.schedule()
    early = sb.wait_terminal(timeout, watch=lambda: crashing.proc.poll() is not None)
    rc = crashing.proc.poll()
    if rc is None:
        if early is not None and early.status in _TERMINAL:
            raise _RunProblem(f"point never reached: the workflow ended {early.status} "
                              f"without crashing", crashing.tail())
        raise _RunProblem(f"point never reached within {timeout:g}s", crashing.tail())
    if rc != CRASH_EXIT_CODE:
        raise _RunProblem(f"worker exited with status {rc}, not at the crash point",
                          crashing.tail())
    resume.release()
    resume.wait_ready()
    return sb.wait_terminal(timeout)


def _engine_crash(sb: _Sandbox, point: str) -> _State | None:
    timeout = sb.spec.timeout
    marker = sb.dir / "crash-signal"
    sb.start_engine()
    worker = sb.spawn("engine-crash", {ENV_CRASH_AT: _crash_at(point),
                                       ENV_CRASH_MODE: CRASH_MODE_ENGINE,
                                       ENV_CRASH_SIGNAL: str(marker)})
    worker.wait_ready()
    sb.schedule()
    early = sb.wait_terminal(timeout, watch=lambda: marker.exists()
                             or worker.proc.poll() is not None)
    if not marker.exists():
        rc = worker.proc.poll()
        if rc is not None:
            raise _RunProblem(f"worker exited with status {rc} before the point",
                              worker.tail())
        status = early.status if early is not None else "unknown"
        raise _RunProblem(f"point never reached (workflow {status})", worker.tail())
    sb.reset_client()
    sb.engine.kill()  # SIGKILL while the app is in the middle of the step
    sb.engine.start()  # same port, same state file
    marker.unlink()
    return sb.wait_terminal(timeout + sb.spec.lock_timeout)


def _judge(result: PointResult, clean: CleanRun, state: _State, ev: _Evidence) -> None:
    """Set the outcome of a run that reached a terminal state."""
    result.status = state.status
    result.output = _decode(state.output_text)
    result.effects = ev.effects
    result.findings = ev.findings
    if state.status != "COMPLETED":
        result.outcome = FAILED
        result.detail = f"workflow {state.status}" + (f": {state.failure}"
                                                      if state.failure else "")
        return
    integrity = sorted({f["code"] for f in ev.findings if f["code"] not in BEHAVIOUR_CODES})
    result.output_matches = result.output == clean.output
    diff: list[str] = []
    if not result.output_matches:
        diff.append(f"output {_short(clean.output)} -> {_short(result.output)}")
    changed = sorted(n for n in set(clean.effects) | set(ev.effects)
                     if clean.effects.get(n, 0) != ev.effects.get(n, 0))
    for name in changed:
        diff.append(f"effect {name} done {clean.effects.get(name, 0)} -> "
                    f"{ev.effects.get(name, 0)}")
    result.diff = diff
    if integrity:
        result.outcome = FAILED
        result.detail = "ledger integrity: " + ", ".join(integrity)
        return
    serious = [f for f in ev.findings if f["severity"] in ("warning", "error")]
    explained = {f.get("effect") for f in serious if f.get("effect")}
    unexplained = [d for d in diff if d.startswith("output")] + [
        f"effect {n}" for n in changed if n not in explained]
    if unexplained:
        result.outcome = DIVERGED
        result.detail = "; ".join(diff)
    elif serious:
        result.outcome = FINDINGS
        codes = list(dict.fromkeys(f["code"] for f in serious))
        result.detail = ", ".join(codes) + (f" ({'; '.join(diff)})" if diff else "")
    else:
        result.outcome = IDENTICAL
        result.detail = "same output and effects as the clean run"


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


# --- public API -------------------------------------------------------------------------

def run_clean(target: str, *, input: Any, app: str | None = None,
              env: Mapping[str, str] | None = None, timeout: float = 60,
              engine_binary: str | None = None) -> CleanRun:
    """Run the workflow once without a crash; see :class:`CleanRun`."""
    spec = _spec(target, input, app, env, timeout, ENGINE_LOCK_TIMEOUT_S, engine_binary)
    return _clean(spec)


def run_point(target: str, point: str, *, input: Any, app: str | None = None,
              engine_crash: bool = False, env: Mapping[str, str] | None = None,
              timeout: float = 60, clean: CleanRun | None = None,
              engine_binary: str | None = None) -> PointResult:
    """Crash the workflow at one point (``name`` or ``name#n``) and judge the recovery.

    Without ``clean`` a clean run is made first, to compare with.
    """
    spec = _spec(target, input, app, env, timeout, ENGINE_LOCK_TIMEOUT_S, engine_binary)
    if clean is None:
        clean = _clean(spec)
    return _crash_once(spec, clean, point, KIND_ENGINE if engine_crash else KIND_APP)


def run_matrix(target: str, *, input: Any, app: str | None = None, jobs: int = 1,
               env: Mapping[str, str] | None = None, timeout: float = 60,
               engine_points: bool = True, app_points: bool = True,
               points: Sequence[str] | None = None, clean: CleanRun | None = None,
               engine_binary: str | None = None,
               progress: Callable[[PointResult, int, int], None] | None = None
               ) -> MatrixResult:
    """Clean run, then every point (or ``points``) as an app crash and an engine crash.

    ``jobs`` runs that many points at once, each with its own engine and workers.
    ``progress(result, done, total)`` is called as each point finishes.
    """
    if jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    if not (app_points or engine_points):
        raise UsageError("nothing to run: both app and engine points are off")
    spec = _spec(target, input, app, env, timeout, ENGINE_LOCK_TIMEOUT_S, engine_binary)
    began = time.monotonic()
    if clean is None:
        clean = _clean(spec)
    chosen = list(dict.fromkeys(points)) if points else clean.points
    kinds = [k for k, on in ((KIND_APP, app_points), (KIND_ENGINE, engine_points)) if on]
    todo = [(p, k) for k in kinds for p in chosen]
    results: list[PointResult | None] = [None] * len(todo)
    done = 0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal done
        point, kind = todo[i]
        res = _crash_once(spec, clean, point, kind)
        with lock:
            results[i] = res
            done += 1
            if progress is not None:
                progress(res, done, len(todo))

    if jobs == 1 or len(todo) <= 1:
        for i in range(len(todo)):
            one(i)
    else:
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="crashtest") as pool:
            for fut in as_completed([pool.submit(one, i) for i in range(len(todo))]):
                fut.result()
    return MatrixResult(target=target, input=input, clean=clean,
                        points=[r for r in results if r is not None],
                        wall=time.monotonic() - began, app=app, env=dict(env or {}),
                        jobs=jobs)


# --- assertions (also for the pytest plugin) --------------------------------------------

def assert_no_duplicate_effects(outcome: PointResult) -> None:
    """Fail unless no side effect was done more often than in the clean run."""
    dup = outcome.duplicated_effects
    if dup:
        raise AssertionError(f"crash at {outcome.point} ({outcome.kind}): side effect "
                             f"{', '.join(dup)} done more than in the clean run "
                             f"[{', '.join(outcome.codes)}]; rerun: {outcome.rerun}")


def assert_recovered(outcome: PointResult) -> None:
    """Fail unless the crashed run ended like the clean one: completed, same output, no
    duplicate side effect, ledger intact."""
    problems = []
    if outcome.outcome in (STUCK, FAILED) or outcome.status != "COMPLETED":
        problems.append(f"{outcome.outcome}: {outcome.detail}")
    else:
        if not outcome.output_matches:
            problems.append(f"output differs from the clean run ({'; '.join(outcome.diff)})")
        dup = outcome.duplicated_effects
        if dup:
            problems.append(f"side effect {', '.join(dup)} duplicated")
    if problems:
        raise AssertionError(f"crash at {outcome.point} ({outcome.kind}) not recovered: "
                             f"{'; '.join(problems)} [{', '.join(outcome.codes) or 'no findings'}]"
                             f"; rerun: {outcome.rerun}")


# --- reports ----------------------------------------------------------------------------

_OUTCOME_STYLE = {IDENTICAL: "green", FINDINGS: "yellow", DIVERGED: "bold red",
                  STUCK: "bold red", FAILED: "bold red"}


def render(result: MatrixResult, console: Any = None) -> None:
    """Print the matrix as a table, then what needs a look and the coverage."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False, soft_wrap=True, markup=False)
    clean = result.clean
    console.print(f"clean run of {result.target}: {clean.status} in {clean.wall:.1f}s, "
                  f"output {_short(clean.output, 80)}, effects "
                  f"{_short(clean.effects, 80)}, {len(clean.points)} crash points")
    table = Table(header_style="bold")
    for col in ("point", "kind", "outcome", "codes", "wall"):
        table.add_column(col, overflow="fold", justify="right" if col == "wall" else "left")
    for p in result.points:
        style = _OUTCOME_STYLE[p.outcome]
        if p.outcome == FINDINGS and not p.failing:
            style = "yellow"
        table.add_row(p.point, p.kind, Text(p.outcome, style=style),
                      ", ".join(p.codes) or "-", f"{p.wall:.1f}s")
    console.print(table)
    look = [p for p in result.points if p.outcome != IDENTICAL]
    for p in look:
        console.print(f"{p.point} ({p.kind}): {p.outcome} — {p.detail}")
        console.print(f"  rerun: {p.rerun}")
    if clean.not_reached:
        console.print("declared but never reached in the clean run: "
                      + ", ".join(clean.not_reached))
    summary = ", ".join(f"{n} {o}" for o, n in result.summary.items())
    console.print(f"{len(result.points)} crash runs in {result.wall:.1f}s "
                  f"(jobs {result.jobs}): {summary}")


def json_report(result: MatrixResult) -> bytes:
    """The ``--json`` file: one object (target, input, clean run, points, coverage)."""
    return (json.dumps(result.to_json(), indent=2, default=str) + "\n").encode("utf-8")


def junit_xml(result: MatrixResult) -> bytes:
    """JUnit XML: one testcase per point; a failure for diverged, stuck, failed and for
    findings at error severity."""
    import xml.etree.ElementTree as ET

    failures = sum(p.failing for p in result.points)
    suite = ET.Element("testsuite", {
        "name": f"histaudit crashtest {result.target}", "tests": str(len(result.points)),
        "failures": str(failures), "errors": "0", "skipped": "0",
        "time": f"{result.wall:.3f}"})
    props = ET.SubElement(suite, "properties")
    for name, value in (("input", json.dumps(result.input, sort_keys=True)),
                        ("clean.output", json.dumps(result.clean.output, sort_keys=True)),
                        ("clean.effects", json.dumps(result.clean.effects, sort_keys=True)),
                        ("coverage.not_reached", ", ".join(result.clean.not_reached))):
        ET.SubElement(props, "property", {"name": name, "value": value})
    workflow = result.target.rpartition(":")[2]
    for p in result.points:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"crashtest.{workflow}.{p.kind}", "name": p.point,
            "time": f"{p.wall:.3f}"})
        text = f"{p.detail}\ncodes: {', '.join(p.codes) or '-'}\nrerun: {p.rerun}"
        if p.failing:
            fail = ET.SubElement(case, "failure", {
                "message": f"{p.outcome}: {p.detail}"[:500], "type": p.outcome})
            fail.text = text + (f"\n--- worker output ---\n{p.log_tail}" if p.log_tail else "")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"{p.outcome}: {text}"
    root = ET.Element("testsuites", {"tests": str(len(result.points)),
                                     "failures": str(failures)})
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


# --- the worker process -----------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """End this worker when the harness that started it is gone."""
    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, name="crashtest-parent-watch", daemon=True).start()


def _worker_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m histaudit.crashtest worker")
    parser.add_argument("--app", required=True)
    parser.add_argument("--info")
    parser.add_argument("--module")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--parent", type=int)
    args = parser.parse_args(argv)
    if args.parent:
        _watch_parent(args.parent)
    import dapr.ext.workflow  # noqa: F401 - the slow import, before anything else

    try:
        module = usercode.load_module(args.app, f"app {args.app!r}")
        runtime = usercode.find_runtime(module, args.app)
    except HistauditError as exc:
        print(f"{WORKER_ERROR}{_one_line(str(exc))}", flush=True)
        return EXIT_WORKER_SETUP
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code, any error
        print(f"{WORKER_ERROR}cannot import {args.app}: "
              f"{_one_line(f'{type(exc).__name__}: {exc}')}", flush=True)
        return EXIT_WORKER_SETUP
    if args.info:
        from .. import sdk
        from ..interceptor import AuditedWorkflowRuntime

        workflows, activities = sdk.registered_names(runtime)
        sources = [getattr(module, "__file__", None)]
        if args.module and args.module != args.app:
            mod = (sys.modules.get(Path(args.module).stem) if usercode.is_file_ref(args.module)
                   else sys.modules.get(args.module))
            sources.append(getattr(mod, "__file__", None) if mod else
                           (args.module if usercode.is_file_ref(args.module) else None))
        Path(args.info).write_text(json.dumps({
            "workflows": workflows, "activities": activities,
            "audited": isinstance(runtime, AuditedWorkflowRuntime),
            "sources": [s for s in dict.fromkeys(sources) if s]}), encoding="utf-8")
    if args.hold:
        print(WORKER_HELD, flush=True)
        if not sys.stdin.readline():
            return 0  # the harness went away before releasing us
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    runtime.start()
    print(WORKER_READY, flush=True)
    while not stop.wait(0.5):
        pass
    with contextlib.suppress(Exception):
        runtime.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return _worker_main(argv[1:])
    print("usage: python -m histaudit.crashtest worker --app MODULE_OR_FILE "
          "(the matrix itself: histaudit crashtest --help)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
