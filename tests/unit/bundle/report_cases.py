"""Hand-built instances for the report's unit tests: entries as the interceptor writes them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from histaudit.ledger.checkpoint import Checkpoint
from histaudit.ledger.timeline import PayloadState, PayloadValue, TimelineEntry
from histaudit.verify.findings import Finding
from histaudit.verify.report import Report

CHECKPOINT = Checkpoint(origin="histaudit/test-ledger", size=99, root=b"\0" * 32, note=b"",
                        kid="k1")
A, B = "host-a:111", "host-b:222"


@dataclass(frozen=True)
class NamedFinding(Finding):
    """A finding that names several entries (what ``Finding.entries`` is becoming)."""

    entries: tuple[int, ...] = ()


class Builder:
    """Appends entries with consecutive seqs; payload fields get a reference and digest."""

    def __init__(self) -> None:
        self.entries: list[TimelineEntry] = []

    def add(self, kind: str, worker: str | None,
            values: dict[str, bytes | None] | None = None, /, **data: Any) -> int:
        seq = len(self.entries) + 1
        fields = dict(data)
        if worker is not None:
            fields["worker"] = worker
        payloads = {}
        for name, value in (values or {}).items():
            fields[name] = {"c": hashlib.sha256(b"c%d" % seq + name.encode()).hexdigest(),
                            "k": True, "n": len(value or b"")}
            fields[f"{name}_digest"] = hashlib.sha256(b"d" + (value or b"")).hexdigest()
            payloads[name] = (PayloadValue(PayloadState.ERASED) if value is None
                              else PayloadValue(PayloadState.KEPT, value))
        self.entries.append(TimelineEntry(seq=seq, ts=f"2026-12-01T10:00:{seq % 60:02d}.000Z",
                                          kind=kind, kid="k1", data=fields,
                                          hash="ab" * 32, payloads=payloads))
        return seq

    def step(self, task: int, activity: str, worker: str, *, attempt: int = 1,
             output: bytes | None = b'"ok"', finish: bool = True,
             effect: str | None = None, execution_id: str | None = None) -> dict[str, int]:
        """One attempt at task ``task``: start, maybe an effect, maybe its completion
        (``execution_id`` defaults to ``exec-<task>``; a retry keeps its call's)."""
        base = {"activity": activity, "task_id": task,
                "execution_id": execution_id or f"exec-{task}", "attempt": attempt}
        seqs = {"started": self.add("activity.started", worker, {"input": b'{"x":1}'},
                                    **base)}
        if effect is not None:
            seqs["intent"] = self.add("effect.intent", worker, name=effect, key="K-1", **base)
            seqs["done"] = self.add("effect.done", worker, {"result": b'"posted"'},
                                    name=effect, key="K-1", intent_seq=seqs["intent"], **base)
        if finish:
            seqs["completed"] = self.add("activity.completed", worker, {"output": output},
                                         started_seq=seqs["started"], **base)
        return seqs


def crashed_run(output: bytes = b'"Summary: fine"') -> tuple[list[TimelineEntry], dict[str, int]]:
    """Two steps; the second's side effect is done, then worker A dies; B runs it again."""
    b = Builder()
    b.add("workflow.started", A, {"input": b'{"id":"t-1"}'}, workflow="triage")
    first = b.step(1, "summarize", A, output=output)
    crashed = b.step(2, "post_comment", A, effect="post-comment", finish=False)
    again = b.step(2, "post_comment", B, attempt=2, effect="post-comment")
    end = b.add("workflow.completed", B, {"output": b'"done"'}, workflow="triage")
    return b.entries, {"summarize_out": first["completed"], "done1": crashed["done"],
                       "done2": again["done"], "restart": again["started"], "end": end}


def report(instance: str, entries: int, *findings: Finding) -> Report:
    return Report(instance_id=instance, entries=entries, mode="default",
                  findings=tuple(findings))
