"""How verification and export say how far they are, without knowing who listens.

A caller passes ``progress(done, total)`` (absolute counts; ``total`` None when unknown):
the CLI draws a bar from it (``histaudit.cli.progress``), a library user may log it. With
no callback, :class:`Tally` hands iterables back untouched, so the work costs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

__all__ = ["Progress", "Tally"]

Progress = Callable[[int, int | None], None]
"""``progress(done, total)``: ``done`` units of ``total`` (None: not known yet)."""

T = TypeVar("T")
_EVERY = 256  # units between calls: the listener is told often enough, not per row


class Tally:
    """Counts units of work and tells ``progress`` every few hundred, and at the end."""

    def __init__(self, progress: Progress | None, total: int | None = None) -> None:
        self.progress, self.total, self.done = progress, total, 0
        self._told = 0

    def count(self, items: Iterable[T]) -> Iterable[T]:
        """``items``, one unit each (``items`` itself when nobody listens)."""
        return items if self.progress is None else self._counted(items)

    def _counted(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            yield item
            self.done += 1
            if self.done - self._told >= _EVERY:
                self.tell()

    def count_chunks(self, chunks: Iterable[list[T]]) -> Iterable[list[T]]:
        """``chunks``, a unit per item of each (told once a chunk has been handed out)."""
        return chunks if self.progress is None else self._counted_chunks(chunks)

    def _counted_chunks(self, chunks: Iterable[list[T]]) -> Iterator[list[T]]:
        for chunk in chunks:
            yield chunk
            self.add(len(chunk))

    def add(self, n: int) -> None:
        self.done += n
        self.tell()

    def tell(self) -> None:
        if self.progress is not None:
            self._told = self.done
            self.progress(self.done, self.total)
