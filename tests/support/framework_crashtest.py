"""``histaudit crashtest`` over a framework's travel example on real daprd (issue 49 item
6), as a user runs it: the example's own ``build_runtime()`` entry, the stub LLM's URL
passed with ``--env``, the volatile fields its adapter declared (the LLM's tool call ids
differ per run with a real model). Two points keep it cheap (a clean run, one sweep of two
crashes, one isolated rerun: ≈ 27 s of CPU, most of it the framework's imports):

* a crash after a guarded tool's activity body: the re-delivery finds the effect done, so
  the trip's output and effects must be the clean run's — any divergence is a false one
  (a tool running beside it when the process died may be ``effect-uncertain``: true);
* a crash inside ``book_flight`` (``after-effect:``): the crash proves the first booking
  got through and the retry booked again, so the point fails, naming the doubled effect
  with both counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from examples.frameworks.stub_llm import ScriptedLLM

from support.cli import cli
from support.repo import REPO

TASK = '{"task": "book a trip to Lisbon"}'


def crash_matrix(tmp: Path, folder: str, workflow: str, after_tool: str) -> dict[str, Any]:
    """Run the two-point matrix of ``examples/frameworks/<folder>``; its JSON report, with
    the two points checked."""
    app = REPO / "examples" / "frameworks" / folder / "app.py"
    with ScriptedLLM() as llm:
        r = cli("crashtest", f"{app}:{workflow}", "--input", TASK, "--engine", "daprd",
                "--env", f"STUB_LLM_URL={llm.url}", "--env", "DO_NOT_TRACK=1",
                "--no-engine-points", "--point", after_tool,
                "--point", "after-effect:tool:book_flight",
                "--json", str(tmp / "matrix.json"), cwd=tmp, timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout[-3000:] + r.stderr
    matrix: dict[str, Any] = json.loads((tmp / "matrix.json").read_text())
    assert matrix["clean"]["status"] == "COMPLETED"
    assert matrix["clean"]["effects"] == {"tool:book_flight": 1, "tool:book_hotel": 1}
    assert matrix["ignore"], "the adapter declared no volatile output field"
    points = {p["point"]: p for p in matrix["points"]}
    assert set(points) == {after_tool, "after-effect:tool:book_flight"}, sorted(points)
    redelivered = points[after_tool]
    assert not redelivered["failing"] and redelivered["output_matches"], redelivered
    assert redelivered["effects"] == matrix["clean"]["effects"] and not redelivered["doubled"]
    # a tool running beside the crashed one may be caught between intent and outcome: a
    # true uncertainty, and the only finding such a point may carry besides info
    serious = {f["code"] for f in redelivered["findings"] if f["severity"] != "info"}
    assert serious <= {"effect-uncertain"}, redelivered["findings"]
    doubled = points["after-effect:tool:book_flight"]
    assert doubled["failing"] and doubled["output_matches"], doubled
    assert doubled["doubled"] == {"tool:book_flight": {"here": 2, "clean": 1}}
    assert "tool:book_flight done 2× (clean run: 1×)" in doubled["detail"]
    return matrix
