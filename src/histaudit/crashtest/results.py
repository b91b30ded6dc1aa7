"""What a crash matrix found: the clean run, one result per crash, the whole matrix.

All three are frozen. Their findings are the verifier's
:class:`~histaudit.verify.findings.Finding` objects, each with the side effect it is
about when the verifier or the ledger entry at its ``seq`` names one (``effect``, in its
JSON as ``{"name", "key"}``); the effect's name is also kept beside it, in
``finding_effects``, for judging.

Effects are counted in executions: the ``effect.done`` records, and an attempt an app
crash at ``after-effect:X`` cut after its block (:func:`histaudit.crashtest.judge.executions`).

Outcomes of one crash (:class:`Outcome`):

``identical``
    completed, same output, same number of executions per effect name, no finding at
    warning or above (info findings such as ``activity-reexecuted`` are listed).
``findings``
    completed; a warning or error behaviour finding (``effect-duplicate``,
    ``effect-uncertain``, …) is present and explains any difference in effect counts.
``diverged``
    output or effect counts differ from the clean run and no finding explains it.
``stuck``
    no completion within the time limit.
``failed``
    the workflow ended FAILED or TERMINATED (the clean run completed), the point was never
    reached, a worker died on its own, or the ledger has an integrity finding.

A point *fails* (exit status 1, a JUnit failure) when it diverged, got stuck or failed;
when an effect was executed more often than in the clean run (:attr:`PointResult.doubled`),
whatever the findings' severity; or when it has a finding at or above its ``fail_on``
severity (``--fail-on``, default error).
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from histaudit.verify.findings import EffectRef, Finding, Severity

from .discovery import base_point
from .spec import CrashSpec

__all__ = [
    "DIVERGED", "FAILED", "FINDINGS", "IDENTICAL", "KIND_APP", "KIND_ENGINE", "OUTCOMES",
    "STUCK", "CleanRun", "CrashKind", "MatrixResult", "Outcome", "PointResult",
    "assert_no_duplicate_effects", "assert_recovered", "doubled_text", "with_restarts",
]


class Outcome(enum.StrEnum):
    """How one crash ended, compared with the clean run (see the module docstring)."""

    IDENTICAL = "identical"
    FINDINGS = "findings"
    DIVERGED = "diverged"
    STUCK = "stuck"
    FAILED = "failed"


IDENTICAL, FINDINGS, DIVERGED, STUCK, FAILED = (
    Outcome.IDENTICAL, Outcome.FINDINGS, Outcome.DIVERGED, Outcome.STUCK, Outcome.FAILED)
OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)


class CrashKind(enum.StrEnum):
    """What is crashed at a point: the app's worker, or the workflow engine."""

    APP = "app"
    ENGINE = "engine"


KIND_APP, KIND_ENGINE = CrashKind.APP, CrashKind.ENGINE


# --- text of values, for details and reports ---------------------------------------------

def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) one space."""
    return " ".join(text.split())


def short(value: Any, limit: int = 120) -> str:
    """``value`` as JSON, cut to ``limit`` characters."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def doubled_text(doubled: Mapping[str, tuple[int, int]]) -> str:
    """``tool:book_flight done 2× (clean run: 1×)`` for each effect, ``; `` between."""
    return "; ".join(f"{name} done {here}× (clean run: {there}×)"
                     for name, (here, there) in doubled.items())


# --- findings with the effect they are about ---------------------------------------------

def _with_effects(findings: Sequence[Finding], effects: Sequence[str | None]
                  ) -> list[tuple[Finding, str | None]]:
    return [(f, effects[i] if i < len(effects) else None) for i, f in enumerate(findings)]


def _finding_docs(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """The findings as every ``--json`` output writes them (Finding.to_json)."""
    return [finding.to_json() for finding in findings]


def _finding_of(doc: Finding | Mapping[str, Any]) -> Finding:
    """A Finding back from ``dataclasses.asdict`` (severity a number after JSON) or from
    ``Finding.to_json`` (severity a name)."""
    if isinstance(doc, Finding):
        return doc
    sev = doc["severity"]
    severity = Severity.parse(sev) if isinstance(sev, str) else Severity(sev)
    effect = doc.get("effect")
    return Finding(code=doc["code"], instance=doc["instance"], seq=doc["seq"],
                   message=doc["message"], severity=severity,
                   entries=tuple(doc.get("entries", ())), task_id=doc.get("task_id"),
                   activity=doc.get("activity"),
                   effect=None if effect is None else EffectRef(effect["name"], effect["key"]))


def _freeze(obj: object, *names: str) -> None:
    """Make the named sequence fields of a frozen dataclass tuples."""
    for name in names:
        object.__setattr__(obj, name, tuple(getattr(obj, name)))


# --- results --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class CleanRun:
    """The reference run: no crash, every point passed recorded in order.

    ``CleanRun.from_dict(json.loads(json.dumps(dataclasses.asdict(clean))))`` equals
    ``clean`` (the pytest plugin shares a clean run across xdist workers that way).
    """

    target: str
    instance: str
    status: str
    output: Any
    output_text: str | None
    effects: dict[str, int]
    """Executions per effect name (the ``effect.done`` records of a run with no crash)."""
    findings: tuple[Finding, ...]
    finding_effects: tuple[str | None, ...] = ()
    """The effect name each finding is about (None: none), in the order of ``findings``."""
    points: tuple[str, ...]
    """Every point reached, in order, repeats numbered (``after:fetch_source#2``)."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Other names of points reached: ``{"after:step:7": "after:fetch_source#2", …}``."""
    workflows: tuple[str, ...]
    activities: tuple[str, ...]
    declared: tuple[str, ...]
    """Points the app declares: ``crash_point("…")`` literals, ``before:``/``after:`` of
    every registered activity, ``before-effect:``/``after-effect:`` of literal effect names."""
    wall: float
    worker_start: float
    """Seconds from spawning the worker to its being connected (what a restart costs)."""
    ignore: tuple[str, ...] = ()
    """The output fields every comparison leaves out: the spec's ``ignore`` and the ones
    the app marked volatile for this workflow (``AuditedWorkflowRuntime.mark_volatile``)."""

    def __post_init__(self) -> None:
        _freeze(self, "findings", "finding_effects", "points", "workflows", "activities",
                "declared", "ignore")

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CleanRun:
        """The inverse of :func:`dataclasses.asdict`, also after a JSON round trip."""
        fields = dict(doc)
        fields["findings"] = tuple(_finding_of(f) for f in doc["findings"])
        return cls(**fields)

    @property
    def reached(self) -> tuple[str, ...]:
        """The distinct points reached (without repeat numbers), in first-reached order."""
        return tuple(dict.fromkeys(base_point(p) for p in self.points))

    @property
    def not_reached(self) -> tuple[str, ...]:
        reached = set(self.reached)
        return tuple(p for p in self.declared if p not in reached)

    def to_json(self) -> dict[str, Any]:
        return {"instance": self.instance, "status": self.status, "output": self.output,
                "effects": self.effects,
                "findings": _finding_docs(self.findings),
                "points": list(self.points), "aliases": self.aliases,
                "workflows": list(self.workflows),
                "activities": list(self.activities), "wall_s": round(self.wall, 3),
                "worker_start_s": round(self.worker_start, 3)}


@dataclass(frozen=True, kw_only=True)
class PointResult:
    """One crash at one point, recovered (or not) and compared with the clean run."""

    point: str
    kind: CrashKind
    outcome: Outcome
    detail: str
    rerun: str
    wall: float = 0.0
    status: str | None = None
    output: Any = None
    output_matches: bool = False
    effects: dict[str, int] = field(default_factory=dict)
    """Executions per effect name: the ``effect.done`` records, and the attempt a crash at
    ``after-effect:X`` cut after X's block (:func:`~histaudit.crashtest.judge.executions`)."""
    clean_effects: dict[str, int] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    finding_effects: tuple[str | None, ...] = ()
    """The effect name each finding is about (None: none), in the order of ``findings``."""
    diff: tuple[str, ...] = ()
    instance: str | None = None
    log_tail: str = ""
    engine_restarts: int = 0
    """Times the harness restarted a stranded daprd after this crash (ADR 0008)."""
    fail_on: Severity = Severity.ERROR
    """The lowest finding severity that makes the point fail (``--fail-on``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", CrashKind(self.kind))
        object.__setattr__(self, "outcome", Outcome(self.outcome))
        _freeze(self, "findings", "finding_effects", "diff")

    @property
    def codes(self) -> tuple[str, ...]:
        """Finding codes present, worst severity first, each once."""
        seen = sorted(self.findings, key=lambda f: (-f.severity, f.code))
        return tuple(dict.fromkeys(f.code for f in seen))

    @property
    def worst(self) -> Severity | None:
        """The highest finding severity, or None."""
        return max((f.severity for f in self.findings), default=None)

    @property
    def doubled(self) -> dict[str, tuple[int, int]]:
        """``{name: (executions here, in the clean run)}`` for every effect executed more
        often than in the clean run, names sorted."""
        return {name: (n, self.clean_effects.get(name, 0))
                for name, n in sorted(self.effects.items())
                if n > self.clean_effects.get(name, 0)}

    @property
    def failing(self) -> bool:
        """Counts against the exit status (and is a JUnit failure): diverged, stuck or
        failed; an effect executed more often than in the clean run, whatever the findings
        say; or a finding at or above :attr:`fail_on`. (A point a sweep vouched for is
        identical: the sweep's own counts are reported with the points it ran alone.)"""
        worst = self.worst
        return (self.outcome in (DIVERGED, STUCK, FAILED)
                or (self.outcome != IDENTICAL and bool(self.doubled))
                or (worst is not None and worst >= self.fail_on))

    @property
    def duplicated_effects(self) -> tuple[str, ...]:
        """Effect names done more often than in the clean run, or reported duplicate."""
        names = {n for n, c in self.effects.items() if c > self.clean_effects.get(n, 0)}
        names |= {effect for f, effect in _with_effects(self.findings, self.finding_effects)
                  if f.code == "effect-duplicate" and effect}
        return tuple(sorted(names))

    @property
    def test_id(self) -> str:
        return self.point if self.kind == KIND_APP else f"engine:{self.point}"

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {"point": self.point, "kind": self.kind.value, "outcome": self.outcome.value,
                "codes": list(self.codes), "worst": None if worst is None else str(worst),
                "failing": self.failing, "detail": self.detail, "status": self.status,
                "output": self.output, "output_matches": self.output_matches,
                "effects": self.effects,
                "doubled": {name: {"here": here, "clean": clean}
                            for name, (here, clean) in self.doubled.items()},
                "diff": list(self.diff),
                "findings": _finding_docs(self.findings),
                "instance": self.instance, "wall_s": round(self.wall, 3),
                "engine_restarts": self.engine_restarts, "rerun": self.rerun}


def with_restarts(result: PointResult, restarts: int) -> PointResult:
    """``result`` noting that the harness restarted a stranded daprd ``restarts`` times
    after its crash (the dapr 1.18.3 deadlock of ADR 0008); the outcome stays what the
    run's end shows."""
    if restarts == 0:
        return result
    note = ("daprd stranded the workflow after the crash (the dapr 1.18.3 deadlock, "
            "docs/adr/0008-daprd.md) and the harness restarted it"
            + (f" {restarts} times" if restarts > 1 else ""))
    return replace(result, engine_restarts=restarts,
                   detail=f"{result.detail}; {note}" if result.detail else note)


@dataclass(frozen=True, kw_only=True)
class MatrixResult:
    """A clean run and every crash made to compare with it."""

    spec: CrashSpec
    clean: CleanRun
    points: tuple[PointResult, ...]
    wall: float
    jobs: int = 1
    mode: str = "isolated"
    """``sweep`` or ``isolated`` (:func:`histaudit.crashtest.matrix.run_matrix`)."""
    runs: dict[str, int] = field(default_factory=dict)
    """What it took: ``{"sweeps": …, "sweep_crashes": …, "isolated": …}``."""

    def __post_init__(self) -> None:
        _freeze(self, "points")

    @property
    def target(self) -> str:
        return self.spec.target

    @property
    def input(self) -> Any:
        return self.spec.input

    @property
    def app(self) -> str | None:
        return self.spec.app

    @property
    def env(self) -> dict[str, str]:
        return dict(self.spec.env)

    @property
    def provenance(self) -> dict[str, Any]:
        """What makes the matrix reproducible and comparable: the commit of the code under
        test, the sample size and its seed, the output paths left out of comparisons."""
        return {"commit": self.spec.commit, "sample": self.spec.sample,
                "seed": self.spec.seed, "fail_on": str(self.spec.fail_on),
                "ignore": list(dict.fromkeys((*self.spec.ignore, *self.clean.ignore)))}

    @property
    def coverage(self) -> dict[str, list[str]]:
        return {"declared": list(self.clean.declared), "reached": list(self.clean.reached),
                "not_reached": list(self.clean.not_reached)}

    @property
    def summary(self) -> dict[str, int]:
        """Points per outcome, in the order of :class:`Outcome`, outcomes seen only."""
        counts = Counter(p.outcome for p in self.points)
        return {o.value: counts[o] for o in OUTCOMES if counts[o]}

    @property
    def exit_code(self) -> int:
        """1 when a point fails (:attr:`PointResult.failing`), else 0."""
        return 1 if any(p.failing for p in self.points) else 0

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "app": self.app, "input": self.input,
                "env": self.env, "jobs": self.jobs, "mode": self.mode,
                "engine": self.spec.engine, "runs": self.runs,
                **self.provenance,
                "clean": self.clean.to_json(),
                "points": [p.to_json() for p in self.points], "coverage": self.coverage,
                "summary": self.summary, "exit_code": self.exit_code,
                "wall_s": round(self.wall, 3)}


# --- assertions (also for the pytest plugin) -------------------------------------------------

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
