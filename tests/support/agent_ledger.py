"""An agent's instance as the interceptor signs it: a dapr-agents travel agent under
``audit_agent``, LLM turns and tool calls, two crashes, as many tasks as asked.

Entries as :mod:`histaudit.interceptor.activity`, ``.llm`` and ``.effects`` write them:

* every turn is ``dapr.agents.travel.call_llm``: one ``llm.call`` with the tokens the
  provider reported; every tool call is ``dapr.agents.travel.run_tool``: the side effect
  ``tool:<tool>`` (intent, then done, skipped or failed), except the read-only search;
* worker A stops (a crash) while running ``book_flight`` (task 3, intent signed, done not:
  the after-effect point) and ``book_hotel`` (task 4, done signed, completion not) in
  parallel; worker B runs both again: book_flight is done again, book_hotel skipped;
* worker B stops inside ``summarize`` after its LLM call (140 tokens) and worker C calls
  the LLM again;
* ``extra_turns`` more turns of ``call_llm`` and ``send_note`` in between, for the
  20-plus-task pictures.

:func:`travel` gives ``(kind, data)`` in chain order, :func:`as_timeline` the rows the
report reads, :func:`sign_into` signs them into a real ledger (payloads committed). The
figures (:func:`expected`, :data:`EXPECTED` for no extra turn) are counted by hand from
this list, not by the code under test.
"""

from __future__ import annotations

from typing import Any

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import Signer
from histaudit.ledger.store import Ledger
from histaudit.ledger.timeline import TimelineEntry

from .ledgers import committed

__all__ = [
    "CALL_LLM",
    "EXPECTED",
    "RUN_TOOL",
    "SUMMARIZE",
    "A",
    "B",
    "C",
    "as_timeline",
    "expected",
    "sign_into",
    "travel",
]

AGENT = "dapr.agents.travel"
CALL_LLM, RUN_TOOL, SUMMARIZE = f"{AGENT}.call_llm", f"{AGENT}.run_tool", f"{AGENT}.summarize"
A, B, C = "host-a:111", "host-b:222", "host-c:333"

Spec = list[tuple[str, dict[str, Any]]]


def expected(extra_turns: int = 0) -> dict[str, Any]:
    """What the instance used, counted from the list :func:`travel` writes."""
    turns = 3 + extra_turns  # call_llm tasks 0, 2, 5 and the extra ones
    prompt = 100 + 150 + 200 + 120 * extra_turns + 90 + 90
    completion = 20 + 30 + 40 + 10 * extra_turns + 50 + 50
    return {"llm_calls": turns + 2, "prompt": prompt, "completion": completion,
            "total": prompt + completion,
            "tools": {"book_flight": {"done": 1, "skipped": 0, "failed": 0, "unanswered": 1},
                      "book_hotel": {"done": 1, "skipped": 1, "failed": 0, "unanswered": 0},
                      **({"send_note": {"done": extra_turns, "skipped": 0, "failed": 0,
                                        "unanswered": 0}} if extra_turns else {})},
            "tasks": 7 + 2 * extra_turns}


EXPECTED = expected()


class _Writer:
    def __init__(self) -> None:
        self.spec: Spec = []

    def add(self, kind: str, **data: Any) -> int:
        self.spec.append((kind, data))
        return len(self.spec)

    def start(self, task: int, activity: str, worker: str, attempt: int = 1) -> dict[str, Any]:
        run = {"activity": activity, "task_id": task, "execution_id": f"exec-{task}",
               "attempt": attempt, "worker": worker}
        run["started_seq"] = self.add("activity.started", **run)
        return run

    def complete(self, run: dict[str, Any]) -> None:
        self.add("activity.completed", **run)

    def llm(self, run: dict[str, Any], prompt: int, completion: int | None,
            tools: tuple[str, ...] = (), messages: int = 2) -> None:
        total = None if completion is None else prompt + completion
        self.add("llm.call", **run, model="stub-1", messages=messages, prompt_tokens=prompt,
                 completion_tokens=completion, total_tokens=total, tool_calls=list(tools),
                 finish_reason="tool_calls" if tools else "stop", error_type=None)

    def tool(self, run: dict[str, Any], name: str, *ends: str) -> None:
        """The guarded call: its intent, then each of ``ends`` (done/skipped/failed)."""
        base = {k: v for k, v in run.items() if k != "started_seq"}
        effect = {**base, "name": f"tool:{name}", "key": run["execution_id"]}
        intent = self.add("effect.intent", **effect)
        for end in ends:
            self.add(f"effect.{end}", **effect, intent_seq=intent)

    def turn(self, task: int, worker: str, prompt: int, completion: int,
             tools: tuple[str, ...] = ()) -> None:
        run = self.start(task, CALL_LLM, worker)
        self.llm(run, prompt, completion, tools)
        self.complete(run)


def travel(extra_turns: int = 0) -> Spec:
    """The instance's entries, ``(kind, data)`` in chain order (seq = position + 1)."""
    w = _Writer()
    w.add("workflow.started", workflow=f"{AGENT}.agent_workflow", worker=A)
    w.turn(0, A, 100, 20, ("search_flights",))
    search = w.start(1, RUN_TOOL, A)
    w.complete(search)  # read-only: not guarded, no tool record
    w.turn(2, A, 150, 30, ("book_flight", "book_hotel"))
    flight, hotel = w.start(3, RUN_TOOL, A), w.start(4, RUN_TOOL, A)
    w.tool(flight, "book_flight")  # its intent only: A stopped inside the tool
    w.tool(hotel, "book_hotel", "done")  # done, then the crash before its completion
    flight = w.start(3, RUN_TOOL, B, attempt=2)
    w.tool(flight, "book_flight", "done")
    w.complete(flight)
    hotel = w.start(4, RUN_TOOL, B, attempt=2)
    w.tool(hotel, "book_hotel", "skipped")
    w.complete(hotel)
    w.turn(5, B, 200, 40)
    task = 6
    for _ in range(extra_turns):
        w.turn(task, B, 120, 10, ("send_note",))
        note = w.start(task + 1, RUN_TOOL, B)
        w.tool(note, "send_note", "done")
        w.complete(note)
        task += 2
    first = w.start(task, SUMMARIZE, B)
    w.llm(first, 90, 50)  # B stops after its LLM call
    again = w.start(task, SUMMARIZE, C, attempt=2)
    w.llm(again, 90, 50)
    w.complete(again)
    w.add("workflow.completed", status="COMPLETED", worker=C)
    return w.spec


def as_timeline(spec: Spec) -> list[TimelineEntry]:
    """The rows the report and ``show`` read (no payloads)."""
    return [TimelineEntry(seq=n, ts=f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000Z",
                          kind=kind, kid="k1", data=dict(data), hash=f"{n:064x}")
            for n, (kind, data) in enumerate(spec, 1)]


def sign_into(ledger: Ledger, signer: Signer, instance: str, spec: Spec) -> None:
    """Sign ``spec`` as ``instance``'s chain, in one transaction, with each activity's
    output and each LLM answer committed as the interceptor commits them."""
    items = []
    for kind, data in spec:
        field = {"activity.completed": "output", "llm.call": "answer"}.get(kind)
        rows = None
        if field is not None:
            value = b'{"content":"ok <b>fine</b>"}'
            ref, rows = committed(value)
            data = {**data, field: ref, f"{field}_digest": fmt.sha256_hex(value)}
        items.append(chain.Item(instance, kind, data, rows))
    chain.append_many(ledger, items, signer=signer)
