"""Counting the worker pools full-mode verification starts."""

from __future__ import annotations

import pytest

from histaudit.verify import parallel


def count_pools(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on in this test, each process pool :mod:`histaudit.verify.parallel`
    starts appends a 1 to the list returned (a real pool all the same)."""
    started: list[int] = []

    class Counted(parallel.ProcessPoolExecutor):
        def __init__(self, *args: object, **kwargs: object) -> None:
            started.append(1)
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Counted)
    return started
