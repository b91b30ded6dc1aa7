"""The behaviour check's input, reduced: one small tuple per tracked entry.

:class:`Events` turns each ``activity.started``, ``activity.completed`` (with a digest)
and ``effect.*`` entry into a tuple numbered by ``o`` (its place among the events, which
decides the order of the findings) and keeps them in three lists; once a list reaches
``spill_at`` everything moves to a :class:`~histaudit.verify.behaviour_spill.Spill`.

Task keys are compared as the original analyzer's dict compared them: by Python
equality, where ``1 == 1.0 == True``. :func:`task_key` maps such values to one
representative (an ``int``) and keeps how the first one was written (``"True"``), so the
in-memory dicts and the spill's hashes agree on which events belong to one task. A key
that cannot be hashed (a JSON object or array as ``task_id``) raises :class:`TypeError`
where the original raised it: at once for a start or completion, at ``finish`` for an
open intent.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from histaudit.ledger.kinds import Kind

from .findings import task_ref

STARTED, COMPLETED, MISMATCH, EFFECT, FAILED, DECISION, LLM, END = 1, 2, 3, 4, 5, 6, 7, 8
"""Routes: which behaviour event a kind makes (0: none)."""
INTENT, DONE, SKIPPED, CLOSING = 0, 1, 2, 3
"""Effect event kinds; CLOSING is any other ``effect.*`` (it may close an intent)."""
DONE_TOLD = 4
"""A retry's done whose attempt was told its idempotency key (only in a :data:`Retry`)."""

Start = tuple[int, Any, Any, int, str, "str | None"]
"""(o, task_id, execution_id, seq, activity, task_id as first written or None)."""
Result = tuple[int, Any, Any, int, str, str, "str | None"]
"""(o, task_id, execution_id, seq, kid, output digest, task_id as written or None)."""
EffectEvent = tuple[int, str, str, int, int, "int | None", Any, Any]
"""(o, name, key, effect kind, seq, intent seq closed, task_id, execution_id); a done's
task_id slot holds True when the attempt was told its idempotency key (``key_told``)."""
Ran = tuple[int, Any, Any, bool]
"""(o, task_id, execution_id, ends): a record only a running body writes — a failure or a
completion without a digest (``ends``: the body's last record), an effect intent (not
``ends``). See :func:`tasks_in_memory` for the start each is credited to."""
Decision = tuple[int, str, int, str, "int | None", "str | None"]
"""(event no., identity, seq, label, task id, activity): a task id for a scheduled activity
or child, an activity name for a scheduled activity, else None."""
"""(o, what names the decision — see :meth:`Events.decision` —, seq, how to call it)."""
Retry = tuple[int, int] | None
"""What the retry did after an open intent: (DONE, DONE_TOLD or SKIPPED, its entry), or
None."""
Uncertain = tuple[int, Retry, Any, str]
"""An intent never closed whose task ran again: (its entry, what the retry did, the task
id as the task's findings show it, the activity)."""

_UNHASHABLE = b"\x01"


@dataclass(slots=True)
class TaskView:
    """What the findings of one task need (only tasks that have findings get one)."""

    first_o: int  # the event that first named the task: the task's place in the report
    task_id: str
    task_ref: int | str | None  # task_id as a finding's JSON names it (findings.task_ref)
    activity: str
    starts: int
    ran: int  # starts known to have run the body (tasks_in_memory)
    first_starts: list[int]  # seqs of its first six starts
    nondeterministic: list[tuple[int, list[int]]]  # per key: (results, six lowest seqs)


@dataclass(slots=True)
class EffectView:
    """What the findings of one effect (``name``, ``key``) need."""

    first_o: int
    name: str
    key: str
    done: int
    first_done: list[int]
    uncertain: list[Uncertain]  # ascending by intent seq
    skipped: int
    first_skipped: int


@dataclass(slots=True)
class DecisionView:
    """One workflow decision signed more than once (``decision-resigned``)."""

    first_o: int
    label: str
    signed: int
    first_seqs: list[int]
    task_id: int | None = None
    activity: str | None = None


_DECISIONS = frozenset({Kind.WORKFLOW_STARTED, Kind.WORKFLOW_SCHEDULED_ACTIVITY,
                        Kind.WORKFLOW_SCHEDULED_CHILD, Kind.WORKFLOW_SCHEDULED_TIMER})
ENDS = frozenset({Kind.WORKFLOW_COMPLETED, Kind.WORKFLOW_FAILED, Kind.WORKFLOW_TERMINATED,
                  Kind.WORKFLOW_CONTINUED_AS_NEW})
"""How a workflow (or one generation of it) ends: route END."""


def route_of(kind: str) -> int:
    if kind == Kind.ACTIVITY_STARTED:
        return STARTED
    if kind == Kind.ACTIVITY_COMPLETED:
        return COMPLETED
    if kind == Kind.ACTIVITY_FAILED:
        return FAILED
    if kind == Kind.REPLAY_MISMATCH or kind == Kind.WORKFLOW_PROPAGATED_HISTORY:
        return MISMATCH
    if kind in _DECISIONS:
        return DECISION
    if kind == Kind.LLM_CALL:
        return LLM
    if kind in ENDS:
        return END
    return EFFECT if kind.startswith("effect.") else 0


def _representative(value: Any) -> Any:
    if value.__class__ is bool:
        return int(value)
    if value.__class__ is float and value.is_integer():
        return int(value)
    return value


def task_key(task_id: Any, execution_id: Any) -> tuple[Any, Any, str | None]:
    """(task_id, execution_id, task_id as written when that differs from its stand-in).

    A part that is a JSON array or object (a forged entry: the interceptor writes ints
    and strings) is unhashable, so it stands in as bytes — never a value JSON parses to,
    so it cannot merge with a genuine id — holding its canonical JSON text; the verifier
    reports the task under that text instead of crashing on it.
    """
    shown = None
    try:
        hash(task_id)
    except TypeError:
        task_id = _stand_in(task_id)
        shown = task_id[1:].decode("utf-8", "replace")
    try:
        hash(execution_id)
    except TypeError:
        execution_id = _stand_in(execution_id)
    tid = _representative(task_id)
    if shown is None and tid is not task_id:
        shown = f"{task_id}"
    return tid, _representative(execution_id), shown


def _stand_in(value: Any) -> bytes:
    try:
        return _UNHASHABLE + orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return _UNHASHABLE + repr(value).encode("utf-8", "replace")


def _ident(*parts: Any) -> str:
    """Parts (str, and ints within 64 bits: task ids) as one unambiguous text."""
    try:
        return orjson.dumps(parts).decode()
    except orjson.JSONEncodeError:
        return repr(parts)


def _intent(value: Any) -> int | None:
    if value.__class__ is int:
        return int(value)
    return int(value) if value.__class__ is bool else None


class SpillFiles(Protocol):
    """Where events go past the threshold (:class:`~.behaviour_spill.Spill`)."""

    def add(self, starts: list[Start], results: list[Result], effects: list[EffectEvent],
            ran: list[Ran], decisions: list[Decision]) -> None: ...

    def views(self) -> tuple[list[TaskView], list[EffectView], list[DecisionView]]: ...

    def close(self) -> None: ...


class Events:
    """The tracked entries of one instance as event tuples, in memory or spilled (into
    what ``make_spill`` makes, once the threshold is passed)."""

    def __init__(self, spill_at: int, make_spill: Callable[[], SpillFiles]) -> None:
        self.spill_at = max(1, spill_at)
        self._make_spill = make_spill
        self.o = 0
        self.starts: list[Start] = []
        self.results: list[Result] = []
        self.effects: list[EffectEvent] = []
        self.ran: list[Ran] = []
        self.decisions: list[Decision] = []
        self.generation: str | None = None  # the newest workflow.started's started_at
        self.spill: SpillFiles | None = None

    def started(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        tid, eid, shown = data.get("task_id"), data.get("execution_id"), None
        if tid.__class__ is not int or eid.__class__ is not str:
            tid, eid, shown = task_key(tid, eid)
        self.o += 1
        self.starts.append((self.o, tid, eid, seq, str(data.get("activity", "?")), shown))
        if len(self.starts) >= self.spill_at:
            self._move()

    def completed(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        digest = data.get("output_digest")
        if digest.__class__ is not str:
            self.failed(seq, kind, kid, data)
            return
        tid, eid, shown = data.get("task_id"), data.get("execution_id"), None
        if tid.__class__ is not int or eid.__class__ is not str:
            tid, eid, shown = task_key(tid, eid)
        self.o += 1
        self.results.append((self.o, tid, eid, seq, kid, digest, shown))
        if len(self.results) >= self.spill_at:
            self._move()

    def failed(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        """An ``activity.failed`` (or a completion without a digest): the body ran."""
        tid, eid, _ = task_key(data.get("task_id"), data.get("execution_id"))
        self.o += 1
        self.ran.append((self.o, tid, eid, True))
        if len(self.ran) >= self.spill_at:
            self._move()

    def decision(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        """A workflow decision, named as the same decision made again would be: a start
        by its ``started_at`` (the engine's, kept across re-runs); a scheduled activity,
        child or timer by its kind and integer ``task_id`` (the workflow's sequence number) within
        the generation that start opened. Without those (a legacy start, a hidden task id)
        it is not tracked. The execution id is no name: a re-run draws a new one."""
        if kind == Kind.WORKFLOW_STARTED:
            started = data.get("started_at")
            self.generation = started if started.__class__ is str else None
            if self.generation is None:
                return
            ident, label = _ident(kind, started), f"workflow.started at {started}"
            tid, activity = None, None
        else:
            tid = data.get("task_id")
            if self.generation is None or tid.__class__ is not int:
                return
            what = ("a timer" if kind == Kind.WORKFLOW_SCHEDULED_TIMER else
                    data.get("activity" if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY
                             else "child_workflow", "?"))
            ident = _ident(kind, self.generation, tid)
            label = f"{kind} of {what} (task {tid})"
            activity = (what if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY
                        and what.__class__ is str else None)
        self.o += 1
        self.decisions.append((self.o, ident, seq, label, tid, activity))
        if len(self.decisions) >= self.spill_at:
            self._move()

    def effect(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        name, key = str(data.get("name")), str(data.get("key"))
        self.o += 1
        if kind == Kind.EFFECT_INTENT:
            tid, eid, _ = task_key(data.get("task_id"), data.get("execution_id"))
            self.effects.append((self.o, name, key, INTENT, seq, None, tid, eid))
            self.ran.append((self.o, tid, eid, False))
        else:
            code = DONE if kind == Kind.EFFECT_DONE else (
                SKIPPED if kind == Kind.EFFECT_SKIPPED else CLOSING)
            told = True if code == DONE and data.get("key_told") is True else None
            self.effects.append((self.o, name, key, code, seq, _intent(data.get("intent_seq")),
                                 told, None))
        if len(self.effects) >= self.spill_at or len(self.ran) >= self.spill_at:
            self._move()

    def _move(self) -> None:
        """Past the threshold: every event so far, and from now on each full list, to disk."""
        if self.spill is None:
            self.spill = self._make_spill()
        self.spill.add(self.starts, self.results, self.effects, self.ran, self.decisions)
        self.starts, self.results, self.effects, self.ran = [], [], [], []
        self.decisions = []

    def spilled_views(self) -> tuple[list[TaskView], list[EffectView], list[DecisionView]]:
        """The views, from the spill files (the rest of the events are moved there first)."""
        assert self.spill is not None
        self._move()
        try:
            return self.spill.views()
        finally:
            self.close()

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


# --- the in-memory analysis: the original analyzer's dicts ----------------------------

def views_in_memory(events: Events
                    ) -> tuple[list[TaskView], list[EffectView], list[DecisionView]]:
    """The views of events that never left memory."""
    tasks = tasks_in_memory(events.starts, events.results, events.ran)
    return (task_views(tasks), effects_in_memory(events.effects, tasks),
            decisions_in_memory(events.decisions))


def decisions_in_memory(decisions: Iterable[Decision]) -> list[DecisionView]:
    """The decisions signed more than once, in the order they were first signed."""
    seen: dict[str, DecisionView] = {}
    for o, ident, seq, label, tid, activity in decisions:
        view = seen.get(ident)
        if view is None:
            seen[ident] = DecisionView(o, label, 1, [seq], tid, activity)
        else:
            view.signed += 1
            if len(view.first_seqs) < 6:
                view.first_seqs.append(seq)
    return [view for view in seen.values() if view.signed > 1]


class Task:
    """One task as the original analyzer kept it."""

    __slots__ = ("activity", "ended", "first_o", "ran", "results", "shown", "start_os",
                 "starts")

    def __init__(self, o: int, shown: object) -> None:
        self.first_o, self.shown, self.activity = o, shown, "?"
        self.starts: list[int] = []
        self.start_os: list[int] = []  # each start's event number, ascending
        self.ran: set[int] = set()  # indexes of the starts whose body left a record
        self.ended = 0  # bit i set: start i holds a last record (a bitset: no object each)
        self.results: dict[tuple[str, str], int] = {}  # (kid, digest) -> first seq

    def touched(self, o: int, shown: object) -> None:
        if o < self.first_o:
            self.first_o, self.shown = o, shown

    def view(self) -> TaskView | None:
        by_key: dict[str, list[int]] = defaultdict(list)
        for (kid, _digest), seq in self.results.items():
            by_key[kid].append(seq)
        nondet = [(len(seqs), sorted(seqs)[:6]) for seqs in by_key.values() if len(seqs) > 1]
        if len(self.starts) <= 1 and not nondet:
            return None
        return TaskView(self.first_o, f"{self.shown}", task_ref(self.shown), self.activity,
                        len(self.starts), len(self.ran), self.starts[:6], nondet)


Tasks = dict[tuple[Any, Any], Task]


def tasks_in_memory(starts: Iterable[Start], results: Iterable[Result],
                    ran: Iterable[Ran]) -> Tasks:
    """Each task's starts and results; ``first_o`` is its first event of either kind.

    A record a running body writes shows that some delivery before it ran the body. An
    effect intent is credited to the task's latest start before it. A body's last record
    (a completion or a failure, one per delivery) is credited to the latest start before
    it that no other last record holds: two deliveries at once (starts, starts, then both
    completions) ran the body twice. Last records are credited in entry order, so the
    count does not depend on how they were batched. A record before any start credits
    none."""
    tasks: Tasks = {}
    for o, tid, eid, seq, activity, show in starts:
        task = tasks.get((tid, eid))
        if task is None:
            task = tasks[(tid, eid)] = Task(o, tid if show is None else show)
        task.activity = activity
        task.starts.append(seq)
        task.start_os.append(o)
    ends: list[tuple[int, Task]] = []
    for o, tid, eid, seq, kid, digest, show in results:
        task = tasks.get((tid, eid))
        shown = tid if show is None else show
        if task is None:
            task = tasks[(tid, eid)] = Task(o, shown)
        else:
            task.touched(o, shown)
        task.results.setdefault((kid, digest), seq)
        ends.append((o, task))
    for o, tid, eid, last in ran:
        task = tasks.get((tid, eid))
        if task is not None:
            if last:
                ends.append((o, task))
            else:
                _credit(task, o)
    ends.sort(key=lambda end: end[0])
    for o, task in ends:
        _credit_end(task, o)
    return tasks


def _credit(task: Task, o: int) -> None:
    at = bisect.bisect_left(task.start_os, o) - 1
    if at >= 0:
        task.ran.add(at)


def _credit_end(task: Task, o: int) -> None:
    below = bisect.bisect_left(task.start_os, o)  # starts 0..below-1 came before
    free = ~task.ended & ((1 << below) - 1)  # those no last record holds yet
    if free:
        at = free.bit_length() - 1  # the latest of them
        task.ended |= 1 << at
        task.ran.add(at)


def task_views(tasks: Tasks) -> list[TaskView]:
    """The tasks that have findings, in the order they were first named."""
    views = [view for task in tasks.values() if (view := task.view()) is not None]
    views.sort(key=lambda v: v.first_o)
    return views


def ran_again(tasks: Tasks, task_key: tuple[Any, Any], intent: int) -> bool:
    """Did the task of an open intent start after it?"""
    started = tasks.get(task_key)
    return started is not None and any(s > intent for s in started.starts)


def uncertain(intent: int, retry: Retry, task: Task) -> Uncertain:
    """The open intent at ``intent`` of ``task``, which ran again."""
    return intent, retry, task.shown, task.activity


def retry_of(closings: Iterable[tuple[int, int, int]], intent_o: int) -> Retry:
    """What came after an open intent (its event ``intent_o``), from the effect's
    ``(o, DONE, DONE_TOLD or SKIPPED, seq)`` events in order: the first done, else the
    first skip."""
    skipped: Retry = None
    for o, kind, seq in closings:
        if o > intent_o:
            if kind in (DONE, DONE_TOLD):
                return kind, seq
            if skipped is None:
                skipped = SKIPPED, seq
    return skipped


class _Effect:
    __slots__ = ("closed", "closings", "done", "intents", "skipped", "view")

    def __init__(self, view: EffectView) -> None:
        self.view = view
        self.intents: dict[int, tuple[tuple[Any, Any], int]] = {}  # seq -> (task key, o)
        self.closed: set[int] = set()
        self.done: list[int] = []
        self.skipped: list[int] = []
        self.closings: list[tuple[int, int, int]] = []  # (o, DONE[_TOLD] or SKIPPED, seq)


def effects_in_memory(effects: Iterable[EffectEvent], tasks: Tasks) -> list[EffectView]:
    """The effects that have findings, in the order they were first named."""
    state: dict[tuple[str, str], _Effect] = {}
    for o, name, key, kind, seq, intent, tid, eid in effects:
        eff = state.get((name, key))
        if eff is None:
            eff = state[(name, key)] = _Effect(EffectView(o, name, key, 0, [], [], 0, 0))
        if kind == INTENT:
            eff.intents[seq] = ((tid, eid), o)
            continue
        if intent is not None:
            eff.closed.add(intent)
        if kind == DONE:
            eff.done.append(seq)
            eff.closings.append((o, DONE_TOLD if tid is True else DONE, seq))
        elif kind == SKIPPED:
            eff.skipped.append(seq)
            eff.closings.append((o, kind, seq))
    out = []
    for eff in state.values():
        view = eff.view
        view.done, view.first_done = len(eff.done), eff.done[:6]
        view.skipped, view.first_skipped = len(eff.skipped), eff.skipped[0] if eff.skipped else 0
        view.uncertain = [uncertain(intent, retry_of(eff.closings, o), tasks[task_key])
                          for intent, (task_key, o) in sorted(eff.intents.items())
                          if intent not in eff.closed and ran_again(tasks, task_key, intent)]
        if view.done > 1 or view.uncertain or view.skipped:
            out.append(view)
    return out
