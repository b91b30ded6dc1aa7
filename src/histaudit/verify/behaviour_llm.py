"""What crashes cost in LLM calls, read from one instance's signed ``llm.call`` entries.

The interceptor signs one ``llm.call`` per LLM call made inside an activity, with the
execution that made it (``task_id``, ``execution_id``, ``started_seq``) and what the
provider reported (:mod:`histaudit.interceptor.llm`). Two patterns are findings:

* ``llm-call-repeated``: the LLM calls of one task were made by more than one of its
  executions — Dapr re-delivered the activity after a crash and the body asked the LLM
  again. The latest execution that called is the one whose answer the workflow went on
  with; every call of the others is what the crash cost, in calls and, where the provider
  reported them, tokens. (An execution that found its answer already recorded — dapr-agents'
  ``call_llm`` with a state store — makes no call and costs nothing.)
* ``conversation-restarted``: a call sent fewer messages than an earlier call of the same
  activity in the same generation made by an earlier task: the agent's conversation
  shrank, which an agent loop's never does — it lost what it had said and heard (a
  DurableAgent without a state store, after a crash) and began again, so the LLM and
  tool calls after it repeat earlier ones under new task ids. What that cost is every
  call of the conversation it lost (the calls of that activity since the generation
  began or since the last restart), less those ``llm-call-repeated`` already prices: the
  two findings together count each thrown-away call once.

Memory: one small record per LLM call (its seq, tokens and execution), one per task that
called the LLM, and one per activity name; an agent instance with 100,000 LLM calls holds
a few tens of MB here at most.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .behaviour_events import task_key
from .findings import Finding


@dataclass(slots=True)
class _Execution:
    started_seq: Any
    calls: int = 0
    tokens: int = 0
    unreported: int = 0  # calls whose provider reported no token count
    seqs: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Task:
    task_id: Any
    activity: str
    model: str | None
    executions: list[_Execution] = field(default_factory=list)


@dataclass(slots=True)
class _Conversation:
    """The largest conversation one activity has sent so far in one generation."""

    messages: int
    seq: int
    task_id: int


@dataclass(slots=True)
class _Restart:
    """A restart seen at ``seq``, and the calls of the conversation it lost:
    ``(seq, tokens or None)`` of each."""

    seq: int
    task_id: int
    activity: str
    text: str
    largest_seq: int
    lost: list[tuple[int, int | None]]


class LlmCalls:
    """Reads one instance's ``llm.call`` entries in chain order; ``findings()``."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.generation: str | None = None
        self._tasks: dict[tuple[Any, Any], _Task] = {}
        self._largest: dict[tuple[str | None, str], _Conversation] = {}
        self._since: dict[tuple[str | None, str], list[tuple[int, int | None]]] = {}
        """The calls (seq, tokens) of each activity's conversation since its generation
        began or it last restarted."""
        self._restarts: list[_Restart] = []

    def started(self, generation: str | None) -> None:
        """A new workflow generation began (its ``workflow.started``)."""
        self.generation = generation

    def call(self, seq: int, kind: str, kid: str, data: Mapping[str, Any]) -> None:
        tid, eid, _ = task_key(data.get("task_id"), data.get("execution_id"))
        activity = str(data.get("activity", "?"))
        model = data.get("model")
        task = self._tasks.get((tid, eid))
        if task is None:
            task = self._tasks[(tid, eid)] = _Task(
                data.get("task_id"), activity, model if model.__class__ is str else None)
        started = data.get("started_seq")
        if not task.executions or task.executions[-1].started_seq != started:
            task.executions.append(_Execution(started))
        ex = task.executions[-1]
        ex.calls += 1
        ex.seqs.append(seq)
        tokens = data.get("total_tokens")
        counted = tokens if tokens.__class__ is int and tokens >= 0 else None
        if counted is not None:
            ex.tokens += counted
        else:
            ex.unreported += 1
        self._conversation(seq, activity, data, counted)

    def _conversation(self, seq: int, activity: str, data: Mapping[str, Any],
                      tokens: int | None) -> None:
        key = (self.generation, activity)
        since = self._since.setdefault(key, [])
        sent, tid = data.get("messages"), data.get("task_id")
        if sent.__class__ is not int or tid.__class__ is not int:
            since.append((seq, tokens))
            return
        largest = self._largest.get(key)
        if largest is None or sent >= largest.messages:
            self._largest[key] = _Conversation(sent, seq, tid)
        elif tid > largest.task_id:
            self._restarts.append(_Restart(
                seq, tid, activity,
                f"activity {activity} (task {tid}) sent the LLM {sent} message"
                f"{'' if sent == 1 else 's'} after task {largest.task_id} had sent "
                f"{largest.messages} (entry {largest.seq}): the agent lost its conversation "
                f"and began again, so the LLM and tool calls after it repeat earlier ones "
                f"under new task ids (a DurableAgent without a state store, after a crash)",
                largest.seq, list(since)))
            self._largest[key] = _Conversation(sent, seq, tid)
            since.clear()
        since.append((seq, tokens))

    def findings(self) -> list[Finding]:
        out = []
        priced: set[int] = set()  # the calls llm-call-repeated counts
        for task in self._tasks.values():
            if len(task.executions) > 1:
                out.append(self._repeated(task))
                priced.update(s for ex in task.executions[:-1] for s in ex.seqs)
        out.sort(key=lambda f: f.seq or 0)
        return out + [self._restarted(r, priced) for r in self._restarts]

    def _restarted(self, restart: _Restart, priced: set[int]) -> Finding:
        """The restart's finding, with the calls of the lost conversation that no
        ``llm-call-repeated`` counts: what the restart cost."""
        lost = [(seq, tokens) for seq, tokens in restart.lost if seq not in priced]
        calls = len(lost)
        unreported = sum(tokens is None for _, tokens in lost)
        tokens = sum(t for _, t in lost if t is not None)
        cost = _cost(calls, tokens, unreported)
        already = len(restart.lost) - calls
        also = (f"; {already} more counted by llm-call-repeated" if already else "")
        shown = ", ".join(str(seq) for seq, _ in lost[:6]) + (", …" if calls > 6 else "")
        where = f" (entries {shown}{also})" if calls else (f" ({already} counted by "
                                                             f"llm-call-repeated)"
                                                             if already else "")
        return Finding.make(
            "conversation-restarted", self.instance, restart.seq,
            f"{restart.text}; the conversation it lost cost {cost}{where}",
            entries=[restart.largest_seq] + [seq for seq, _ in lost[:6]],
            task_id=restart.task_id, activity=restart.activity)

    def _repeated(self, task: _Task) -> Finding:
        *lost, kept = task.executions
        calls = sum(ex.calls for ex in lost)
        tokens = sum(ex.tokens for ex in lost)
        unreported = sum(ex.unreported for ex in lost)
        cost = _cost(calls, tokens, unreported)
        model = f" of {task.model}" if task.model else ""
        seqs = [s for ex in lost for s in ex.seqs][:6]
        return Finding.make(
            "llm-call-repeated", self.instance, seqs[0],
            f"activity {task.activity} (task {task.task_id}) called the LLM in "
            f"{len(task.executions)} executions: the crash cost {cost}{model} (calls at "
            f"entries {', '.join(map(str, seqs))}{', …' if calls > 6 else ''}; the answer "
            f"used is from entry {kept.seqs[-1]})",
            entries=seqs, task_id=task.task_id, activity=task.activity)


def _cost(calls: int, tokens: int, unreported: int) -> str:
    """``N LLM calls and T tokens``, saying how many calls reported no token count."""
    cost = f"{calls} LLM call{'' if calls == 1 else 's'}"
    if unreported < calls:
        cost += f" and {tokens} tokens"
    if unreported:
        cost += f" ({unreported} call{'' if unreported == 1 else 's'} with no token " \
                f"count reported)"
    return cost


__all__ = ["LlmCalls"]
