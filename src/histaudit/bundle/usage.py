"""What an instance's runs used: LLM calls with their tokens and tool executions, per run
and per crash, as ``histaudit show`` and the HTML pages state them.

A *run* is one execution of an activity task, one delivery by the engine: its records
carry its ``attempt`` number (an ``llm.call`` its ``started_seq`` too). Each ``llm.call``
entry is one LLM call with the token counts the provider reported
(:mod:`histaudit.interceptor.llm`); each side effect named ``tool:<tool>`` is a tool call
(:mod:`histaudit.interceptor.effects`), counted by what ended it: done, skipped (found
done), failed, or an intent nothing answered (the run stopped inside the tool). A run with
no outcome whose task was delivered again was cut short by a crash, and the runs one worker
process (``host:pid``) left that way are that crash's.

:class:`UsageCounter` reads entries in chain order, one at a time, and keeps a small record
per run that used something, never the entries, so ``show`` feeds it every entry of the
instance whatever its filters keep. It says what the entries say and verifies nothing:
what a crash is proven to have cost is ``verify``'s ``llm-call-repeated``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from histaudit.ledger.kinds import Kind

from .steps import step_key

__all__ = ["ENDED", "TOOL_PREFIX", "Crash", "LlmCall", "LlmUse", "Recorded", "RunUse", "ToolUse",
           "Usage", "UsageCounter", "account", "tools_words"]

TOOL_PREFIX = "tool:"
"""A tool call is the side effect ``tool:<tool>`` (the interceptor's ``TOOL_EFFECT_PREFIX``;
a package on the interceptor's layer does not import it)."""

ENDED = ("completed", "failed", "crashed", "no-outcome")
"""How a run ended (:attr:`RunUse.ended`), a closed set (``show --json``)."""

_TOOL_KINDS = (Kind.EFFECT_INTENT, Kind.EFFECT_DONE, Kind.EFFECT_SKIPPED, Kind.EFFECT_FAILED)


class Recorded(Protocol):
    """An entry as read (a parsed ledger entry, or a row of a timeline)."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


def _count(value: Any) -> int | None:
    return value if value.__class__ is int and value >= 0 else None


@dataclass(frozen=True, slots=True)
class LlmCall:
    """One ``llm.call`` entry, as the picture marks it."""

    seq: int
    model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    error_type: str | None

    @classmethod
    def of(cls, seq: int, data: Mapping[str, Any]) -> LlmCall:
        model, error = data.get("model"), data.get("error_type")
        return cls(seq, model if isinstance(model, str) else None,
                   _count(data.get("prompt_tokens")), _count(data.get("completion_tokens")),
                   _count(data.get("total_tokens")), error if isinstance(error, str) else None)

    def words(self) -> str:
        """``LLM call to gpt-x: 140 tokens (100 prompt, 40 completion)``."""
        head = f"LLM call to {self.model}" if self.model else "LLM call"
        if self.total_tokens is None:
            cost = "no token count reported"
        else:
            parts = [f"{n} {what}" for n, what in ((self.prompt_tokens, "prompt"),
                                                  (self.completion_tokens, "completion"))
                     if n is not None]
            cost = f"{self.total_tokens} tokens" + (f" ({', '.join(parts)})" if parts else "")
        failed = f"; failed ({self.error_type})" if self.error_type else ""
        return f"{head}: {cost}{failed}"


@dataclass(slots=True)
class LlmUse:
    """LLM calls and the tokens the provider reported for them, summed."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    unreported: int = 0
    """Calls signed with no total token count: their tokens are in no sum."""
    failed: int = 0
    """Calls that raised (``error_type`` signed); they may still have cost."""
    models: list[str] = field(default_factory=list)

    def add(self, call: LlmCall) -> None:
        self.calls += 1
        self.prompt_tokens += call.prompt_tokens or 0
        self.completion_tokens += call.completion_tokens or 0
        if call.total_tokens is None:
            self.unreported += 1
        else:
            self.total_tokens += call.total_tokens
        self.failed += call.error_type is not None
        if call.model is not None and call.model not in self.models:
            self.models.append(call.model)

    def absorb(self, other: LlmUse) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.total_tokens += other.total_tokens
        self.unreported += other.unreported
        self.failed += other.failed
        self.models.extend(m for m in other.models if m not in self.models)

    def words(self) -> str:
        """``2 LLM calls, 388 tokens (300 prompt, 88 completion)``, or ``no LLM call``."""
        if not self.calls:
            return "no LLM call"
        out = f"{self.calls} LLM call{'' if self.calls == 1 else 's'}"
        if self.unreported < self.calls:
            out += (f", {self.total_tokens:,} tokens ({self.prompt_tokens:,} prompt, "
                    f"{self.completion_tokens:,} completion)")
        if self.unreported:
            out += f"; {self.unreported} with no token count reported"
        if self.failed:
            out += f"; {self.failed} failed"
        return out

    def as_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens, "unreported": self.unreported,
                "failed": self.failed, "models": list(self.models)}


@dataclass(slots=True)
class ToolUse:
    """One tool's executions: how each guarded call of it ended."""

    name: str
    """The tool's name (the side effect is ``tool:<name>``)."""
    done: int = 0
    skipped: int = 0
    failed: int = 0
    intents: int = 0

    @property
    def unanswered(self) -> int:
        """Intents no done, skipped or failed answered: stopped inside the tool."""
        return max(0, self.intents - self.done - self.skipped - self.failed)

    @property
    def executions(self) -> int:
        """Times the tool was run: done, failed, or begun and never answered."""
        return self.done + self.failed + self.unanswered

    def absorb(self, other: ToolUse) -> None:
        self.done += other.done
        self.skipped += other.skipped
        self.failed += other.failed
        self.intents += other.intents

    def words(self) -> str:
        """``book_flight: done 2, skipped 1, 1 begun with no answer``."""
        counts = [f"{what} {n}" for what, n in (("done", self.done), ("skipped", self.skipped),
                                                ("failed", self.failed)) if n]
        if self.unanswered:
            counts.append(f"{self.unanswered} begun with no answer")
        return f"{self.name}: {', '.join(counts)}"

    def as_json(self) -> dict[str, Any]:
        return {"tool": self.name, "done": self.done, "skipped": self.skipped,
                "failed": self.failed, "unanswered": self.unanswered}


def tools_words(tools: Iterable[ToolUse]) -> str:
    """Each tool's counts, ``; ``-separated, or ``no tool call``."""
    return "; ".join(t.words() for t in tools) or "no tool call"


@dataclass(slots=True)
class RunUse:
    """What one run (one execution of one task) used."""

    activity: str
    task_id: Any
    execution_id: str | None
    attempt: int | None
    worker: str | None
    first: int
    """Seq of this run's first LLM or tool record."""
    key: tuple[Any, ...]
    """Its step's key (:func:`.steps.step_key`): the step table finds it by it."""
    started_seq: int | None = None
    """Seq of its ``activity.started`` (None when no entry read shows it)."""
    outcome: str | None = None
    """``completed`` or ``failed`` when the run recorded it, else None."""
    ran_again: bool = False
    """A later run of the same task was delivered."""
    llm: LlmUse = field(default_factory=LlmUse)
    calls: list[LlmCall] = field(default_factory=list)
    tools: dict[str, ToolUse] = field(default_factory=dict)
    seqs: list[int] = field(default_factory=list)
    """Seqs of its ``llm.call`` and tool records."""

    @property
    def ended(self) -> str:
        """One of :data:`ENDED`: ``completed``, ``failed``, ``crashed`` (no outcome, and
        its task ran again) or ``no-outcome`` (none recorded: still running, or it
        stopped for good)."""
        if self.outcome is not None:
            return self.outcome
        return "crashed" if self.ran_again else "no-outcome"

    def tool(self, name: str) -> ToolUse:
        found = self.tools.get(name)
        if found is None:
            found = self.tools[name] = ToolUse(name)
        return found

    def words(self) -> str:
        parts = [self.llm.words()] if self.llm.calls else []
        parts += [t.words() for t in self.tools.values()]
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {"activity": self.activity, "task_id": self.task_id,
                "execution_id": self.execution_id, "attempt": self.attempt,
                "worker": self.worker, "started_seq": self.started_seq,
                "ended": self.ended, "llm": self.llm.as_json(),
                "tools": [t.as_json() for t in self.tools.values()], "entries": self.seqs}


@dataclass(frozen=True, slots=True)
class Crash:
    """One worker process that stopped in the middle of runs that were delivered again,
    and what those runs had used before it stopped."""

    worker: str
    runs: tuple[RunUse, ...]
    llm: LlmUse
    tools: tuple[ToolUse, ...]

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker,
                "runs": [{"activity": r.activity, "task_id": r.task_id,
                          "attempt": r.attempt} for r in self.runs],
                "llm": self.llm.as_json(), "tools": [t.as_json() for t in self.tools]}


@dataclass(frozen=True, slots=True)
class Usage:
    """An instance's LLM calls and tool executions: in all, per run, per crash."""

    llm: LlmUse
    tools: tuple[ToolUse, ...]
    runs: tuple[RunUse, ...]
    """Every run that made an LLM call or a tool call, in the order of its first record."""
    crashes: tuple[Crash, ...]
    deliveries: Mapping[tuple[Any, ...], int]
    """Step key -> how many runs of it were delivered (only steps that used something)."""

    @property
    def empty(self) -> bool:
        return not self.runs

    def runs_of(self, key: tuple[Any, ...]) -> list[RunUse]:
        return [r for r in self.runs if r.key == key]

    def repeated(self) -> list[list[RunUse]]:
        """The runs of every task delivered more than once, task by task."""
        out: dict[tuple[Any, ...], list[RunUse]] = {}
        for r in self.runs:
            if self.deliveries.get(r.key, 1) > 1:
                out.setdefault(r.key, []).append(r)
        return list(out.values())

    def as_json(self) -> dict[str, Any]:
        return {"llm": self.llm.as_json(), "tools": [t.as_json() for t in self.tools],
                "runs": [r.as_json() for r in self.runs],
                "crashes": [c.as_json() for c in self.crashes]}


class UsageCounter:
    """Reads one instance's entries in chain order (:meth:`add`); :meth:`result`."""

    def __init__(self) -> None:
        self._generation = 0
        self._started: dict[tuple[Any, ...], dict[Any, int]] = {}
        """Step key -> attempt -> seq of its start, for runs with no outcome yet (a run's
        records come between its start and its outcome, so that is all it needs)."""
        self._runs: dict[tuple[Any, ...], list[RunUse]] = {}
        self._deliveries: dict[tuple[Any, ...], int] = {}
        self._order: list[RunUse] = []

    def add(self, entry: Recorded) -> None:
        kind = entry.kind
        if kind == Kind.WORKFLOW_CONTINUED_AS_NEW:
            self._generation += 1
            return
        if kind == Kind.LLM_CALL:
            run = self._run(entry)
            call = LlmCall.of(entry.seq, entry.data)
            run.llm.add(call)
            run.calls.append(call)
            started = entry.data.get("started_seq")
            if run.started_seq is None and type(started) is int:
                run.started_seq = started
            run.seqs.append(entry.seq)
            return
        if kind in _TOOL_KINDS:
            name = entry.data.get("name")
            if not isinstance(name, str) or not name.startswith(TOOL_PREFIX):
                return
            run = self._run(entry)
            tool = run.tool(name[len(TOOL_PREFIX):])
            if kind == Kind.EFFECT_INTENT:
                tool.intents += 1
            elif kind == Kind.EFFECT_DONE:
                tool.done += 1
            elif kind == Kind.EFFECT_SKIPPED:
                tool.skipped += 1
            else:
                tool.failed += 1
            run.seqs.append(entry.seq)
            return
        if kind in (Kind.ACTIVITY_STARTED, Kind.ACTIVITY_COMPLETED, Kind.ACTIVITY_FAILED):
            self._activity(entry.seq, kind, entry.data)

    def _activity(self, seq: int, kind: str, data: Mapping[str, Any]) -> None:
        """A start or an outcome: where a run began, how it ended, whether it ran again."""
        key = step_key(data, self._generation)
        attempt = data.get("attempt")
        number = attempt if type(attempt) is int else None
        if kind == Kind.ACTIVITY_STARTED:
            self._started.setdefault(key, {})[number] = seq
        else:
            open_ = self._started.get(key)
            if open_ is not None:
                open_.pop(number, None)
                if not open_:
                    del self._started[key]
        runs = self._runs.get(key)
        if runs is None:
            return
        if kind == Kind.ACTIVITY_STARTED:
            if number is not None:
                self._deliveries[key] = max(self._deliveries[key], number)
            for r in runs:
                if number is None or r.attempt is None or r.attempt < number:
                    r.ran_again = True
            return
        for r in reversed(runs):
            if r.attempt == number or number is None:
                r.outcome = "completed" if kind == Kind.ACTIVITY_COMPLETED else "failed"
                return

    def _run(self, entry: Recorded) -> RunUse:
        data = entry.data
        key = step_key(data, self._generation)
        attempt = data.get("attempt")
        number = attempt if type(attempt) is int else None
        runs = self._runs.setdefault(key, [])
        self._deliveries[key] = max(self._deliveries.get(key, 1), number or 1)
        for r in reversed(runs):
            if r.attempt == number:
                return r
        worker, execution = data.get("worker"), data.get("execution_id")
        run = RunUse(str(data.get("activity", "?")), data.get("task_id"),
                     execution if isinstance(execution, str) and execution else None,
                     number, worker if isinstance(worker, str) and worker else None,
                     entry.seq, key, self._started.get(key, {}).get(number))
        runs.append(run)
        self._order.append(run)
        return run

    def result(self) -> Usage:
        llm = LlmUse()
        tools: dict[str, ToolUse] = {}
        crashed: dict[str, list[RunUse]] = {}
        for r in self._order:
            llm.absorb(r.llm)
            for t in r.tools.values():
                tools.setdefault(t.name, ToolUse(t.name)).absorb(t)
            if r.ended == "crashed":
                crashed.setdefault(r.worker or "an unnamed worker", []).append(r)
        crashes = []
        for worker, runs in crashed.items():
            spent = LlmUse()
            used: dict[str, ToolUse] = {}
            for r in runs:
                spent.absorb(r.llm)
                for t in r.tools.values():
                    used.setdefault(t.name, ToolUse(t.name)).absorb(t)
            crashes.append(Crash(worker, tuple(runs), spent, tuple(used.values())))
        return Usage(llm, tuple(tools.values()), tuple(self._order), tuple(crashes),
                     dict(self._deliveries))


def account(entries: Iterable[Recorded]) -> Usage:
    """The :class:`Usage` of one instance's ``entries`` (chain order)."""
    counter = UsageCounter()
    for e in entries:
        counter.add(e)
    return counter.result()
