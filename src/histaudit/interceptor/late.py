"""Decisions that could not be recorded when they were made, recorded once the ledger is
back.

A workflow's last decision — its completion, its failure, its ``continue_as_new`` — is
made once: no later turn replays it, so the replay that restores a lost decision
(:mod:`.workflow`) never comes. When the ledger cannot take it (an outage longer than
``$HISTAUDIT_STORE_OUTAGE_WAIT``), the engine has ended the instance and the ledger would
say it is still running. :class:`LateRecords` keeps such a record and appends it, from a
thread of its own, as soon as the ledger answers again (first look, then every few
seconds while the process lives), unless the chain holds it by then; one log line says
so. A process that dies first loses it: ``verify --engine`` then shows the ledger behind
the engine.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from histaudit.errors import HistauditError

__all__ = ["LateRecord", "LateRecords"]

log = logging.getLogger("histaudit.interceptor")

_FIRST_PAUSE_S = 1.0
_LONGEST_PAUSE_S = 10.0


@dataclass(frozen=True)
class LateRecord:
    instance: str
    kind: str
    append: Callable[[], Any]
    """Appends the record as it was made (its payloads included)."""
    held: Callable[[], bool]
    """Whether the chain holds the record already."""


class LateRecords:
    """Records waiting for the ledger, retried in order on one daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[LateRecord] = []
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, record: LateRecord) -> None:
        with self._lock:
            self._waiting.append(record)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="histaudit-late-records")
                self._thread.start()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _run(self) -> None:
        pause = _FIRST_PAUSE_S
        while True:
            self._wake.wait(pause)
            with self._lock:
                todo = list(self._waiting)
            done = 0
            for record in todo:
                try:
                    if not record.held():
                        record.append()
                        log.warning("histaudit: recorded %s for workflow %s late, once the "
                                    "ledger answered again", record.kind, record.instance)
                except (HistauditError, OSError):
                    break  # still away: try again later, in order
                done += 1
            with self._lock:
                del self._waiting[:done]
                if not self._waiting:
                    self._thread = None
                    return
            pause = _FIRST_PAUSE_S if done else min(pause * 2, _LONGEST_PAUSE_S)
