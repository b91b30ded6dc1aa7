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
  tool calls after it repeat earlier ones under new task ids.

Memory: one small record per task that called the LLM, and one per activity name; an
agent instance with 100,000 LLM calls holds a few tens of MB here at most.
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


class LlmCalls:
    """Reads one instance's ``llm.call`` entries in chain order; ``findings()``."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.generation: str | None = None
        self._tasks: dict[tuple[Any, Any], _Task] = {}
        self._largest: dict[tuple[str | None, str], _Conversation] = {}
        self._restarts: list[Finding] = []

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
        if tokens.__class__ is int and tokens >= 0:
            ex.tokens += tokens
        else:
            ex.unreported += 1
        self._conversation(seq, activity, data)

    def _conversation(self, seq: int, activity: str, data: Mapping[str, Any]) -> None:
        sent, tid = data.get("messages"), data.get("task_id")
        if sent.__class__ is not int or tid.__class__ is not int:
            return
        key = (self.generation, activity)
        largest = self._largest.get(key)
        if largest is None or sent >= largest.messages:
            self._largest[key] = _Conversation(sent, seq, tid)
        elif tid > largest.task_id:
            self._restarts.append(Finding.make(
                "conversation-restarted", self.instance, seq,
                f"activity {activity} (task {tid}) sent the LLM {sent} message"
                f"{'' if sent == 1 else 's'} after task {largest.task_id} had sent "
                f"{largest.messages} (entry {largest.seq}): the agent lost its conversation "
                f"and began again, so the LLM and tool calls after it repeat earlier ones "
                f"under new task ids (a DurableAgent without a state store, after a crash)",
                entries=[largest.seq], task_id=tid, activity=activity))
            self._largest[key] = _Conversation(sent, seq, tid)

    def findings(self) -> list[Finding]:
        out = []
        for task in self._tasks.values():
            if len(task.executions) > 1:
                out.append(self._repeated(task))
        out.sort(key=lambda f: f.seq or 0)
        return out + self._restarts

    def _repeated(self, task: _Task) -> Finding:
        *lost, kept = task.executions
        calls = sum(ex.calls for ex in lost)
        tokens = sum(ex.tokens for ex in lost)
        unreported = sum(ex.unreported for ex in lost)
        cost = f"{calls} LLM call{'' if calls == 1 else 's'}"
        if unreported < calls:
            cost += f" and {tokens} tokens"
        if unreported:
            cost += f" ({unreported} call{'' if unreported == 1 else 's'} with no token " \
                    f"count reported)"
        model = f" of {task.model}" if task.model else ""
        seqs = [s for ex in lost for s in ex.seqs][:6]
        return Finding.make(
            "llm-call-repeated", self.instance, seqs[0],
            f"activity {task.activity} (task {task.task_id}) called the LLM in "
            f"{len(task.executions)} executions: the crash cost {cost}{model} (calls at "
            f"entries {', '.join(map(str, seqs))}{', …' if calls > 6 else ''}; the answer "
            f"used is from entry {kept.seqs[-1]})",
            entries=seqs, task_id=task.task_id, activity=task.activity)


__all__ = ["LlmCalls"]
