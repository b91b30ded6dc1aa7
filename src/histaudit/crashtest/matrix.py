"""Crash matrix: crash a workflow at every point it reaches, recover, and compare.

``run_matrix(CrashSpec(target="examples/triage/app.py:triage", input={...}))`` first runs
the workflow once without any crash, on a fresh engine with a fresh ledger, key pair and
``DATA_DIR``, and with ``$HISTAUDIT_CRASH_TRACE`` set, so the worker writes down every
crash point it passes (:mod:`histaudit.crash`: the named ``crash_point`` calls and the
automatic ``before:`` / ``after:`` / ``before-effect:`` / ``after-effect:`` points). A
point reached more than once is numbered: ``after:fetch_source#2`` is its second pass.

Then, for every point P, the same workflow runs again from nothing (its own engine, ledger,
key and data directory, so parallel runs never meet; :mod:`histaudit.crashtest.sandbox`)
and is crashed at P:

* **app crash** — the worker has ``HISTAUDIT_CRASH_AT=P`` and dies there like a power cut
  (exit 86). A second worker without the crash switch takes over. It is spawned together
  with the first and held before it connects, so recovery does not wait for Python to
  import the app a second time; it connects only once the first one is dead.
* **engine crash** — the worker runs with ``HISTAUDIT_CRASH_MODE=engine``: at P it writes a
  marker file and waits. The harness SIGKILLs the engine, starts it again on the same port
  and state file (with a short lock timeout, see
  :class:`histaudit.testing.engine.EngineProcess`), removes the marker, and the worker
  carries on. The step it was in the middle of is handed out again by the restarted engine.

That is the ``isolated`` mode. The default, ``sweep``
(:mod:`histaudit.crashtest.sweep`), crashes one instance at every point in turn and runs
points alone only where the sweep cannot vouch for them.

After completion every instance in the ledger (child workflows too) is verified, and the
run is compared with the clean one (:mod:`histaudit.crashtest.judge`); the outcomes are
described in :mod:`histaudit.crashtest.results`. The worker process and what it needs of
the app are in :mod:`histaudit.crashtest.worker`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from histaudit.crash import (
    CRASH_EXIT_CODE,
    CRASH_MODE_ENGINE,
    ENV_CRASH_AT,
    ENV_CRASH_MODE,
    ENV_CRASH_SIGNAL,
    ENV_CRASH_TRACE,
    read_trace_entries,
)
from histaudit.errors import EngineError, HistauditError, InputError, UsageError

from .discovery import crash_at, declared_points, number_points, point_aliases, select_points
from .ignore import check_paths
from .judge import decode_output, evidence, judge
from .results import (
    DIVERGED,
    FAILED,
    KIND_APP,
    KIND_ENGINE,
    STUCK,
    CleanRun,
    CrashKind,
    MatrixResult,
    PointResult,
    one_line,
    with_restarts,
)
from .sandbox import RunError, RunState, Sandbox
from .spec import CrashSpec
from .sweep import CrashSeen, SweepRun, sweep_points

__all__ = ["MODES", "run_clean", "run_matrix", "run_point"]

T = TypeVar("T")
R = TypeVar("R")

Progress = Callable[[PointResult, int, int], None]
"""``progress(result, done, total)``, called as each point of a matrix finishes."""


# --- one clean run ----------------------------------------------------------------------

def run_clean(spec: CrashSpec) -> CleanRun:
    """Run the workflow once without a crash; see :class:`CleanRun`.

    Anything that keeps it from completing is an error (the app does not load, the
    workflow is not registered, the engine does not start, the run fails or hangs):
    without a clean run there is nothing to compare crashes with.
    """
    began = time.monotonic()
    target = spec.target
    with Sandbox(spec, label="clean") as sb:
        trace = sb.dir / "trace.txt"
        info_path = sb.dir / "info.json"
        sb.start_engine()
        worker = sb.spawn("clean", {ENV_CRASH_TRACE: str(trace)}, info=info_path)
        try:
            worker.wait_ready()
        except RunError as exc:
            error = worker.setup_error()
            if error:
                raise InputError(error) from None
            raise EngineError(f"clean run of {target}: {exc}; worker output: "
                              f"{one_line(exc.tail[-400:])}") from None
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if spec.workflow not in info["workflows"]:
            known = ", ".join(info["workflows"]) or "none"
            raise UsageError(f"workflow {spec.workflow!r} is not registered in "
                             f"{spec.app_module} (registered: {known})")
        worker_start = (worker.ready_at or time.monotonic()) - worker.spawned
        volatile = info.get("volatile", {}).get(spec.workflow, [])
        try:
            marked = check_paths(volatile)
        except UsageError as exc:
            raise UsageError(f"{spec.app_module} marks {spec.workflow!r} volatile: {exc}"
                             ) from None
        sb.schedule()
        state = sb.wait_terminal(spec.timeout)
        if state is None or not state.terminal:
            waiting = state is not None and state.status == "RUNNING" and not spec.events
            raise HistauditError(f"clean run of {target} did not complete within "
                                 f"{spec.timeout:g}s (status "
                                 f"{state.status if state else 'unknown'}); "
                                 f"nothing to compare crashes with"
                                 + ("; if it waits for an external event, raise it with "
                                    "--event NAME=JSON" if waiting else ""))
        if state.status != "COMPLETED":
            raise HistauditError(f"clean run of {target} ended {state.status}"
                                 f"{': ' + state.failure if state.failure else ''}; "
                                 f"nothing to compare crashes with")
        ev = evidence(sb.db_url, sb.keys)
        declared = declared_points(info["sources"],
                                   info["activities"] if info["audited"] else ())
        passes = read_trace_entries(trace)
        return CleanRun(target=target, instance=sb.instance, status=state.status,
                        output=decode_output(state.output_text), output_text=state.output_text,
                        effects=ev.effects, findings=ev.findings,
                        finding_effects=ev.finding_effects,
                        points=tuple(number_points(name for name, _ in passes)),
                        aliases=point_aliases(passes, sb.instance),
                        workflows=tuple(info["workflows"]),
                        activities=tuple(info["activities"]), declared=tuple(declared),
                        wall=time.monotonic() - began, worker_start=worker_start,
                        ignore=tuple(dict.fromkeys((*spec.ignore, *marked))))


# --- one crash --------------------------------------------------------------------------

def _crash_once(spec: CrashSpec, clean: CleanRun, point: str, kind: CrashKind) -> PointResult:
    began = time.monotonic()
    result = PointResult(point=point, kind=kind, outcome=FAILED, detail="",
                         rerun=spec.rerun_command(point, engine_crash=kind == KIND_ENGINE),
                         clean_effects=dict(clean.effects), fail_on=spec.fail_on)
    if point not in clean.points:
        return replace(result, detail="point never reached in the clean run")
    lock = spec.lock_timeout if kind == KIND_ENGINE else None
    try:
        with Sandbox(spec, lock_timeout=lock, label=kind.value) as sb:
            result = replace(result, instance=sb.instance)
            state: RunState | None
            try:
                state = _app_crash(sb, point) if kind == KIND_APP else _engine_crash(sb, point)
            except RunError as exc:
                result = replace(result, detail=str(exc), log_tail=exc.tail)
                state = None
            else:
                if state is None or not state.terminal:
                    status = state.status if state else None
                    result = replace(result, outcome=STUCK, status=status,
                                     detail=f"not complete {spec.timeout:g}s after the crash "
                                            f"(status {status or 'unknown'})",
                                     log_tail=sb.last_tail())
            if state is not None and state.terminal:
                result = judge(result, clean, state, evidence(sb.db_url, sb.keys),
                               ignore=clean.ignore,
                               crashed=(point,) if kind == KIND_APP else ())
                if result.outcome in (FAILED, DIVERGED) and sb.workers:
                    result = replace(result, log_tail=sb.last_tail())
            result = with_restarts(result, len(sb.engine_restarts))
    except EngineError as exc:
        result = replace(result, detail=f"engine: {one_line(str(exc))[:300]}")
    except Exception as exc:  # noqa: BLE001 - one point's trouble must not end the matrix
        result = replace(result, detail=f"harness: {type(exc).__name__}: "
                                        f"{one_line(str(exc))[:300]}")
    return replace(result, wall=time.monotonic() - began)


def _app_crash(sb: Sandbox, point: str) -> RunState | None:
    timeout = sb.spec.timeout
    sb.start_engine()
    crashing = sb.spawn("crash", {ENV_CRASH_AT: crash_at(point)})
    resume = sb.spawn("resume", hold=True)  # imports now, connects after the crash
    crashing.wait_ready()
    sb.schedule()
    early = sb.wait_terminal(timeout, watch=lambda: crashing.proc.poll() is not None)
    rc = crashing.proc.poll()
    if rc is None:
        if early is not None and early.terminal:
            raise RunError(f"point never reached: the workflow ended {early.status} "
                           f"without crashing", crashing.tail())
        raise RunError(f"point never reached within {timeout:g}s", crashing.tail())
    if rc != CRASH_EXIT_CODE:
        raise RunError(f"worker exited with status {rc}, not at the crash point",
                       crashing.tail())
    resume.release()
    resume.wait_ready()
    return sb.wait_terminal(timeout)


def _engine_crash(sb: Sandbox, point: str) -> RunState | None:
    timeout = sb.spec.timeout
    marker = sb.dir / "crash-signal"
    sb.start_engine()
    worker = sb.spawn("engine-crash", {ENV_CRASH_AT: crash_at(point),
                                       ENV_CRASH_MODE: CRASH_MODE_ENGINE,
                                       ENV_CRASH_SIGNAL: str(marker)})
    worker.wait_ready()
    sb.schedule()
    early = sb.wait_terminal(timeout, watch=lambda: marker.exists()
                             or worker.proc.poll() is not None)
    if not marker.exists():
        rc = worker.proc.poll()
        if rc is not None:
            raise RunError(f"worker exited with status {rc} before the point", worker.tail())
        status = early.status if early is not None else "unknown"
        raise RunError(f"point never reached (workflow {status})", worker.tail())
    sb.kill_engine_and_restart(frozen=[worker])  # while the app is in the middle of the step
    marker.unlink()
    return sb.wait_terminal(timeout + sb.spec.lock_timeout)


# --- public API -------------------------------------------------------------------------

def run_point(spec: CrashSpec, point: str, *, engine_crash: bool = False,
              clean: CleanRun | None = None) -> PointResult:
    """Crash the workflow at one point (``name``, ``name#n`` or an alias such as
    ``after:step:87``) and judge the recovery.

    Without ``clean`` a clean run is made first, to compare with.
    """
    if clean is None:
        clean = run_clean(spec)
    point = clean.aliases.get(point, point)
    return _crash_once(spec, clean, point, KIND_ENGINE if engine_crash else KIND_APP)


MODES = ("sweep", "isolated")
"""How a matrix crashes its points: one instance swept over them all
(:mod:`histaudit.crashtest.sweep`), or a run of its own for each."""


def run_matrix(spec: CrashSpec, *, jobs: int = 1, engine_points: bool = True,
               app_points: bool = True, points: Sequence[str] | None = None,
               clean: CleanRun | None = None, progress: Progress | None = None,
               mode: str = "sweep", on_crash: CrashSeen | None = None,
               keep_sweeps: list[SweepRun] | None = None) -> MatrixResult:
    """Clean run, then every point (or ``points``) as an app crash and an engine crash.

    ``points`` are names, aliases, globs or step ranges
    (:func:`~histaudit.crashtest.discovery.select_points`). ``mode`` is ``"sweep"`` (one
    instance crashed at every point in turn; points it cannot vouch for are run alone) or
    ``"isolated"`` (every point a run of its own).

    ``jobs`` runs that many runs at once, each with its own engine and workers (a sweep:
    the app and the engine sweep side by side). ``progress(result, done, total)`` is
    called as each isolated run finishes; ``on_crash(point, kind, done, total)`` at each
    crash of a sweep. ``keep_sweeps`` receives every sweep made (their timings).
    """
    if jobs < 1:
        raise UsageError(f"jobs must be at least 1, not {jobs}")
    if mode not in MODES:
        raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not (app_points or engine_points):
        raise UsageError("nothing to run: both app and engine points are off")
    began = time.monotonic()
    if clean is None:
        clean = run_clean(spec)
    chosen = select_points(points, clean.points, clean.aliases) if points \
        else list(clean.points)
    kinds = [k for k, on in ((KIND_APP, app_points), (KIND_ENGINE, engine_points)) if on]
    done = 0
    lock = threading.Lock()

    def finished(res: PointResult, total: int) -> PointResult:
        nonlocal done
        with lock:
            done += 1
            if progress is not None:
                progress(res, done, total)
        return res

    if mode == "sweep":
        def sweep(kind: CrashKind) -> tuple[list[PointResult], list[SweepRun]]:
            return sweep_points(spec, clean, chosen, kind,
                                lambda p, k: _crash_once(spec, clean, p, k),
                                on_crash=on_crash, on_isolated=lambda r: finished(r, 0))

        parts = _each(sweep, kinds, min(jobs, len(kinds)))
        results = [r for found, _ in parts for r in found]
        sweeps = [s for _, made in parts for s in made]
        runs = {"sweeps": len(sweeps), "sweep_crashes": sum(len(s.crashes) for s in sweeps),
                "isolated": done}
        if keep_sweeps is not None:
            keep_sweeps.extend(sweeps)
    else:
        todo = [(p, k) for k in kinds for p in chosen]
        results = _each(lambda pk: finished(_crash_once(spec, clean, *pk), len(todo)),
                        todo, jobs)
        runs = {"sweeps": 0, "sweep_crashes": 0, "isolated": done}
    return MatrixResult(spec=spec, clean=clean, points=tuple(results),
                        wall=time.monotonic() - began, jobs=jobs, mode=mode, runs=runs)


def _each(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """``[fn(x) for x in items]``, ``jobs`` at a time."""
    if jobs == 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="crashtest") as pool:
        return list(pool.map(fn, items))
