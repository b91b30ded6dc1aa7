"""Cross-check the engine's history of an instance against its signed ledger entries.

The interceptor signs every activity completion *before* the result goes back to the
engine, so every ``TaskCompleted`` event the engine holds must have a signed
``activity.completed`` entry for the same task with the same output, and a signed
completion should be in the engine's history. :func:`crosscheck` checks both directions:

* an engine completion with no signed record — ``engine-unsigned-completion``;
* an engine completion whose result is not the signed output — ``replay-mismatch``
  (the engine state was altered, or something other than the audited activity answered);
  so is one naming another execution than the history's ``TaskScheduled`` of its task
  (the engine resolved the task with another execution's result: daprd 1.18.3 can hand
  a generation that continued as new the late result of the previous generation's task
  of the same id; :mod:`histaudit.interceptor.replaycheck` records it live);
* a signed completion whose task the engine has no completion for —
  ``engine-missing-completion`` (the engine lost or dropped it; also seen while the
  completion is still in flight, or after ``continue_as_new`` purged older history);
* an engine completion that cannot be compared because the signed payload was erased and
  the sizes agree — ``engine-completion-unverifiable`` (info);
* the engine's history ends the workflow (``ExecutionCompleted``, status COMPLETED, FAILED
  or CANCELED) while the ledger signed no end after its last ``workflow.started``, so it
  reads the workflow as still running — ``engine-unsigned-completion``, as
  :mod:`.dapr_crosscheck` says it of Dapr's signed history; ended TERMINATED without a
  signed ``workflow.terminated`` (a terminate no turn of the app carried) —
  ``workflow-terminated`` (info): it ended there, and is neither unfinished nor unsigned.

The verifier holds only public keys, so the keyed ``output_digest`` cannot be recomputed.
The comparison uses the salted commitment: with the payload row still stored (its salt
beside it), ``commit(engine result, salt) == commitment`` decides; once erased, only the
committed size ``n`` is left, which can prove a difference but never equality.

A task is matched by its task id, and by the SDK's task execution id when both sides
carry one (it tells apart tasks of different generations of a ``continue_as_new`` loop).

**A rerun** (``rerun_workflow_from_event``) starts with the history of its source copied
up to the event it reruns from, results included: those results were signed in the
source's chain. When the instance's chain holds ``workflow.rerun`` and the verifier can
read the source's chain (``lineage``), an engine completion of a task before that event
with no completion signed here is compared with the source's signed completions of that
task instead: equal is clean, different is ``rerun-prefix-mismatch`` (the copy is not
what the source signed), and absent from both is ``engine-unsigned-completion`` as
before.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry

from .check import Parsed
from .findings import Finding
from .payloads import SAME, UNKNOWN, PayloadLookup, compare_committed

__all__ = ["EngineCrossCheck", "Lineage"]

Lineage = Callable[[str], Iterable[Entry]]
"""The parsed entries of another instance's chain (a rerun's source), from the snapshot
the verifier reads."""

_ENDED = {1: "COMPLETED", 3: "FAILED", 4: "CANCELED"}
"""The engine's OrchestrationStatus values of a workflow that ended by its own code."""
_TERMINATED = 5
_SIGNED_ENDS = (Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED, Kind.WORKFLOW_TERMINATED)
_REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class _Signed:
    seq: int
    activity: str
    task_id: Any
    execution_id: str
    output: Any  # {"c", "n"} or None


def _compare(lookup: PayloadLookup, signed: _Signed, raw: bytes | None) -> str:
    return compare_committed(signed.output, raw, lookup)


def _same_task(signed: _Signed, task_id: int, execution_id: str) -> bool:
    if signed.task_id != task_id:
        return False
    return not (execution_id and signed.execution_id) or signed.execution_id == execution_id


class EngineCrossCheck:
    """Compares the engine's ``history`` (HistoryEvent protobufs) of ``instance`` with its
    signed ``activity.completed`` entries; ``lookup`` finds stored payloads."""

    def __init__(self, instance: str, history: Iterable[Any], lookup: PayloadLookup, *,
                 ends: bool = True, lineage: Lineage | None = None) -> None:
        """``ends``: also compare how the workflow ended (not for Dapr's signed history,
        whose ends :mod:`.dapr_crosscheck` compares itself); ``lineage``: reads a rerun's
        source chain (see the module docstring)."""
        self.instance, self.history, self.lookup = instance, list(history), lookup
        self.signed: list[_Signed] = []
        self.ends = ends
        self.end: str | None = None  # the last end signed since the last workflow.started
        self.lineage = lineage
        self.rerun: tuple[str, int, int] | None = None  # source, event id, entry seq

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):  # the integrity check reports malformed entries
            self.observe_valid(row, parsed.instance, parsed.seq, parsed.kind, parsed.kid,
                               parsed.ts, parsed.data)

    def observe_valid(self, row: StoredEntry, instance: str, seq: int, kind: str, kid: str,
                      ts: str, data: Mapping[str, Any]) -> None:
        if kind == Kind.ACTIVITY_COMPLETED:
            self.signed.append(_Signed(seq, str(data.get("activity", "?")),
                                       data.get("task_id"), str(data.get("execution_id") or ""),
                                       data.get("output")))
        elif kind == Kind.WORKFLOW_STARTED:
            self.end = None
        elif kind == Kind.WORKFLOW_RERUN and self.rerun is None \
                and isinstance(data.get("source"), str) and isinstance(data.get("event_id"), int):
            self.rerun = (data["source"], data["event_id"], seq)
        elif kind in _SIGNED_ENDS or kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            self.end = kind

    def finish(self) -> Iterable[Finding]:
        found = _crosscheck(self.instance, self.signed, self.history, self.lookup,
                            self._inherited())
        if self.ends:
            found += _ended(self.instance, self.end, self.history)
        return found


    def _inherited(self) -> _Inherited | None:
        """The source's signed completions of the tasks a rerun copied (None: no rerun,
        or no way to read its source)."""
        if self.rerun is None or self.lineage is None:
            return None
        source, event_id, seq = self.rerun
        signed: list[_Signed] = []
        for e in self.lineage(source):
            if e.kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
                signed = []  # a rerun copies the source's last generation
            elif e.kind == Kind.ACTIVITY_COMPLETED and isinstance(e.data.get("task_id"), int) \
                    and e.data["task_id"] < event_id:
                signed.append(_Signed(e.seq, str(e.data.get("activity", "?")),
                                      e.data["task_id"],
                                      str(e.data.get("execution_id") or ""), e.data.get("output")))
        return _Inherited(source, event_id, seq, signed)


@dataclass(frozen=True, slots=True)
class _Inherited:
    """What a rerun's copied prefix must agree with: its source's signed completions."""

    source: str
    event_id: int
    seq: int  # of the workflow.rerun entry
    signed: list[_Signed]


def _crosscheck(instance: str, signed: list[_Signed], history: Iterable[Any],
                lookup: PayloadLookup, inherited: _Inherited | None = None) -> list[Finding]:
    by_task: dict[Any, list[_Signed]] = defaultdict(list)
    for s in signed:
        by_task[s.task_id].append(s)
    findings: list[Finding] = []
    engine_tasks: dict[int, set[str]] = defaultdict(set)  # task id -> execution ids
    scheduled: dict[int, str] = {}  # task id -> execution id its TaskScheduled names
    for event in history:
        if event.HasField("taskScheduled"):
            scheduled[int(event.eventId)] = str(event.taskScheduled.taskExecutionId or "")
        if not event.HasField("taskCompleted"):
            continue
        done = event.taskCompleted
        task_id, execution_id = int(done.taskScheduledId), str(done.taskExecutionId or "")
        engine_tasks[task_id].add(execution_id)
        raw = done.result.value.encode("utf-8") if done.result.value != "" else None
        ordered = scheduled.get(task_id, "")
        if ordered and execution_id and ordered != execution_id:
            theirs = [s for s in by_task.get(task_id, ()) if s.execution_id == execution_id]
            where = f", signed at entry {theirs[-1].seq}" if theirs else ""
            findings.append(Finding.make(
                "replay-mismatch", instance, theirs[-1].seq if theirs else None,
                f"task {task_id}: the engine's history completes it with the result of "
                f"execution {execution_id} ({_size(raw)}{where}), not of execution "
                f"{ordered} that the history scheduled",
                entries=[s.seq for s in theirs], task_id=task_id))
            continue
        mine = [s for s in by_task.get(task_id, ()) if _same_task(s, task_id, execution_id)]
        if not mine and inherited is not None and task_id < inherited.event_id:
            findings += _copied(instance, inherited, task_id, execution_id, raw, lookup)
            continue
        if not mine:
            findings.append(Finding.make(
                "engine-unsigned-completion", instance, None,
                f"the engine holds a completion of task {task_id} "
                f"({_size(raw)}) that no signed activity.completed records",
                task_id=task_id))
            continue
        verdicts = [_compare(lookup, s, raw) for s in mine]
        last = mine[-1]
        if SAME in verdicts:
            continue
        if UNKNOWN in verdicts:
            findings.append(Finding.make(
                "engine-completion-unverifiable", instance, last.seq,
                f"activity {last.activity} (task {task_id}): unverifiable (payload erased); "
                f"the engine's result has the signed size ({_size(raw)})",
                entries=[s.seq for s in mine], task_id=task_id, activity=last.activity))
            continue
        findings.append(Finding.make(
            "replay-mismatch", instance, last.seq,
            f"activity {last.activity} (task {task_id}): the engine's result ({_size(raw)}) "
            f"is not the output signed at entry {last.seq}"
            + (f" ({len(mine)} signed completions)" if len(mine) > 1 else ""),
            entries=[s.seq for s in mine], task_id=task_id, activity=last.activity))
    reported: set[Any] = set()
    for s in signed:
        ids = engine_tasks.get(s.task_id) if isinstance(s.task_id, int) else None
        present = bool(ids) and (not s.execution_id or "" in (ids or ())
                                 or s.execution_id in (ids or ()))
        if present or s.task_id in reported:
            continue
        reported.add(s.task_id)
        findings.append(Finding.make(
            "engine-missing-completion", instance, s.seq,
            f"activity {s.activity} (task {s.task_id}) completed at entry {s.seq}, but the "
            f"engine's history has no completion of that task",
            task_id=s.task_id, activity=s.activity))
    return findings


def _copied(instance: str, inherited: _Inherited, task_id: int, execution_id: str,
            raw: bytes | None, lookup: PayloadLookup) -> list[Finding]:
    """A completion a rerun copied, against its source's signed completions."""
    theirs = [s for s in inherited.signed if _same_task(s, task_id, execution_id)]
    source = f"the source {inherited.source!r}"
    if not theirs:
        return [Finding.make(
            "engine-unsigned-completion", instance, inherited.seq,
            f"the engine holds a completion of task {task_id} ({_size(raw)}), copied from "
            f"{source} by a rerun, that no signed activity.completed records, here or there",
            task_id=task_id)]
    verdicts = [_compare(lookup, s, raw) for s in theirs]
    last = theirs[-1]
    if SAME in verdicts:
        return []
    if UNKNOWN in verdicts:
        return [Finding.make(
            "engine-completion-unverifiable", instance, inherited.seq,
            f"activity {last.activity} (task {task_id}), copied from {source}: "
            f"unverifiable (payload erased); the engine's result has the signed size "
            f"({_size(raw)})", task_id=task_id, activity=last.activity)]
    return [Finding.make(
        "rerun-prefix-mismatch", instance, inherited.seq,
        f"activity {last.activity} (task {task_id}): the result this rerun copied from "
        f"{source} ({_size(raw)}) is not the output the source signed at its entry "
        f"{last.seq}", task_id=task_id, activity=last.activity)]


def _ended(instance: str, signed_end: str | None, history: Iterable[Any]) -> list[Finding]:
    """The engine's history ends the workflow and the ledger's last run has no end."""
    if signed_end in _SIGNED_ENDS:
        return []
    for index, event in enumerate(history):
        if not event.HasField("executionCompleted"):
            continue
        done = event.executionCompleted
        status = getattr(done, "workflowStatus", getattr(done, "orchestrationStatus", 0))
        if status == _TERMINATED:
            return [Finding.make(
                "workflow-terminated", instance, None,
                f"the engine's history ends the workflow TERMINATED (event {index}), and "
                f"the ledger holds no workflow.terminated: a client ended it there")]
        if status in _ENDED:
            return [Finding.make(
                "engine-unsigned-completion", instance, None,
                f"the engine's history ends the workflow {_ENDED[status]} (event "
                f"{index}{_reason(done)}), but the ledger signed no workflow.completed or "
                f"workflow.failed after its last workflow.started: it reads the workflow "
                f"as still running")]
    return []


def _reason(done: Any) -> str:
    """``: ErrorType: message`` of a failed ``ExecutionCompleted`` (the engine's text)."""
    if not done.HasField("failureDetails"):
        return ""
    text = " ".join(f"{done.failureDetails.errorType}: "
                    f"{done.failureDetails.errorMessage}".split())
    if len(text) > _REASON_CHARS:
        text = f"{text[:_REASON_CHARS]}…"
    return f": {text}"


def _size(raw: bytes | None) -> str:
    return "no result" if raw is None else f"{len(raw)} bytes"
