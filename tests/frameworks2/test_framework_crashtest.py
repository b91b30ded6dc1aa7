"""The crash matrix drives the Strands and CrewAI examples on daprd with no false
divergence, and fails the point whose booking doubled (issue 49 item 6;
tests/support/framework_crashtest.py says what each point must show). Cost: 54 s of
CPU measured (two matrices, each a clean run, a sweep of two crashes and an isolated
rerun; most of it the frameworks' imports in each app start).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.framework_crashtest import crash_matrix

pytestmark = [pytest.mark.daprd, pytest.mark.crash, pytest.mark.engine]


def test_the_strands_example_under_the_crash_matrix(tmp_path: Path) -> None:
    crash_matrix(tmp_path, "strands", "dapr.strands.Travel.workflow",
                 "after:strands_execute_tool#2")


def test_the_crewai_example_under_the_crash_matrix(tmp_path: Path) -> None:
    # Diagrid's CrewAI runner runs one answer's tool calls one after the other: the flight
    crash_matrix(tmp_path, "crewai", "dapr.crewai.Travel.workflow",
                 "after:execute_tool_activity#2")
