"""pytest plugin: one test per crash point of a Dapr workflow.

Installed with histaudit (entry point ``pytest11``), so it needs no ``conftest.py``::

    import pytest
    from histaudit.pytest_plugin import assert_recovered

    @pytest.mark.crashmatrix("examples/triage/app.py:triage",
                             input={"id": "T-1", "title": "Login page 500s"},
                             env={"IDEMPOTENT": "1"})
    def test_triage_recovers(crash_outcome):
        assert_recovered(crash_outcome)

At collection time the workflow runs once without a crash (see
:func:`histaudit.crashtest.run_clean`); every crash point that run passed becomes one
test, ``test_triage_recovers[after_post]``, ``test_triage_recovers[after:summarize]`` …,
and with ``engine_points=True`` also ``test_…[engine:after_post]`` (the engine killed
there instead of the app). The test receives ``crash_outcome``, the
:class:`histaudit.crashtest.PointResult` of crashing there and recovering.

Marker arguments: ``target`` (``MODULE_OR_FILE:WORKFLOW``; a relative file path is taken
from the test file's directory first, then from the current directory), ``input`` (the
workflow input, JSON-serialisable), ``env`` (dict for the workers), ``engine_points``
(default False), ``app_points`` (default True), ``points`` (only these), ``app`` (module
holding the runtime), ``timeout`` (seconds, default 60), ``engine`` (``"durabletask"``,
the default, or ``"daprd"``), ``resources`` (with daprd: a directory of component files,
taken from the test file's directory first, like ``target``), ``ignore`` (JSONPaths of
output fields to leave out of comparisons) and ``events`` (``{name: data}``, raised on
every run's instance in that order right after it is scheduled, as ``--event``) —
``crashtest``'s options of those names.
The clean run is shared by every test with the same arguments, also across pytest-xdist
workers.

A dapr-agents agent (``examples/durable_agent``)::

    @pytest.mark.crashmatrix("app.py:dapr.agents.scribe.workflow",
                             input={"task": "note hello"}, engine="daprd",
                             resources="components", env={"STUB_LLM_URL": url},
                             points=["after:*summarize"])
    def test_agent(crash_outcome):
        assert_no_duplicate_effects(crash_outcome)
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from histaudit import crashtest as ct
from histaudit.crashtest import (
    CleanRun,
    CrashSpec,
    PointResult,
    assert_no_duplicate_effects,
    assert_recovered,
)
from histaudit.crashtest.discovery import select_points
from histaudit.crashtest.spec import DEFAULT_ENGINE
from histaudit.errors import HistauditError

__all__ = ["PointResult", "assert_no_duplicate_effects", "assert_recovered"]

MARKER = "crashmatrix"
_ALLOWED = {"input", "env", "engine_points", "app_points", "points", "app", "timeout",
            "engine", "resources", "ignore", "events"}

# One clean run per distinct marker configuration, for the whole session.
_CLEAN: dict[tuple[Any, ...], CleanRun] = {}
# Files this process shares clean runs through with other xdist workers.
_SHARED_FILES: set[Path] = set()


@dataclass(frozen=True)
class _Case:
    """One parametrized crash: what ``crash_outcome`` runs."""

    spec: CrashSpec
    point: str
    kind: ct.CrashKind
    clean: CleanRun

    @property
    def test_id(self) -> str:
        return self.point if self.kind == ct.KIND_APP else f"engine:{self.point}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(target, input=None, env=None, engine_points=False): run the test once "
        f"per crash point of the workflow; it gets the result as `crash_outcome`")


def pytest_unconfigure(config: pytest.Config) -> None:
    # Every worker has collected by the time any worker ends, so nobody needs them now.
    for path in _SHARED_FILES:
        path.unlink(missing_ok=True)
    _SHARED_FILES.clear()


def _resolve(ref: str, base: Path) -> str:
    """A relative .py path is looked up beside the test file first."""
    if ref.endswith(".py") and not Path(ref).is_absolute():
        beside = base / ref
        if beside.is_file():
            return str(beside)
    return ref


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    where = f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER}"
    if "crash_outcome" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{where} needs the test to take the `crash_outcome` "
                                f"fixture")
    if len(marker.args) != 1 or not isinstance(marker.args[0], str):
        raise pytest.UsageError(f"{where}: give exactly one target, "
                                f"'MODULE_OR_FILE:WORKFLOW'")
    unknown = set(marker.kwargs) - _ALLOWED
    if unknown:
        raise pytest.UsageError(f"{where}: unknown argument(s) {', '.join(sorted(unknown))}")
    base = Path(str(metafunc.definition.path)).parent
    module, _, workflow = marker.args[0].rpartition(":")
    target = f"{_resolve(module, base)}:{workflow}" if module else marker.args[0]
    kw = marker.kwargs
    app = _resolve(kw["app"], base) if kw.get("app") else None
    env = tuple(sorted((str(k), str(v)) for k, v in (kw.get("env") or {}).items()))
    timeout = float(kw.get("timeout", 60))
    inp = kw.get("input")
    engine = str(kw.get("engine", DEFAULT_ENGINE))
    resources = None
    if kw.get("resources"):
        beside = base / str(kw["resources"])
        resources = str(beside) if beside.is_dir() else str(kw["resources"])
    ignore = tuple(str(p) for p in kw.get("ignore") or ())
    raised = kw.get("events") or {}
    if not isinstance(raised, dict):
        raise pytest.UsageError(f"{where}: events is {{name: data}}, not {raised!r}")
    try:
        events = tuple((str(name), json.dumps(data)) for name, data in raised.items())
        spec = CrashSpec(target=target, input=inp, app=app, env=dict(env), timeout=timeout,
                         engine=engine, resources=resources, ignore=ignore, events=events)
    except (HistauditError, TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None
    key = (target, json.dumps(inp, sort_keys=True, default=repr), app, env, timeout, engine,
           resources, ignore, events)
    clean = _CLEAN.get(key)
    if clean is None:
        clean = _shared_clean(metafunc.config, key, lambda: ct.run_clean(spec))
        _CLEAN[key] = clean
    try:
        points = select_points(kw["points"], clean.points, clean.aliases) \
            if kw.get("points") else list(clean.points)
    except HistauditError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None
    kinds = [k for k, on in ((ct.KIND_APP, kw.get("app_points", True)),
                             (ct.KIND_ENGINE, kw.get("engine_points", False))) if on]
    cases = [_Case(spec, p, k, clean) for k in kinds for p in points]
    metafunc.parametrize("crash_outcome", cases, ids=[c.test_id for c in cases],
                         indirect=True)


def _shared_clean(config: pytest.Config, key: tuple[Any, ...],
                  make: Callable[[], CleanRun]) -> CleanRun:
    """The clean run, made once per test run even under pytest-xdist.

    Every xdist worker collects every test, so each would make its own clean run — and a
    workflow with parallel steps can pass its points in another order each time, which
    xdist refuses (workers must collect the same tests). The first worker to get here
    makes it and leaves it in a file named after the run's id; the others read that.
    """
    run_id = getattr(config, "workerinput", {}).get("testrunuid")
    if not run_id:
        return make()
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"histaudit-crashmatrix-{run_id}-{digest}.json"
    _SHARED_FILES.update({path, path.with_suffix(".lock")})
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                return CleanRun.from_dict(json.loads(path.read_text(encoding="utf-8")))
            clean = make()
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(dataclasses.asdict(clean)), encoding="utf-8")
            os.replace(tmp, path)
            return clean
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def crash_outcome(request: pytest.FixtureRequest) -> PointResult:
    """The result of crashing at this test's point and recovering (see the marker)."""
    case = getattr(request, "param", None)
    if not isinstance(case, _Case):
        pytest.fail(f"crash_outcome needs @pytest.mark.{MARKER}(target, input=...)",
                    pytrace=False)
    return ct.run_point(case.spec, case.point, engine_crash=case.kind == ct.KIND_ENGINE,
                        clean=case.clean)
