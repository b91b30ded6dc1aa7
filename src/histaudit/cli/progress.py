"""Progress for long commands: a rich bar on stderr when it is a terminal, else nothing.

The library reports progress through a plain callback, ``progress(done, total)`` (absolute
counts; ``total`` None when unknown), so no layer below the CLI imports rich.
:class:`Meter` is that callback. It draws only when stderr is a TTY and
``$HISTAUDIT_PROGRESS`` is not ``0``, and only once the work has run for ``delay``
seconds, so quick commands, pipes and CI stay silent; it never writes to stdout, and it
erases itself when the work ends, before the command renders its result.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import IO, Any, TypeVar

__all__ = ["PROGRESS_ENV", "Meter", "wanted"]

PROGRESS_ENV = "HISTAUDIT_PROGRESS"
DELAY = 0.5
"""Seconds of work before anything is drawn: a command that ends sooner shows nothing."""
_REFRESH = 0.1  # seconds between redraws; a callback in between only stores its counts

T = TypeVar("T")


def wanted(stream: IO[str] | None = None, env: dict[str, str] | None = None) -> bool:
    """Whether progress is drawn: ``stream`` (stderr) is a terminal and
    ``$HISTAUDIT_PROGRESS`` is not ``0``."""
    stream = sys.stderr if stream is None else stream
    setting = (os.environ if env is None else env).get(PROGRESS_ENV, "").strip()
    if setting == "0":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Meter:
    """A context manager for one piece of long work, and its ``progress(done, total)``
    callback. Known total: a bar with counts and ETA; unknown: a spinner with counts;
    ``counts=False`` (work that cannot report as it goes): a spinner and the time.

    ``callback`` is None when nothing is drawn, so a library given it pays nothing.
    """

    def __init__(self, description: str, *, total: int | None = None, unit: str = "entries",
                 counts: bool = True, enabled: bool | None = None, delay: float = DELAY,
                 stream: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.description = description
        self.unit, self.counts = unit, counts
        self.enabled = wanted(stream) if enabled is None else enabled
        self.done, self.total = 0, total
        self._delay, self._stream, self._clock = delay, stream, clock
        self._last = 0.0
        self._bar: Any = None  # rich.progress.Progress once shown
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def callback(self) -> Callable[[int, int | None], None] | None:
        return self if self.enabled else None

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def __enter__(self) -> Meter:
        if self.enabled:
            # A timer, not the next callback: work that reports nothing for a while (one
            # big instance) still gets its spinner after ``delay``.
            self._timer = threading.Timer(self._delay, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __call__(self, done: int, total: int | None = None) -> None:
        """Record ``done`` of ``total`` (``total`` None keeps the one known so far)."""
        self.done = done
        if total is not None:
            self.total = total
        if self._bar is None:
            return
        now = self._clock()
        if now - self._last >= _REFRESH:
            self._last = now
            self._draw()

    def advance(self, n: int = 1) -> None:
        self(self.done + n)

    def count(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, advancing by one for each (zero cost when nothing is drawn)."""
        if not self.enabled:
            yield from items
            return
        for item in items:
            yield item
            self.advance()

    def close(self) -> None:
        """Stop drawing and erase the bar (idempotent)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()

    def _show(self) -> None:
        """Start drawing (the timer's thread, ``delay`` seconds after ``__enter__``)."""
        with self._lock:
            if self._closed or self._bar is not None:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self._stream or sys.stderr, stderr=True, highlight=False,
                              markup=False, emoji=False)
            # redirect_*=False: rich would otherwise capture stdout while drawing and send
            # it to this console, i.e. mix the command's output into stderr.
            columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.counts:
                columns += [BarColumn(), MofNCompleteColumn(), TextColumn(self.unit)]
            columns.append(TimeElapsedColumn())
            if self.counts:
                columns.append(TimeRemainingColumn())
            bar = Progress(*columns, console=console, transient=True,
                           redirect_stdout=False, redirect_stderr=False,
                           refresh_per_second=10)
            self._task = bar.add_task(self.description, total=self.total,
                                      completed=self.done)
            bar.start()
            self._bar = bar

    def _draw(self) -> None:
        self._bar.update(self._task, completed=self.done, total=self.total)
