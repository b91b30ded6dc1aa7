"""Behaviour across crashes, read from the signed entries of one instance.

The interceptor (:mod:`histaudit.interceptor`) records ``activity.started`` before every
activity body and ``activity.completed``/``activity.failed`` after it; activity code
records ``effect.intent`` before a side effect and ``effect.done``, ``effect.skipped`` or
``effect.failed`` after it (:mod:`histaudit.interceptor.effects`). A crash between those records
leaves a pattern this analyzer names:

* one task (same ``task_id`` and ``execution_id``) started more than once: Dapr
  re-delivered it after a crash (at-least-once) — ``activity-reexecuted``, which counts
  deliveries (starts) and, apart, the ones known to have run the body: each completion
  or failure is one delivery's last record, and an effect intent shows the latest
  delivery before it ran (``tasks_in_memory`` in :mod:`.behaviour_events`);
* its completions carry different output digests (same signing key): the activity is
  not deterministic — ``activity-nondeterministic``;
* one effect (``name``, ``key``) done twice — ``effect-duplicate``;
* an intent never closed, and the task ran again — ``effect-uncertain``, saying what the
  effect's later records show the retry did: did it (a duplicate if the first attempt had
  got through, which no record can tell; harmless when the attempt handed its idempotency
  key to a service that deduplicates), skipped it, or neither;
* a later attempt found the effect done and skipped it — ``effect-deduplicated``;
* the LLM calls of one task made by more than one execution — ``llm-call-repeated``,
  with what the crash cost — and a call that sent less of the conversation than an
  earlier task's — ``conversation-restarted`` (:mod:`histaudit.verify.behaviour_llm`);
* on a replay the engine fed back an activity result that is not the signed completion
  of that task (the interceptor signed ``replay.mismatch``) — ``replay-mismatch``;
* one workflow decision (a start by its ``started_at``; a scheduled activity or child by
  its ``task_id`` within the generation) signed twice, both records present: the workflow
  made it again because the engine had not kept the first — ``decision-resigned``. A
  decision re-appended on replay (``"replayed": true``) because its record was lost is
  signed once and is normal;
* the instance's last end is a failure or a client's terminate — ``workflow-failed``,
  ``workflow-terminated`` (:mod:`histaudit.verify.behaviour_end`).

Deliberate retries of a failed activity get a new ``task_id`` from the SDK and are not
re-executions.

Memory stays bounded however long the instance: each tracked entry becomes one small
event tuple (:mod:`histaudit.verify.behaviour_events`). Up to ``spill_at`` events per list
are analysed in memory at :meth:`BehaviourCheck.finish`, by the original analyzer's dicts;
past that the events go, in batches, to a temporary directory
(:mod:`histaudit.verify.behaviour_spill`) from which ``finish`` reads back only the tasks,
effects and decisions that can have findings, into the same views. One set of functions below
words the findings of both paths; tests/unit/verify/test_behaviour.py holds both to the
original analyzer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from histaudit.ledger.kinds import Kind
from histaudit.ledger.records import Entry, StoredEntry

from . import behaviour_events as ev
from .behaviour_end import WorkflowEnd
from .behaviour_llm import LlmCalls
from .behaviour_spill import Spill
from .check import Parsed
from .findings import EffectRef, Finding
from .payloads import PayloadLookup

_Handler = Callable[[int, str, str, Any], None]


def _untracked(seq: int, kind: str, kid: str, data: Any) -> None:
    """Route 0: a kind the behaviour check does not track."""

SPILL_AT = 2048
"""Events held in memory per list before the check moves them to a temporary file."""


class BehaviourCheck:
    """Reads one instance's entries in chain order; ``finish()`` names what crashes did."""

    def __init__(self, instance: str, *, spill_at: int | None = None,
                 payloads: PayloadLookup | None = None) -> None:
        """``spill_at``: events per list kept in memory (default :data:`SPILL_AT`);
        ``payloads``: stored payloads, for a failure's message (:mod:`.behaviour_end`)."""
        self.instance = instance
        self.events = events = ev.Events(SPILL_AT if spill_at is None else spill_at, Spill)
        self._mismatches: list[Finding] = []
        self.llm = LlmCalls(instance)
        self.end = WorkflowEnd(instance, payloads)
        handlers: dict[int, _Handler] = {
            ev.STARTED: events.started, ev.COMPLETED: events.completed,
            ev.MISMATCH: self.mismatch, ev.EFFECT: events.effect, ev.FAILED: events.failed,
            ev.DECISION: self.decision, ev.LLM: self.llm.call, ev.END: self.end.ended}
        self.on = tuple(handlers.get(route, _untracked) for route in range(max(handlers) + 1))
        """What an entry goes to, by its route (:func:`~.behaviour_events.route_of`):
        ``on[route](seq, kind, kid, data)``; ``on[0]``, route 0, does nothing."""

    def observe(self, row: StoredEntry, parsed: Parsed) -> None:
        if isinstance(parsed, Entry):
            self.observe_entry(parsed)

    def observe_entry(self, entry: Entry) -> None:
        route = ev.route_of(entry.kind)
        if route:
            self.on[route](entry.seq, entry.kind, entry.kid, entry.data)

    def decision(self, seq: int, kind: str, kid: str, data: Any) -> None:
        self.events.decision(seq, kind, kid, data)
        if kind == Kind.WORKFLOW_STARTED:
            self.llm.started(self.events.generation)
            self.end.started()

    def mismatch(self, seq: int, kind: str, kid: str, data: Any) -> None:
        if kind == Kind.WORKFLOW_PROPAGATED_HISTORY:
            problems = data.get("problems")
            if isinstance(problems, list) and problems:
                self._mismatches.append(Finding.make(
                    "propagated-history-mismatch", self.instance, seq,
                    f"the history propagated to this workflow is not what its ancestors "
                    f"signed: {'; '.join(map(str, problems[:6]))}"
                    + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else "")))
            return
        what = f"activity {data.get('activity', '?')} (task {data.get('task_id')})"
        if data.get("scheduled_execution_id"):  # another execution's result (replaycheck)
            where = data.get("completed_seq")
            signed = "" if where is None else f", signed at entry {where}"
            detail = (f"{what}: the engine fed back the result of execution "
                      f"{data.get('execution_id')} (digest {_short(data.get('seen_digest'))}"
                      f"{signed}), not of execution {data.get('scheduled_execution_id')} "
                      f"that the workflow's history scheduled")
        else:
            source = data.get("source")
            where = f"the source {source!r}'s entry" if isinstance(source, str) else "entry"
            detail = (f"{what}: on replay the engine fed back a result (digest "
                      f"{_short(data.get('seen_digest'))}) that is not the completion signed "
                      f"at {where} {data.get('completed_seq')} (digest "
                      f"{_short(data.get('expected_digest'))})")
        self._mismatches.append(Finding.make(
            "replay-mismatch", self.instance, seq, detail,
            entries=[data.get("completed_seq")], task_id=data.get("task_id"),
            activity=data.get("activity")))

    def finish(self) -> Iterable[Finding]:
        events = self.events
        tasks, effects, decisions = (ev.views_in_memory(events) if events.spill is None
                                     else events.spilled_views())
        out: list[Finding] = list(self._mismatches)
        for task in tasks:
            out += task_findings(self.instance, task)
        for effect in effects:
            out += effect_findings(self.instance, effect)
        out += [decision_finding(self.instance, decision) for decision in decisions]
        return out + self.llm.findings() + self.end.findings()

    def close(self) -> None:
        """Remove the temporary file, if the events were spilled (``finish`` does too)."""
        self.events.close()


def task_findings(instance: str, task: ev.TaskView) -> list[Finding]:
    label = f"activity {task.activity} (task {task.task_id})"
    out = []
    if task.starts > 1:
        out.append(Finding.make(
            "activity-reexecuted", instance, task.first_starts[1],
            f"{label} delivered {task.starts} times (starts at entries "
            f"{_seqs(task.first_starts, task.starts)}); {ran_wording(task.ran, task.starts)}",
            entries=task.first_starts, task_id=task.task_ref,
            activity=task.activity))
    for count, lowest in task.nondeterministic:
        out.append(Finding.make(
            "activity-nondeterministic", instance, lowest[1],
            f"{label} returned {count} different results across executions "
            f"(completions at entries {_seqs(lowest, count)})", entries=lowest,
            task_id=task.task_ref, activity=task.activity))
    return out


def effect_findings(instance: str, eff: ev.EffectView) -> list[Finding]:
    label = f"side effect {eff.name} [{eff.key}]"
    effect = EffectRef(eff.name, eff.key)
    out = []
    if eff.done > 1:
        out.append(Finding.make(
            "effect-duplicate", instance, eff.first_done[1],
            f"{label} done {eff.done} times (entries {_seqs(eff.first_done, eff.done)})",
            entries=eff.first_done, effect=effect))
    for intent, retry, task, activity in eff.uncertain:
        out.append(Finding.make(
            "effect-uncertain", instance, intent,
            f"{label}: intent at entry {intent} never confirmed, and the "
            f"activity ran again — {retry_wording(retry)}",
            entries=() if retry is None else (retry[1],), task_id=task, activity=activity,
            effect=effect))
    if eff.skipped:
        out.append(Finding.make(
            "effect-deduplicated", instance, eff.first_skipped,
            f"{label} was already done; re-execution skipped it "
            f"{eff.skipped} time(s)", effect=effect))
    return out


def ran_wording(ran: int, delivered: int) -> str:
    """How many deliveries are known to have run the body: one per completion or failure
    (each the last record of one delivery before it, so two deliveries at once that both
    completed count twice), and the latest delivery before an effect intent. A delivery
    that crashed before the body (or before its first record) is not counted."""
    if ran == delivered:
        return "the body ran each time"
    if ran == 0:
        return "no record shows the body ran"
    return f"the body is known to have run {ran} {'time' if ran == 1 else 'times'}"


def retry_wording(retry: ev.Retry) -> str:
    """What the effect's later records say the retry did about an unconfirmed intent."""
    if retry is None:
        return "it may have happened, and the retry has not confirmed it either"
    kind, seq = retry
    if kind == ev.DONE:
        return (f"unknown whether the first attempt got through; the retry did it "
                f"(effect.done at entry {seq}): a duplicate if it had")
    if kind == ev.DONE_TOLD:
        return (f"unknown whether the first attempt got through; the retry did it "
                f"(effect.done at entry {seq}) with the same idempotency key, which the "
                f"attempt handed on: a duplicate only if the service it called does not "
                f"deduplicate by it")
    return f"the retry skipped it (effect.skipped at entry {seq})"


def decision_finding(instance: str, decision: ev.DecisionView) -> Finding:
    """One decision signed twice, both records present: the workflow made it again as
    new work, not as a replay (a replay re-appends only a decision whose record is lost,
    so that one is signed once)."""
    return Finding.make(
        "decision-resigned", instance, decision.first_seqs[1],
        f"{decision.label} signed {decision.signed} times (entries "
        f"{_seqs(decision.first_seqs, decision.signed)}): the workflow made it again — the "
        f"engine had not kept the first (e.g. it was killed while a result was in flight)",
        entries=decision.first_seqs, task_id=decision.task_id, activity=decision.activity)


def _short(digest: Any) -> str:
    return f"{digest[:12]}…" if isinstance(digest, str) else "none"


def _seqs(first: list[int], total: int, limit: int = 6) -> str:
    """The first ``limit`` of ``total`` entry numbers (``first`` holds at least those)."""
    shown = ", ".join(map(str, first[:limit]))
    return shown + (", …" if total > limit else "")


__all__ = ["SPILL_AT", "BehaviourCheck", "decision_finding", "effect_findings", "ran_wording",
           "retry_wording", "task_findings"]
