"""What a replay returns: frozen :class:`ReplayResult` and :class:`Divergence` values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DIFFERENT_ACTIVITY = "different-activity"
"""At one step the code schedules another activity (or child workflow) than the history."""
DIFFERENT_INPUT = "different-input"
"""Same activity at the same step, with another input (or a timer with another fire time)."""
DIFFERENT_ORDER = "different-order"
"""The code schedules, at this step, what the history schedules at a later one."""
DIFFERENT_OUTCOME = "different-outcome"
"""The workflow ends differently: status, result or error, or it ends where the history
goes on, or goes on where the history ended."""
NONDETERMINISM_ERROR = "nondeterminism-error"
"""The SDK itself refused the replay (another kind of step, or no step where the history
has one)."""


OUTCOMES = ("running", "completed", "continued-as-new", "failed", "canceled", "terminated",
            "pending", "suspended", "stalled", "refused", "unknown")
"""A replay's JSON ``outcome``: the orchestration status the replayed code ended with
(src/histaudit/replay/describe.py STATUS), ``refused`` when the SDK refused the replay,
``unknown`` for a status this version does not know."""


def outcome_json(outcome: str) -> str:
    """:attr:`ReplayResult.outcome` as one of :data:`OUTCOMES`."""
    if outcome == "refused by the SDK":
        return "refused"
    return outcome if outcome in OUTCOMES else "unknown"


@dataclass(frozen=True, slots=True)
class Divergence:
    """One place where the code did not do what the history recorded."""

    kind: str
    event_id: int | None
    """Sequence id of the step in the history (the task id of an activity)."""
    index: int | None
    """Position of the history event in the history (0-based)."""
    expected: str
    """What the history recorded."""
    actual: str
    """What the code did on replay."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "event_id": self.event_id, "index": self.index,
                "expected": self.expected, "actual": self.actual, "message": self.message}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of replaying one history. ``bool(result)`` is True when it is clean."""

    instance_id: str
    workflow: str
    events: int
    """History events fed to the SDK's executor."""
    outcome: str
    """How the replayed code ended: completed, failed, terminated, continued-as-new,
    running (waiting for more events), or "refused by the SDK" (non-determinism)."""
    divergence: Divergence | None = None
    """The first divergence, or None when the code replays the history exactly."""
    divergences: tuple[Divergence, ...] = field(default_factory=tuple)
    """Every divergence, in history order (later ones are often consequences of the first)."""
    completed: bool = True
    """The history records the workflow's end (``ExecutionCompleted``). A history saved
    mid-run is replayed as far as it goes: see ``last_event``, ``waiting`` and ``next``."""
    last_event: str | None = None
    """The last history event replayed, in words."""
    waiting: tuple[str, ...] = ()
    """Steps the history scheduled that it records no completion for (not completed)."""
    next: tuple[str, ...] = ()
    """What today's code would do next, past the end of a history that is not completed:
    the steps it schedules that the history does not have yet, or its completion."""
    output: str | None = None
    """The result the replayed code completed the workflow with (the SDK's JSON text), or
    None when it did not complete (or completed without a result)."""

    @property
    def ok(self) -> bool:
        return self.divergence is None

    def __bool__(self) -> bool:
        return self.ok

    def explain(self) -> str:
        """A few lines for a human: verdict, then both sides of the first divergence."""
        head = (f"instance {self.instance_id}: workflow {self.workflow!r}, "
                f"{self.events} history events replayed")
        d = self.divergence
        if d is None and self.completed:
            return f"{head} — OK (replay {self.outcome}, same steps and outcome as recorded)"
        if d is None:
            return "\n".join([f"{head} — OK so far (history not completed: same steps as "
                               f"recorded up to its last event)", *self.progress()])
        where = f"step #{d.event_id}" if d.event_id is not None else "the end"
        if d.index is not None:
            where += f" (history event {d.index})"
        more = len(self.divergences) - 1
        lines = [f"{head} — DIVERGED: {d.kind} at {where}",
                 f"  {d.message}",
                 f"  history: {d.expected}",
                 f"  code:    {d.actual}"]
        if more > 0:
            lines.append(f"  ({more} further difference(s) follow from here)")
        if not self.completed:
            lines += self.progress()
        return "\n".join(lines)

    def progress(self) -> list[str]:
        """How far a history that is not completed got, in a few indented lines."""
        lines = [f"  last event replayed: {self.last_event or 'none'}"]
        lines += [f"  waiting for: {w}" for w in self.waiting]
        lines += [f"  next, today's code would: {n}" for n in self.next]
        if not self.waiting and not self.next:
            lines.append("  the code waits (for an external event or a timer)")
        return lines

    def to_json(self) -> dict[str, Any]:
        """The replay alone (``instance``: the ledger format's name for the field)."""
        return {"instance": self.instance_id, "workflow": self.workflow, "ok": self.ok,
                "events": self.events, "outcome": outcome_json(self.outcome),
                "divergence": None if self.divergence is None else self.divergence.to_json(),
                "divergences": [d.to_json() for d in self.divergences],
                "completed": self.completed, "last_event": self.last_event,
                "waiting": list(self.waiting), "next": list(self.next), "output": self.output}
