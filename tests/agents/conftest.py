"""tests/agents run where dapr-agents is installed: ``.venv-sdk118`` (dapr 1.18 +
dapr-ext-workflow 1.18, what dapr-agents 1.0 pins), which ``make test`` builds and runs
them in. Elsewhere collecting them is an error that says so, not a skip."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("dapr_agents") is None:
    raise pytest.UsageError(
        "tests/agents need dapr-agents, which needs dapr 1.18 + dapr-ext-workflow 1.18: "
        "run them in .venv-sdk118 (make test does), or pass --ignore=tests/agents here")
