"""The crash matrix drives the OpenAI Agents SDK and LangGraph examples on daprd with no
false divergence, and fails the point whose booking doubled (issue 49 item 6;
tests/support/framework_crashtest.py says what each point must show). Cost: 54 s of
CPU measured (two matrices, each a clean run, a sweep of two crashes and an isolated
rerun; most of it the frameworks' imports in each app start).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.framework_crashtest import crash_matrix

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]


def test_the_openai_agents_example_under_the_crash_matrix(tmp_path: Path) -> None:
    # the second tool activity is the flight or the hotel (they run in parallel): either
    # is a re-delivery that must find its effect settled
    matrix = crash_matrix(tmp_path, "openai_agents", "dapr.openai.Travel.workflow",
                          "after:execute_tool_activity#2")
    assert set(matrix["ignore"]) == {"$..tool_calls[*].id", "$..tool_call_id"}


def test_the_langgraph_example_under_the_crash_matrix(tmp_path: Path) -> None:
    # the tools node's second run: the flight and the hotel's 0-night call in one activity
    crash_matrix(tmp_path, "langgraph", "dapr.langgraph.Travel.workflow",
                 "after:execute_node_activity#4")
