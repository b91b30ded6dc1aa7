"""The seed's scenario (examples/financial_agent): a 100-step agent crashes at step 87.

``demo.py`` (what ``make demo-87`` runs) crashes the real worker right after step 87's
body, resumes it on the real engine and audits the ledger. The outcome any user can count
must hold: steps 1–86 ran once (replayed, not re-executed), only step 87 twice, the
report went out once, and ``histaudit verify --full`` exits 0 reporting the second run of
step 87 — and no other finding.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.crash]

DEMO = Path(__file__).resolve().parents[2] / "examples" / "financial_agent" / "demo.py"


def test_crash_at_step_87_reexecutes_only_step_87(engine_binary: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HISTAUDIT_")}
    env.update({"HISTAUDIT_ENGINE_BIN": str(engine_binary), "COLUMNS": "100"})
    out_dir = tmp_path / "out"
    run = subprocess.run([sys.executable, str(DEMO), "--out", str(out_dir)], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    out = run.stdout
    assert run.returncode == 0, out[-6000:] + run.stderr[-3000:]
    assert "died at after:competitors#15 (exit 86" in out
    assert "executions: 101 for 100 steps; run twice: [87]; never run: none" in out
    assert "LLM calls: 16 (one per analysis step: 16); reports sent: 1" in out
    assert "findings: ['activity-reexecuted'])" in out
    assert "activity competitors (task 87) ran 2" in out
    sent = (out_dir / "data" / "reports_sent.txt").read_text().splitlines()
    assert len(sent) == 1 and sent[0].startswith("ACME ")
