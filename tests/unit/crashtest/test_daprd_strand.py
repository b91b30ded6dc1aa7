"""The daprd strand detector (``daprd_wait.stranded``) on lines daprd v1.18.3 wrote in
crash runs of the procurement app (``daprd_logs/``: one run that deadlocked after an app
crash mid fan-out, one that recovered). Cost: under 1 s."""

from __future__ import annotations

from pathlib import Path

from histaudit.testing.daprd_wait import stranded

LOGS = Path(__file__).parent / "daprd_logs"
STRANDED = (LOGS / "stranded.log").read_text()
HEALTHY = (LOGS / "healthy.log").read_text()


def test_a_connected_worker_refused_for_ten_seconds_is_a_strand() -> None:
    assert stranded(STRANDED)


def test_a_recovered_crash_is_not_a_strand() -> None:
    # one refusal in the gap between the two workers, then placement took the types
    assert not stranded(HEALTHY)


def test_fewer_than_ten_refusals_is_not_yet_a_strand() -> None:
    lines = STRANDED.splitlines(keepends=True)
    refusals = [i for i, line in enumerate(lines) if "not registered" in line]
    assert len(refusals) == 12
    assert not stranded("".join(lines[:refusals[9]]))  # 9 refusals
    assert stranded("".join(lines[:refusals[9] + 1]))  # the 10th


def test_refusals_while_no_worker_is_connected_are_not_a_strand() -> None:
    # the same refusals, but the next worker never connected: nobody hosts the types
    lines = STRANDED.splitlines(keepends=True)
    reconnect = max(i for i, line in enumerate(lines) if "stream established" in line)
    assert not stranded("".join(lines[:reconnect] + lines[reconnect + 1:]))


def test_a_placement_change_after_the_refusals_ends_the_strand() -> None:
    healed = STRANDED + HEALTHY.splitlines(keepends=True)[-2]  # "Dissemination complete"
    assert "Dissemination complete for version 3" in healed
    assert not stranded(healed)
