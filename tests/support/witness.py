"""The pytest fixture that starts real C2SP witnesses (litewitness) for a test:
:mod:`histaudit.testing.witness` is the launcher."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from histaudit.testing.witness import Witness, WitnessError, witness_bin_dir, write_policy

__all__ = ["Witness", "WitnessError", "start_witness", "witness_bin_dir", "write_policy"]


@pytest.fixture
def start_witness(tmp_path: Path) -> Iterator[Callable[[str], Witness]]:
    """``start_witness(name)`` starts one more litewitness for this test (its own agent,
    key, database, port); every one is stopped at the end. Fails (never skips) when the
    binaries or the ssh tools are missing."""
    started: list[Witness] = []

    def start(name: str) -> Witness:
        w = Witness(tmp_path / f"witness-{len(started) + 1}", name=name)
        started.append(w)
        try:
            return w.start()
        except (WitnessError, OSError) as exc:
            pytest.fail(f"cannot start litewitness: {exc}", pytrace=False)

    try:
        yield start
    finally:
        for w in started:
            w.close()
