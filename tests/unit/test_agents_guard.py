"""``audit_agent`` twice on one agent is refused in one line (issue 48: the second call
silently registered the agent on a second runtime; before that, issue #38, it nested two
``tool:<name>`` effects of one key). Cost: under 1 s of CPU.

The agent here is a stand-in with a DurableAgent's shape (a ``tool_executor`` with
``run_tool``/``get_tool``/``list_tools``, ``register``): what is tested is how histaudit's
wrappers compose, which needs no engine; running a guarded tool for real is
``tests/agents/test_durable_agent.py``'s part, on daprd.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from histaudit import audit_agent
from histaudit.errors import UsageError


class _Executor:
    def __init__(self) -> None:
        self.tools = {"write_note": SimpleNamespace(name="write_note"),
                      "lookup": SimpleNamespace(name="lookup")}

    def get_tool(self, name: str) -> Any:
        return self.tools.get(name)

    def list_tools(self) -> list[Any]:
        return list(self.tools.values())

    async def run_tool(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return name


class _Agent:
    def __init__(self) -> None:
        self.tool_executor = _Executor()
        self.registered: list[Any] = []
        self._infra = SimpleNamespace(state_store=object())

    def register(self, runtime: Any) -> None:
        self.registered.append(runtime)


def test_a_second_audit_agent_on_one_agent_is_refused_in_one_line() -> None:
    agent = _Agent()
    audit_agent(agent)
    first = agent.tool_executor.run_tool
    with pytest.raises(UsageError) as raised:
        audit_agent(agent, read_only=["lookup"])
    assert "already audited" in str(raised.value) and "\n" not in str(raised.value)
    # nothing changed: the first guard stays, registered on one runtime only
    assert agent.tool_executor.run_tool is first
    assert len(agent.registered) == 1
