"""What a crash matrix runs: :class:`CrashSpec`, and the parsers of its command-line parts.

A spec is everything every run of one matrix shares — the workflow, its input, the app
holding the runtime, the workers' environment, the time limits, the output fields left out
of comparisons and the sample of points to run. It is checked when it is made (the
target's module or file exists, the input is JSON-serialisable, the timeout is positive,
the ignored paths are JSONPath), so a bad one fails before any engine starts. It also
records the git commit of the code under test (:func:`git_commit`), for the reports.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from histaudit import usercode
from histaudit.errors import InputError, UsageError
from histaudit.testing import DURABLETASK, ENGINES
from histaudit.verify.findings import Severity

from .ignore import check_paths

__all__ = ["DEFAULT_ENGINE", "DEFAULT_FAIL_ON", "DEFAULT_TIMEOUT_S", "ENGINES",
           "ENGINE_LOCK_TIMEOUT_S", "CrashSpec", "git_commit", "parse_env", "parse_events",
           "parse_input"]

DEFAULT_TIMEOUT_S = 60.0
"""Seconds a run may take to crash, and then to complete (``--timeout``'s default)."""

ENGINE_LOCK_TIMEOUT_S = 3.0
"""Lock timeout of the engine in engine-crash runs: how soon a step the killed engine had
handed out is handed out again (upstream's fixed value is two minutes)."""

DEFAULT_ENGINE = DURABLETASK
"""What a matrix's runs talk to unless told: the standalone durabletask-go engine; the
other of :data:`~histaudit.testing.ENGINES` is real daprd with its placement and
scheduler (docs/adr/0008-daprd.md)."""

DEFAULT_FAIL_ON = Severity.ERROR
"""The lowest finding severity that makes a point fail unless told (``--fail-on``), as
for ``histaudit verify``."""


def parse_input(text: str) -> Any:
    """The workflow input from its JSON text; InputError (one line) when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise InputError(f"--input is not JSON: {exc}") from None


def parse_events(pairs: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``NAME=JSON`` strings into (name, JSON text) pairs, in order; UsageError (one line)
    without the ``=``. :class:`CrashSpec` checks that the text is JSON."""
    events = []
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--event {pair!r}: expected NAME=JSON")
        events.append((name, text))
    return tuple(events)


def parse_env(pairs: Iterable[str]) -> dict[str, str]:
    """``K=V`` strings into a dict; UsageError on anything else."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or "\0" in pair or not key.replace("_", "a").isalnum():
            raise UsageError(f"--env {pair!r}: expected NAME=VALUE")
        env[key] = value
    return env


_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory); None when it is
    not a git checkout, has no commit yet, or git is missing or fails."""
    try:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD"], cwd=cwd,
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and _COMMIT.fullmatch(commit) else None


def _input_json(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"workflow input is not JSON-serialisable: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class CrashSpec:
    """One workflow to crash: ``CrashSpec(target="app.py:triage", input={...})``.

    ``target`` is ``MODULE_OR_FILE:WORKFLOW_NAME``; ``app`` the module (or ``.py`` file)
    holding the ``WorkflowRuntime`` when it is not the target's module; ``env`` extra
    environment for the workers; ``timeout`` the seconds a run may take to crash, and
    then to complete; ``lock_timeout`` the engine's lock timeout in engine-crash runs;
    ``engine_binary`` the durabletask-go binary (default: see
    :func:`histaudit.testing.engine.find_engine_binary`); ``engine`` what the runs
    talk to, one of :data:`ENGINES` (on ``"daprd"`` an engine crash SIGKILLs and restarts
    daprd, whose own timing re-dispatches the interrupted step: ``lock_timeout`` and
    ``engine_binary`` are not used); ``ignore`` RFC 9535 JSONPaths
    of output fields left out when outputs are compared
    (:mod:`~histaudit.crashtest.ignore`); ``sample`` how
    many of the selected points to run, chosen with ``seed``
    (:func:`~histaudit.crashtest.discovery.sample_points`; a seed is picked, and kept
    here, when ``sample`` is given without one); ``resources`` (daprd only) a directory of
    Dapr component files every run's daprd loads beside its own actor store (an agent's
    ``agent-workflow`` state store): each daprd runs in its run's own directory, so a
    relative path in a component (``connectionString: agent-state.db``) is per run;
    ``events`` external events (name, JSON text) raised on every run's instance right
    after it is scheduled, in order — the engine keeps an event until the workflow waits
    for it, so an approval path runs in every run, crashed or not; ``fail_on`` the lowest
    finding severity that makes a point fail (a :class:`Severity` or its name, as
    ``verify --fail-on``; a doubled effect, a divergence, a stuck or failed run fail
    whatever it is); ``rerun_from`` (daprd only) an event id: every run first runs the
    workflow to completion as a source instance, then reruns it from that event
    (``rerun_workflow_from_event``) as the instance that is crashed and judged — the
    crash points are those of the rerun alone.

    Made, it is checked: UsageError or InputError (one line) when it cannot run.
    """

    target: str
    input: Any
    app: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT_S
    lock_timeout: float = ENGINE_LOCK_TIMEOUT_S
    engine_binary: str | None = None
    engine: str = DEFAULT_ENGINE
    ignore: tuple[str, ...] = ()
    sample: int | None = None
    seed: int | None = None
    resources: str | None = None
    events: tuple[tuple[str, str], ...] = ()
    fail_on: Severity = DEFAULT_FAIL_ON
    rerun_from: int | None = None

    # Derived when the spec is made (not arguments): the target resolved, the input's text,
    # the commit.
    module: str = field(init=False, repr=False, compare=False)
    """The target's module: a dotted name, or the absolute path of a ``.py`` file."""
    workflow: str = field(init=False, repr=False, compare=False)
    """The workflow's registered name."""
    app_module: str = field(init=False, repr=False, compare=False)
    """The module (or absolute file path) whose runtime the workers start."""
    input_json: str = field(init=False, repr=False, compare=False)
    """The input as compact JSON text (what a rerun command passes to ``--input``)."""
    commit: str | None = field(init=False, repr=False, compare=False)
    """The git commit checked out where the spec was made (:func:`git_commit`)."""

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise UsageError(f"timeout must be positive, not {self.timeout}")
        if self.lock_timeout <= 0:
            raise UsageError(f"lock_timeout must be positive, not {self.lock_timeout}")
        if self.engine not in ENGINES:
            raise UsageError(f"engine must be one of {', '.join(ENGINES)}, not "
                             f"{self.engine!r}")
        if self.sample is not None and self.sample < 1:
            raise UsageError(f"--sample must be at least 1, not {self.sample}")
        if self.seed is not None and self.sample is None:
            raise UsageError("--seed without --sample: there is no sample to choose")
        if self.rerun_from is not None and self.engine != "daprd":
            raise UsageError("--rerun-from needs --engine daprd: the standalone engine "
                             "does not rerun from an event")
        if self.rerun_from is not None and self.rerun_from < 0:
            raise UsageError(f"--rerun-from must be an event id (0 or more), not "
                             f"{self.rerun_from}")
        ignore = check_paths(self.ignore)
        fail_on = Severity.threshold(self.fail_on)
        resources = self._resources()
        events = tuple((str(n), str(t)) for n, t in self.events)
        for name, text in events:
            if not name:
                raise UsageError("--event: the event needs a name (NAME=JSON)")
            try:
                json.loads(text)
            except ValueError as exc:
                raise InputError(f"--event {name}: the data is not JSON: {exc}") from None
        seed = self.seed
        if self.sample is not None and seed is None:
            seed = secrets.randbits(32)
        module, sep, workflow = self.target.rpartition(":")
        if not sep or not module or not workflow:
            raise UsageError(f"target {self.target!r}: expected MODULE_OR_FILE:WORKFLOW_NAME")
        module_ref = usercode.resolve_ref(module, "target")
        app_ref = usercode.resolve_ref(self.app, "--app") if self.app else module_ref
        derived = {"env": dict(self.env or {}), "timeout": float(self.timeout),
                   "lock_timeout": float(self.lock_timeout), "module": module_ref,
                   "workflow": workflow, "app_module": app_ref,
                   "input_json": _input_json(self.input),
                   "ignore": ignore, "seed": seed, "resources": resources, "events": events,
                   "fail_on": fail_on, "commit": git_commit()}
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def _resources(self) -> str | None:
        if self.resources is None:
            return None
        if self.engine != "daprd":
            raise UsageError("--resources needs --engine daprd: component files are daprd's")
        path = Path(self.resources).expanduser()
        if not path.is_dir():
            raise InputError(f"--resources {self.resources}: no such directory")
        files = sorted(p.name for p in path.glob("*.yaml"))
        if not files:
            raise InputError(f"--resources {self.resources}: no component files (*.yaml)")
        if "statestore.yaml" in files:
            raise UsageError(f"--resources {self.resources}: statestore.yaml is the name of "
                             "the actor state store each run's daprd writes; rename yours")
        return str(path.resolve())

    def rerun_command(self, point: str, *, engine_crash: bool) -> str:
        """The ``histaudit crashtest`` command line that runs only this point again."""
        argv = ["histaudit", "crashtest", self.target, "--input", self.input_json,
                "--point", point]
        argv.append("--engine-crash" if engine_crash else "--no-engine-points")
        if self.app:
            argv += ["--app", self.app]
        for key, value in self.env.items():
            argv += ["--env", f"{key}={value}"]
        if self.timeout != DEFAULT_TIMEOUT_S:
            argv += ["--timeout", f"{self.timeout:g}"]
        if self.engine != DEFAULT_ENGINE:
            argv += ["--engine", self.engine]
        if self.resources:
            argv += ["--resources", self.resources]
        for name, text in self.events:
            argv += ["--event", f"{name}={text}"]
        if self.rerun_from is not None:
            argv += ["--rerun-from", str(self.rerun_from)]
        if engine_crash and self.engine == DEFAULT_ENGINE \
                and self.lock_timeout != ENGINE_LOCK_TIMEOUT_S:
            argv += ["--lock-timeout", f"{self.lock_timeout:g}"]
        for path in self.ignore:
            argv += ["--ignore", path]
        if self.fail_on != DEFAULT_FAIL_ON:
            argv += ["--fail-on", str(self.fail_on)]
        return shlex.join(argv)
