"""Behaviour across crashes, read from the signed entries of one instance.

The interceptor (:mod:`histaudit.dapr`) records ``activity.started`` before every
activity body and ``activity.completed``/``activity.failed`` after it, and activity
code records ``effect.intent``/``effect.done`` around a side effect. A crash between
those records leaves a pattern this analyzer names: a task that started more than once
was re-executed (Dapr's at-least-once delivery); an effect done twice under one
idempotency key is a duplicate; an intent with no done followed by another attempt is an
effect whose outcome is unknown.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import format as fmt
from .findings import Finding


@dataclass
class _Task:
    activity: str = "?"
    starts: list[int] = field(default_factory=list)  # seq of each start
    results: dict[str, int] = field(default_factory=dict)  # output digest -> first seq


@dataclass
class _Effect:
    intents: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    task: Any = None


class BehaviourAnalyzer:
    """Feed it parsed entries in chain order; ``finish()`` returns behaviour findings."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._tasks: dict[Any, _Task] = defaultdict(_Task)
        self._effects: dict[tuple[str, str], _Effect] = defaultdict(_Effect)

    def observe(self, entry: fmt.Entry) -> None:
        data, kind = entry.data, entry.kind
        if kind == "activity.started":
            task = self._tasks[data.get("task_id")]
            task.activity = str(data.get("activity", "?"))
            task.starts.append(entry.seq)
        elif kind == "activity.completed":
            digest = data.get("output_digest")
            if isinstance(digest, str):
                self._tasks[data.get("task_id")].results.setdefault(digest, entry.seq)
        elif kind.startswith("effect."):
            effect = self._effects[(str(data.get("name")), str(data.get("key")))]
            effect.task = data.get("task_id", effect.task)
            bucket = {"effect.intent": effect.intents, "effect.done": effect.done,
                      "effect.skipped": effect.skipped}.get(kind)
            if bucket is not None:
                bucket.append(entry.seq)

    def finish(self) -> list[Finding]:
        out: list[Finding] = []
        for task_id, task in self._tasks.items():
            if len(task.starts) > 1:
                out.append(Finding.make(
                    "activity-reexecuted", self.instance, task.starts[1],
                    f"activity {task.activity} (task {task_id}) ran {len(task.starts)} times "
                    f"(starts at entries {_seqs(task.starts)})"))
            if len(task.results) > 1:
                out.append(Finding.make(
                    "activity-nondeterministic", self.instance, sorted(task.results.values())[1],
                    f"activity {task.activity} (task {task_id}) returned {len(task.results)} "
                    f"different results across executions"))
        for (name, key), eff in self._effects.items():
            label = f"side effect {name} [{key}]"
            if len(eff.done) > 1:
                out.append(Finding.make(
                    "effect-duplicate", self.instance, eff.done[1],
                    f"{label} done {len(eff.done)} times (entries {_seqs(eff.done)})"))
            undone = [s for s in eff.intents if not any(d > s for d in eff.done)]
            if eff.intents and len(eff.intents) > len(eff.done) and self._ran_again(eff, undone):
                out.append(Finding.make(
                    "effect-uncertain", self.instance, undone[0],
                    f"{label}: intent at entry {undone[0]} never confirmed, and the activity "
                    f"ran again"))
            if eff.skipped:
                out.append(Finding.make(
                    "effect-deduplicated", self.instance, eff.skipped[0],
                    f"{label} already done; re-execution skipped it "
                    f"{len(eff.skipped)} time(s)"))
        return out

    def _ran_again(self, eff: _Effect, undone: list[int]) -> bool:
        task = self._tasks.get(eff.task)
        return task is not None and any(s > undone[0] for s in task.starts)


def _seqs(seqs: list[int], limit: int = 6) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (", …" if len(seqs) > limit else "")
