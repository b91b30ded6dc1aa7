"""A sweep whose worker dies on its own (not at a crash point): the sweep stops there, the
point it crashed at last is reported from an isolated run, and the points after it are
swept again, so none is lost. Split from ``test_sweep.py`` (stop 47) to keep each file
inside its CPU budget. Cost: ≈ 50 s of CPU, 40–100 s of wall on a slow 2-core machine (the
stuck worker is waited for, 15 s at a time).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from histaudit import crashtest as ct

pytestmark = [pytest.mark.engine, pytest.mark.crash]

APP = Path(__file__).resolve().parent / "apps" / "sweep_app.py"


def test_a_worker_dying_on_its_own_stops_the_sweep_and_the_rest_is_swept_again(
        engine_binary: Path) -> None:
    spec = ct.CrashSpec(target=f"{APP}:steps", input=0, env={"FRAGILE": "1"}, timeout=15)
    result = ct.run_matrix(spec, engine_points=False)
    by_point = {p.point: p for p in result.points}
    assert sorted(by_point) == sorted(result.clean.points)  # nothing lost
    fragile = by_point["after:fragile"]
    assert fragile.outcome in ("stuck", "failed")
    assert "the sweep stopped after this crash" in fragile.detail
    assert "worker exited with status 3" in fragile.detail
    assert by_point["after:stamp"].outcome == "diverged"
    assert {p for p, r in by_point.items() if r.outcome == "identical"} == \
        set(by_point) - {"after:fragile", "after:stamp"}
    assert result.runs["sweeps"] >= 2
