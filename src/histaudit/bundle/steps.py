"""An instance's entries as the report draws them: steps, their attempts, worker processes.

A *step* is one activity task the workflow scheduled (named by the SDK's task execution
id, or by its task id within a generation when there is none). Each ``activity.started``
of it is one *attempt*, a delivery by the engine; the ``worker`` (``host:pid``) every
record carries says which process ran it. An attempt with no ``activity.completed`` or
``activity.failed`` was cut short: its process stopped (a crash) or the run is still
going. Side effects are grouped by name and idempotency key, so one done twice is seen.

This reads what the entries say and verifies nothing; the verifier's findings are what
the report states as conclusions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.timeline import TimelineEntry

__all__ = ["Attempt", "Effect", "Run", "Step", "StepGroup", "Worker", "analyse", "collapse",
           "step_key"]

_ACTIVITY_KINDS = (Kind.ACTIVITY_STARTED, Kind.ACTIVITY_COMPLETED, Kind.ACTIVITY_FAILED)
_WORKFLOW_MARKS = (Kind.WORKFLOW_STARTED, Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED,
                   Kind.WORKFLOW_CONTINUED_AS_NEW, Kind.WORKFLOW_TERMINATED, Kind.REPLAY_MISMATCH)


@dataclass
class Effect:
    """One side effect (name and idempotency key) of one step, over all its attempts."""

    name: str
    key: str
    intents: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        """Completed more than once: the outside world saw it twice."""
        return len(self.done) > 1

    @property
    def unconfirmed(self) -> int:
        """Intents that no done, skipped or failed record answers."""
        return max(0, len(self.intents) - len(self.done) - len(self.skipped) - len(self.failed))


@dataclass
class Attempt:
    """One delivery of a step: its ``activity.started`` and what followed it."""

    number: int
    """The attempt number the start record signed (1, 2, …)."""
    worker: str | None
    started: int
    last: int
    """Seq of the last record of this attempt (its outcome, or its last effect record)."""
    outcome: str | None = None
    """``completed``, ``failed``, or None: no outcome recorded."""
    outcome_seq: int | None = None
    marks: list[tuple[int, str, Effect]] = field(default_factory=list)
    """(seq, effect kind, effect) of the side-effect records made during this attempt."""

    @property
    def cut_short(self) -> bool:
        return self.outcome is None


@dataclass
class Step:
    """One activity task of the workflow and every attempt at it."""

    activity: str
    task_id: Any
    key: tuple[Any, ...] = ()
    """Its :func:`step_key`: what :mod:`.usage` finds its runs by."""
    scheduled: int | None = None
    """Seq of the ``workflow.scheduled_activity`` decision, when recorded."""
    attempts: list[Attempt] = field(default_factory=list)
    effects: dict[tuple[str, str], Effect] = field(default_factory=dict)
    seqs: list[int] = field(default_factory=list)
    """Seqs of every record about this step, in order."""

    @property
    def first(self) -> int:
        return self.seqs[0]

    @property
    def last(self) -> int:
        return self.seqs[-1]

    @property
    def deliveries(self) -> int:
        return len(self.attempts)

    @property
    def outcome(self) -> str | None:
        """What the last attempt recorded (None: it has no outcome)."""
        return self.attempts[-1].outcome if self.attempts else None

    @property
    def output_seq(self) -> int | None:
        return self.attempts[-1].outcome_seq if self.attempts else None

    @property
    def ran_again_after_crash(self) -> bool:
        """An earlier attempt was cut short (no outcome) and a later one was delivered."""
        return any(a.cut_short for a in self.attempts[:-1])

    @property
    def duplicates(self) -> list[Effect]:
        return [e for e in self.effects.values() if e.duplicate]

    @property
    def eventful(self) -> bool:
        """Anything an auditor looks at twice: a re-delivery, no success, an odd effect."""
        return (self.deliveries != 1 or self.outcome != "completed"
                or any(e.duplicate or e.skipped or e.failed or e.unconfirmed
                       for e in self.effects.values()))


@dataclass(frozen=True)
class StepGroup:
    """Consecutive uneventful steps, drawn and listed as one line of a large report."""

    steps: tuple[Step, ...]

    @property
    def first(self) -> int:
        return self.steps[0].first

    @property
    def last(self) -> int:
        return max(s.last for s in self.steps)


@dataclass
class Worker:
    """One worker process (``host:pid``) and the span of records it made."""

    name: str
    index: int
    """Order of first appearance (0, 1, …); it picks the colour."""
    first: int
    last: int
    records: int = 0
    cut_short: list[Step] = field(default_factory=list)
    """Steps whose attempt in this process has no outcome: it stopped in the middle."""


@dataclass
class Run:
    """What an instance's entries say happened, for the picture and the step table."""

    steps: list[Step]
    workers: list[Worker]
    marks: list[tuple[int, str]]
    """(seq, kind) of the workflow's own records worth a mark (start, end, mismatch)."""
    first: int
    last: int


def step_key(data: Mapping[str, Any], generation: int) -> tuple[Any, ...]:
    """The step a record is about: its execution id, else its task id within the
    generation (continue-as-new restarts task ids)."""
    execution = data.get("execution_id")
    if isinstance(execution, str) and execution:
        return ("x", execution)
    return ("t", generation, repr(data.get("task_id")))


def analyse(entries: Sequence[TimelineEntry]) -> Run:
    """Group ``entries`` (one instance, chain order) into steps, attempts and workers."""
    steps: dict[tuple[Any, ...], Step] = {}
    workers: dict[str, Worker] = {}
    marks: list[tuple[int, str]] = []
    generation = 0
    for e in entries:
        data: dict[str, Any] = dict(e.data)
        worker = data.get("worker")
        if isinstance(worker, str) and worker:
            w = workers.get(worker)
            if w is None:
                w = workers[worker] = Worker(worker, len(workers), e.seq, e.seq)
            w.last, w.records = e.seq, w.records + 1
        kind = e.kind
        if kind in _WORKFLOW_MARKS:
            marks.append((e.seq, str(kind)))
            if kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
                generation += 1
            continue
        is_effect = isinstance(kind, str) and kind.startswith("effect.")
        if kind not in _ACTIVITY_KINDS and kind != Kind.WORKFLOW_SCHEDULED_ACTIVITY \
                and not is_effect:
            continue
        key = step_key(data, generation)
        step = steps.get(key)
        if step is None:
            step = steps[key] = Step(str(data.get("activity", "?")), data.get("task_id"), key)
        step.seqs.append(e.seq)
        if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY:
            step.scheduled = e.seq if step.scheduled is None else step.scheduled
            continue
        if kind == Kind.ACTIVITY_STARTED:
            number = data.get("attempt")
            attempt = Attempt(number if type(number) is int else len(step.attempts) + 1,
                              worker if isinstance(worker, str) else None, e.seq, e.seq)
            step.attempts.append(attempt)
            continue
        found = _attempt_of(step, data)
        if found is None:
            continue
        attempt = found
        attempt.last = max(attempt.last, e.seq)
        if kind in (Kind.ACTIVITY_COMPLETED, Kind.ACTIVITY_FAILED):
            attempt.outcome = "completed" if kind == Kind.ACTIVITY_COMPLETED else "failed"
            attempt.outcome_seq = e.seq
        elif is_effect:
            effect = _effect_of(step, data)
            into = {"effect.done": effect.done, "effect.skipped": effect.skipped,
                    "effect.failed": effect.failed}.get(str(kind), effect.intents)
            into.append(e.seq)
            attempt.marks.append((e.seq, str(kind), effect))
    for step in steps.values():
        for a in step.attempts:
            if a.cut_short and a.worker in workers:
                workers[a.worker].cut_short.append(step)
    seqs = [e.seq for e in entries] or [1]
    ordered = sorted((s for s in steps.values() if s.seqs), key=lambda s: s.first)
    return Run(ordered, list(workers.values()), marks, min(seqs), max(seqs))


def _attempt_of(step: Step, data: dict[str, Any]) -> Attempt | None:
    """The attempt a record after the start belongs to: by ``started_seq`` when signed,
    else by attempt number, else the step's latest attempt."""
    started = data.get("started_seq")
    if type(started) is int:
        for a in step.attempts:
            if a.started == started:
                return a
    number = data.get("attempt")
    for a in reversed(step.attempts):
        if a.number == number:
            return a
    return step.attempts[-1] if step.attempts else None


def _effect_of(step: Step, data: dict[str, Any]) -> Effect:
    name, key = str(data.get("name", "?")), str(data.get("key", ""))
    effect = step.effects.get((name, key))
    if effect is None:
        effect = step.effects[(name, key)] = Effect(name, key)
    return effect


def collapse(steps: Iterable[Step], limit: int) -> tuple[list[Step | StepGroup], int]:
    """At most ``limit`` lines for ``steps``: when there are more, runs of two or more
    uneventful steps become one :class:`StepGroup`; if that is still too many, the lines
    past ``limit`` are dropped. Returns the lines and how many steps were dropped."""
    steps = list(steps)
    if len(steps) <= limit:
        return list(steps), 0
    lines: list[Step | StepGroup] = []
    run: list[Step] = []

    def flush() -> None:
        if len(run) >= 2:
            lines.append(StepGroup(tuple(run)))
        else:
            lines.extend(run)
        run.clear()

    for s in steps:
        if s.eventful:
            flush()
            lines.append(s)
        else:
            run.append(s)
    flush()
    if len(lines) <= limit:
        return lines, 0
    dropped = sum(len(x.steps) if isinstance(x, StepGroup) else 1 for x in lines[limit:])
    return lines[:limit], dropped
