"""Replay many histories in one call, fail-fast by default — temporalio's ``replay_workflows``.

Each history comes as a source (an instance id, a file) and a loader, so a fail-fast run
stops fetching at the first failure. One :class:`ReplayItem` per history says how it went:
``ok``, ``diverged`` (today's code takes another path than the history), ``mismatch``
(it replays, but to another output than was signed) or ``error`` (the history cannot be
replayed at all: unreadable, another workflow). :class:`BatchResult` holds them and a
summary.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from histaudit.errors import HistauditError

from .history import History
from .replayer import replay
from .result import ReplayResult
from .signed import NOT_COMPARED, OutputCheck

__all__ = ["BatchResult", "ItemStatus", "ReplayItem", "replay_many"]

Compare = Callable[[ReplayResult, History], OutputCheck]
"""The signed-output comparison of one replayed history (see :mod:`.signed`)."""


class ItemStatus(enum.StrEnum):
    OK = "ok"
    DIVERGED = "diverged"
    MISMATCH = "mismatch"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ReplayItem:
    """One history of a batch: its replay, its signed-output check, or why it could not be
    replayed. ``bool()`` is True when it is ``ok``."""

    source: str
    """The instance id or file the history came from."""
    result: ReplayResult | None
    output: OutputCheck = NOT_COMPARED
    error: str | None = None

    @property
    def status(self) -> ItemStatus:
        if self.result is None:
            return ItemStatus.ERROR
        if not self.result.ok:
            return ItemStatus.DIVERGED
        return ItemStatus.OK if self.output else ItemStatus.MISMATCH

    def __bool__(self) -> bool:
        return self.status is ItemStatus.OK

    def explain(self) -> str:
        if self.result is None:
            return f"{self.source}: ERROR — {self.error}"
        text = self.result.explain()
        if self.status is ItemStatus.MISMATCH:
            text = text.replace(" — OK", " — OUTPUT MISMATCH; replay OK", 1)
        lines = [text]
        if self.output is not NOT_COMPARED:
            lines.append(f"  output: {self.output.status}: {self.output.message}")
        ended = {g.seq for g in self.output.generations}  # their findings: a line below
        lines += [f"  {f.code} at entry {f.seq}: {f.message}" for f in self.output.findings
                  if f.seq not in ended]
        lines += [f"  generation {g.generation}: {g.message}" for g in self.output.generations]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """``ok`` is the item's (``status`` is ok); the replay's own ``ok`` (no divergence)
        stays inside ``replay``, which is null for a history that could not be replayed."""
        return {"source": self.source, "status": str(self.status), "ok": bool(self),
                "replay": None if self.result is None else self.result.to_json(),
                "output_check": self.output.to_json(), "error": self.error}


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Every history replayed, in order; ``bool()`` is True when all are ``ok``."""

    items: tuple[ReplayItem, ...]
    histories: int
    """How many histories were given (more than ``items`` when a fail-fast run stopped)."""

    @property
    def stopped(self) -> bool:
        return len(self.items) < self.histories

    def counts(self) -> Counter[ItemStatus]:
        return Counter(item.status for item in self.items)

    def __bool__(self) -> bool:
        return all(self.items) and not self.stopped

    def summary(self) -> str:
        c = self.counts()
        line = (f"{len(self.items)} of {self.histories} histories replayed: {c[ItemStatus.OK]} "
                f"ok, {c[ItemStatus.DIVERGED]} diverged, {c[ItemStatus.MISMATCH]} output "
                f"mismatch, {c[ItemStatus.ERROR]} could not be replayed")
        partial = sum(1 for i in self.items if i.result is not None and not i.result.completed)
        if partial:
            line += f"; {partial} not completed (replayed as far as recorded)"
        if self.stopped:
            line += f" — stopped at the first failure ({self.histories - len(self.items)} " \
                    f"not replayed; --keep-going replays all)"
        return line

    def to_json(self) -> dict[str, Any]:
        c = self.counts()
        return {"ok": bool(self), "results": [item.to_json() for item in self.items],
                "summary": {"histories": self.histories, "replayed": len(self.items),
                            **{str(s): c[s] for s in ItemStatus},
                            "not_completed": sum(1 for i in self.items if i.result is not None
                                                 and not i.result.completed),
                            "stopped": self.stopped}}


def replay_many(sources: Iterable[tuple[str, Callable[[], History]]], workflow: Any, *,
                keep_going: bool = False, compare: Compare | None = None) -> BatchResult:
    """Replay each ``(source, load)`` history against ``workflow``; stop at the first one
    that is not ``ok`` unless ``keep_going``. ``compare`` checks the signed outputs."""
    todo = list(sources)
    items: list[ReplayItem] = []
    for source, load in todo:
        try:
            history = load()
            result = replay(history, workflow)
            output = NOT_COMPARED if compare is None else compare(result, history)
            item = ReplayItem(source, result, output)
        except HistauditError as exc:
            item = ReplayItem(source, None, error=str(exc))
        items.append(item)
        if not item and not keep_going:
            break
    return BatchResult(tuple(items), len(todo))
