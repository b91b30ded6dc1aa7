"""The behaviour analyzer as it was before events could spill to disk (git 2080e38).

A verbatim copy, kept as the oracle the new :class:`~histaudit.verify.behaviour.BehaviourCheck`
must agree with, finding for finding and in the same order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry
from histaudit.verify.check import Parsed
from histaudit.verify.findings import Finding


@dataclass
class _Task:
    activity: str = "?"
    starts: list[int] = field(default_factory=list)  # seq of each activity.started
    results: dict[tuple[str, str], int] = field(default_factory=dict)  # (kid, digest) -> seq


@dataclass
class _Effect:
    intents: dict[int, Any] = field(default_factory=dict)  # intent seq -> task key
    closed: set[int] = field(default_factory=set)  # intent seqs with done/failed/skipped
    done: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)


def _task_key(data: Any) -> tuple[Any, Any]:
    return (data.get("task_id"), data.get("execution_id"))


class OriginalBehaviourCheck:
    """Reads one instance's entries in chain order; ``finish()`` names what crashes did."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._tasks: dict[tuple[Any, Any], _Task] = defaultdict(_Task)
        self._effects: dict[tuple[str, str], _Effect] = defaultdict(_Effect)
        self._mismatches: list[Finding] = []

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.observe_entry(parsed)

    def observe_entry(self, entry: Entry) -> None:
        data, kind = entry.data, entry.kind
        if kind == Kind.ACTIVITY_STARTED:
            task = self._tasks[_task_key(data)]
            task.activity = str(data.get("activity", "?"))
            task.starts.append(entry.seq)
        elif kind == Kind.ACTIVITY_COMPLETED:
            digest = data.get("output_digest")
            if isinstance(digest, str):
                self._tasks[_task_key(data)].results.setdefault((entry.kid, digest), entry.seq)
        elif kind == Kind.REPLAY_MISMATCH:
            self._mismatches.append(Finding.make(
                "replay-mismatch", self.instance, entry.seq,
                f"activity {data.get('activity', '?')} (task {data.get('task_id')}): on "
                f"replay the engine fed back a result (digest {_short(data.get('seen_digest'))})"
                f" that is not the completion signed at entry {data.get('completed_seq')} "
                f"(digest {_short(data.get('expected_digest'))})"))
        elif kind.startswith("effect."):
            effect = self._effects[(str(data.get("name")), str(data.get("key")))]
            if kind == Kind.EFFECT_INTENT:
                effect.intents[entry.seq] = _task_key(data)
                return
            intent = data.get("intent_seq")
            if isinstance(intent, int):
                effect.closed.add(intent)
            if kind == Kind.EFFECT_DONE:
                effect.done.append(entry.seq)
            elif kind == Kind.EFFECT_SKIPPED:
                effect.skipped.append(entry.seq)

    def finish(self) -> Iterable[Finding]:
        out: list[Finding] = list(self._mismatches)
        for (task_id, _), task in self._tasks.items():
            label = f"activity {task.activity} (task {task_id})"
            if len(task.starts) > 1:
                out.append(Finding.make(
                    "activity-reexecuted", self.instance, task.starts[1],
                    f"{label} ran {len(task.starts)} times (starts at entries "
                    f"{_seqs(task.starts)})"))
            by_key: dict[str, list[int]] = defaultdict(list)
            for (kid, _digest), seq in task.results.items():
                by_key[kid].append(seq)
            for seqs in by_key.values():
                if len(seqs) > 1:
                    out.append(Finding.make(
                        "activity-nondeterministic", self.instance, sorted(seqs)[1],
                        f"{label} returned {len(seqs)} different results across executions "
                        f"(completions at entries {_seqs(sorted(seqs))})"))
        for (name, key), eff in self._effects.items():
            label = f"side effect {name} [{key}]"
            if len(eff.done) > 1:
                out.append(Finding.make(
                    "effect-duplicate", self.instance, eff.done[1],
                    f"{label} done {len(eff.done)} times (entries {_seqs(eff.done)})"))
            for intent, task_key in sorted(eff.intents.items()):
                if intent in eff.closed:
                    continue
                started = self._tasks.get(task_key)
                if started is not None and any(s > intent for s in started.starts):
                    out.append(Finding.make(
                        "effect-uncertain", self.instance, intent,
                        f"{label}: intent at entry {intent} never confirmed, and the "
                        f"activity ran again — it may have happened"))
            if eff.skipped:
                out.append(Finding.make(
                    "effect-deduplicated", self.instance, eff.skipped[0],
                    f"{label} was already done; re-execution skipped it "
                    f"{len(eff.skipped)} time(s)"))
        return out


def _short(digest: Any) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) else "none"


def _seqs(seqs: list[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (", …" if len(seqs) > limit else "")
