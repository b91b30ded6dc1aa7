"""Sweep: one instance crashed at every point in turn, so a matrix costs O(N), not O(N²).

The isolated matrix (:mod:`histaudit.crashtest.matrix`) runs the workflow from nothing for
every point, so a 100-step agent pays for 300 fresh runs, each as long as the prefix
before its point. A sweep walks the points the way SQLite's crash tests walk the N-th
write: one instance, one engine, one ledger; the worker crashes at the first point, the
next worker resumes the instance and crashes at the next point *not yet exercised*, and
so on until the instance completes. Every point is crashed at once, and each crash costs
one worker restart.

Points are named across processes by their *scoped* alias, ``name@<instance>/<task id>``
(``<instance>/g<n>/<task id>`` in generation n ≥ 1 of a workflow that continued as new;
:func:`histaudit.crash.crash_scope`): the sweep's instance has an id of its own, so app
state kept by instance id outside the sandbox is never shared with the clean run, and the
clean run's aliases are renamed to it (a child's id made from its parent's is renamed
with it) to name the same passes here. The list of aliases still to crash at is a file
(``$HISTAUDIT_CRASH_SWEEP``); a worker crashes at the first one it reaches and notes it
as fired; the harness takes it off the list before the next worker starts. App crashes
use a new worker each time (spawned ahead and held, so its import overlaps the run
before); engine crashes keep one worker and SIGKILL and restart the engine at each point.

The completed sweep is judged like one crashed run (:func:`histaudit.crashtest.judge.judge`).
A finding is *attributed* to the two crashes around its entry (the ledger's last ``seq``
per instance is noted at every crash): the one after which the entry was written, and
the one that ended the process writing it. Then, since a sweep mixes many crashes
in one run, nothing it shows is taken on trust:

* a point with a warning or error finding attributed to it is re-run in isolation, and
  its isolated result is the one reported (with the rerun command, a minimal
  reproduction);
* a sweep that is not clean while no attributed point reproduces it is bisected: each
  half of its points that does not sweep clean is split again, down to single points
  run in isolation; what no single point reproduces is reported as a result of the
  sweep itself;
* an app-crash sweep whose every warning or error finding is reproduced alone by a point
  next to it (same output as the clean run, effect counts differing only where those
  findings say) vouches for its other points; otherwise, once the points that reproduce
  its trouble alone are known, the others are swept again without them, so a point is
  reported identical only by a sweep that ended clean or was explained point by point.
  An engine-crash sweep never vouches that way: the worker carries on after each engine
  restart beside the step handed out again, so the re-run a crash causes can land next
  to a *later* crash (the triage post duplicated by a kill at
  ``before:post_comment`` shows up beside ``after:post_comment``), and one finding can
  have several causes; its other points are always swept again without the culprits;
* a sweep that stops (a worker dies on its own, the instance is stuck) reports the point
  it crashed at last from an isolated run, and sweeps the points after it again;
* points the sweep never reached, or that have no scoped alias (crash points outside any
  activity), run in isolation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from histaudit.crash import (
    CRASH_EXIT_CODE,
    CRASH_MODE_ENGINE,
    ENV_CRASH_MODE,
    ENV_CRASH_SIGNAL,
    ENV_CRASH_SWEEP,
    fired_path,
)
from histaudit.errors import EngineError
from histaudit.verify.findings import Finding, Severity

from .discovery import base_point
from .judge import Evidence, evidence, judge
from .results import (
    FAILED,
    FINDINGS,
    IDENTICAL,
    KIND_APP,
    KIND_ENGINE,
    STUCK,
    CleanRun,
    CrashKind,
    Outcome,
    PointResult,
    one_line,
    with_restarts,
)
from .sandbox import RunError, RunState, Sandbox
from .spec import CrashSpec

__all__ = ["SweepCrash", "SweepRun", "scoped_points", "sweep_points"]

CrashSeen = Callable[[str, CrashKind, int, int], None]
"""``on_crash(point, kind, done, total)``, called at each crash of a sweep."""

RunIsolated = Callable[[str, CrashKind], PointResult]
"""Crash one point in a run of its own (:func:`histaudit.crashtest.matrix.run_point`)."""


def scoped_points(clean: CleanRun) -> dict[str, str]:
    """{numbered point: its scoped alias} for the clean run's points inside an activity."""
    return {point: alias for alias, point in clean.aliases.items()
            if alias.startswith(f"{base_point(point)}@")}


@dataclass(frozen=True)
class SweepCrash:
    """One crash of a sweep."""

    point: str
    """The clean run's numbered point."""
    at: float
    """Seconds since the sweep began."""
    tips: dict[str, int]
    """The ledger's last ``seq`` per instance when the crash happened."""


@dataclass(frozen=True)
class SweepRun:
    """One instance swept over some points: its crashes and how it ended."""

    kind: CrashKind
    crashes: tuple[SweepCrash, ...]
    result: PointResult
    """The whole sweep judged as one crashed run."""
    stopped_at: str | None
    """The point crashed at last when the sweep could not go on (stuck, worker died)."""
    wall: float
    resumed: tuple[float, ...] = ()
    """Seconds from each crash until work went on: the next worker connected (app), the
    engine back (engine)."""
    restarts: tuple[float, ...] = ()
    """Seconds since the sweep began at which the harness restarted a stranded daprd."""

    def restarts_after(self, n: int) -> int:
        """Restarts of a stranded daprd between crash ``n`` (1-based) and the next."""
        begin = self.crashes[n - 1].at
        end = self.crashes[n].at if n < len(self.crashes) else float("inf")
        return sum(1 for t in self.restarts if begin <= t < end)

    def around(self, finding: Finding) -> tuple[str | None, str | None]:
        """The crashes on either side of ``finding``'s entry: the one after which it was
        written (a retry's record), and the one that cut short the process writing it
        (an intent left open); None where there is none."""
        before = None
        for crash in self.crashes:
            if finding.seq is None or finding.seq <= crash.tips.get(finding.instance, 0):
                return before, None if finding.seq is None else crash.point
            before = crash.point
        return before, None

    def attributed(self) -> dict[str, list[Finding]]:
        """Findings at warning or above, by the crashes around them (isolated runs then
        tell which of the two it was)."""
        found: dict[str, list[Finding]] = {}
        for finding in self.result.findings:
            if finding.severity >= Severity.WARNING:
                for point in filter(None, self.around(finding)):
                    found.setdefault(point, []).append(finding)
        return found

    def explained_by(self, alone: Mapping[str, PointResult]) -> bool:
        """Whether every finding at warning or above has, on one side of it, a point
        whose isolated run reproduced its code — then nothing in the sweep is left to
        the points in between, and the sweep vouches for them."""
        return all(any(f.code in alone[p].codes for p in filter(None, self.around(f))
                       if p in alone)
                   for f in self.result.findings if f.severity >= Severity.WARNING)

    def info_around(self, point: str) -> tuple[Finding, ...]:
        """Info findings (what recovery did: a re-execution, a skipped effect) with the
        crash at ``point`` on one side of their entry."""
        return tuple(f for f in self.result.findings
                     if f.severity < Severity.WARNING and point in self.around(f))


# --- one sweep ---------------------------------------------------------------------------

def _tips(sb: Sandbox) -> dict[str, int]:
    from histaudit.ledger.store import Ledger

    with Ledger.open(sb.db_url) as ledger:
        return {s.instance: s.last_seq for s in ledger.instances()}


class _Walk:
    """The state of one sweep while it runs: the list file, what fired, the crashes."""

    def __init__(self, sb: Sandbox, keys: dict[str, str], kind: CrashKind,
                 on_crash: CrashSeen | None, total: int) -> None:
        self.sb, self.kind, self.on_crash, self.total = sb, kind, on_crash, total
        self.todo = {key: point for point, key in keys.items()}
        self.list_file = sb.dir / "sweep.txt"
        self.fired = fired_path(self.list_file)
        self.crashes: list[SweepCrash] = []
        self.resumed: list[float] = []
        self.began = time.monotonic()
        self._write()

    def _write(self) -> None:
        tmp = self.list_file.with_suffix(".tmp")
        tmp.write_text("".join(f"{key}\n" for key in self.todo), encoding="utf-8")
        os.replace(tmp, self.list_file)

    @property
    def env(self) -> dict[str, str]:
        return {ENV_CRASH_SWEEP: str(self.list_file)}

    def note_crash(self) -> None:
        """Take the alias fired last off the list, and note the crash."""
        lines = self.fired.read_text(encoding="utf-8").split() if self.fired.exists() else []
        if len(lines) != len(self.crashes) + 1:
            raise RunError(f"sweep: {len(lines)} crashes noted, {len(self.crashes) + 1} "
                           f"expected")
        point = self.todo.pop(lines[-1])
        self._write()
        self.crashes.append(SweepCrash(point, time.monotonic() - self.began, _tips(self.sb)))
        if self.on_crash is not None:
            self.on_crash(point, self.kind, len(self.crashes), self.total)


def _walk_app(walk: _Walk) -> RunState | None:
    """App crashes: each worker dies at the next point; a held one takes over."""
    sb, timeout = walk.sb, walk.sb.spec.timeout
    current = sb.spawn("sweep-1", walk.env)
    held = sb.spawn("sweep-2", walk.env, hold=True)
    current.wait_ready()
    sb.schedule()
    while True:
        state = sb.wait_terminal(timeout, watch=current.exited)
        rc = current.proc.poll()
        if rc is None:
            return state  # terminal, or stuck
        if rc != CRASH_EXIT_CODE:
            raise RunError(f"worker exited with status {rc}, not at a crash point",
                           current.tail())
        walk.note_crash()
        crashed = time.monotonic()
        held.release()
        held.wait_ready()
        walk.resumed.append(time.monotonic() - crashed)
        current = held
        held = sb.spawn(f"sweep-{len(walk.crashes) + 2}", walk.env, hold=True)


def _walk_engine(walk: _Walk) -> RunState | None:
    """Engine crashes: one worker holds at each point while the engine is killed."""
    sb, timeout = walk.sb, walk.sb.spec.timeout
    marker = sb.dir / "crash-signal"
    worker = sb.spawn("sweep-engine", {**walk.env, ENV_CRASH_MODE: CRASH_MODE_ENGINE,
                                       ENV_CRASH_SIGNAL: str(marker)})
    worker.wait_ready()
    sb.schedule()
    limit = timeout
    while True:
        state = sb.wait_terminal(limit, watch=lambda: marker.exists()
                                 or worker.proc.poll() is not None)
        if not marker.exists():
            rc = worker.proc.poll()
            if rc is not None:
                raise RunError(f"worker exited with status {rc}", worker.tail())
            return state
        walk.note_crash()
        crashed = time.monotonic()
        sb.kill_engine_and_restart(frozen=[worker])
        marker.unlink()
        walk.resumed.append(time.monotonic() - crashed)
        limit = timeout + sb.spec.lock_timeout


def _sweep(spec: CrashSpec, clean: CleanRun, keys: dict[str, str], kind: CrashKind,
           on_crash: CrashSeen | None = None) -> SweepRun:
    """Sweep one instance over ``keys`` ({point: scoped alias}) and judge it."""
    began = time.monotonic()
    label = f"sweep of {len(keys)} points"
    result = PointResult(point=label, kind=kind, outcome=FAILED, detail="",
                         rerun="", clean_effects=dict(clean.effects), fail_on=spec.fail_on)
    lock = spec.lock_timeout if kind == KIND_ENGINE else None
    walk: _Walk | None = None
    restarts: tuple[float, ...] = ()
    state: RunState | None = None
    ev: Evidence | None = None
    try:
        with Sandbox(spec, lock_timeout=lock, label=f"sweep-{kind.value}", fork=True) as sb:
            # The sandbox's own instance id, never the clean run's, so app state kept by
            # instance id outside the sandbox is not shared; the clean run's scoped aliases
            # name its instance (a child's id made from it too), so they are renamed.
            keys = {point: key.replace(clean.instance, sb.instance)
                    for point, key in keys.items()}
            result = replace(result, instance=sb.instance)
            walk = _Walk(sb, keys, kind, on_crash, len(keys))
            sb.start_engine()
            try:
                state = _walk_app(walk) if kind == KIND_APP else _walk_engine(walk)
            except RunError as exc:
                result = replace(result, detail=str(exc), log_tail=exc.tail)
            if state is not None and state.terminal:
                ev = evidence(sb.db_url, sb.keys)
                result = judge(result, clean, state, ev, ignore=clean.ignore, crashed=[
                    c.point for c in walk.crashes] if kind == KIND_APP else ())
            elif not result.detail:
                status = state.status if state else None
                result = replace(result, outcome=STUCK, status=status,
                                 detail=f"not complete {spec.timeout:g}s after the last "
                                        f"crash (status {status or 'unknown'})",
                                 log_tail=sb.last_tail())
            if walk is not None:
                restarts = tuple(t - walk.began for t in sb.engine_restarts)
                result = with_restarts(result, len(restarts))
    except EngineError as exc:
        result = replace(result, detail=f"engine: {one_line(str(exc))[:300]}")
    crashes = tuple(walk.crashes) if walk else ()
    finished = state is not None and state.terminal
    stopped = None if finished or not crashes else crashes[-1].point
    return SweepRun(kind=kind, crashes=crashes, result=replace(
        result, wall=time.monotonic() - began), stopped_at=stopped,
        wall=time.monotonic() - began, resumed=tuple(walk.resumed) if walk else (),
        restarts=restarts)


# --- a sweep, checked --------------------------------------------------------------------

def _swept(point: str, kind: CrashKind, run: SweepRun, spec: CrashSpec) -> PointResult:
    """The result of a point the sweep crashed at and recovered from."""
    n = next(i for i, c in enumerate(run.crashes, start=1) if c.point == point)
    prev = run.crashes[n - 2].at if n > 1 else 0.0
    outcome = run.result.outcome
    if outcome == IDENTICAL:
        note, effects = "", dict(run.result.effects)
    elif outcome == FINDINGS:  # explained point by point (SweepRun.explained_by)
        note = "; the sweep's findings are all at points run alone"
        effects = dict(run.result.clean_effects)
    else:
        note = f"; the sweep ended {outcome}: see {run.result.point!r}"
        effects = dict(run.result.effects)
    return with_restarts(PointResult(point=point, kind=kind, outcome=IDENTICAL,
                       detail=f"recovered in the sweep (crash {n} of {len(run.crashes)})"
                              + note,
                       rerun=spec.rerun_command(point, engine_crash=kind == KIND_ENGINE),
                       wall=run.crashes[n - 1].at - prev, status=run.result.status,
                       output=run.result.output, output_matches=run.result.output_matches,
                       effects=effects, clean_effects=dict(run.result.clean_effects),
                       findings=run.info_around(point), fail_on=spec.fail_on,
                       instance=run.result.instance), run.restarts_after(n))


def sweep_points(spec: CrashSpec, clean: CleanRun, points: Sequence[str], kind: CrashKind,
                 isolated: RunIsolated, *, on_crash: CrashSeen | None = None,
                 on_isolated: Callable[[PointResult], object] | None = None
                 ) -> tuple[list[PointResult], list[SweepRun]]:
    """Crash ``points`` (the clean run's numbered points) by sweeping; see the module
    docstring. Returns one result per point, in the order given, and every sweep made.

    ``isolated(point, kind)`` runs one point in isolation (confirmations, fallbacks).
    """
    scoped = scoped_points(clean)
    results: dict[str, PointResult] = {}
    alone_done: dict[str, PointResult] = {}
    sweeps: list[SweepRun] = []

    def alone(point: str, note: str) -> PointResult:
        """Run ``point`` in isolation (once); its result is the point's result."""
        if point not in alone_done:
            res = isolated(point, kind)
            alone_done[point] = replace(res, detail=f"{note}; in isolation: {res.detail}")
            if on_isolated is not None:
                on_isolated(alone_done[point])
        results[point] = alone_done[point]
        return results[point]

    def localise(keys: dict[str, str], outcome: Outcome) -> bool:
        """Bisect ``keys`` down to the points that alone end ``outcome``; True if found.

        Only a half that sweeps clean is set aside: one that ends otherwise (harness
        trouble on a loaded machine, say) is looked into as well."""
        if len(keys) <= 1:
            return any(alone(p, f"bisected from a sweep that ended {outcome}").outcome
                       == outcome for p in keys)
        items = list(keys.items())
        found = False
        for part in (dict(items[:len(items) // 2]), dict(items[len(items) // 2:])):
            sub = _sweep(spec, clean, part, kind)
            sweeps.append(sub)
            if sub.result.outcome != IDENTICAL:
                found = localise(part, outcome) or found
        return found

    todo = {p: scoped[p] for p in points if p in scoped}
    for point in points:
        if point not in scoped:
            alone(point, "not inside an activity, so not swept")
    while todo:
        run = _sweep(spec, clean, todo, kind, on_crash)
        sweeps.append(run)
        if run.stopped_at is not None:  # stuck or broken after a crash: that one alone,
            alone(run.stopped_at, f"the sweep stopped after this crash "  # the rest again
                                  f"({run.result.outcome}: {run.result.detail})")
            del todo[run.stopped_at]
            continue
        crashed = [c.point for c in run.crashes]
        outcome = run.result.outcome
        if crashed and outcome != IDENTICAL:
            for point, found in run.attributed().items():
                codes = ", ".join(dict.fromkeys(f.code for f in found))
                alone(point, f"the sweep attributes {codes} to this crash")
            if outcome == FINDINGS and kind == KIND_APP and run.explained_by(alone_done):
                pass  # every finding reproduced alone next to where the sweep saw it
            else:
                if not any(alone_done[p].outcome == outcome for p in crashed
                           if p in alone_done):
                    localise({p: todo[p] for p in crashed if p not in alone_done}, outcome)
                if any(alone_done[p].outcome != IDENTICAL for p in crashed if p in alone_done):
                    # Explained by points that reproduce it alone: sweep the others again
                    # without them, so that what vouches for the others ended clean.
                    todo = {p: k for p, k in todo.items() if p not in alone_done}
                    continue
                results[run.result.point] = replace(run.result, detail=(
                    f"{run.result.detail}; no single point reproduces it in isolation "
                    f"(only this sweep's {len(crashed)} crashes together)"))
        for point in crashed:
            if point not in alone_done:
                results[point] = _swept(point, kind, run, spec)
        for point in todo:  # never reached (or the sweep could not start)
            if point not in results:
                alone(point, "not reached in the sweep")
        todo = {}
    order = {p: i for i, p in enumerate(points)}
    return sorted(results.values(), key=lambda r: order.get(r.point, -1)), sweeps
