"""The behaviour analyzer as it was before events could spill to disk (git 2080e38).

A copy, kept as the oracle the new :class:`~histaudit.verify.behaviour.BehaviourCheck`
must agree with, finding for finding and in the same order; changed since only where the
findings' wording changed (issue 13): deliveries apart from runs known to have reached the
body, and what the retry did after an unconfirmed effect — written here the plain way
(each record credits the task's latest start; the effect's later records scanned in
order), not as the fast code does it; and one finding added, ``decision-resigned``: a
workflow decision signed twice, named by its ``started_at`` or by (kind, generation,
integer ``task_id``). The findings' ``entries``, ``task_id``, ``activity`` and ``effect``
(issue 13 item 6) are set here from the same lists, the first six entries of each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry
from histaudit.verify.check import Parsed
from histaudit.verify.findings import EffectRef, Finding


@dataclass
class _Task:
    activity: str = "?"
    starts: list[int] = field(default_factory=list)  # seq of each activity.started
    ran: set[int] = field(default_factory=set)  # indexes of starts whose body left a record
    ended: set[int] = field(default_factory=set)  # indexes of starts a last record took
    results: dict[tuple[str, str], int] = field(default_factory=dict)  # (kid, digest) -> seq


@dataclass
class _Effect:
    intents: dict[int, Any] = field(default_factory=dict)  # intent seq -> (task key, order)
    later: list[tuple[int, str, int]] = field(default_factory=list)  # (order, kind, seq)
    closed: set[int] = field(default_factory=set)  # intent seqs with done/failed/skipped
    done: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    told: set[int] = field(default_factory=set)  # done seqs whose attempt was told its key


def _task_key(data: Any) -> tuple[Any, Any]:
    return (data.get("task_id"), data.get("execution_id"))


class OriginalBehaviourCheck:
    """Reads one instance's entries in chain order; ``finish()`` names what crashes did."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._tasks: dict[tuple[Any, Any], _Task] = defaultdict(_Task)
        self._effects: dict[tuple[str, str], _Effect] = defaultdict(_Effect)
        self._mismatches: list[Finding] = []
        self._order = 0
        self._generation: str | None = None
        # decision -> (label, task id, activity, seqs)
        self._decisions: dict[tuple[Any, ...], tuple[str, Any, Any, list[int]]] = {}

    def _decision(self, entry: Entry) -> None:
        data, kind = entry.data, entry.kind
        if kind == Kind.WORKFLOW_STARTED:
            started = data.get("started_at")
            self._generation = started if type(started) is str else None
            if self._generation is None:
                return
            key: tuple[Any, ...] = ("started", started)
            label, tid, activity = f"workflow.started at {started}", None, None
        else:
            tid = data.get("task_id")
            if self._generation is None or type(tid) is not int:
                return
            key = (kind, self._generation, tid)
            what = data.get("activity" if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY
                            else "child_workflow", "?")
            label = f"{kind} of {what} (task {tid})"
            activity = (what if kind == Kind.WORKFLOW_SCHEDULED_ACTIVITY
                        and type(what) is str else None)
        self._decisions.setdefault(key, (label, tid, activity, []))[3].append(entry.seq)

    def _ran(self, data: Any) -> None:
        task = self._tasks.get(_task_key(data))
        if task is not None and task.starts:
            task.ran.add(len(task.starts) - 1)

    def _ended(self, data: Any) -> None:
        """A body's last record (completion, failure): the latest start no other last
        record took."""
        task = self._tasks.get(_task_key(data))
        if task is None:
            return
        free = [i for i in range(len(task.starts)) if i not in task.ended]
        if free:
            task.ended.add(free[-1])
            task.ran.add(free[-1])

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.observe_entry(parsed)

    def observe_entry(self, entry: Entry) -> None:
        data, kind = entry.data, entry.kind
        self._order += 1
        if kind == Kind.ACTIVITY_FAILED:
            self._ended(data)
        if kind in (Kind.WORKFLOW_STARTED, Kind.WORKFLOW_SCHEDULED_ACTIVITY,
                    Kind.WORKFLOW_SCHEDULED_CHILD):
            self._decision(entry)
        if kind == Kind.ACTIVITY_STARTED:
            task = self._tasks[_task_key(data)]
            task.activity = str(data.get("activity", "?"))
            task.starts.append(entry.seq)
        elif kind == Kind.ACTIVITY_COMPLETED:
            digest = data.get("output_digest")
            if isinstance(digest, str):
                self._tasks[_task_key(data)].results.setdefault((entry.kid, digest), entry.seq)
            self._ended(data)
        elif kind == Kind.REPLAY_MISMATCH:
            self._mismatches.append(Finding.make(
                "replay-mismatch", self.instance, entry.seq,
                f"activity {data.get('activity', '?')} (task {data.get('task_id')}): on "
                f"replay the engine fed back a result (digest {_short(data.get('seen_digest'))})"
                f" that is not the completion signed at entry {data.get('completed_seq')} "
                f"(digest {_short(data.get('expected_digest'))})",
                entries=[data.get("completed_seq")], task_id=data.get("task_id"),
                activity=data.get("activity")))
        elif kind.startswith("effect."):
            effect = self._effects[(str(data.get("name")), str(data.get("key")))]
            if kind == Kind.EFFECT_INTENT:
                effect.intents[entry.seq] = (_task_key(data), self._order)
                self._ran(data)
                return
            intent = data.get("intent_seq")
            if isinstance(intent, int):
                effect.closed.add(intent)
            if kind == Kind.EFFECT_DONE:
                effect.done.append(entry.seq)
                if data.get("key_told") is True:
                    effect.told.add(entry.seq)
            elif kind == Kind.EFFECT_SKIPPED:
                effect.skipped.append(entry.seq)
            if kind in (Kind.EFFECT_DONE, Kind.EFFECT_SKIPPED):
                effect.later.append((self._order, kind, entry.seq))

    def finish(self) -> Iterable[Finding]:
        out: list[Finding] = list(self._mismatches)
        for (task_id, _), task in self._tasks.items():
            label = f"activity {task.activity} (task {task_id})"
            if len(task.starts) > 1:
                n, ran = len(task.starts), len(task.ran)
                runs = ("the body ran each time" if ran == n else
                        "no record shows the body ran" if ran == 0 else
                        f"the body is known to have run {ran} time{'s' * (ran > 1)}")
                out.append(Finding.make(
                    "activity-reexecuted", self.instance, task.starts[1],
                    f"{label} delivered {n} times (starts at entries "
                    f"{_seqs(task.starts)}); {runs}", entries=task.starts[:6],
                    task_id=task_id, activity=task.activity))
            by_key: dict[str, list[int]] = defaultdict(list)
            for (kid, _digest), seq in task.results.items():
                by_key[kid].append(seq)
            for seqs in by_key.values():
                if len(seqs) > 1:
                    out.append(Finding.make(
                        "activity-nondeterministic", self.instance, sorted(seqs)[1],
                        f"{label} returned {len(seqs)} different results across executions "
                        f"(completions at entries {_seqs(sorted(seqs))})",
                        entries=sorted(seqs)[:6], task_id=task_id, activity=task.activity))
        for (name, key), eff in self._effects.items():
            label = f"side effect {name} [{key}]"
            ref = EffectRef(name, key)
            if len(eff.done) > 1:
                out.append(Finding.make(
                    "effect-duplicate", self.instance, eff.done[1],
                    f"{label} done {len(eff.done)} times (entries {_seqs(eff.done)})",
                    entries=eff.done[:6], effect=ref))
            for intent, (task_key, order) in sorted(eff.intents.items()):
                if intent in eff.closed:
                    continue
                started = self._tasks.get(task_key)
                if started is not None and any(s > intent for s in started.starts):
                    after = [(kind, seq) for o, kind, seq in eff.later if o > order]
                    done = [seq for kind, seq in after if kind == Kind.EFFECT_DONE]
                    skipped = [seq for kind, seq in after if kind == Kind.EFFECT_SKIPPED]
                    told = bool(done) and done[0] in eff.told
                    retry = (f"unknown whether the first attempt got through; the retry did "
                             f"it (effect.done at entry {done[0]}) with the same idempotency "
                             f"key, which the attempt handed on: a duplicate only if the "
                             f"service it called does not deduplicate by it"
                             if told else
                             f"unknown whether the first attempt got through; the retry did "
                             f"it (effect.done at entry {done[0]}): a duplicate if it had"
                             if done else
                             f"the retry skipped it (effect.skipped at entry {skipped[0]})"
                             if skipped else
                             "it may have happened, and the retry has not confirmed it either")
                    out.append(Finding.make(
                        "effect-uncertain", self.instance, intent,
                        f"{label}: intent at entry {intent} never confirmed, and the "
                        f"activity ran again — {retry}", entries=(done or skipped)[:1],
                        # the task's id as its own findings name it: the key its
                        # first start or result stored (False and 0 are one task)
                        task_id=next(k for k in self._tasks if k == task_key)[0],
                        activity=started.activity, effect=ref))
            if eff.skipped:
                out.append(Finding.make(
                    "effect-deduplicated", self.instance, eff.skipped[0],
                    f"{label} was already done; re-execution skipped it "
                    f"{len(eff.skipped)} time(s)", effect=ref))
        for label, tid, activity, seqs in self._decisions.values():
            if len(seqs) > 1:
                out.append(Finding.make(
                    "decision-resigned", self.instance, seqs[1],
                    f"{label} signed {len(seqs)} times (entries {_seqs(seqs)}): the workflow "
                    f"made it again — the engine had not kept the first (e.g. it was killed "
                    f"while a result was in flight)", entries=seqs[:6], task_id=tid,
                    activity=activity))
        return out


def _short(digest: Any) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) else "none"


def _seqs(seqs: list[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (", …" if len(seqs) > limit else "")
