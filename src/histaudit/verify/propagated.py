"""A propagated history, checked against the ledger that signed it.

With daprd 1.18's history propagation (``call_child_workflow(..., propagation=
PropagationScope.OWN_HISTORY | LINEAGE)``), a child workflow is handed its caller's
history — and with ``LINEAGE`` its ancestors' — and reads it with
``ctx.get_propagated_history()``: one *chunk* of engine events per ancestor instance,
oldest first. A child that decides on what it was given must be able to trust that it
is what its ancestors did. For every chunk whose instance the ledger holds, this module
checks two things against that instance's signed chain:

* **nothing in it was changed**: each result it holds (``TaskCompleted``) is the output
  the ancestor signed for that task (the salted commitment of a stored payload; once
  erased, the size) — a result the ancestor never signed is a problem too;
* **nothing was cut off its end**: every activity, child workflow and timer the
  ancestor signed as scheduled before the point the next in line was created (the task
  id the child's ``ExecutionStarted`` names; for an older chunk, the one the next
  chunk's does) is in it — task ids are the order a workflow schedules in, so whatever
  has a lower one was in the history by then.

Chunks of instances the ledger does not hold (another app's ledger) are not checked and
are said so. Pure: events (protobuf objects, read by field name) and entries in,
problems out; it imports no SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry

from .payloads import DIFFERENT, PayloadLookup, compare_committed

__all__ = ["Chunk", "PropagatedCheck", "check_propagated"]

_SCHEDULING: dict[str, str] = {Kind.WORKFLOW_SCHEDULED_ACTIVITY: "activity",
               Kind.WORKFLOW_SCHEDULED_CHILD: "child workflow",
               Kind.WORKFLOW_SCHEDULED_TIMER: "timer"}
_SCHEDULED_EVENTS = ("taskScheduled", "childWorkflowInstanceCreated", "timerCreated")
_LISTED = 6


@dataclass(frozen=True)
class Chunk:
    """One ancestor's events as propagated (``HistoryEvent`` protobufs)."""

    instance: str
    app_id: str
    workflow: str
    events: Sequence[Any]


@dataclass(frozen=True)
class PropagatedCheck:
    checked: tuple[str, ...]
    """The chunks' instances the ledger holds, checked."""
    unchecked: tuple[str, ...]
    """Those it holds no chain of."""
    problems: tuple[str, ...]


def _cut_points(chunks: Sequence[Chunk], cut: int | None) -> list[int | None]:
    """For each chunk, the task id the next in line was scheduled under (None: unknown)."""
    points: list[int | None] = []
    for nxt in chunks[1:]:
        started = next((e.executionStarted for e in nxt.events
                        if e.HasField("executionStarted")), None)
        points.append(int(started.parentInstance.taskScheduledId)
                      if started is not None and started.HasField("parentInstance") else None)
    return [*points, cut]


def check_propagated(chunks: Sequence[Chunk], cut: int | None,
                     entries_of: Callable[[str], Iterable[Entry]],
                     lookup: PayloadLookup) -> PropagatedCheck:
    """Check ``chunks`` against the chains ``entries_of`` reads (see the module
    docstring); ``cut`` is the task id the receiving workflow was scheduled under by the
    last chunk's instance (None when unknown: its cut-off is then not checked)."""
    checked: list[str] = []
    unchecked: list[str] = []
    problems: list[str] = []
    for chunk, point in zip(chunks, _cut_points(chunks, cut), strict=True):
        entries = list(entries_of(chunk.instance))
        if not entries:
            unchecked.append(chunk.instance)
            continue
        checked.append(chunk.instance)
        problems += [f"{chunk.instance!r}: {p}" for p in _chunk_problems(chunk, point,
                                                                          entries, lookup)]
    return PropagatedCheck(tuple(checked), tuple(unchecked), tuple(problems))


def _chunk_problems(chunk: Chunk, point: int | None, entries: list[Entry],
                    lookup: PayloadLookup) -> list[str]:
    # the generation the chunk can be of: after the ancestor's last continue-as-new
    last = max((i for i, e in enumerate(entries) if e.kind == Kind.WORKFLOW_CONTINUED_AS_NEW),
               default=-1)
    generation = entries[last + 1:]
    signed: dict[int, list[Entry]] = {}
    scheduled: dict[int, str] = {}
    for e in generation:
        task = e.data.get("task_id")
        if task.__class__ is not int:
            continue
        if e.kind == Kind.ACTIVITY_COMPLETED:
            signed.setdefault(task, []).append(e)
        elif e.kind in _SCHEDULING:
            scheduled[task] = _SCHEDULING[e.kind]
    problems: list[str] = []
    present: set[int] = set()
    for event in chunk.events:
        kind = event.WhichOneof("eventType")
        if kind in _SCHEDULED_EVENTS:
            present.add(int(event.eventId))
        if kind != "taskCompleted":
            continue
        done = event.taskCompleted
        task = int(done.taskScheduledId)
        raw = done.result.value.encode("utf-8") if done.HasField("result") else None
        theirs = signed.get(task, [])
        if not theirs:
            problems.append(f"task {task} has a result ({_size(raw)}) no signed "
                            f"activity.completed records")
        elif all(compare_committed(e.data.get("output"), raw, lookup) == DIFFERENT
                 for e in theirs):
            problems.append(f"task {task}'s result ({_size(raw)}) is not the output signed "
                            f"at entry {theirs[-1].seq}")
    if point is not None:
        cut = sorted(t for t in scheduled if t < point and t not in present)
        if cut:
            listed = ", ".join(f"{scheduled[t]} task {t}" for t in cut[:_LISTED])
            problems.append(f"cut short: it lacks {listed}"
                            + (f" and {len(cut) - _LISTED} more" if len(cut) > _LISTED else "")
                            + f", signed as scheduled before task {point}")
    return problems


def _size(raw: bytes | None) -> str:
    return "no result" if raw is None else f"{len(raw)} bytes"
