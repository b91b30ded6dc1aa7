"""examples/durable_agent as a user runs it: ``make demo-agent``, and the example's crash
matrix through ``histaudit crashtest --engine daprd --resources`` and through the pytest
plugin. Cost: ≈ 65 s of CPU (one daprd stack and eight app starts for the demo; a clean
run and a sweep of eleven points, with two runs of their own, for the matrix; a clean run
and two isolated points for the plugin).

The matrix crashes the agent after every activity body and inside its tool — the points
where Dapr's at-least-once delivery repeats work — on real daprd with the example's own
component directory, whose relative SQLite path must give every run its own agent state.
Every crash must leave the agent's answer identical to the clean run's once ``$.id``,
which ``audit_agent`` marks volatile, is left out; the crashes that cost something must
say what: ``llm-call-repeated`` after ``summarize``, ``effect-uncertain`` inside the tool.
The crash after the tool's block (``after-effect:``) proves its attempt wrote the note,
and the retry wrote it again: the one failing point, two executions (issue 48).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from examples.durable_agent.stub_llm import StubLLM

from support.cli import cli
from support.repo import REPO

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]

EXAMPLE = REPO / "examples" / "durable_agent"


def test_make_demo_agent_passes(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(EXAMPLE / "demo.py"), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every case as expected" in run.stdout
    assert "unexpected" not in run.stdout
    # the agent's state store lived in the demo's daprd directory, not in the checkout
    assert (tmp_path / "out" / "engine" / "agent-state.db").is_file()
    assert not (EXAMPLE / "agent-state.db").exists()


def test_the_example_crash_matrix(tmp_path: Path) -> None:
    with StubLLM() as llm:
        r = cli("crashtest", f"{EXAMPLE / 'app.py'}:dapr.agents.scribe.workflow",
                "--input", '{"task": "note hello"}', "--engine", "daprd",
                "--resources", str(EXAMPLE / "components"), "--env",
                f"STUB_LLM_URL={llm.url}", "--no-engine-points", "--point", "after:*",
                "--point", "after-effect:*", "--json", str(tmp_path / "matrix.json"),
                cwd=tmp_path, timeout=600)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    matrix = json.loads((tmp_path / "matrix.json").read_text())
    assert matrix["ignore"] == ["$.id"]  # marked by audit_agent, not passed
    outcomes = {p["point"]: (p["outcome"], p["output_matches"],
                             sorted({f["code"] for f in p["findings"]} - {"activity-reexecuted"}))
                for p in matrix["points"]}
    assert len(outcomes) == 11, sorted(outcomes)  # ten activity bodies, one effect
    assert outcomes["after:dapr.agents.scribe.summarize"] == (
        "findings", True, ["llm-call-repeated"])
    assert outcomes["after-effect:tool:write_note"][1:] == (True, ["effect-uncertain"])
    (failing,) = [p for p in matrix["points"] if p["failing"]]
    assert failing["point"] == "after-effect:tool:write_note", failing
    assert failing["effects"] == {"tool:write_note": 2}, failing
    assert "tool:write_note done 2× (clean run: 1×)" in failing["detail"]
    for point in ("after:dapr.agents.scribe.call_llm", "after:dapr.agents.scribe.call_llm#2",
                  "after:dapr.agents.scribe.call_llm#3", "after:dapr.agents.scribe.run_tool",
                  "after:dapr.agents.scribe.finalize_workflow"):
        assert outcomes[point][:2] == ("identical", True), (point, outcomes[point])
    assert outcomes["after:dapr.agents.scribe.run_tool#2"][2] == ["effect-deduplicated"]
    assert all(matches for _, matches, _ in outcomes.values()), outcomes


def test_the_pytest_plugin_crash_tests_the_agent_on_daprd(pytester: pytest.Pytester) -> None:
    """``@pytest.mark.crashmatrix`` with ``engine="daprd"`` and ``resources``: one test per
    chosen point, each judged like ``crashtest``'s (``$.id`` left out, as marked)."""
    with StubLLM() as llm:
        pytester.makepyfile(test_agent_crashes=f"""
            import pytest
            from histaudit.pytest_plugin import assert_no_duplicate_effects, assert_recovered

            @pytest.mark.crashmatrix({str(EXAMPLE / 'app.py') + ':dapr.agents.scribe.workflow'!r},
                                     input={{"task": "note hello"}}, engine="daprd",
                                     resources={str(EXAMPLE / 'components')!r},
                                     env={{"STUB_LLM_URL": {llm.url!r}}},
                                     points=["after:*run_tool#2", "after:*summarize"])
            def test_agent(crash_outcome):
                assert crash_outcome.output_matches, crash_outcome.diff
                assert_no_duplicate_effects(crash_outcome)
            """)
        # in a process of its own: pytester's in-process run unloads what the inner run
        # imported, and PyO3 modules (dapr-agents' pydantic-core) cannot be loaded twice
        result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get("passed") == 2, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_agent[[]after:dapr.agents.scribe.run_tool#2[]] PASSED*",
                                 "*test_agent[[]after:dapr.agents.scribe.summarize[]] PASSED*"])
