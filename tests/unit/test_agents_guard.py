"""``audit_agent`` twice on one agent guards each tool call once (a leftover of issue #38:
the tool executor was wrapped again, nesting two ``tool:<name>`` effects of one key).
Cost: under 1 s of CPU.

The agent here is a stand-in with a DurableAgent's shape (a ``tool_executor`` with
``run_tool``/``get_tool``/``list_tools``, ``register``): what is tested is how histaudit's
wrappers compose, which needs no engine; running a guarded tool for real is
``tests/agents/test_durable_agent.py``'s part, on daprd.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from histaudit.agents import audit_agent


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


def test_a_second_audit_agent_rewraps_the_original_tool_runner() -> None:
    agent = _Agent()
    original = _Executor.run_tool
    audit_agent(agent)
    first = agent.tool_executor.run_tool
    audit_agent(agent, read_only=["lookup"])
    second = agent.tool_executor.run_tool
    assert first is not second
    # both wrap the executor's own run_tool, never each other
    for guard in (first, second):
        assert guard._histaudit_unguarded.__func__ is original
    assert len(agent.registered) == 2
