"""tests/frameworks2 run where Strands and CrewAI are installed beside dapr-agents and
diagrid: ``.venv-frameworks2``, which ``make test`` builds and runs them in (their
OpenTelemetry pins agree with dapr-agents' only at 1.45.1 / 0.66b1: Makefile). Elsewhere
collecting them is an error that says so, not a skip."""

from __future__ import annotations

import importlib.util

import pytest

if not all(importlib.util.find_spec(name) for name in ("strands", "crewai", "diagrid")):
    raise pytest.UsageError(
        "tests/frameworks2 need strands-agents, crewai and diagrid beside dapr-agents: run "
        "them in .venv-frameworks2 (make test does), or pass --ignore=tests/frameworks2 here")
